/*
 * oob module (TCP bootstrap): a listener publishes regions and a client
 * finds them by name, in one process, across two processes and with
 * several clients at once; tokens; every malformed frame a raw socket can
 * send is refused without hurting the listener; a client facing a fake
 * server fails with the right error within its deadline; bad arguments.
 *
 * Listeners bind 127.0.0.1:0 (ferry_oob_port tells the port), so suites
 * running side by side never collide.
 */
#include "testutil.h"

#include "ferry-internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROV "tcp;ofi_rxm"

/* Frame kinds and limits of lib/oob.c (the wire format under test). */
enum {
    K_HELLO = 16,
    K_HELLO_OK,
    K_LOOKUP,
    K_FOUND,
    K_NOTFOUND,
    K_OFFER,
    K_OFFER_OK,
    K_ERROR,
};
#define FRAME_MAX (64u * 1024u)
#define HDR FERRY__BLOB_HEADER_LEN

#define SRV_LEN (64u * 1024u)
#define SRV_SEED 0x5e4e5e4eu

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- contexts, regions, transfers ------------------------------------------ */

static ferry_context_t *ctx_open(const char *prov, int progress_thread,
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

static ferry_mem_t *reg(ferry_context_t *ctx, void *buf, size_t len)
{
    ferry_mem_t *mem = NULL;
    int ret = ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0,
                                 FERRY_ACCESS_REMOTE_READ |
                                     FERRY_ACCESS_REMOTE_WRITE,
                                 &mem);

    ck_assert_msg(ret == 0, "register %zu bytes: %s", len,
                  ferry_last_error());
    return mem;
}

/* One write or read of len bytes, waited for; 0 or the error, whose
 * sentence goes to err (threads cannot assert). */
static int xfer(ferry_peer_t *peer, int write, void *local, ferry_mem_t *lmem,
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
    ferry_req_free(req);
    return ret;
}

static void xfer_ok(ferry_peer_t *peer, int write, void *local,
                    ferry_mem_t *lmem, ferry_rmem_t *rmem, uint64_t off,
                    size_t len)
{
    char err[600];
    int ret = xfer(peer, write, local, lmem, rmem, off, len, err, sizeof(err));

    ck_assert_msg(ret == 0, "%s", err);
}

/* ---- a listener with one region ---------------------------------------------- */

/* A server context (progress thread) listening on 127.0.0.1:0, with a
 * SRV_LEN region filled with SRV_SEED published as "reg". */
struct srv {
    ferry_context_t *ctx;
    ferry_oob_t *lis;
    int port;
    char hostport[32];
    uint8_t *buf;
    ferry_mem_t *mem;
};

static void srv_open(struct srv *s, const char *token)
{
    int ret;

    memset(s, 0, sizeof(*s));
    s->ctx = ctx_open(PROV, 1, token);
    s->buf = tu_alloc_buf(SRV_LEN);
    tu_fill(s->buf, SRV_LEN, SRV_SEED);
    s->mem = reg(s->ctx, s->buf, SRV_LEN);
    ret = ferry_oob_listen(s->ctx, "127.0.0.1:0", &s->lis);
    ck_assert_msg(ret == 0, "listen: %s", ferry_last_error());
    s->port = ferry_oob_port(s->lis);
    ck_assert_msg(s->port > 0 && s->port < 65536, "port %d", s->port);
    snprintf(s->hostport, sizeof(s->hostport), "127.0.0.1:%d", s->port);
    ret = ferry_oob_publish(s->lis, "reg", s->mem);
    ck_assert_msg(ret == 0, "publish: %s", ferry_last_error());
}

static void srv_close(struct srv *s)
{
    ferry_oob_close(s->lis);
    ck_assert_int_eq(ferry_mem_deregister(s->mem), 0);
    ferry_context_destroy(s->ctx);
    tu_free_buf(s->buf, SRV_LEN);
    memset(s, 0, sizeof(*s));
}

/*
 * Proves the listener still serves: a fresh client connects, finds "reg"
 * and reads it back with the right contents.
 */
static void client_ok(struct srv *s, const char *token)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, token);
    ferry_oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *local = tu_alloc_buf(SRV_LEN);
    ferry_mem_t *lmem = reg(ctx, local, SRV_LEN);
    size_t bad;
    int ret;

    ret = ferry_oob_connect(ctx, s->hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "a normal client cannot connect to %s: %s (%s)",
                  s->hostport, ferry_last_error(), ferry_strerror(ret));
    ck_assert_ptr_nonnull(ferry_oob_conn_peer(conn));
    ret = ferry_oob_lookup(conn, "reg", 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup of \"reg\": %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), SRV_LEN);
    xfer_ok(ferry_oob_conn_peer(conn), 0, local, lmem, rmem, 0, SRV_LEN);
    bad = tu_check(local, SRV_LEN, SRV_SEED);
    ck_assert_msg(bad == SIZE_MAX, "read-back differs at byte %zu", bad);
    ck_assert_int_eq(ferry_rmem_free(rmem), 0);
    ferry_oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_deregister(lmem), 0);
    ferry_context_destroy(ctx);
    tu_free_buf(local, SRV_LEN);
}

/* ---- raw sockets and frames --------------------------------------------------- */

static int raw_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
                  "raw connect to port %d: %s", port, strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_msg(n > 0, "raw send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* A frame of `kind` with an optional string and u32-length-prefixed bytes,
 * as lib/oob.c builds them. */
static size_t frame(uint8_t *buf, size_t cap, unsigned kind, const char *str,
                    const void *bytes, size_t n)
{
    struct ferry__blob_writer w;
    size_t len = 0;

    ferry__blob_begin(&w, buf, cap, (enum ferry__blob_kind)kind);
    if (str != NULL)
        ferry__blob_put_str(&w, str);
    if (bytes != NULL) {
        ferry__blob_put_u32(&w, (uint32_t)n);
        ferry__blob_put_bytes(&w, bytes, n);
    }
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* A bare 16-byte header. */
static void header(uint8_t *h, uint32_t magic, unsigned version,
                   unsigned kind, uint32_t total)
{
    put32(h, magic);
    h[4] = (uint8_t)version;
    h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)kind;
    h[7] = (uint8_t)(kind >> 8);
    put32(h + 8, total);
    put32(h + 12, 0);
}

/* The HELLO a real client sends, carrying the address blob of ctx. */
static size_t hello_frame(uint8_t *buf, size_t cap, ferry_context_t *ctx,
                          const char *token)
{
    uint8_t addr[512];
    size_t alen = sizeof(addr);
    int ret = ferry_context_address(ctx, addr, &alen);

    ck_assert_msg(ret == 0, "address: %s", ferry_last_error());
    return frame(buf, cap, K_HELLO, token != NULL ? token : "", addr, alen);
}

/* Reads one whole frame within timeout_ms; returns its kind. */
static unsigned raw_read_frame(int fd, uint8_t *buf, size_t cap,
                               int timeout_ms, size_t *len)
{
    double end = now_s() + timeout_ms / 1000.0;
    size_t got = 0, want = HDR;

    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - now_s()) * 1000);
        ssize_t n;

        ck_assert_msg(ms > 0 && poll(&pfd, 1, ms) == 1,
                      "no whole frame from the server within %d ms (%zu "
                      "bytes so far)",
                      timeout_ms, got);
        n = recv(fd, buf + got, want - got, 0);
        ck_assert_msg(n > 0, "server closed or failed mid-frame: %s",
                      n == 0 ? "EOF" : strerror(errno));
        got += (size_t)n;
        if (got == HDR) {
            want = get32(buf + 8);
            ck_assert_msg(want >= HDR && want <= cap,
                          "server frame announces %zu bytes", want);
        }
    }
    *len = got;
    return (unsigned)buf[6] | (unsigned)buf[7] << 8;
}

