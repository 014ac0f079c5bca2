/*
 * mem module from inside: what a registration holds, the context's lists,
 * remote-key export (the blob's bytes) and import (every truncation,
 * corruption and mismatch refused, hand-built blobs, the peer's count of
 * held regions), and one test per mr_mode path, forced where a provider
 * here takes the hint: VIRT_ADDR, requested keys (no PROV_KEY), a small
 * key space, ENDPOINT, RAW and LOCAL.  (Refusals, the ALLOCATED path and
 * lifetimes through the API: test/api/check_mem.c.)
 */
#include "testutil.h"

#include "reg/mem.h"
#include "base/blob.h"
#include "base/keys.h"
#include "reg/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TCP "tcp;ofi_rxm"
/* Flag bits of the remote-key blob (mem.c). */
#define RKEY_VIRT_ADDR 0x1u
#define RKEY_RAW 0x2u

/* Sentinels that a failed call must leave alone. */
#define MEM_UNTOUCHED ((ferry_mem_t *)(uintptr_t)0x5a5a)
#define RMEM_UNTOUCHED ((ferry_rmem_t *)(uintptr_t)0x5a5a)

/* Imports an exact-size heap copy, so over-reads are caught by ASan. */
static int import_copy(ferry_peer_t *peer, const uint8_t *blob, size_t len,
                       ferry_rmem_t **out)
{
    void *copy = tu_heap_copy(blob, len);
    int ret = ferry_rmem_import(peer, copy, len, out);

    free(copy);
    return ret;
}

static uint64_t mem_key(const ferry_mem_t *mem, unsigned rail)
{
    return ferry__key_to_u64(mem->key[rail], mem->key_len[rail]);
}

/* A remote-key blob built by hand (layout in mem.c). */
struct rkey_spec {
    const char *prov;
    uint32_t flags;
    uint32_t access;
    uint64_t base;
    uint64_t len;
    unsigned claimed; /* rail count written */
    unsigned nrails;  /* rail entries written */
    unsigned rail_flags; /* each rail's (0x1: virtual addresses) */
    size_t klen;
    uint64_t key;  /* first 8 bytes of each key, little-endian */
    size_t extra;  /* junk bytes after the fields */
    /* The pulse slot and generation, written with flag 0x10 (RKEY_SLOT). */
    uint32_t slot;
    uint64_t generation;
    /* With flag 0x8 (RKEY_INBOX), the inbox's id and base are written
     * after the rails when inbox_base is not 0 (its keys do not follow). */
    uint64_t inbox_base;
};

