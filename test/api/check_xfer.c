/*
 * xfer module through the API: writes and reads that land byte for byte,
 * in one process (two contexts) and in two, on every loopback provider,
 * whole regions, odd sizes and 64 scattered iovs; and regions that grant
 * only one direction.  (Chunking and operation slots, iovs without lmem,
 * remote addressing, refusals that post nothing, and regions held while
 * requests use them: test/unit/check_xfer.c.)
 */
#include "testutil.h"

#include <stdbool.h>
#include <string.h>

#define BIG (64 * MiB)

/* ---- one process, two contexts ------------------------------------------ */

static const size_t odd_sizes[] = {1, 3, 8, 4095, 4097, 65537, 1000003};

START_TEST(test_pair_write_sizes)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    uint8_t *want = tu_alloc_buf(2 * MiB);

    tu_fx_open(&f, prov, NULL, 0, 1, 2 * MiB, 2 * MiB);
    tu_fill(f.tbuf, f.tlen, 0xb0b0);
    memcpy(want, f.tbuf, f.tlen);
    for (size_t k = 0; k < TU_ARRAY_LEN(odd_sizes); k++) {
        size_t len = odd_sizes[k];
        uint64_t roff = (k * 131071) % (f.tlen - len);
        size_t loff = (k * 8191) % (f.llen - len);
        uint64_t seed = 0x1000 + k;
        struct ferry_iov iov = {f.lbuf + loff, f.lmem, f.rmem, roff, len};

        tu_fill(f.lbuf + loff, len, seed);
        tu_xfer_ok(f.p.peer, true, &iov, 1, prov);
        tu_assert_pattern(f.tbuf + roff, len, seed,
                          "%s: write of %zu bytes to offset %llu", prov, len,
                          (unsigned long long)roff);
        tu_fill(want + roff, len, seed);
        /* Nothing around it moved. */
        tu_assert_same(f.tbuf, want, f.tlen, "target after the write");
    }
    tu_fx_close(&f);
    tu_free_buf(want, 2 * MiB);
}
END_TEST

START_TEST(test_pair_read_sizes)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    uint8_t *want = tu_alloc_buf(2 * MiB);

    tu_fx_open(&f, prov, NULL, 0, 1, 2 * MiB, 2 * MiB);
    tu_fill(f.lbuf, f.llen, 0xc0c0);
    memcpy(want, f.lbuf, f.llen);
    for (size_t k = 0; k < TU_ARRAY_LEN(odd_sizes); k++) {
        size_t len = odd_sizes[k];
        uint64_t roff = (k * 65519) % (f.tlen - len);
        size_t loff = (k * 12289) % (f.llen - len);
        uint64_t seed = 0x2000 + k;
        struct ferry_iov iov = {f.lbuf + loff, f.lmem, f.rmem, roff, len};

        tu_fill(f.tbuf + roff, len, seed);
        tu_xfer_ok(f.p.peer, false, &iov, 1, prov);
        tu_assert_pattern(f.lbuf + loff, len, seed,
                          "%s: read of %zu bytes from offset %llu", prov, len,
                          (unsigned long long)roff);
        tu_fill(want + loff, len, seed);
        tu_assert_same(f.lbuf, want, f.llen, "local buffer after the read");
    }
    tu_fx_close(&f);
    tu_free_buf(want, 2 * MiB);
}
END_TEST

START_TEST(test_pair_write_64mib)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov;

    tu_fx_open(&f, prov, NULL, 0, 1, BIG, BIG);
    tu_fill(f.lbuf, BIG, 0x6464);
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, BIG};
    tu_xfer_ok(f.p.peer, true, &iov, 1, prov);
    tu_assert_pattern(f.tbuf, BIG, 0x6464, "%s: 64 MiB write", prov);
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_pair_read_64mib)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov;

    tu_fx_open(&f, prov, NULL, 0, 1, BIG, BIG);
    tu_fill(f.tbuf, BIG, 0x4646);
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, BIG};
    tu_xfer_ok(f.p.peer, false, &iov, 1, prov);
    tu_assert_pattern(f.lbuf, BIG, 0x4646, "%s: 64 MiB read", prov);
    tu_fx_close(&f);
}
END_TEST