/* Sends a real HELLO and checks the HELLO_OK. */
static void raw_hello(int fd, ferry_context_t *ctx)
{
    uint8_t buf[FRAME_MAX];
    size_t len = hello_frame(buf, sizeof(buf), ctx, NULL);

    raw_send(fd, buf, len);
    ck_assert_uint_eq(raw_read_frame(fd, buf, sizeof(buf), 3000, &len),
                      K_HELLO_OK);
}

/*
 * Reads until the server closes the socket (EOF, or a reset) or
 * timeout_ms passes.  Asserts that it was closed in time.  When want is
 * not NULL, the server must have sent an ERROR frame whose sentence
 * contains want; when it is NULL, it must have sent nothing.
 */
static void expect_dropped(int fd, int timeout_ms, const char *want,
                           double *elapsed)
{
    static uint8_t data[1u << 20];
    double t0 = now_s(), end = t0 + timeout_ms / 1000.0;
    size_t got = 0;
    bool closed = false, reset = false;
    char why[512] = "";

    while (!closed) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - now_s()) * 1000);
        ssize_t n;

        if (ms <= 0 || poll(&pfd, 1, ms) != 1)
            break;
        n = recv(fd, data + got, sizeof(data) - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0 || errno == ECONNRESET) {
            closed = true;
            reset = n != 0;
        } else if (errno != EINTR) {
            ck_abort_msg("raw recv: %s", strerror(errno));
        }
        ck_assert_msg(got < sizeof(data), "server keeps sending");
    }
    if (elapsed != NULL)
        *elapsed = now_s() - t0;
    ck_assert_msg(closed,
                  "the server did not close the socket within %d ms (%zu "
                  "bytes received)",
                  timeout_ms, got);
    /* What was received: whole frames; the last one may be an ERROR. */
    for (size_t pos = 0; pos + HDR <= got;) {
        size_t total = get32(data + pos + 8);
        unsigned kind = data[pos + 6] | data[pos + 7] << 8;
        struct ferry__blob_reader r;

        ck_assert_msg(total >= HDR && pos + total <= got,
                      "partial frame of %zu bytes from the server", total);
        ck_assert_msg(ferry__blob_open(&r, data + pos, total,
                                       (enum ferry__blob_kind)kind,
                                       "server frame") == 0,
                      "server sent a bad frame: %s", ferry_last_error());
        if (kind == K_ERROR) {
            ferry__blob_get_str(&r, why, sizeof(why));
            ck_assert_msg(!r.bad, "ERROR frame without a sentence");
        }
        pos += total;
    }
    if (want == NULL) {
        ck_assert_msg(got == 0, "expected no answer, got %zu bytes", got);
    } else {
        ck_assert_msg(!reset || why[0] != '\0',
                      "the server reset the socket before its ERROR frame "
                      "arrived");
        ck_assert_msg(strstr(why, want) != NULL,
                      "ERROR frame says \"%s\", expected it to contain "
                      "\"%s\"",
                      why, want);
    }
}

/*
 * Sends bytes on a raw socket (after a HELLO when greet), expects the
 * server to drop it (with an ERROR containing want, or silently when want
 * is NULL), then checks that a normal client is still served.
 */