static size_t build_rkey(uint8_t *buf, size_t cap, const struct rkey_spec *s)
{
    struct ferry__blob_writer w;
    uint8_t key[FERRY__KEY_MAX + 16];
    size_t len = 0;

    ck_assert_uint_le(s->klen, sizeof(key));
    memset(key, 0, sizeof(key));
    for (size_t i = 0; i < 8 && i < s->klen; i++)
        key[i] = (uint8_t)(s->key >> (8 * i));
    ferry__blob_begin(&w, buf, cap, FERRY__BLOB_RKEY);
    ferry__blob_put_str(&w, s->prov);
    ferry__blob_put_u32(&w, s->flags);
    ferry__blob_put_u32(&w, s->access);
    ferry__blob_put_u64(&w, s->base);
    ferry__blob_put_u64(&w, s->len);
    if (s->flags & 0x10) {
        ferry__blob_put_u32(&w, s->slot);
        ferry__blob_put_u64(&w, s->generation);
    }
    ferry__blob_put_u16(&w, (uint16_t)s->claimed);
    for (unsigned i = 0; i < s->nrails; i++) {
        ferry__blob_put_u16(&w, (uint16_t)s->rail_flags);
        ferry__blob_put_u64(&w, 0);
        ferry__blob_put_u16(&w, (uint16_t)s->klen);
        ferry__blob_put_bytes(&w, key, s->klen);
    }
    if (s->inbox_base != 0) {
        ferry__blob_put_u64(&w, 1);
        ferry__blob_put_u64(&w, s->inbox_base);
    }
    for (size_t i = 0; i < s->extra; i++)
        ferry__blob_put_bytes(&w, "\x5a", 1);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

static struct rkey_spec good_spec(void)
{
    struct rkey_spec s = {.prov = TCP,
                          .access = RW,
                          .base = 0x10000,
                          .len = 4096,
                          .claimed = 1,
                          .nrails = 1,
                          .klen = 8,
                          .key = 42};
    return s;
}

/* Writes 64 pattern bytes at roffset of rmem and waits for them. */
static void write_at(ferry_peer_t *peer, ferry_mem_t *lmem, void *local,
                     ferry_rmem_t *rmem, uint64_t roffset)
{
    struct ferry_iov iov = {.local = local,
                            .lmem = lmem,
                            .rmem = rmem,
                            .roffset = roffset,
                            .len = 64};
    ferry_req_t *req = NULL;
    int ret;

    tu_fill(local, 64, 7);
    ret = ferry_write(peer, &iov, 1, NULL, &req);
    ck_assert_msg(ret == 0, "write: %s", ferry_last_error());
    ret = ferry_req_wait(req, 20000);
    ck_assert_msg(ret == 0, "wait: %d %s", ret, ferry_last_error());
    ferry_req_close(req);
}

/* The remote buffer holds the pattern at [off, off + 64), zeros around. */
static void check_written(const uint8_t *remote, size_t len, size_t off)
{
    ck_assert_uint_eq(tu_check(remote + off, 64, 7), SIZE_MAX);
    for (size_t i = 0; i < len; i++)
        if (i < off || i >= off + 64)
            ck_assert_msg(remote[i] == 0, "byte %zu outside [%zu, +64) "
                          "written", i, off);
}

/* ---- register ---------------------------------------------------------- */

START_TEST(test_register_null_args)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    void *buf = tu_alloc_buf(4096);

    TU_EXPECT_ERROR(ferry_mem_register(NULL, buf, 4096, FERRY_MEM_HOST, 0, 0,
                                       &mem),
                    FERRY_EINVAL, "ferry_mem_register: context is NULL");
    TU_EXPECT_ERROR(ferry_mem_register(ctx, NULL, 4096, FERRY_MEM_HOST, 0, 0,
                                       &mem),
                    FERRY_EINVAL, "addr is NULL; pass a buffer");
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, 0,
                                       NULL),
                    FERRY_EINVAL, "ferry_mem_register: out is NULL");
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 0, FERRY_MEM_HOST, 0, 0,
                                       &mem),
                    FERRY_EINVAL, "len is 0; pass a buffer and its length");
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ck_assert_ptr_null(ferry__reg_of(ctx)->mem.list);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_register_cuda_not_supported)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    void *buf = tu_alloc_buf(4096);

    if (ferry_device_backend() != NULL) {
        /* A GPU here: the pointer is what is wrong (host memory). */
        TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_CUDA, 3,
                                           RW, &mem),
                        FERRY_EINVAL, "host memory");
        ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
        ferry_context_close(ctx);
        tu_free_buf(buf, 4096);
        return;
    }
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_CUDA, 3, RW,
                                       &mem),
                    FERRY_ENOTSUP, "on CUDA device 3");
    /* Why, and what to do instead. */
    ck_assert_msg(strstr(ferry_last_error(),
                         HAVE_CUDA ? "libcuda.so.1"
                                   : "built without CUDA support") != NULL,
                  "%s", ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "register host memory (FERRY_MEM_HOST)"));
    ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    ck_assert_ptr_null(ferry__reg_of(ctx)->mem.list);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_register_fields)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    uint8_t *buf = tu_alloc_buf(8192);
    ferry_mem_t *a = NULL, *b = NULL;

    /* AUTO without CUDA is host memory; an unaligned sub-range is fine. */
    ck_assert_int_eq(ferry_mem_register(ctx, buf + 3, 5000, FERRY_MEM_AUTO,
                                        0, FERRY_ACCESS_REMOTE_READ, &a),
                     0);
    ck_assert_uint_eq(a->magic, FERRY__MAGIC_MEM);
    ck_assert_ptr_eq(a->ctx, ctx);
    ck_assert_ptr_eq(a->addr, buf + 3);
    ck_assert_uint_eq(a->len, 5000);
    ck_assert_int_eq(a->kind, FERRY_MEM_HOST);
    ck_assert_uint_eq(a->access, FERRY_ACCESS_REMOTE_READ);
    ck_assert(!a->oneshot);
    for (unsigned i = 0; i < tu_info(ctx).nrails; i++) {
        ck_assert_ptr_nonnull(a->mr[i]);
        ck_assert_ptr_eq(a->desc[i], fi_mr_desc(a->mr[i]));
        ck_assert_uint_ge(a->key_len[i], 1);
    }
    b = tu_register(ctx, buf, 8192, 0);
    /* Both on the context's list, newest first; unlinking keeps it. */
    ck_assert_ptr_eq(ferry__reg_of(ctx)->mem.list, b);
    ck_assert_ptr_eq(b->next, a);
    ck_assert_ptr_eq(a->prev, b);
    ck_assert_int_eq(ferry_mem_close(b), 0);
    ck_assert_ptr_eq(ferry__reg_of(ctx)->mem.list, a);
    ck_assert_ptr_null(a->prev);
    ck_assert_int_eq(ferry_mem_close(a), 0);
    ck_assert_ptr_null(ferry__reg_of(ctx)->mem.list);
    ferry_context_close(ctx);
    tu_free_buf(buf, 8192);
}
END_TEST