/*
 * 64 iovs of varied lengths at scattered, non-overlapping offsets, laid
 * out in one order locally and in the reverse order remotely.
 */
#define NSCATTER 64

static void scatter_layout(struct ferry_iov *iov, size_t n, size_t region)
{
    size_t rcur = 0, lcur = 0;

    for (size_t i = 0; i < n; i++) {
        size_t len = i == 0 ? 1 : i == 1 ? 3 : i == 2 ? 4097
                                                      : 1 + (i * 7919) % 9000;
        iov[i].len = len;
    }
    for (size_t i = 0; i < n; i++) {
        rcur += 1 + (i * 13) % 509; /* gap */
        iov[n - 1 - i].roffset = rcur;
        rcur += iov[n - 1 - i].len;
        lcur += 1 + (i * 29) % 311;
        iov[i].local = (void *)(uintptr_t)lcur; /* offset for now */
        lcur += iov[i].len;
    }
    ck_assert_uint_le(rcur, region);
    ck_assert_uint_le(lcur, region);
}

static void scatter(const char *prov, bool write)
{
    struct tu_fx f;
    struct ferry_iov iov[NSCATTER];
    uint8_t *want = tu_alloc_buf(MiB);

    tu_fx_open(&f, prov, NULL, 0, 1, MiB, MiB);
    scatter_layout(iov, NSCATTER, MiB);
    /* Backgrounds that must survive between the pieces. */
    tu_fill(f.tbuf, MiB, 0xaaaa);
    tu_fill(f.lbuf, MiB, 0xbbbb);
    memcpy(want, write ? f.tbuf : f.lbuf, MiB);
    for (size_t i = 0; i < NSCATTER; i++) {
        size_t loff = (uintptr_t)iov[i].local;
        iov[i].local = f.lbuf + loff;
        iov[i].lmem = f.lmem;
        iov[i].rmem = f.rmem;
        if (write) {
            tu_fill(iov[i].local, iov[i].len, 0x3000 + i);
            tu_fill(want + iov[i].roffset, iov[i].len, 0x3000 + i);
        } else {
            tu_fill(f.tbuf + iov[i].roffset, iov[i].len, 0x3000 + i);
            tu_fill(want + loff, iov[i].len, 0x3000 + i);
        }
    }
    tu_xfer_ok(f.p.peer, write, iov, NSCATTER, prov);
    for (size_t i = 0; i < NSCATTER; i++) {
        const uint8_t *got = write ? f.tbuf + iov[i].roffset
                                   : (const uint8_t *)iov[i].local;
        tu_assert_pattern(got, iov[i].len, 0x3000 + i,
                          "%s: iov[%zu] of %zu bytes", prov, i, iov[i].len);
    }
    tu_assert_same(write ? f.tbuf : f.lbuf, want, MiB,
                write ? "target after 64 scattered writes"
                      : "local buffer after 64 scattered reads");
    tu_fx_close(&f);
    tu_free_buf(want, MiB);
}

START_TEST(test_pair_write_scattered)
{
    scatter(tu_providers[_i], true);
}
END_TEST

START_TEST(test_pair_read_scattered)
{
    scatter(tu_providers[_i], false);
}
END_TEST

/* ---- two processes ------------------------------------------------------ */

struct remote {
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint8_t *lbuf;
    size_t len;
    ferry_mem_t *lmem;
};