static void raw_case(const uint8_t *bytes, size_t len, bool greet,
                     bool shut_wr, const char *want)
{
    struct srv s;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    if (greet)
        raw_hello(fd, s.ctx);
    raw_send(fd, bytes, len);
    if (shut_wr)
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    expect_dropped(fd, 3000, want, NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}

/* ---- happy path, one process ---------------------------------------------------- */

struct offer_later {
    ferry_oob_conn_t *conn;
    ferry_mem_t *mem;
    int delay_ms;
    int ret;
    char err[512];
};

static void *offer_main(void *arg)
{
    struct offer_later *o = arg;

    usleep((useconds_t)o->delay_ms * 1000);
    o->ret = ferry_oob_offer(o->conn, "back", o->mem, 5000);
    snprintf(o->err, sizeof(o->err), "%s", ferry_last_error());
    return NULL;
}

START_TEST(test_publish_lookup_offer_one_process)
{
    enum { A_LEN = 64 * 1024, B_LEN = 32 * 1024, C_LEN = 16 * 1024 };
    ferry_context_t *sctx = ctx_open(PROV, 1, NULL);
    ferry_context_t *cctx = ctx_open(PROV, 1, NULL);
    uint8_t *a = tu_alloc_buf(A_LEN), *b = tu_alloc_buf(B_LEN);
    uint8_t *c = tu_alloc_buf(C_LEN), *local = tu_alloc_buf(A_LEN);
    uint8_t *slocal = tu_alloc_buf(C_LEN);
    ferry_mem_t *amem, *bmem, *cmem, *lmem, *slmem;
    ferry_oob_t *lis = NULL;
    ferry_oob_conn_t *conn = NULL, *sconn = NULL, *none = NULL;
    ferry_rmem_t *ra = NULL, *rb = NULL, *rc = NULL, *rx = NULL;
    struct offer_later o;
    pthread_t th;
    char hostport[32];
    double t0;
    size_t bad;
    int ret, port;

    tu_fill(a, A_LEN, 1);
    amem = reg(sctx, a, A_LEN);
    bmem = reg(sctx, b, B_LEN);
    cmem = reg(cctx, c, C_LEN);
    lmem = reg(cctx, local, A_LEN);
    slmem = reg(sctx, slocal, C_LEN);

    ret = ferry_oob_listen(sctx, "127.0.0.1:0", &lis);
    ck_assert_msg(ret == 0, "listen: %s", ferry_last_error());
    port = ferry_oob_port(lis);
    ck_assert_int_gt(port, 0);
    ck_assert_int_eq(ferry_oob_publish(lis, "alpha", amem), 0);
    ck_assert_int_eq(ferry_oob_publish(lis, "beta", bmem), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", port);

    ret = ferry_oob_connect(cctx, hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect to %s: %s", hostport, ferry_last_error());
    ck_assert_ptr_nonnull(ferry_oob_conn_peer(conn));

    ret = ferry_oob_lookup(conn, "alpha", 5000, &ra);
    ck_assert_msg(ret == 0, "lookup alpha: %s", ferry_last_error());
    /* < 0: no deadline, as for ferry_oob_accept. */
    ret = ferry_oob_lookup(conn, "beta", -1, &rb);
    ck_assert_msg(ret == 0, "lookup beta: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(ra), A_LEN);
    ck_assert_uint_eq(ferry_rmem_length(rb), B_LEN);

    /* Read alpha, write beta; both checked in the server's memory. */
    xfer_ok(ferry_oob_conn_peer(conn), 0, local, lmem, ra, 0, A_LEN);
    bad = tu_check(local, A_LEN, 1);
    ck_assert_msg(bad == SIZE_MAX, "alpha read differs at byte %zu", bad);
    tu_fill(local, B_LEN, 2);
    xfer_ok(ferry_oob_conn_peer(conn), 1, local, lmem, rb, 0, B_LEN);
    bad = tu_check(b, B_LEN, 2);
    ck_assert_msg(bad == SIZE_MAX, "beta write differs at byte %zu", bad);

    /* An unknown name: FERRY_ENOENT, and the sentence names it. */
    ret = ferry_oob_lookup(conn, "gamma", 5000, &rx);
    ck_assert_msg(ret == FERRY_ENOENT, "lookup gamma gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "\"gamma\"") != NULL, "%s",
                  ferry_last_error());
    ck_assert_ptr_null(rx);

    /* The newest publication of a name wins. */
    ck_assert_int_eq(ferry_oob_publish(lis, "alpha", bmem), 0);
    ret = ferry_oob_lookup(conn, "alpha", 5000, &rx);
    ck_assert_msg(ret == 0, "lookup alpha again: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rx), B_LEN);
    ck_assert_int_eq(ferry_rmem_free(rx), 0);

    /* The server accepts the client and writes into what it offers;
     * ferry_oob_lookup on the accepted conn waits for the offer. */
    ret = ferry_oob_accept(lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ck_assert_ptr_nonnull(ferry_oob_conn_peer(sconn));
    ret = ferry_oob_accept(lis, 100, &none);
    ck_assert_msg(ret == FERRY_ETIMEDOUT, "second accept gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_null(none);

    o = (struct offer_later){.conn = conn, .mem = cmem, .delay_ms = 300};
    ck_assert_int_eq(pthread_create(&th, NULL, offer_main, &o), 0);
    t0 = now_s();
    ret = ferry_oob_lookup(sconn, "back", 5000, &rc);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(o.ret == 0, "offer: %s", o.err);
    ck_assert_msg(ret == 0, "server lookup of the offer: %s",
                  ferry_last_error());
    ck_assert_msg(now_s() - t0 > 0.2,
                  "lookup returned before the offer was made");
    ck_assert_uint_eq(ferry_rmem_length(rc), C_LEN);
    tu_fill(slocal, C_LEN, 3);
    xfer_ok(ferry_oob_conn_peer(sconn), 1, slocal, slmem, rc, 0, C_LEN);
    bad = tu_check(c, C_LEN, 3);
    ck_assert_msg(bad == SIZE_MAX, "write-back differs at byte %zu", bad);

    /* A name never offered: ENOENT once the wait runs out. */
    t0 = now_s();
    ret = ferry_oob_lookup(sconn, "never", 200, &rx);
    ck_assert_msg(ret == FERRY_ENOENT, "server lookup of never gave %d: %s",
                  ret, ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "\"never\""));
    ck_assert_msg(now_s() - t0 >= 0.15 && now_s() - t0 < 2.0,
                  "waited %.3f s for a 200 ms lookup", now_s() - t0);

    ck_assert_int_eq(ferry_rmem_free(ra), 0);
    ck_assert_int_eq(ferry_rmem_free(rb), 0);
    ck_assert_int_eq(ferry_rmem_free(rc), 0);
    ferry_oob_disconnect(sconn);
    ferry_oob_disconnect(conn);
    ferry_oob_close(lis);
    ferry_context_destroy(cctx);
    ferry_context_destroy(sctx);
    tu_free_buf(a, A_LEN);
    tu_free_buf(b, B_LEN);
    tu_free_buf(c, C_LEN);
    tu_free_buf(local, A_LEN);
    tu_free_buf(slocal, C_LEN);
}
END_TEST

/* Closing the listener leaves accepted conns valid (but detached). */
START_TEST(test_close_keeps_accepted_conn)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    uint8_t *c = tu_alloc_buf(4096);
    ferry_mem_t *cmem = reg(cctx, c, 4096);
    ferry_oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret;

    srv_open(&s, NULL);
    ret = ferry_oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    ret = ferry_oob_offer(conn, "c1", cmem, 5000);
    ck_assert_msg(ret == 0, "offer: %s", ferry_last_error());
    ret = ferry_oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());

    ferry_oob_close(s.lis);
    s.lis = NULL;
    ck_assert_ptr_nonnull(ferry_oob_conn_peer(sconn));
    ret = ferry_oob_lookup(sconn, "c1", 100, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET, "lookup after close gave %d: %s",
                  ret, ferry_last_error());
    ret = ferry_oob_offer(sconn, "x", s.mem, 100);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ferry_oob_disconnect(sconn);

    /* The client's connection is gone with the listener. */
    ret = ferry_oob_lookup(conn, "reg", 2000, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET,
                  "client lookup after the listener closed gave %d: %s", ret,
                  ferry_last_error());
    ferry_oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_deregister(cmem), 0);
    ferry_context_destroy(cctx);
    tu_free_buf(c, 4096);
    srv_close(&s);
}
END_TEST

/* A server-side lookup ends early when the client goes away. */
START_TEST(test_accepted_lookup_sees_disconnect)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    double t0;
    int ret;

    srv_open(&s, NULL);
    ret = ferry_oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    ret = ferry_oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ferry_oob_disconnect(conn);
    t0 = now_s();
    ret = ferry_oob_lookup(sconn, "x", 5000, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET, "lookup gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "disconnected"));
    ck_assert_msg(now_s() - t0 < 2.0, "took %.3f s", now_s() - t0);
    ferry_oob_disconnect(sconn);
    ferry_context_destroy(cctx);
    srv_close(&s);
}
END_TEST

/* ---- two processes ------------------------------------------------------------ */

#define TP_LEN (128u * 1024u)

/* Reports a failure to the parent (`E` and a sentence) and exits. */
static void child_fail(int out, int code, const char *step)
{
    char msg[600];

    memset(msg, 0, sizeof(msg));
    snprintf(msg, sizeof(msg), "child: %s: %s", step, ferry_last_error());
    if (write(out, "E", 1) == 1 && write(out, msg, sizeof(msg)) > 0)
        (void)0;
    _exit(code);
}

/* The server process: publishes "srv" (pattern 11), accepts the parent,
 * writes pattern 13 into what it offers as "cli", then verifies that its
 * own region holds pattern 12 (the parent's write). */
static void server_child(int in, int out)
{
    ferry_context_t *ctx = NULL;
    ferry_oob_t *lis = NULL;
    ferry_oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    ferry_mem_t *mem = NULL, *lmem = NULL;
    struct ferry_config cfg;
    uint8_t *buf = tu_alloc_buf(TP_LEN), *local = tu_alloc_buf(TP_LEN);
    char err[600], cmd = 0;
    int port;

    tu_fill(buf, TP_LEN, 11);
    tu_fill(local, TP_LEN, 13);
    tu_config(&cfg, PROV);
    cfg.progress_thread = 1;
    cfg.oob_token = NULL;
    if (ferry_context_create(&cfg, &ctx) != 0)
        child_fail(out, 20, "context");
    if (ferry_mem_register(ctx, buf, TP_LEN, FERRY_MEM_HOST, 0,
                           FERRY_ACCESS_REMOTE_READ |
                               FERRY_ACCESS_REMOTE_WRITE,
                           &mem) != 0 ||
        ferry_mem_register(ctx, local, TP_LEN, FERRY_MEM_HOST, 0, 0, &lmem))
        child_fail(out, 21, "register");
    if (ferry_oob_listen(ctx, "127.0.0.1:0", &lis) != 0)
        child_fail(out, 22, "listen");
    if (ferry_oob_publish(lis, "srv", mem) != 0)
        child_fail(out, 23, "publish");
    port = ferry_oob_port(lis);
    if (write(out, "p", 1) != 1 || write(out, &port, sizeof(port)) != 4)
        _exit(24);
    if (ferry_oob_accept(lis, 15000, &conn) != 0)
        child_fail(out, 25, "accept");
    if (ferry_oob_lookup(conn, "cli", 15000, &rmem) != 0)
        child_fail(out, 26, "lookup of the offer");
    if (ferry_rmem_length(rmem) != TP_LEN)
        child_fail(out, 27, "offered length");
    if (xfer(ferry_oob_conn_peer(conn), 1, local, lmem, rmem, 0, TP_LEN, err,
             sizeof(err)) != 0) {
        ferry__error(FERRY_EIO, "%s", err);
        child_fail(out, 28, "write-back");
    }
    if (write(out, "w", 1) != 1)
        _exit(29);
    while (read(in, &cmd, 1) == 1 && cmd == 'v') {
        char ok = tu_check(buf, TP_LEN, 12) == SIZE_MAX ? '1' : '0';
        if (write(out, &ok, 1) != 1)
            _exit(30);
    }
    ferry_rmem_free(rmem);
    ferry_oob_disconnect(conn);
    ferry_oob_close(lis);
    ferry_context_destroy(ctx);
    _exit(cmd == 'q' ? 0 : 31);
}

/* Reads the byte the child sends next; a failure report fails the test. */
static char from_child(int fd, pid_t pid)
{
    char c = 0, msg[600];
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int status = 0;

    if (poll(&pfd, 1, 20000) == 1 && read(fd, &c, 1) == 1) {
        if (c != 'E')
            return c;
        memset(msg, 0, sizeof(msg));
        tu_read_all(fd, msg, sizeof(msg));
        msg[sizeof(msg) - 1] = '\0';
        waitpid(pid, &status, 0);
        ck_abort_msg("%s", msg);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    ck_abort_msg("the server child went silent (status 0x%x)", status);
    return 0;
}

START_TEST(test_two_processes)
{
    int up[2], down[2], port = 0, status = 0;
    pid_t pid;
    ferry_context_t *ctx;
    ferry_oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *local, *cli;
    ferry_mem_t *lmem, *cmem;
    char hostport[32], ok;
    size_t bad;
    int ret;

    /* Fork first: no context (and no libfabric thread) in the parent yet. */
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    pid = fork();
    ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        server_child(down[0], up[1]);
    }
    close(up[1]);
    close(down[0]);
    ck_assert_int_eq(from_child(up[0], pid), 'p');
    tu_read_all(up[0], &port, sizeof(port));
    ck_assert_int_gt(port, 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", port);

    /* The parent is a target too (the child writes back): progress thread. */
    ctx = ctx_open(PROV, 1, NULL);
    local = tu_alloc_buf(TP_LEN);
    cli = tu_alloc_buf(TP_LEN);
    lmem = reg(ctx, local, TP_LEN);
    cmem = reg(ctx, cli, TP_LEN);
    ret = ferry_oob_connect(ctx, hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect to the child at %s: %s", hostport,
                  ferry_last_error());
    ret = ferry_oob_lookup(conn, "srv", 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup srv: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), TP_LEN);
    xfer_ok(ferry_oob_conn_peer(conn), 0, local, lmem, rmem, 0, TP_LEN);
    bad = tu_check(local, TP_LEN, 11);
    ck_assert_msg(bad == SIZE_MAX, "read from the child differs at %zu", bad);
    tu_fill(local, TP_LEN, 12);
    xfer_ok(ferry_oob_conn_peer(conn), 1, local, lmem, rmem, 0, TP_LEN);

    ret = ferry_oob_offer(conn, "cli", cmem, 5000);
    ck_assert_msg(ret == 0, "offer: %s", ferry_last_error());
    ck_assert_int_eq(from_child(up[0], pid), 'w');
    bad = tu_check(cli, TP_LEN, 13);
    ck_assert_msg(bad == SIZE_MAX, "the child's write-back differs at %zu",
                  bad);
    tu_write_all(down[1], "v", 1);
    ok = from_child(up[0], pid);
    ck_assert_msg(ok == '1', "the child's region does not hold our write");
    tu_write_all(down[1], "q", 1);
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "server child ended with status 0x%x", status);

    ck_assert_int_eq(ferry_rmem_free(rmem), 0);
    ferry_oob_disconnect(conn);
    ferry_context_destroy(ctx);
    tu_free_buf(local, TP_LEN);
    tu_free_buf(cli, TP_LEN);
    close(up[0]);
    close(down[1]);
}
END_TEST

/* ---- several clients at once --------------------------------------------------- */

#define NCLI 4
#define SLICE (16u * 1024u)

struct cli_job {
    const char *hostport;
    ferry_context_t *ctx;
    unsigned idx;
    ferry_oob_conn_t *conn;
    int ret;
    char err[700];
};

static void *cli_main(void *arg)
{
    struct cli_job *j = arg;
    ferry_rmem_t *rmem = NULL;
    ferry_mem_t *lmem = NULL;
    uint8_t *local = malloc(SLICE);

    if (local == NULL) {
        j->ret = FERRY_ENOMEM;
        snprintf(j->err, sizeof(j->err), "malloc");
        return NULL;
    }
    tu_fill(local, SLICE, 100 + j->idx);
    j->ret = ferry_oob_connect(j->ctx, j->hostport, 10000, &j->conn);
    if (j->ret == 0)
        j->ret = ferry_oob_lookup(j->conn, "slices", 10000, &rmem);
    if (j->ret == 0)
        j->ret = ferry_mem_register(j->ctx, local, SLICE, FERRY_MEM_HOST, 0,
                                    0, &lmem);
    if (j->ret != 0)
        snprintf(j->err, sizeof(j->err), "client %u: %s", j->idx,
                 ferry_last_error());
    else
        j->ret = xfer(ferry_oob_conn_peer(j->conn), 1, local, lmem, rmem,
                      (uint64_t)j->idx * SLICE, SLICE, j->err,
                      sizeof(j->err));
    ferry_rmem_free(rmem);
    ferry_mem_deregister(lmem);
    free(local);
    return NULL;
}

START_TEST(test_concurrent_clients)
{
    struct srv s;
    uint8_t *big = tu_alloc_buf(NCLI * SLICE);
    ferry_mem_t *bmem;
    struct cli_job jobs[NCLI];
    pthread_t th[NCLI];
    ferry_oob_conn_t *acc[NCLI] = {0};
    int ret;

    srv_open(&s, NULL);
    bmem = reg(s.ctx, big, NCLI * SLICE);
    ck_assert_int_eq(ferry_oob_publish(s.lis, "slices", bmem), 0);
    /* Contexts are made here; the threads connect, look up and write. */
    for (unsigned i = 0; i < NCLI; i++) {
        jobs[i] = (struct cli_job){.hostport = s.hostport, .idx = i};
        jobs[i].ctx = ctx_open(PROV, 0, NULL);
    }
    for (unsigned i = 0; i < NCLI; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, cli_main, &jobs[i]),
                         0);
    for (unsigned i = 0; i < NCLI; i++)
        ck_assert_int_eq(pthread_join(th[i], NULL), 0);
    for (unsigned i = 0; i < NCLI; i++)
        ck_assert_msg(jobs[i].ret == 0, "%s", jobs[i].err);
    for (unsigned i = 0; i < NCLI; i++) {
        size_t bad = tu_check(big + i * SLICE, SLICE, 100 + i);
        ck_assert_msg(bad == SIZE_MAX, "slice %u differs at byte %zu", i,
                      bad);
    }
    /* Every client is accepted exactly once. */
    for (unsigned i = 0; i < NCLI; i++) {
        ret = ferry_oob_accept(s.lis, 5000, &acc[i]);
        ck_assert_msg(ret == 0, "accept %u: %s", i, ferry_last_error());
        ck_assert_ptr_nonnull(ferry_oob_conn_peer(acc[i]));
        for (unsigned k = 0; k < i; k++)
            ck_assert_ptr_ne(acc[k], acc[i]);
    }
    ck_assert_int_eq(ferry_oob_accept(s.lis, 100, &acc[0]), FERRY_ETIMEDOUT);
    for (unsigned i = 0; i < NCLI; i++) {
        ferry_oob_disconnect(acc[i]);
        ferry_oob_disconnect(jobs[i].conn);
        ferry_context_destroy(jobs[i].ctx);
    }
    ck_assert_int_eq(ferry_mem_deregister(bmem), 0);
    tu_free_buf(big, NCLI * SLICE);
    srv_close(&s);
}
END_TEST