/* ---- export ------------------------------------------------------------ */

START_TEST(test_export_size_protocol)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(ctx, buf, 4096, FERRY_ACCESS_REMOTE_WRITE);
    struct ferry__blob_reader r;
    uint8_t blob[1024], again[1024];
    size_t need = 999, len;
    char phrase[64];

    TU_EXPECT_ERROR(ferry_mem_export(mem, NULL, &need), FERRY_ENOSPC,
                    "pass a buffer of at least");
    ck_assert_uint_gt(need, FERRY__BLOB_HEADER_LEN);
    ck_assert_uint_lt(need, sizeof(blob) - 64);
    snprintf(phrase, sizeof(phrase), "needs %zu bytes", need);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), phrase));
    for (size_t cap = 0; cap < need; cap++) {
        memset(blob, 0xa5, sizeof(blob));
        len = cap;
        ck_assert_int_eq(ferry_mem_export(mem, blob, &len), FERRY_ENOSPC);
        ck_assert_uint_eq(len, need);
        for (size_t i = cap; i < sizeof(blob); i++)
            ck_assert_msg(blob[i] == 0xa5,
                          "capacity %zu: byte %zu was written", cap, i);
    }
    memset(blob, 0xa5, sizeof(blob));
    len = need;
    ck_assert_int_eq(ferry_mem_export(mem, blob, &len), 0);
    ck_assert_uint_eq(len, need);
    for (size_t i = need; i < sizeof(blob); i++)
        ck_assert_uint_eq(blob[i], 0xa5);
    ck_assert_int_eq(ferry__blob_open(&r, blob, len, FERRY__BLOB_RKEY, "rk"),
                     0);
    len = sizeof(again);
    ck_assert_int_eq(ferry_mem_export(mem, again, &len), 0);
    ck_assert_uint_eq(len, need);
    ck_assert_mem_eq(blob, again, need);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* ---- import ------------------------------------------------------------ */

START_TEST(test_import_round_trip)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = tu_self_peer(ctx);
    uint8_t *buf = tu_alloc_buf(3 * 4096);
    ferry_mem_t *mem =
        tu_register(ctx, buf + 100, 9000, FERRY_ACCESS_REMOTE_READ);
    ferry_rmem_t *rmem = tu_share(mem, peer);

    ck_assert_uint_eq(rmem->magic, FERRY__MAGIC_RMEM);
    ck_assert_ptr_eq(rmem->peer, peer);
    ck_assert_uint_eq(ferry_rmem_length(rmem), 9000);
    ck_assert_uint_eq(rmem->len, 9000);
    ck_assert_uint_eq(rmem->base, (uintptr_t)(buf + 100));
    ck_assert_uint_eq(rmem->access, FERRY_ACCESS_REMOTE_READ);
    ck_assert_uint_eq(rmem->nrails, tu_info(ctx).nrails);
    ck_assert_str_eq(rmem->provider, prov);
    for (unsigned i = 0; i < rmem->nrails; i++) {
        ck_assert_uint_eq(rmem->key[i], mem_key(mem, i));
        ck_assert_uint_eq(rmem->key[i], fi_mr_key(mem->mr[i]));
        ck_assert(!rmem->key_mapped[i]);
    }
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 1);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    ck_assert_ptr_null(ferry__reg_of(ctx)->mem.rlist);
    ferry_context_close(ctx);
    tu_free_buf(buf, 3 * 4096);
}
END_TEST