static void remote_open(struct remote *r, const char *prov, size_t len,
                        uint64_t child_seed)
{
    struct ferry_config cfg;
    int ret;

    memset(r, 0, sizeof(*r));
    tu_child_start(&r->c, prov, len, child_seed);
    tu_config(&cfg, prov);
    ret = ferry_context_create(&cfg, &r->ctx);
    ck_assert_msg(ret == 0, "context on %s: %s", prov, ferry_last_error());
    ret = ferry_peer_add(r->ctx, r->c.addr, r->c.addr_len, &r->peer);
    ck_assert_msg(ret == 0, "peer_add of the child: %s", ferry_last_error());
    ret = ferry_rmem_import(r->peer, r->c.rkey, r->c.rkey_len, &r->rmem);
    ck_assert_msg(ret == 0, "import of the child's region: %s",
                  ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(r->rmem), len);
    r->len = len;
    r->lbuf = tu_alloc_buf(len);
    ret = ferry_mem_register(r->ctx, r->lbuf, len, FERRY_MEM_HOST, 0, 0,
                             &r->lmem);
    ck_assert_msg(ret == 0, "local register: %s", ferry_last_error());
}

static void remote_close(struct remote *r)
{
    ck_assert_int_eq(ferry_rmem_close(r->rmem), 0);
    ck_assert_int_eq(ferry_mem_close(r->lmem), 0);
    ck_assert_int_eq(ferry_peer_close(r->peer), 0);
    ferry_context_close(r->ctx);
    tu_child_stop(&r->c);
    tu_free_buf(r->lbuf, r->len);
}

START_TEST(test_child_write_64mib)
{
    const char *prov = tu_providers[_i];
    struct remote r;
    struct ferry_iov iov;

    remote_open(&r, prov, BIG, 0x5151);
    tu_fill(r.lbuf, BIG, 0x5252);
    iov = (struct ferry_iov){r.lbuf, r.lmem, r.rmem, 0, BIG};
    tu_xfer_ok(r.peer, true, &iov, 1, prov);
    ck_assert_msg(tu_child_verify(&r.c, 0x5252),
                  "%s: the child's 64 MiB differ from what was written", prov);
    remote_close(&r);
}
END_TEST

START_TEST(test_child_read_64mib)
{
    const char *prov = tu_providers[_i];
    struct remote r;
    struct ferry_iov iov;

    remote_open(&r, prov, BIG, 0x5353);
    iov = (struct ferry_iov){r.lbuf, r.lmem, r.rmem, 0, BIG};
    tu_xfer_ok(r.peer, false, &iov, 1, prov);
    tu_assert_pattern(r.lbuf, BIG, 0x5353, "%s: 64 MiB read from the child",
                      prov);
    remote_close(&r);
}
END_TEST

/* The whole region in pieces cut at odd places, several rounds. */
START_TEST(test_child_pieces)
{
    const char *prov = tu_providers[_i];
    const size_t len = 1000003;
    const size_t cuts[] = {0, 1, 4, 4097, 65536, 65539, 500000, 999999, len};
    struct ferry_iov iov[TU_ARRAY_LEN(cuts) - 1];
    struct remote r;

    remote_open(&r, prov, len, 0x6161);
    for (uint64_t round = 0; round < 3; round++) {
        uint64_t seed = 0x6200 + round;

        tu_fill(r.lbuf, len, seed);
        for (size_t i = 0; i + 1 < TU_ARRAY_LEN(cuts); i++)
            iov[i] = (struct ferry_iov){r.lbuf + cuts[i], r.lmem, r.rmem,
                                        cuts[i], cuts[i + 1] - cuts[i]};
        tu_xfer_ok(r.peer, true, iov, TU_ARRAY_LEN(iov), prov);
        ck_assert_msg(tu_child_verify(&r.c, seed),
                      "%s: round %llu: child's buffer is not pattern %llx",
                      prov, (unsigned long long)round,
                      (unsigned long long)seed);
        memset(r.lbuf, 0, len);
        tu_xfer_ok(r.peer, false, iov, TU_ARRAY_LEN(iov), prov);
        tu_assert_pattern(r.lbuf, len, seed, "%s: read back, round %llu", prov,
                          (unsigned long long)round);
    }
    remote_close(&r);
}
END_TEST

