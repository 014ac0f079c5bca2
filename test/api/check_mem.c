/*
 * mem module through the API: registration's refusals, remote-key
 * export and import refusals, lifetimes (regions closed with their
 * context, remote lengths and frees), and FI_MR_ALLOCATED forced.
 * (What a registration holds, the blobs' bytes and the other mr_mode
 * paths: test/unit/check_mem.c.)
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TCP tu_tcp()

/* Sentinels that a failed call must leave alone. */
#define MEM_UNTOUCHED ((ferry_mem_t *)(uintptr_t)0x5a5a)
#define RMEM_UNTOUCHED ((ferry_rmem_t *)(uintptr_t)0x5a5a)

/* ---- register ----------------------------------------------------------- */

START_TEST(test_register_wrapping_range)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_mem_t *mem = MEM_UNTOUCHED;

    TU_EXPECT_ERROR(ferry_mem_register(ctx, (void *)(UINTPTR_MAX - 100), 4096,
                                       FERRY_MEM_HOST, 0, 0, &mem),
                    FERRY_EINVAL, "wraps around the address space");
    TU_EXPECT_ERROR(ferry_mem_register(ctx, (void *)(uintptr_t)4096, SIZE_MAX,
                                       FERRY_MEM_HOST, 0, 0, &mem),
                    FERRY_EINVAL, "wraps around the address space");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_register_unknown_access)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    void *buf = tu_alloc_buf(4096);

    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0,
                                       RW | 0x8u, &mem),
                    FERRY_EINVAL,
                    "access 0xb has bits that are not "
                    "FERRY_ACCESS_REMOTE_READ/WRITE/FANOUT");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_register_unknown_kind)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    void *buf = tu_alloc_buf(4096);

    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, (enum ferry_mem_kind)7,
                                       0, 0, &mem),
                    FERRY_EINVAL,
                    "kind 7 is not FERRY_MEM_HOST, FERRY_MEM_CUDA or "
                    "FERRY_MEM_AUTO");
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, (enum ferry_mem_kind)-1,
                                       0, 0, &mem),
                    FERRY_EINVAL, "kind -1 is not");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_register_wrong_handle)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = tu_self_peer(ctx);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    void *buf = tu_alloc_buf(4096);

    TU_EXPECT_ERROR(ferry_mem_register((ferry_context_t *)peer, buf, 4096,
                                       FERRY_MEM_HOST, 0, 0, &mem),
                    FERRY_EHANDLE, "not a live ferry context");
    TU_EXPECT_ERROR(ferry_mem_close((ferry_mem_t *)ctx), FERRY_EHANDLE,
                    "ferry_mem_close: not a live ferry registration");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_deregister_null)
{
    ck_assert_int_eq(ferry_mem_close(NULL), 0);
    ck_assert_str_eq(ferry_last_error(), "");
}
END_TEST

START_TEST(test_mems_closed_with_context)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = tu_self_peer(ctx);
    uint8_t *buf = tu_alloc_buf(16 * 4096);
    uint8_t blob[512];

    /* Registrations and imports never freed: destruction closes them
     * (leaks or use-after-free show under AddressSanitizer). */
    for (int i = 0; i < 16; i++) {
        ferry_mem_t *mem = tu_register(ctx, buf + i * 4096, 4096, RW);
        ferry_rmem_t *rmem = NULL;
        size_t len = tu_export(mem, blob, sizeof(blob));
        ck_assert_int_eq(ferry_rmem_import(peer, blob, len, &rmem), 0);
    }
    ferry_context_close(ctx);
    tu_free_buf(buf, 16 * 4096);
}
END_TEST

/* ---- export ------------------------------------------------------------- */