START_TEST(test_import_every_truncation)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = tu_self_peer(ctx);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(ctx, buf, 4096, RW);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t blob[512];
    size_t len = tu_export(mem, blob, sizeof(blob));

    for (size_t cut = 0; cut < len; cut++) {
        int ret = import_copy(peer, blob, cut, &rmem);
        ck_assert_msg(ret == FERRY_EBLOB,
                      "%s: blob cut to %zu of %zu bytes gave %d: %s", prov,
                      cut, len, ret, ferry_last_error());
        ck_assert_msg(strstr(ferry_last_error(), "truncated") != NULL,
                      "cut %zu: \"%s\" does not say truncated", cut,
                      ferry_last_error());
    }
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    ck_assert_int_eq(import_copy(peer, blob, len, &rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_import_every_corrupted_byte)
{
    static const uint8_t flips[] = {0x01, 0x10, 0x80, 0xff};
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = tu_self_peer(ctx);
    void *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem = tu_register(ctx, buf, 4096, RW);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t blob[512];
    size_t len = tu_export(mem, blob, sizeof(blob));

    for (size_t i = 0; i < len; i++) {
        for (size_t f = 0; f < sizeof(flips); f++) {
            int ret;

            blob[i] ^= flips[f];
            ret = import_copy(peer, blob, len, &rmem);
            blob[i] ^= flips[f];
            ck_assert_msg(ret == FERRY_EBLOB || ret == FERRY_EINCOMPAT,
                          "%s: byte %zu ^ 0x%02x accepted or misreported "
                          "(%d): %s",
                          prov, i, flips[f], ret, ferry_last_error());
            ck_assert_str_ne(ferry_last_error(), "");
        }
    }
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    ck_assert_int_eq(import_copy(peer, blob, len, &rmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

START_TEST(test_import_built_blobs)
{
    ferry_context_t *ctx = tu_context(TCP);
    ferry_peer_t *peer = tu_self_peer(ctx);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED, *ok = NULL;
    uint8_t blob[2048];
    struct rkey_spec s = good_spec();
    size_t len;

    /* The builder is right: the well-formed blob is accepted. */
    len = build_rkey(blob, sizeof(blob), &s);
    ck_assert_msg(import_copy(peer, blob, len, &ok) == 0, "%s",
                  ferry_last_error());
    ck_assert_uint_eq(ok->key[0], 42);
    ck_assert_uint_eq(ferry_rmem_length(ok), 4096);
    ck_assert(!ok->virt_addr);
    ck_assert_int_eq(ferry_rmem_close(ok), 0);
    /* Addressing is the rail's, as the exporter's blob says. */
    s.rail_flags = 0x1;
    len = build_rkey(blob, sizeof(blob), &s);
    ck_assert_msg(import_copy(peer, blob, len, &ok) == 0, "%s",
                  ferry_last_error());
    ck_assert(ok->virt_addr);
    ck_assert_int_eq(ferry_rmem_close(ok), 0);

    s = good_spec();
    s.klen = 9;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "rail 0 has a 9-byte key without the raw-key flag");

    s = good_spec();
    s.flags = 0x20;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "unknown flags 0x20");

    /* A pulse slot is kept (its key is checked against it), one past the
     * table is refused. */
    s = good_spec();
    s.flags = 0x10;
    s.slot = 7;
    s.generation = 99;
    len = build_rkey(blob, sizeof(blob), &s);
    ck_assert_msg(import_copy(peer, blob, len, &ok) == 0, "%s",
                  ferry_last_error());
    ck_assert_uint_eq(ok->slot, 7);
    ck_assert_uint_eq(ok->generation, 99);
    ck_assert_int_eq(ferry_rmem_close(ok), 0);
    s.slot = FERRY__PULSE_SLOTS;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "pulse slot beyond");

    /* The fan-out inbox flag without its fields, and with an inbox that
     * wraps past the end of the address space. */
    s = good_spec();
    s.flags = 0x8;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "ends inside its fan-out inbox fields");
    s.inbox_base = UINT64_MAX - 4095;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "fan-out inbox at 0xfffffffffffff000 wraps past the end");

    s = good_spec();
    s.len = 0;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "an empty or wrapping region");

    s = good_spec();
    s.base = UINT64_MAX - 10;
    s.len = 100;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "an empty or wrapping region");

    s = good_spec();
    s.access = 0x8;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "access 0x8");

    s = good_spec();
    s.claimed = s.nrails = 0;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "lists 0 rails, but its peer's address blob lists 1");

    s = good_spec();
    s.claimed = s.nrails = 99;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "lists 99 rails, but its peer's address blob lists 1");

    s = good_spec();
    s.claimed = 2;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "lists 2 rails, but its peer's address blob lists 1: "
                    "was it exported by another context");

    /* An empty key: the exporter could not register the region on the
     * transport this peer is reached over. */
    s = good_spec();
    s.klen = 0;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EINCOMPAT,
                    "cannot be reached over " TCP ": its exporter could not "
                    "register it there");

    s = good_spec();
    s.klen = FERRY__KEY_MAX + 1;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "rail 0 key of 65 bytes is too long or cut short");

    s = good_spec();
    s.extra = 3;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EBLOB,
                    "has 3 bytes after its last field");

    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    /* Every refusal gave its hold on the peer back. */
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    ck_assert_ptr_null(ferry__reg_of(ctx)->mem.rlist);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ferry_context_close(ctx);
}
END_TEST

