/*
 * Helpers of the oob suites (see bootutil.h).
 */
#include "bootutil.h"

#include <stdio.h>
#include <string.h>

double now_s(void)
{
    return (double)tu_now_ns() / 1e9;
}

ferry_context_t *ctx_open(const char *prov, int progress_thread,
                          const char *token)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;
    int ret;

    tu_config(&cfg, prov);
    cfg.progress_thread = progress_thread;
    cfg.oob_token = token;
    ret = ferry_context_create(&cfg, &ctx);
    ck_assert_msg(ret == 0, "context on %s: %s", prov, ferry_last_error());
    return ctx;
}

int xfer(ferry_peer_t *peer, int write, void *local, ferry_mem_t *lmem,
         ferry_rmem_t *rmem, uint64_t off, size_t len, char *err,
         size_t errcap)
{
    struct ferry_iov iov = {.local = local,
                            .lmem = lmem,
                            .rmem = rmem,
                            .roffset = off,
                            .len = len};
    ferry_req_t *req = NULL;
    int ret = write ? ferry_write(peer, &iov, 1, NULL, &req)
                    : ferry_read(peer, &iov, 1, NULL, &req);

    if (ret == 0)
        ret = ferry_req_wait(req, 15000);
    if (ret != 0)
        snprintf(err, errcap, "%s: %s (%s)", write ? "write" : "read",
                 ferry_last_error(), ferry_strerror(ret));
    ferry_req_close(req);
    return ret;
}

void xfer_ok(ferry_peer_t *peer, int write, void *local,
             ferry_mem_t *lmem, ferry_rmem_t *rmem, uint64_t off,
             size_t len)
{
    char err[600];
    int ret = xfer(peer, write, local, lmem, rmem, off, len, err, sizeof(err));

    ck_assert_msg(ret == 0, "%s", err);
}

void srv_open(struct srv *s, const char *token)
{
    int ret;

    memset(s, 0, sizeof(*s));
    s->ctx = ctx_open(PROV, 1, token);
    s->buf = tu_alloc_buf(SRV_LEN);
    tu_fill(s->buf, SRV_LEN, SRV_SEED);
    s->mem = tu_register(s->ctx, s->buf, SRV_LEN, RW);
    ret = ferry__oob_listen(s->ctx, "127.0.0.1:0", &s->lis);
    ck_assert_msg(ret == 0, "listen: %s", ferry_last_error());
    s->port = ferry__oob_port(s->lis);
    ck_assert_msg(s->port > 0 && s->port < 65536, "port %d", s->port);
    snprintf(s->hostport, sizeof(s->hostport), "127.0.0.1:%d", s->port);
    ret = ferry__oob_publish(s->lis, "reg", s->mem);
    ck_assert_msg(ret == 0, "publish: %s", ferry_last_error());
}

void srv_close(struct srv *s)
{
    ferry__oob_close(s->lis);
    ck_assert_int_eq(ferry_mem_close(s->mem), 0);
    ferry_context_close(s->ctx);
    tu_free_buf(s->buf, SRV_LEN);
    memset(s, 0, sizeof(*s));
}

void client_ok(struct srv *s, const char *token)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, token);
    ferry__oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *local = tu_alloc_buf(SRV_LEN);
    ferry_mem_t *lmem = tu_register(ctx, local, SRV_LEN, RW);
    size_t bad;
    int ret;

    ret = ferry__oob_connect(ctx, s->hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "a normal client cannot connect to %s: %s (%s)",
                  s->hostport, ferry_last_error(), ferry_strerror(ret));
    ck_assert_ptr_nonnull(ferry__oob_conn_peer(conn));
    ret = ferry__oob_lookup(conn, "reg", 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup of \"reg\": %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), SRV_LEN);
    xfer_ok(ferry__oob_conn_peer(conn), 0, local, lmem, rmem, 0, SRV_LEN);
    bad = tu_check(local, SRV_LEN, SRV_SEED);
    ck_assert_msg(bad == SIZE_MAX, "read-back differs at byte %zu", bad);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry__oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(local, SRV_LEN);
}