/* ---- tokens ----------------------------------------------------------------------- */

static void connect_refused(struct srv *s, const char *token)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, token);
    ferry_oob_conn_t *conn = NULL;
    int ret = ferry_oob_connect(ctx, s->hostport, 5000, &conn);

    ck_assert_msg(ret == FERRY_EPROTO,
                  "client token %s: connect gave %d (%s), expected "
                  "FERRY_EPROTO",
                  token ? token : "(none)", ret, ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "token does not match") != NULL,
                  "sentence: %s", ferry_last_error());
    ck_assert_ptr_null(conn);
    ferry_context_destroy(ctx);
}

START_TEST(test_token_must_match)
{
    struct srv s;
    ferry_context_t *cctx;
    ferry_oob_conn_t *acc = NULL, *none = NULL, *conn = NULL;
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    srv_open(&s, "s3cret");
    connect_refused(&s, NULL);
    connect_refused(&s, "other");
    connect_refused(&s, "s3cre");
    /* The client with the token is the only one accept ever hands out. */
    cctx = ctx_open(PROV, 0, "s3cret");
    ret = ferry_oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect with the token: %s", ferry_last_error());
    ret = ferry_oob_accept(s.lis, 3000, &acc);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ret = ferry_oob_accept(s.lis, 300, &none);
    ck_assert_msg(ret == FERRY_ETIMEDOUT, "second accept gave %d: %s", ret,
                  ferry_last_error());
    ferry_oob_disconnect(acc);
    ferry_oob_disconnect(conn);
    ferry_context_destroy(cctx);
    client_ok(&s, "s3cret"); /* and it moves data */
    srv_close(&s);
}
END_TEST