/* ---- mr_mode paths ----------------------------------------------------- */

/* VIRT_ADDR follows the exporter: base + offset, or the offset alone.
 * _i: 0 = shm forced VIRT_ADDR (takes it; offered, it takes it only from
 * libfabric 2.5, where ferry asks for no ordered writes), 1 = shm not
 * offered it, 2 = tcp (never asks for it). */
START_TEST(test_virt_addr)
{
    const char *prov = _i == 2 ? TCP : "shm";
    const bool want_virt = _i == 0;
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_pair p;
    uint8_t *remote = tu_alloc_buf(4096), *local = tu_alloc_buf(4096);
    ferry_mem_t *rm, *lm;
    ferry_rmem_t *rmem;

    tu_config(&cfg, prov);
    if (_i == 0)
        cfg.mr_mode_force |= FERRY_MR_VIRT_ADDR;
    if (_i == 1)
        cfg.mr_mode_offer &= ~FERRY_MR_VIRT_ADDR;
    tu_pair_open(&p, prov, &cfg);
    ck_assert_int_eq(ferry_context_info(p.target, &info), 0);
    ck_assert_uint_eq(!!(info.mr_mode & FERRY_MR_VIRT_ADDR), want_virt);
    rm = tu_register(p.target, remote, 4096, RW);
    lm = tu_register(p.init, local, 4096, 0);
    rmem = tu_share(rm, p.peer);
    ck_assert_uint_eq(rmem->virt_addr, want_virt);
    ck_assert_uint_eq(rmem->base, (uintptr_t)remote);
    if (want_virt)
        ck_assert_uint_eq(ferry__rma_addr(rmem, 100),
                          (uintptr_t)remote + 100);
    else
        ck_assert_uint_eq(ferry__rma_addr(rmem, 100), 100);
    /* The provider agrees: the bytes land at offset 100. */
    write_at(p.peer, lm, local, rmem, 100);
    check_written(remote, 4096, 100);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    tu_pair_close(&p);
    tu_free_buf(remote, 4096);
    tu_free_buf(local, 4096);
}
END_TEST