/* ---- access ------------------------------------------------------------- */

START_TEST(test_access_refused)
{
    const char *prov = tu_providers[_i];
    struct tu_pair p;
    uint8_t *tbuf = tu_alloc_buf(2 * 4096), *lbuf = tu_alloc_buf(4096);
    ferry_mem_t *ronly, *wonly;
    ferry_rmem_t *r_ro, *r_wo;
    struct ferry_iov iov;
    ferry_req_t *req = (ferry_req_t *)0x1;
    int ret;

    tu_pair_open(&p, prov, NULL);
    ck_assert_int_eq(ferry_mem_register(p.target, tbuf, 4096, FERRY_MEM_HOST,
                                        0, FERRY_ACCESS_REMOTE_READ, &ronly),
                     0);
    ck_assert_int_eq(ferry_mem_register(p.target, tbuf + 4096, 4096,
                                        FERRY_MEM_HOST, 0,
                                        FERRY_ACCESS_REMOTE_WRITE, &wonly),
                     0);
    r_ro = tu_share(ronly, p.peer);
    r_wo = tu_share(wonly, p.peer);
    tu_fill(lbuf, 4096, 0xf0);

    iov = (struct ferry_iov){lbuf, NULL, r_ro, 0, 16};
    ret = ferry_write(p.peer, &iov, 1, NULL, &req);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "iov[0]"));
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "FERRY_ACCESS_REMOTE_WRITE"));
    iov.rmem = r_wo;
    ret = ferry_read(p.peer, &iov, 1, NULL, &req);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "FERRY_ACCESS_REMOTE_READ"));
    ck_assert_ptr_eq(req, (ferry_req_t *)0x1);
    /* Nothing reached the read-only region; the allowed directions work. */
    for (size_t i = 0; i < 4096; i++)
        ck_assert_uint_eq(tbuf[i], 0);
    /* A write into the write-only one. */
    tu_xfer_ok(p.peer, true, &iov, 1, prov);
    tu_assert_pattern(tbuf + 4096, 16, 0xf0, "%s: write-only region", prov);
    tu_fill(tbuf, 4096, 0xf1);
    iov.rmem = r_ro;
    tu_xfer_ok(p.peer, false, &iov, 1, prov);
    tu_assert_pattern(lbuf, 16, 0xf1, "%s: read-only region", prov);

    ck_assert_int_eq(ferry_rmem_close(r_ro), 0);
    ck_assert_int_eq(ferry_rmem_close(r_wo), 0);
    tu_pair_close(&p);
    tu_free_buf(tbuf, 2 * 4096);
    tu_free_buf(lbuf, 4096);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *xfer_suite(void)
{
    Suite *s = suite_create("xfer");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "pair", 60);
    tcase_add_loop_test(tc, test_pair_write_sizes, 0, np);
    tcase_add_loop_test(tc, test_pair_read_sizes, 0, np);
    tcase_add_loop_test(tc, test_pair_write_64mib, 0, np);
    tcase_add_loop_test(tc, test_pair_read_64mib, 0, np);
    tcase_add_loop_test(tc, test_pair_write_scattered, 0, np);
    tcase_add_loop_test(tc, test_pair_read_scattered, 0, np);

    tc = tu_tcase(s, "child", 60);
    tcase_add_loop_test(tc, test_child_write_64mib, 0, np);
    tcase_add_loop_test(tc, test_child_read_64mib, 0, np);
    tcase_add_loop_test(tc, test_child_pieces, 0, np);

    tc = tu_tcase(s, "invalid", 60);
    tcase_add_loop_test(tc, test_access_refused, 0, np);
    return s;
}

int main(void)
{
    return tu_run(xfer_suite());
}