START_TEST(test_export_needs_remote_access)
{
    ferry_context_t *ctx = tu_context(TCP);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(ctx, buf, 4096, 0);
    uint8_t blob[512];
    size_t len = sizeof(blob);

    TU_EXPECT_ERROR(ferry_mem_export(mem, blob, &len), FERRY_EINVAL,
                    "was registered without remote access; register it with "
                    "FERRY_ACCESS_REMOTE_READ");
    ck_assert_uint_eq(len, sizeof(blob));
    TU_EXPECT_ERROR(ferry_mem_export(mem, blob, NULL), FERRY_EINVAL,
                    "len is NULL");
    TU_EXPECT_ERROR(ferry_mem_export(NULL, blob, &len), FERRY_EINVAL,
                    "registration is NULL");
    TU_EXPECT_ERROR(ferry_mem_export((ferry_mem_t *)ctx, blob, &len),
                    FERRY_EHANDLE, "not a live ferry registration");
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* ---- import ------------------------------------------------------------- */

START_TEST(test_import_null_args)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = tu_self_peer(ctx);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(ctx, buf, 4096, RW);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t blob[512];
    size_t len = tu_export(mem, blob, sizeof(blob));

    TU_EXPECT_ERROR(ferry_rmem_import(NULL, blob, len, &rmem), FERRY_EINVAL,
                    "ferry_rmem_import: peer is NULL");
    TU_EXPECT_ERROR(ferry_rmem_import(peer, NULL, len, &rmem), FERRY_EINVAL,
                    "remote-key blob is NULL");
    TU_EXPECT_ERROR(ferry_rmem_import(peer, blob, len, NULL), FERRY_EINVAL,
                    "ferry_rmem_import: out is NULL");
    TU_EXPECT_ERROR(ferry_rmem_import(peer, blob, 0, &rmem), FERRY_EBLOB,
                    "shorter than the 16-byte header");
    TU_EXPECT_ERROR(ferry_rmem_import((ferry_peer_t *)mem, blob, len, &rmem),
                    FERRY_EHANDLE, "not a live ferry peer");
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    /* No refusal kept a hold on the peer (it would be EBUSY). */
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_import_address_blob)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = tu_self_peer(ctx);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t addr[512];
    size_t len = sizeof(addr);
    void *copy;

    ck_assert_int_eq(ferry_context_address(ctx, addr, &len), 0);
    /* An exact-size heap copy: a read past len is one ASan reports. */
    copy = tu_heap_copy(addr, len);
    TU_EXPECT_ERROR(ferry_rmem_import(peer, copy, len, &rmem), FERRY_EBLOB,
                    "remote-key blob is an address blob, expected a "
                    "remote-key blob");
    free(copy);
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_import_other_provider)
{
    /* _i: 0 = a shm region into a tcp context, 1 = the other way round. */
    const char *from = _i == 0 ? "shm" : TCP, *to = _i == 0 ? TCP : "shm";
    ferry_context_t *src = tu_context(from), *dst = tu_context(to);
    ferry_peer_t *peer = tu_self_peer(dst);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(src, buf, 4096, RW);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t blob[512];
    size_t len = tu_export(mem, blob, sizeof(blob));
    void *copy = tu_heap_copy(blob, len); /* ASan sees a read past len */
    char phrase[128];

    snprintf(phrase, sizeof(phrase),
             "peer using provider '%s' but the peer it is imported for "
             "uses '%s'", from, to);
    TU_EXPECT_ERROR(ferry_rmem_import(peer, copy, len, &rmem), FERRY_EINCOMPAT,
                    phrase);
    free(copy);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "same provider"));
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    /* The refusal kept no hold on the peer (it would be EBUSY). */
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ferry_context_close(src);
    ferry_context_close(dst);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_rmem_length_and_free)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = tu_self_peer(ctx);
    void *buf = tu_alloc_buf(8192);
    ferry_mem_t *mem = tu_register(ctx, buf, 6000, RW);
    ferry_rmem_t *rmem = tu_share(mem, peer);

    ck_assert_uint_eq(ferry_rmem_length(NULL), 0);
    ck_assert_uint_eq(ferry_rmem_length(rmem), 6000);
    /* Another kind of handle has no length. */
    ck_assert_uint_eq(ferry_rmem_length((ferry_rmem_t *)mem), 0);
    ck_assert_int_eq(ferry_rmem_close(NULL), 0);
    ck_assert_str_eq(ferry_last_error(), "");
    TU_EXPECT_ERROR(ferry_rmem_close((ferry_rmem_t *)mem), FERRY_EHANDLE,
                    "ferry_rmem_close: not a live remote region");
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 8192);
}
END_TEST