START_TEST(test_token_from_env)
{
    struct srv s;

    setenv("FERRY_OOB_TOKEN", "envtok", 1);
    srv_open(&s, NULL); /* takes "envtok" */
    client_ok(&s, NULL);
    connect_refused(&s, "s3cret"); /* the config beats the environment */
    unsetenv("FERRY_OOB_TOKEN");
    connect_refused(&s, NULL);
    client_ok(&s, "envtok");
    srv_close(&s);
}
END_TEST

/* A token longer than a frame's token field is refused up front on both
 * sides instead of never matching. */
START_TEST(test_token_too_long)
{
    char tok[201];
    ferry_context_t *ctx;
    ferry_oob_t *lis = NULL;
    ferry_oob_conn_t *conn = NULL;
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    memset(tok, 'k', 200);
    tok[200] = '\0';
    ctx = ctx_open(PROV, 0, tok);
    ret = ferry_oob_listen(ctx, "127.0.0.1:0", &lis);
    ck_assert_msg(ret == FERRY_EINVAL, "listen gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "token"));
    ck_assert_ptr_null(lis);
    ret = ferry_oob_connect(ctx, "127.0.0.1:1", 300, &conn);
    ck_assert_msg(ret == FERRY_EINVAL, "connect gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "token"));
    ferry_context_destroy(ctx);

    /* 127 characters is the most, and works. */
    {
        struct srv s;
        tok[127] = '\0';
        srv_open(&s, tok);
        client_ok(&s, tok);
        srv_close(&s);
    }
}
END_TEST

/* ---- bad frames from a raw socket ------------------------------------------------- */

START_TEST(test_raw_garbage)
{
    /* Exactly one header's worth, so nothing is left unread. */
    static const char http[] = "GET / HTTP/1.1\r\n";

    ck_assert_uint_eq(sizeof(http) - 1, HDR);
    raw_case((const uint8_t *)http, HDR, false, false, "not a ferry frame");
}
END_TEST

START_TEST(test_raw_wrong_version)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 2, K_HELLO, HDR);
    raw_case(h, sizeof(h), false, false, "frame version 2");
}
END_TEST

START_TEST(test_raw_oversized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 1, K_HELLO, 1u << 20);
    raw_case(h, sizeof(h), false, false, "announced a 1048576-byte frame");
}
END_TEST

START_TEST(test_raw_undersized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 1, K_HELLO, 8);
    raw_case(h, sizeof(h), false, false, "announced a 8-byte frame");
}
END_TEST

START_TEST(test_raw_truncated_then_close)
{
    uint8_t buf[HDR + 20];

    memset(buf, 0xab, sizeof(buf));
    header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO, 64);
    raw_case(buf, sizeof(buf), false, true, NULL);
}
END_TEST

START_TEST(test_raw_bad_checksum)
{
    struct srv s;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    buf[len - 1] ^= 0x40; /* one payload bit */
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "checksum", NULL);
    close(fd);
    /* And a corrupted checksum field itself. */
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    buf[12] ^= 0x01;
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "checksum", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_raw_unknown_kind)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), 99, "what", NULL, 0);

    raw_case(buf, len, true, false, "unexpected frame kind");
}
END_TEST

START_TEST(test_raw_server_kind_from_client)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), K_FOUND, NULL, "x", 1);

    raw_case(buf, len, true, false, "unexpected frame kind");
}
END_TEST

START_TEST(test_raw_lookup_before_hello)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), K_LOOKUP, "reg", NULL, 0);

    raw_case(buf, len, false, false, "first frame must be a hello");
}
END_TEST

START_TEST(test_raw_malformed_lookup)
{
    struct ferry__blob_writer w;
    uint8_t buf[256];
    size_t len;

    /* A name that claims 500 bytes in a frame of a few. */
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_LOOKUP);
    ferry__blob_put_u16(&w, 500);
    ferry__blob_put_bytes(&w, "reg", 3);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    raw_case(buf, len, true, false, "malformed lookup frame");
}
END_TEST

START_TEST(test_raw_malformed_offer)
{
    struct ferry__blob_writer w;
    uint8_t buf[256];
    size_t len;

    /* A remote-key field that claims 10000 bytes. */
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_OFFER);
    ferry__blob_put_str(&w, "x");
    ferry__blob_put_u32(&w, 10000);
    ferry__blob_put_bytes(&w, "abcdefgh", 8);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    raw_case(buf, len, true, false, "malformed offer frame");
}
END_TEST

START_TEST(test_raw_hello_bad_address)
{
    struct srv s;
    uint8_t junk[40], buf[256];
    ferry_oob_conn_t *acc = NULL;
    size_t len;
    int fd, ret;

    memset(junk, 0x5a, sizeof(junk));
    srv_open(&s, NULL);
    len = frame(buf, sizeof(buf), K_HELLO, "", junk, sizeof(junk));
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "address blob", NULL);
    close(fd);
    /* It never reaches the application's accept. */
    ret = ferry_oob_accept(s.lis, 300, &acc);
    ck_assert_msg(ret == FERRY_ETIMEDOUT, "accept gave %d: %s", ret,
                  ferry_last_error());
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_raw_hello_trailing_bytes)
{
    struct srv s;
    struct ferry__blob_writer w;
    uint8_t addr[512], buf[1024];
    size_t alen = sizeof(addr), len;
    int fd;

    srv_open(&s, NULL);
    ck_assert_int_eq(ferry_context_address(s.ctx, addr, &alen), 0);
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_HELLO);
    ferry__blob_put_str(&w, "");
    ferry__blob_put_u32(&w, (uint32_t)alen);
    ferry__blob_put_bytes(&w, addr, alen);
    ferry__blob_put_u16(&w, 7);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "malformed hello frame", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* A second hello could rewrite the address accept is reading. */