/* No PROV_KEY (tcp, shm): ferry requests distinct keys itself. */
START_TEST(test_requested_keys)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    uint8_t *buf = tu_alloc_buf(8192);
    ferry_mem_t *a, *b;

    ck_assert_uint_eq(tu_info(ctx).mr_mode & FERRY_MR_PROV_KEY, 0);
    a = tu_register(ctx, buf, 4096, RW);
    b = tu_register(ctx, buf + 4096, 4096, RW);
    ck_assert_uint_eq(a->key_len[0], 8);
    ck_assert_uint_eq(mem_key(a, 0), fi_mr_key(a->mr[0]));
    ck_assert_uint_eq(mem_key(b, 0), fi_mr_key(b->mr[0]));
    ck_assert_uint_ne(mem_key(a, 0), mem_key(b, 0));
    ck_assert_uint_ne(mem_key(a, 0), 0);
    ck_assert_uint_ne(mem_key(b, 0), 0);
    ferry_context_close(ctx);
    tu_free_buf(buf, 8192);
}
END_TEST

/* What ferry's requested keys rely on: a key in use is refused. */
START_TEST(test_provider_refuses_duplicate_key)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    uint8_t *buf = tu_alloc_buf(8192);
    ferry_mem_t *a = tu_register(ctx, buf, 4096, RW);
    struct iovec iov = {.iov_base = buf + 4096, .iov_len = 4096};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = FI_READ | FI_WRITE | FI_REMOTE_READ |
                                        FI_REMOTE_WRITE,
                              .requested_key = fi_mr_key(a->mr[0])};
    struct fid_mr *mr = NULL;
    int ret = fi_mr_regattr(ferry__fabric_of(ctx)->rails[0].domain, &attr, 0, &mr);

    ck_assert_msg(ret == -FI_ENOKEY,
                  "%s accepted a duplicate requested key (%d): ferry's key "
                  "allocation would hand out a key twice",
                  prov, ret);
    if (ret == 0)
        fi_close(&mr->fid);
    ferry_context_close(ctx);
    tu_free_buf(buf, 8192);
}
END_TEST

/* PROV_KEY forced on a provider that really wants requested keys. */
START_TEST(test_prov_key_forced)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    ferry_context_t *ctx;
    uint8_t *buf = tu_alloc_buf(3 * 4096);
    ferry_mem_t *m[3];

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_PROV_KEY;
    ctx = tu_context_cfg(&cfg);
    ck_assert(tu_info(ctx).mr_mode & FERRY_MR_PROV_KEY);
    for (int i = 0; i < 3; i++) {
        m[i] = tu_register(ctx, buf + i * 4096, 4096, RW);
        /* The key is read back from the provider, never assumed. */
        ck_assert_uint_eq(mem_key(m[i], 0), fi_mr_key(m[i]->mr[0]));
        for (int j = 0; j < i; j++)
            ck_assert_uint_ne(mem_key(m[i], 0), mem_key(m[j], 0));
    }
    ferry_context_close(ctx);
    tu_free_buf(buf, 3 * 4096);
}
END_TEST

/* A one-byte key space: 255 keys (0 is never used), then ENOSPC. */
START_TEST(test_small_key_space)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    ferry_context_t *ctx;
    uint8_t *buf = tu_alloc_buf(4096);
    ferry_mem_t *m[254], *extra = MEM_UNTOUCHED;
    bool seen[256] = {false};
    uint64_t freed, pulse_key;

    tu_config(&cfg, prov);
    cfg.mr_key_size = 1;
    ctx = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_uint_eq(info.mr_key_size, 1);
    /* The context's heartbeat word (fabric/pulse.h) holds one key of the
     * 255; the regions get the other 254. */
    pulse_key = ferry__key_to_u64(ferry__fabric_of(ctx)->transports[0].pulse.key,
                                  ferry__fabric_of(ctx)->transports[0].pulse.key_len);
    ck_assert_msg(pulse_key >= 1 && pulse_key <= 255,
                  "heartbeat word key %llu outside one byte",
                  (unsigned long long)pulse_key);
    seen[pulse_key] = true;
    for (int i = 0; i < 254; i++) {
        uint64_t k;

        /* The same page many times over: each registration its own key. */
        m[i] = tu_register(ctx, buf, 4096, RW);
        k = mem_key(m[i], 0);
        ck_assert_msg(k >= 1 && k <= 255, "key %llu outside one byte",
                      (unsigned long long)k);
        ck_assert_msg(!seen[k], "key %llu handed out twice",
                      (unsigned long long)k);
        seen[k] = true;
    }
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, RW,
                                       &extra),
                    FERRY_ENOSPC, "1-byte key space and all are in use");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "deregister regions"));
    ck_assert_ptr_eq(extra, MEM_UNTOUCHED);
    /* Freeing one makes its key the one free key. */
    freed = mem_key(m[99], 0);
    ck_assert_int_eq(ferry_mem_close(m[99]), 0);
    m[99] = tu_register(ctx, buf, 4096, RW);
    ck_assert_uint_eq(mem_key(m[99], 0), freed);
    TU_EXPECT_ERROR(ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, RW,
                                       &extra),
                    FERRY_ENOSPC, "key space");
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* ENDPOINT forced: neither provider here implements fi_mr_bind (1.17:
 * -FI_ENOSYS), so registration must fail and say so.  Should one start to
 * accept it, the registration must then carry a transfer. */
