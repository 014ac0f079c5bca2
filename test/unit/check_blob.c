/*
 * blob and keys modules: the checked blob format (every truncation and
 * every corrupted byte is refused, never read past) and the requested-key
 * allocator at every key width.
 */
#include "testutil.h"

#include "base/blob.h"
#include "base/keys.h"

#include <stdlib.h>
#include <string.h>

static size_t make_blob(uint8_t *buf, size_t cap)
{
    struct ferry__blob_writer w;
    size_t len = 0;

    ferry__blob_begin(&w, buf, cap, FERRY__BLOB_RKEY);
    ferry__blob_put_str(&w, "tcp;ofi_rxm");
    ferry__blob_put_u16(&w, 0xbeef);
    ferry__blob_put_u32(&w, 0xdeadbeef);
    ferry__blob_put_u64(&w, 0x0123456789abcdefull);
    ferry__blob_put_bytes(&w, "raw", 3);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

START_TEST(test_round_trip)
{
    uint8_t buf[128], raw[3];
    char s[32];
    struct ferry__blob_reader r;
    size_t len = make_blob(buf, sizeof(buf));

    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_RKEY, "b"), 0);
    ferry__blob_get_str(&r, s, sizeof(s));
    ck_assert_str_eq(s, "tcp;ofi_rxm");
    ck_assert_uint_eq(ferry__blob_get_u16(&r), 0xbeef);
    ck_assert_uint_eq(ferry__blob_get_u32(&r), 0xdeadbeef);
    ck_assert_uint_eq(ferry__blob_get_u64(&r), 0x0123456789abcdefull);
    ferry__blob_get_bytes(&r, raw, 3);
    ck_assert_mem_eq(raw, "raw", 3);
    ck_assert(!r.bad);
    ck_assert_uint_eq(r.pos, r.len);
    /* Past the end: zero and `bad`, never a read beyond the buffer. */
    ck_assert_uint_eq(ferry__blob_get_u64(&r), 0);
    ck_assert(r.bad);
}
END_TEST

START_TEST(test_writer_measures_without_buffer)
{
    uint8_t buf[128];
    struct ferry__blob_writer w;
    size_t need = 0, len = make_blob(buf, sizeof(buf));

    ferry__blob_begin(&w, NULL, 0, FERRY__BLOB_RKEY);
    ferry__blob_put_str(&w, "tcp;ofi_rxm");
    ferry__blob_put_u16(&w, 1);
    ferry__blob_put_u32(&w, 1);
    ferry__blob_put_u64(&w, 1);
    ferry__blob_put_bytes(&w, "raw", 3);
    ck_assert_int_eq(ferry__blob_end(&w, &need), FERRY_ENOSPC);
    ck_assert_uint_eq(need, len);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "needs"));
}
END_TEST

START_TEST(test_writer_small_buffer_is_not_overrun)
{
    uint8_t buf[64];
    struct ferry__blob_writer w;
    size_t need = 0;

    memset(buf, 0xaa, sizeof(buf));
    ferry__blob_begin(&w, buf, 20, FERRY__BLOB_RKEY);
    ferry__blob_put_u64(&w, 0);
    ferry__blob_put_u64(&w, 0);
    ck_assert_int_eq(ferry__blob_end(&w, &need), FERRY_ENOSPC);
    ck_assert_uint_eq(need, 32);
    for (size_t i = 20; i < sizeof(buf); i++)
        ck_assert_uint_eq(buf[i], 0xaa);
}
END_TEST

START_TEST(test_every_truncation_refused)
{
    uint8_t buf[128];
    struct ferry__blob_reader r;
    size_t len = make_blob(buf, sizeof(buf));

    for (size_t cut = 0; cut < len; cut++) {
        int ret = ferry__blob_open(&r, buf, cut, FERRY__BLOB_RKEY, "blob");
        ck_assert_msg(ret == FERRY_EBLOB, "length %zu of %zu accepted", cut,
                      len);
        ck_assert_str_ne(ferry_last_error(), "");
    }
}
END_TEST

START_TEST(test_every_corrupted_byte_refused)
{
    uint8_t buf[128];
    struct ferry__blob_reader r;
    size_t len = make_blob(buf, sizeof(buf));

    for (size_t i = 0; i < len; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1u << bit);
            int ret = ferry__blob_open(&r, buf, len, FERRY__BLOB_RKEY, "b");
            ck_assert_msg(ret == FERRY_EBLOB || ret == FERRY_EINCOMPAT,
                          "flip of bit %u in byte %zu accepted (%d)", bit, i,
                          ret);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    }
    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_RKEY, "b"),
                     0);
}
END_TEST