START_TEST(test_raw_hello_twice)
{
    struct srv s;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, s.ctx);
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "hello only once", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * A client address that is a well-formed blob of another provider passes
 * the hello; ferry_oob_accept then reports the peer error, with the
 * client named and the reason intact.
 */
START_TEST(test_accept_reports_incompatible_client)
{
    struct srv s;
    ferry_context_t *shm = ctx_open("shm", 0, NULL);
    ferry_oob_conn_t *acc = NULL;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd, ret;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    len = hello_frame(buf, sizeof(buf), shm, NULL);
    raw_send(fd, buf, len);
    ck_assert_uint_eq(raw_read_frame(fd, buf, sizeof(buf), 3000, &len),
                      K_HELLO_OK);
    ret = ferry_oob_accept(s.lis, 3000, &acc);
    ck_assert_msg(ret == FERRY_EINCOMPAT, "accept gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_null(acc);
    ck_assert_msg(strstr(ferry_last_error(),
                         "ferry_oob_accept: client 127.0.0.1:") ==
                      ferry_last_error(),
                  "sentence: %s", ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "provider 'shm'") != NULL,
                  "sentence: %s", ferry_last_error());
    /* The refused client is dropped, not offered again. */
    expect_dropped(fd, 3000, NULL, NULL);
    close(fd);
    ret = ferry_oob_accept(s.lis, 200, &acc);
    ck_assert_int_eq(ret, FERRY_ETIMEDOUT);
    client_ok(&s, NULL);
    srv_close(&s);
    ferry_context_destroy(shm);
}
END_TEST

/* A frame that stops half-way is dropped after ~5 s; others are served
 * meanwhile and afterwards. */
START_TEST(test_raw_stalled_frame)
{
    struct srv s;
    uint8_t buf[HDR + 10];
    double t0, dt;
    int fd;

    srv_open(&s, NULL);
    memset(buf, 0, sizeof(buf));
    header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO, 64);
    fd = raw_connect(s.port);
    t0 = now_s();
    raw_send(fd, buf, sizeof(buf));
    client_ok(&s, NULL); /* served while the stalled one waits */
    expect_dropped(fd, 9000, "stalled", NULL);
    dt = now_s() - t0;
    ck_assert_msg(dt > 4.5 && dt < 8.0,
                  "stalled frame dropped after %.2f s, expected about 5", dt);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * A client that floods lookups and never reads its answers must not
 * freeze the service thread: once the answers cannot go out it is
 * dropped (within about a second), and others are served.
 */
START_TEST(test_raw_flood_without_reading)
{
    struct srv s;
    static uint8_t chunk[64 * 1024];
    uint8_t one[64];
    size_t flen, n, sent = 0;
    bool dropped = false;
    double t0;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, s.ctx);
    flen = frame(one, sizeof(one), K_LOOKUP, "reg", NULL, 0);
    n = sizeof(chunk) / flen * flen;
    for (size_t i = 0; i < n; i += flen)
        memcpy(chunk + i, one, flen);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    /* Each ~20-byte lookup earns a ~100-byte answer: the answers fill both
     * socket buffers long before 256 MiB of lookups.  Stop when the server
     * drops us, or when it has taken nothing for 4 s (it is stuck). */
    t0 = now_s();
    while (!dropped && sent < (256u << 20) && now_s() - t0 < 30) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        size_t off = sent % n;
        ssize_t k;

        if (poll(&pfd, 1, 4000) != 1)
            break;
        if (pfd.revents & (POLLERR | POLLHUP)) {
            dropped = true;
            break;
        }
        k = send(fd, chunk + off, n - off, MSG_NOSIGNAL);
        if (k > 0)
            sent += (size_t)k;
        else if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            dropped = true;
        else if (k < 0 && errno != EAGAIN && errno != EINTR)
            ck_abort_msg("flood send: %s", strerror(errno));
    }
    ck_assert_msg(dropped,
                  "after %zu bytes of lookups the server neither reads more "
                  "nor drops the client that does not read (stuck sending "
                  "to it?)",
                  sent);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* ---- the client facing a fake server ---------------------------------------------- */

enum fake_mode {
    FAKE_SILENT,     /* accepts, reads the hello, never answers */
    FAKE_GARBAGE,    /* answers with text */
    FAKE_VERSION,    /* answers with a frame of version 2 */
    FAKE_MIDFRAME,   /* answers half a frame, then closes */
    FAKE_HUGE,       /* announces a 1 MiB frame */
    FAKE_ERROR,      /* answers with an ERROR frame */
    FAKE_WRONG_KIND, /* answers the hello with a FOUND */
};

struct fake {
    int lfd;
    int port;
    int stop[2];
    enum fake_mode mode;
    pthread_t th;
    bool got_hello;
};

/* Reads one frame with a deadline; false on anything else. */
static bool fake_read_frame(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0, want = HDR;

    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, 5000) != 1)
            return false;
        n = recv(fd, buf + got, want - got, 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
        if (got == HDR) {
            want = get32(buf + 8);
            if (want < HDR || want > cap)
                return false;
        }
    }
    return true;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    struct pollfd pfd[2] = {{.fd = f->lfd, .events = POLLIN},
                            {.fd = f->stop[0], .events = POLLIN}};
    static uint8_t buf[FRAME_MAX];
    size_t len = 0;
    int fd;

    if (poll(pfd, 2, 10000) != 1 || pfd[1].revents)
        return NULL;
    fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    f->got_hello = fake_read_frame(fd, buf, sizeof(buf)) &&
                   (buf[6] | buf[7] << 8) == K_HELLO;
    switch (f->mode) {
    case FAKE_SILENT:
        break;
    case FAKE_GARBAGE:
        len = (size_t)snprintf((char *)buf, sizeof(buf),
                               "HTTP/1.1 400 Bad Request\r\n\r\n");
        break;
    case FAKE_VERSION:
        header(buf, FERRY__BLOB_MAGIC, 2, K_HELLO_OK, HDR);
        len = HDR;
        break;
    case FAKE_MIDFRAME:
        len = frame(buf, sizeof(buf), K_HELLO_OK, NULL, "0123456789abcdef",
                    16);
        len -= 10;
        break;
    case FAKE_HUGE:
        header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO_OK, 1u << 20);
        len = HDR;
        break;
    case FAKE_ERROR:
        len = frame(buf, sizeof(buf), K_ERROR, "the fake says no", NULL, 0);
        break;
    case FAKE_WRONG_KIND:
        len = frame(buf, sizeof(buf), K_FOUND, NULL, "x", 1);
        break;
    }
    if (len > 0 && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
        f->got_hello = false;
    if (f->mode == FAKE_SILENT)
        (void)poll(&pfd[1], 1, 10000); /* until the test is done */
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);

    memset(f, 0, sizeof(*f));
    f->mode = mode;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(f->lfd, 4), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
    f->port = ntohs(sa.sin_port);
    ck_assert_int_eq(pipe(f->stop), 0);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    tu_write_all(f->stop[1], "x", 1);
    ck_assert_int_eq(pthread_join(f->th, NULL), 0);
    close(f->lfd);
    close(f->stop[0]);
    close(f->stop[1]);
}