/* ---- mr_mode paths ------------------------------------------------------ */

/*
 * One page mapped at a low fixed address whose next page is free. A page
 * freed in the middle of the mmap area is no proof of a hole: any other
 * thread's mmap (the sanitizer's allocator, libfabric's) can take it
 * before the registration looks. The kernel hands out addresses top-down
 * from below the stack, so a low address stays as we leave it.
 */
static uint8_t *low_page_before_hole(long page)
{
    for (uintptr_t at = 16u << 20; at < (1u << 30); at += 16u << 20) {
        void *p = mmap((void *)at, (size_t)page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                       -1, 0);

        if (p == MAP_FAILED)
            continue;
        if (p == (void *)at && msync((uint8_t *)p + page, (size_t)page,
                                     MS_ASYNC) != 0)
            return p;
        munmap(p, (size_t)page);
    }
    ck_abort_msg("no low page with a free page after it below 1 GiB");
    return NULL;
}

START_TEST(test_allocated_forced)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;
    ferry_mem_t *mem = MEM_UNTOUCHED;
    long page = sysconf(_SC_PAGESIZE);
    uint8_t *mapped, *gone;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_ALLOCATED;
    ctx = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert(info.mr_mode & FERRY_MR_ALLOCATED);

    /* Unmapped entirely. */
    mapped = low_page_before_hole(page);
    gone = mapped + page;
    TU_EXPECT_ERROR(ferry_mem_register(ctx, gone, (size_t)page, FERRY_MEM_HOST,
                                       0, RW, &mem),
                    FERRY_EINVAL, "is not entirely mapped memory");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "(FI_MR_ALLOCATED)"));
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "allocate the buffer"));

    /* Mapped first page, unmapped second: the range is refused, the
     * mapped page alone is fine. */
    TU_EXPECT_ERROR(ferry_mem_register(ctx, mapped + 10, (size_t)page,
                                       FERRY_MEM_HOST, 0, RW, &mem),
                    FERRY_EINVAL, "FI_MR_ALLOCATED");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    mem = tu_register(ctx, mapped + 10, (size_t)page - 10, RW);
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    tu_free_buf(mapped, (size_t)page);
    ferry_context_close(ctx);
}
END_TEST

static Suite *mem_suite(void)
{
    Suite *s = suite_create("mem");
    TCase *tc = tcase_create("register");

    tcase_add_test(tc, test_register_wrapping_range);
    tcase_add_test(tc, test_register_unknown_access);
    tcase_add_test(tc, test_register_unknown_kind);
    tcase_add_test(tc, test_register_wrong_handle);
    tcase_add_test(tc, test_deregister_null);
    tcase_add_loop_test(tc, test_mems_closed_with_context, 0,
                        (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("export");
    tcase_add_test(tc, test_export_needs_remote_access);
    suite_add_tcase(s, tc);

    tc = tcase_create("import");
    tcase_add_test(tc, test_import_null_args);
    tcase_add_test(tc, test_import_address_blob);
    tcase_add_loop_test(tc, test_import_other_provider, 0, 2);
    tcase_add_test(tc, test_rmem_length_and_free);
    suite_add_tcase(s, tc);

    tc = tcase_create("mr_mode");
    tcase_add_loop_test(tc, test_allocated_forced, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(mem_suite());
}