START_TEST(test_endpoint_forced)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_pair p;
    uint8_t *remote = tu_alloc_buf(4096), *local = tu_alloc_buf(4096);
    ferry_mem_t *mem = MEM_UNTOUCHED;
    int ret;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_ENDPOINT;
    tu_pair_open(&p, prov, &cfg);
    ck_assert_int_eq(ferry_context_info(p.target, &info), 0);
    ck_assert(info.mr_mode & FERRY_MR_ENDPOINT);
    ret = ferry_mem_register(p.target, remote, 4096, FERRY_MEM_HOST, 0, RW,
                             &mem);
    if (ret != 0) {
        TU_EXPECT_ERROR(ret, FERRY_ENOTSUP, "(FI_MR_ENDPOINT)");
        ck_assert_ptr_nonnull(strstr(ferry_last_error(), "fi_mr_bind"));
        ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                     "FERRY_MR_ENDPOINT"));
        ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
        ck_assert_ptr_null(ferry__reg_of(p.target)->mem.list);
    } else {
        ferry_mem_t *lm = tu_register(p.init, local, 4096, 0);
        ferry_rmem_t *rmem = tu_share(mem, p.peer);

        write_at(p.peer, lm, local, rmem, 0);
        check_written(remote, 4096, 0);
    }
    tu_pair_close(&p);
    tu_free_buf(remote, 4096);
    tu_free_buf(local, 4096);
}
END_TEST

/* RAW: no provider here has it.  A raw-key blob is refused by a context
 * without it, and forcing it fails registration with a clear sentence. */
START_TEST(test_raw_key_blob_refused)
{
    const char *prov = tu_providers[_i];
    ferry_context_t *ctx = tu_context(prov);
    ferry_peer_t *peer = tu_self_peer(ctx);
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t blob[2048];
    struct rkey_spec s = good_spec();
    size_t len;

    ck_assert_uint_eq(tu_info(ctx).mr_mode & FERRY_MR_RAW, 0);
    s.prov = prov;
    s.flags = RKEY_RAW;
    s.klen = 16;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EINCOMPAT,
                    "remote-key blob carries raw keys (FI_MR_RAW) but this "
                    "context does not");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "same provider and "
                                                     "mr_mode"));
    /* The same with a short key: the flag alone decides. */
    s.klen = 8;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EINCOMPAT,
                    "FI_MR_RAW");
    ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
    ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_raw_forced)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_mem_t *mem = MEM_UNTOUCHED;
    ferry_rmem_t *rmem = RMEM_UNTOUCHED;
    uint8_t *buf = tu_alloc_buf(4096);
    uint8_t blob[2048];
    struct rkey_spec s = good_spec();
    size_t len;
    int ret;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_RAW;
    ctx = tu_context_cfg(&cfg);
    peer = tu_self_peer(ctx);
    ck_assert(tu_info(ctx).mr_mode & FERRY_MR_RAW);
    ret = ferry_mem_register(ctx, buf, 4096, FERRY_MEM_HOST, 0, RW, &mem);
    if (ret != 0) {
        /* Neither provider here has fi_mr_raw_attr. */
        TU_EXPECT_ERROR(ret, FERRY_ENOTSUP, "fi_mr_raw_attr");
        ck_assert_ptr_nonnull(strstr(ferry_last_error(), "FI_MR_RAW"));
        ck_assert_ptr_eq(mem, MEM_UNTOUCHED);
    } else {
        ck_assert_uint_ge(mem->key_len[0], 1);
        ck_assert_int_eq(ferry_mem_close(mem), 0);
    }
    /* A non-raw blob is refused by the raw context, naming the mismatch. */
    s.prov = prov;
    s.claimed = s.nrails = peer->remote_rails;
    len = build_rkey(blob, sizeof(blob), &s);
    TU_EXPECT_ERROR(import_copy(peer, blob, len, &rmem), FERRY_EINCOMPAT,
                    "remote-key blob has no raw keys (FI_MR_RAW) but this "
                    "context uses them");
    /* A raw blob reaches fi_mr_map_raw, which these providers lack. */
    s.flags = RKEY_RAW;
    s.klen = 16;
    len = build_rkey(blob, sizeof(blob), &s);
    ret = import_copy(peer, blob, len, &rmem);
    if (ret != 0) {
        TU_EXPECT_ERROR(ret, FERRY_ENOTSUP, "fi_mr_map_raw");
        ck_assert_ptr_nonnull(strstr(ferry_last_error(), "FI_MR_RAW"));
        ck_assert_ptr_eq(rmem, RMEM_UNTOUCHED);
        ck_assert_uint_eq(atomic_load(&peer->rmem_count), 0);
    } else {
        ck_assert(rmem->key_mapped[0]);
        ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    }
    ferry_context_close(ctx);
    tu_free_buf(buf, 4096);
}
END_TEST