/* Connects to a fake server of `mode`; checks the error, its sentence
 * (want) and that it came within max_s seconds. */
static void fake_case(enum fake_mode mode, int timeout_ms, int want_ret,
                      const char *want, double max_s)
{
    struct fake f;
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL;
    char hostport[32], err[512];
    double t0, dt;
    int ret;

    fake_start(&f, mode);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", f.port);
    t0 = now_s();
    ret = ferry_oob_connect(ctx, hostport, timeout_ms, &conn);
    dt = now_s() - t0;
    snprintf(err, sizeof(err), "%s", ferry_last_error());
    fake_stop(&f);
    ck_assert_msg(f.got_hello, "the fake server did not get a hello");
    ck_assert_msg(ret == want_ret, "connect gave %d (%s): %s, expected %d",
                  ret, ferry_strerror(ret), err, want_ret);
    ck_assert_ptr_null(conn);
    ck_assert_msg(strstr(err, want) != NULL,
                  "sentence \"%s\" lacks \"%s\"", err, want);
    ck_assert_msg(dt < max_s, "connect took %.3f s", dt);
    ck_assert_msg(mode != FAKE_SILENT || dt >= timeout_ms / 1000.0 - 0.05,
                  "gave up after %.3f s, before its %d ms", dt, timeout_ms);
    ferry_context_destroy(ctx);
}

START_TEST(test_failed_exchange_closes_connection)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry_oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret;

    srv_open(&s, NULL);
    ctx = ctx_open(PROV, 0, NULL);
    ret = ferry_oob_connect(ctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    /* A deadline of now: the answer comes later, if at all. */
    ret = ferry_oob_lookup(conn, "reg", 0, &rmem);
    ck_assert_int_eq(ret, FERRY_ETIMEDOUT);
    /* The late answer must not be taken for the next lookup's: the
     * connection is closed, and the next call says so. */
    ret = ferry_oob_lookup(conn, "nosuch", 5000, &rmem);
    ck_assert_int_eq(ret, FERRY_ECONNRESET);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "closed after an earlier failure"));
    ferry_oob_disconnect(conn);
    ferry_context_destroy(ctx);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_fake_server_silent)
{
    /* The deadline holds: 300 ms, not the 2 s allowed here. */
    fake_case(FAKE_SILENT, 300, FERRY_ETIMEDOUT, "deadline", 2.0);
}
END_TEST