START_TEST(test_wrong_kind_and_version)
{
    uint8_t buf[128];
    struct ferry__blob_reader r;
    size_t len = make_blob(buf, sizeof(buf));

    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_ADDR, "addr"),
                     FERRY_EBLOB);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "remote-key blob"));
    buf[4] = 9; /* version */
    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_RKEY, "b"),
                     FERRY_EINCOMPAT);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "version 9"));
    ck_assert_int_eq(ferry__blob_open(&r, NULL, 10, FERRY__BLOB_RKEY, "b"),
                     FERRY_EINVAL);
}
END_TEST

START_TEST(test_oversized_string_marks_bad)
{
    uint8_t buf[128];
    char small[4];
    struct ferry__blob_reader r;
    size_t len = make_blob(buf, sizeof(buf));

    ck_assert_int_eq(ferry__blob_open(&r, buf, len, FERRY__BLOB_RKEY, "b"), 0);
    ferry__blob_get_str(&r, small, sizeof(small));
    ck_assert(r.bad);
    ck_assert_str_eq(small, "");
}
END_TEST

/* A string its 16-bit length cannot hold: the blob is refused, measured
 * or written, rather than sealed with a cut length. */
START_TEST(test_string_too_long_refused)
{
    size_t n = (size_t)UINT16_MAX + 1, need = 0;
    char *s = malloc(n + 1);
    uint8_t *buf = malloc(n + 64);
    struct ferry__blob_writer w;

    ck_assert_ptr_nonnull(s);
    ck_assert_ptr_nonnull(buf);
    memset(s, 'a', n);
    s[n] = '\0';
    ferry__blob_begin(&w, NULL, 0, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, s);
    TU_EXPECT_ERROR(ferry__blob_end(&w, &need), FERRY_EINVAL,
                    "blob: a string of 65536 bytes; a string in a blob "
                    "holds at most 65535 bytes");
    ferry__blob_begin(&w, buf, n + 64, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, s);
    ferry__blob_put_u32(&w, 7);
    ck_assert_int_eq(ferry__blob_end(&w, &need), FERRY_EINVAL);
    s[n - 1] = '\0'; /* 65535 bytes: the most a string holds */
    ferry__blob_begin(&w, buf, n + 64, FERRY__BLOB_ADDR);
    ferry__blob_put_str(&w, s);
    ck_assert_int_eq(ferry__blob_end(&w, &need), 0);
    free(buf);
    free(s);
}
END_TEST

START_TEST(test_keys_one_byte_wrap)
{
    struct ferry__keyalloc ka;

    ferry__keyalloc_init(&ka, 1, 1);
    ck_assert_uint_eq(ferry__keyalloc_space(&ka), 255);
    for (uint64_t want = 1; want <= 255; want++)
        ck_assert_uint_eq(ferry__keyalloc_next(&ka), want);
    /* 256 & 0xff is 0, which is skipped. */
    ck_assert_uint_eq(ferry__keyalloc_next(&ka), 1);
}
END_TEST

START_TEST(test_keys_fit_every_width)
{
    for (size_t bytes = 1; bytes <= 8; bytes++) {
        struct ferry__keyalloc ka;
        uint64_t limit = bytes == 8 ? UINT64_MAX
                                    : ((uint64_t)1 << (8 * bytes)) - 1;

        ferry__keyalloc_init(&ka, bytes, 1);
        ck_assert_uint_eq(ferry__keyalloc_space(&ka), limit);
        /* Jump near the top to see the wrap at this width. */
        atomic_store(&ka.next, limit - 1);
        ck_assert_uint_eq(ferry__keyalloc_next(&ka), limit - 1);
        ck_assert_uint_eq(ferry__keyalloc_next(&ka), limit);
        ck_assert_uint_eq(ferry__keyalloc_next(&ka), 1);
    }
}
END_TEST

START_TEST(test_key_bytes_little_endian)
{
    const uint8_t key[8] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};

    ck_assert_uint_eq(ferry__key_to_u64(key, 8), 0x0123456789abcdefull);
    ck_assert_uint_eq(ferry__key_to_u64(key, 2), 0xcdef);
}
END_TEST

static Suite *blob_suite(void)
{
    Suite *s = suite_create("blob");
    TCase *tc = tcase_create("format");

    tcase_add_test(tc, test_round_trip);
    tcase_add_test(tc, test_writer_measures_without_buffer);
    tcase_add_test(tc, test_writer_small_buffer_is_not_overrun);
    tcase_add_test(tc, test_every_truncation_refused);
    tcase_add_test(tc, test_every_corrupted_byte_refused);
    tcase_add_test(tc, test_wrong_kind_and_version);
    tcase_add_test(tc, test_oversized_string_marks_bad);
    tcase_add_test(tc, test_string_too_long_refused);
    suite_add_tcase(s, tc);
    tc = tcase_create("keys");
    tcase_add_test(tc, test_keys_one_byte_wrap);
    tcase_add_test(tc, test_keys_fit_every_width);
    tcase_add_test(tc, test_key_bytes_little_endian);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(blob_suite());
}