/* LOCAL forced: every registration has its desc, and transfers pass it.
 * Both providers here return a non-NULL desc (the MR object). */
START_TEST(test_local_forced)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    struct tu_pair p;
    uint8_t *remote = tu_alloc_buf(4096), *local = tu_alloc_buf(4096);
    ferry_mem_t *rm, *lm;
    ferry_rmem_t *rmem;

    tu_config(&cfg, prov);
    cfg.mr_mode_force = FERRY_MR_LOCAL;
    tu_pair_open(&p, prov, &cfg);
    ck_assert_int_eq(ferry_context_info(p.init, &info), 0);
    ck_assert(info.mr_mode & FERRY_MR_LOCAL);
    ck_assert(ferry__fabric_of(p.init)->register_local);
    rm = tu_register(p.target, remote, 4096, RW);
    lm = tu_register(p.init, local, 4096, 0);
    for (unsigned i = 0; i < info.nrails; i++) {
        ck_assert_ptr_eq(lm->desc[i], fi_mr_desc(lm->mr[i]));
        ck_assert_msg(lm->desc[i] != NULL,
                      "%s returned a NULL desc under FI_MR_LOCAL", prov);
    }
    rmem = tu_share(rm, p.peer);
    write_at(p.peer, lm, local, rmem, 512);
    check_written(remote, 4096, 512);
    /* Without lmem ferry registers for the request itself. */
    write_at(p.peer, NULL, local + 1024, rmem, 2048);
    check_written(remote + 2048, 64, 0);
    tu_pair_close(&p);
    tu_free_buf(remote, 4096);
    tu_free_buf(local, 4096);
}
END_TEST

static Suite *mem_suite(void)
{
    Suite *s = suite_create("mem");
    TCase *tc = tcase_create("register");

    tcase_add_test(tc, test_register_null_args);
    tcase_add_test(tc, test_register_cuda_not_supported);
    tcase_add_loop_test(tc, test_register_fields, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("export");
    tcase_add_loop_test(tc, test_export_size_protocol, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);

    tc = tcase_create("import");
    tcase_add_loop_test(tc, test_import_round_trip, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_import_every_truncation, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_import_every_corrupted_byte, 0,
                        (int)tu_nproviders);
    tcase_add_test(tc, test_import_built_blobs);
    suite_add_tcase(s, tc);

    tc = tcase_create("mr_mode");
    tcase_add_loop_test(tc, test_virt_addr, 0, 3);
    tcase_add_loop_test(tc, test_requested_keys, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_provider_refuses_duplicate_key, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_prov_key_forced, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_small_key_space, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_endpoint_forced, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_raw_key_blob_refused, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_raw_forced, 0, (int)tu_nproviders);
    tcase_add_loop_test(tc, test_local_forced, 0, (int)tu_nproviders);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(mem_suite());
}