START_TEST(test_fake_server_garbage)
{
    fake_case(FAKE_GARBAGE, 3000, FERRY_EPROTO, "not a ferry frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_wrong_version)
{
    fake_case(FAKE_VERSION, 3000, FERRY_EINCOMPAT, "version 2", 2.0);
}
END_TEST

START_TEST(test_fake_server_closes_mid_frame)
{
    fake_case(FAKE_MIDFRAME, 3000, FERRY_ECONNRESET, "mid-frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_huge_frame)
{
    fake_case(FAKE_HUGE, 3000, FERRY_EPROTO, "1048576-byte frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_error_frame)
{
    fake_case(FAKE_ERROR, 3000, FERRY_EPROTO, "refused: the fake says no",
              2.0);
}
END_TEST

START_TEST(test_fake_server_wrong_kind)
{
    fake_case(FAKE_WRONG_KIND, 3000, FERRY_EPROTO,
              "answered the hello with frame kind 19", 2.0);
}
END_TEST

START_TEST(test_nobody_listening)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL;
    char hostport[32];
    double t0, dt;
    /* A port bound but not listening: connections to it are refused, and
     * nobody else can take it meanwhile. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ret;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ntohs(sa.sin_port));
    t0 = now_s();
    ret = ferry_oob_connect(ctx, hostport, 300, &conn);
    dt = now_s() - t0;
    ck_assert_msg(ret == FERRY_EHOSTUNREACH || ret == FERRY_ETIMEDOUT,
                  "connect gave %d: %s", ret, ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), hostport) != NULL, "%s",
                  ferry_last_error());
    ck_assert_msg(dt >= 0.25 && dt < 2.0,
                  "connect retried for %.3f s, expected about 0.3", dt);
    ck_assert_ptr_null(conn);
    close(fd);
    ferry_context_destroy(ctx);
}
END_TEST

/* ---- bad arguments ------------------------------------------------------------------ */

static void expect_err(int ret, int want, const char *contains,
                       const char *what)
{
    ck_assert_msg(ret == want, "%s gave %d (%s), expected %d: %s", what, ret,
                  ferry_strerror(ret), want, ferry_last_error());
    ck_assert_msg(contains == NULL ||
                      strstr(ferry_last_error(), contains) != NULL,
                  "%s: sentence \"%s\" lacks \"%s\"", what,
                  ferry_last_error(), contains);
}

START_TEST(test_bad_args_listen)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry_oob_t *lis = NULL, *lis2 = NULL;
    char hostport[32];

    expect_err(ferry_oob_listen(NULL, "127.0.0.1:0", &lis), FERRY_EINVAL,
               "NULL", "listen(NULL ctx)");
    expect_err(ferry_oob_listen(ctx, NULL, &lis), FERRY_EINVAL, "NULL",
               "listen(NULL hostport)");
    expect_err(ferry_oob_listen(ctx, "127.0.0.1:0", NULL), FERRY_EINVAL,
               "NULL", "listen(NULL out)");
    expect_err(ferry_oob_listen(ctx, "nohostport", &lis), FERRY_EINVAL,
               "\"nohostport\" has no port", "listen(nohostport)");
    expect_err(ferry_oob_listen(ctx, "127.0.0.1:", &lis), FERRY_EINVAL,
               "has no port", "listen(empty port)");
    expect_err(ferry_oob_listen(ctx, ":abc", &lis), FERRY_EINVAL,
               "\"abc\" is not a number", "listen(:abc)");
    expect_err(ferry_oob_listen(ctx, "127.0.0.1:70000", &lis), FERRY_EINVAL,
               "70000", "listen(port 70000)");
    expect_err(ferry_oob_listen(ctx, "no.such.host.invalid:0", &lis),
               FERRY_EHOSTUNREACH, "no.such.host.invalid",
               "listen(unresolvable)");
    ck_assert_ptr_null(lis);
    ck_assert_int_eq(ferry_oob_port(NULL), FERRY_EINVAL);

    /* A port in use: the sentence names the address. */
    ck_assert_int_eq(ferry_oob_listen(ctx, "127.0.0.1:0", &lis), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ferry_oob_port(lis));
    expect_err(ferry_oob_listen(ctx, hostport, &lis2), FERRY_EINVAL, hostport,
               "listen(port in use)");
    ck_assert_ptr_null(lis2);
    ferry_oob_close(lis);
    ferry_oob_close(NULL);
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_bad_args_connect)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL;

    expect_err(ferry_oob_connect(NULL, "127.0.0.1:1", 1000, &conn),
               FERRY_EINVAL, "NULL", "connect(NULL ctx)");
    expect_err(ferry_oob_connect(ctx, NULL, 1000, &conn), FERRY_EINVAL,
               "NULL", "connect(NULL hostport)");
    expect_err(ferry_oob_connect(ctx, "127.0.0.1:1", 1000, NULL),
               FERRY_EINVAL, "NULL", "connect(NULL out)");
    expect_err(ferry_oob_connect(ctx, "127.0.0.1:1", 0, &conn), FERRY_EINVAL,
               "timeout_ms is 0", "connect(timeout 0)");
    expect_err(ferry_oob_connect(ctx, "127.0.0.1:1", -1, &conn), FERRY_EINVAL,
               "timeout_ms is -1", "connect(timeout -1)");
    expect_err(ferry_oob_connect(ctx, "nohostport", 1000, &conn),
               FERRY_EINVAL, "has no port", "connect(nohostport)");
    expect_err(ferry_oob_connect(ctx, ":abc", 1000, &conn), FERRY_EINVAL,
               "not a number", "connect(:abc)");
    expect_err(ferry_oob_connect(ctx, "127.0.0.1:99999", 1000, &conn),
               FERRY_EINVAL, "99999", "connect(port 99999)");
    expect_err(ferry_oob_connect(ctx, "no.such.host.invalid:1234", 1000,
                                 &conn),
               FERRY_EHOSTUNREACH, "cannot resolve", "connect(unresolvable)");
    ck_assert_ptr_null(conn);
    ferry_oob_disconnect(NULL);
    ck_assert_ptr_null(ferry_oob_conn_peer(NULL));
    ferry_context_destroy(ctx);
}
END_TEST

START_TEST(test_bad_args_names)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *cbuf = tu_alloc_buf(4096);
    ferry_mem_t *cmem = reg(cctx, cbuf, 4096);
    char longname[201], maxname[128];
    int ret;

    memset(longname, 'n', 200);
    longname[200] = '\0';
    memset(maxname, 'm', 127);
    maxname[127] = '\0';
    srv_open(&s, NULL);

    expect_err(ferry_oob_publish(NULL, "x", s.mem), FERRY_EINVAL, "NULL",
               "publish(NULL lis)");
    expect_err(ferry_oob_publish(s.lis, NULL, s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(NULL name)");
    expect_err(ferry_oob_publish(s.lis, "", s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(empty name)");
    expect_err(ferry_oob_publish(s.lis, longname, s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(200-char name)");
    ck_assert_int_ne(ferry_oob_publish(s.lis, "x", NULL), 0);
    ck_assert_int_eq(ferry_oob_publish(s.lis, maxname, s.mem), 0);
    expect_err(ferry_oob_accept(NULL, 10, &sconn), FERRY_EINVAL, "NULL",
               "accept(NULL lis)");
    expect_err(ferry_oob_accept(s.lis, 10, NULL), FERRY_EINVAL, "NULL",
               "accept(NULL out)");

    ret = ferry_oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    expect_err(ferry_oob_lookup(NULL, "reg", 1000, &rmem), FERRY_EINVAL,
               "NULL", "lookup(NULL conn)");
    expect_err(ferry_oob_lookup(conn, "reg", 1000, NULL), FERRY_EINVAL,
               "NULL", "lookup(NULL out)");
    expect_err(ferry_oob_lookup(conn, "", 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(empty name)");
    expect_err(ferry_oob_lookup(conn, longname, 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(200-char name)");
    expect_err(ferry_oob_offer(NULL, "c", cmem, 1000), FERRY_EINVAL, "NULL",
               "offer(NULL conn)");
    expect_err(ferry_oob_offer(conn, "", cmem, 1000), FERRY_EINVAL,
               "1 to 127 characters", "offer(empty name)");
    expect_err(ferry_oob_offer(conn, longname, cmem, 1000), FERRY_EINVAL,
               "1 to 127 characters", "offer(200-char name)");
    ck_assert_int_ne(ferry_oob_offer(conn, "c", NULL, 1000), 0);
    ck_assert_ptr_null(rmem);

    /* The longest name works end to end. */
    ret = ferry_oob_lookup(conn, maxname, 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup of a 127-char name: %s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_rmem_free(rmem), 0);
    rmem = NULL;
    /* The connection still works after the refused calls (and < 0 is no
     * deadline). */
    ret = ferry_oob_offer(conn, "c", cmem, -1);
    ck_assert_msg(ret == 0, "offer: %s", ferry_last_error());

    /* Only the connecting side offers. */
    ret = ferry_oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    expect_err(ferry_oob_offer(sconn, "s", s.mem, 1000), FERRY_EINVAL,
               "only the connecting side offers", "offer(accepted conn)");
    expect_err(ferry_oob_lookup(sconn, "", 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(accepted, empty name)");
    ret = ferry_oob_lookup(sconn, "c", 5000, &rmem);
    ck_assert_msg(ret == 0, "server lookup: %s", ferry_last_error());
    ck_assert_int_eq(ferry_rmem_free(rmem), 0);

    ferry_oob_disconnect(sconn);
    ferry_oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_deregister(cmem), 0);
    ferry_context_destroy(cctx);
    tu_free_buf(cbuf, 4096);
    srv_close(&s);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------ */

static Suite *oob_suite(void)
{
    Suite *s = suite_create("oob");
    TCase *tc;

    tc = tu_tcase(s, "exchange", 60);
    tcase_add_test(tc, test_publish_lookup_offer_one_process);
    tcase_add_test(tc, test_failed_exchange_closes_connection);
    tcase_add_test(tc, test_close_keeps_accepted_conn);
    tcase_add_test(tc, test_accepted_lookup_sees_disconnect);
    tcase_add_test(tc, test_two_processes);
    tcase_add_test(tc, test_concurrent_clients);
    tc = tu_tcase(s, "token", 60);
    tcase_add_test(tc, test_token_must_match);
    tcase_add_test(tc, test_token_from_env);
    tcase_add_test(tc, test_token_too_long);
    tc = tu_tcase(s, "raw", 60);
    tcase_add_test(tc, test_raw_garbage);
    tcase_add_test(tc, test_raw_wrong_version);
    tcase_add_test(tc, test_raw_oversized);
    tcase_add_test(tc, test_raw_undersized);
    tcase_add_test(tc, test_raw_truncated_then_close);
    tcase_add_test(tc, test_raw_bad_checksum);
    tcase_add_test(tc, test_raw_unknown_kind);
    tcase_add_test(tc, test_raw_server_kind_from_client);
    tcase_add_test(tc, test_raw_lookup_before_hello);
    tcase_add_test(tc, test_raw_malformed_lookup);
    tcase_add_test(tc, test_raw_malformed_offer);
    tcase_add_test(tc, test_raw_hello_bad_address);
    tcase_add_test(tc, test_raw_hello_trailing_bytes);
    tcase_add_test(tc, test_raw_hello_twice);
    tcase_add_test(tc, test_accept_reports_incompatible_client);
    tcase_add_test(tc, test_raw_stalled_frame);
    tcase_add_test(tc, test_raw_flood_without_reading);
    tc = tu_tcase(s, "fake-server", 60);
    tcase_add_test(tc, test_fake_server_silent);
    tcase_add_test(tc, test_fake_server_garbage);
    tcase_add_test(tc, test_fake_server_wrong_version);
    tcase_add_test(tc, test_fake_server_closes_mid_frame);
    tcase_add_test(tc, test_fake_server_huge_frame);
    tcase_add_test(tc, test_fake_server_error_frame);
    tcase_add_test(tc, test_fake_server_wrong_kind);
    tcase_add_test(tc, test_nobody_listening);
    tc = tu_tcase(s, "args", 60);
    tcase_add_test(tc, test_bad_args_listen);
    tcase_add_test(tc, test_bad_args_connect);
    tcase_add_test(tc, test_bad_args_names);
    return s;
}

int main(void)
{
    return tu_run(oob_suite());
}
