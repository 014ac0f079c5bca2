/*
 * oob module (TCP bootstrap) through the API: a listener publishes regions
 * and a client finds them by name, in one process, across two processes
 * and with several clients at once; failed exchanges; tokens; a client
 * with nobody listening; bad arguments.  (Malformed frames from a raw
 * socket and clients facing a fake server, built with ferry's own frame
 * writer: test/unit/check_oob.c.)
 *
 * Listeners bind 127.0.0.1:0 (ferry__oob_port tells the port), so suites
 * running side by side never collide.
 */
#include "bootutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- happy path, one process -------------------------------------------- */

struct offer_later {
    ferry__oob_conn_t *conn;
    ferry_mem_t *mem;
    int delay_ms;
    int ret;
    char err[512];
};

static void *offer_main(void *arg)
{
    struct offer_later *o = arg;

    usleep((useconds_t)o->delay_ms * 1000);
    o->ret = ferry__oob_offer(o->conn, "back", o->mem, 5000);
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
    ferry__oob_t *lis = NULL;
    ferry__oob_conn_t *conn = NULL, *sconn = NULL, *none = NULL;
    ferry_rmem_t *ra = NULL, *rb = NULL, *rc = NULL, *rx = NULL;
    struct offer_later o;
    pthread_t th;
    char hostport[32];
    double t0;
    size_t bad;
    int ret, port;

    tu_fill(a, A_LEN, 1);
    amem = tu_register(sctx, a, A_LEN, RW);
    bmem = tu_register(sctx, b, B_LEN, RW);
    cmem = tu_register(cctx, c, C_LEN, RW);
    lmem = tu_register(cctx, local, A_LEN, RW);
    slmem = tu_register(sctx, slocal, C_LEN, RW);

    ret = ferry__oob_listen(sctx, "127.0.0.1:0", &lis);
    ck_assert_msg(ret == 0, "listen: %s", ferry_last_error());
    port = ferry__oob_port(lis);
    ck_assert_int_gt(port, 0);
    ck_assert_int_eq(ferry__oob_publish(lis, "alpha", amem), 0);
    ck_assert_int_eq(ferry__oob_publish(lis, "beta", bmem), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", port);

    ret = ferry__oob_connect(cctx, hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect to %s: %s", hostport, ferry_last_error());
    ck_assert_ptr_nonnull(ferry__oob_conn_peer(conn));

    ret = ferry__oob_lookup(conn, "alpha", 5000, &ra);
    ck_assert_msg(ret == 0, "lookup alpha: %s", ferry_last_error());
    /* < 0: no deadline, as for ferry__oob_accept. */
    ret = ferry__oob_lookup(conn, "beta", -1, &rb);
    ck_assert_msg(ret == 0, "lookup beta: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(ra), A_LEN);
    ck_assert_uint_eq(ferry_rmem_length(rb), B_LEN);

    /* Read alpha, write beta; both checked in the server's memory. */
    xfer_ok(ferry__oob_conn_peer(conn), 0, local, lmem, ra, 0, A_LEN);
    bad = tu_check(local, A_LEN, 1);
    ck_assert_msg(bad == SIZE_MAX, "alpha read differs at byte %zu", bad);
    tu_fill(local, B_LEN, 2);
    xfer_ok(ferry__oob_conn_peer(conn), 1, local, lmem, rb, 0, B_LEN);
    bad = tu_check(b, B_LEN, 2);
    ck_assert_msg(bad == SIZE_MAX, "beta write differs at byte %zu", bad);

    /* An unknown name: FERRY_ENOENT, and the sentence names it. */
    ret = ferry__oob_lookup(conn, "gamma", 5000, &rx);
    ck_assert_msg(ret == FERRY_ENOENT, "lookup gamma gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "\"gamma\"") != NULL, "%s",
                  ferry_last_error());
    ck_assert_ptr_null(rx);

    /* The newest publication of a name wins. */
    ck_assert_int_eq(ferry__oob_publish(lis, "alpha", bmem), 0);
    ret = ferry__oob_lookup(conn, "alpha", 5000, &rx);
    ck_assert_msg(ret == 0, "lookup alpha again: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rx), B_LEN);
    ck_assert_int_eq(ferry_rmem_close(rx), 0);

    /* The server accepts the client and writes into what it offers;
     * ferry__oob_lookup on the accepted conn waits for the offer. */
    ret = ferry__oob_accept(lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ck_assert_ptr_nonnull(ferry__oob_conn_peer(sconn));
    ret = ferry__oob_accept(lis, 100, &none);
    ck_assert_msg(ret == FERRY_EAGAIN, "second accept gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_null(none);

    o = (struct offer_later){.conn = conn, .mem = cmem, .delay_ms = 300};
    ck_assert_int_eq(pthread_create(&th, NULL, offer_main, &o), 0);
    t0 = now_s();
    ret = ferry__oob_lookup(sconn, "back", 5000, &rc);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(o.ret == 0, "offer: %s", o.err);
    ck_assert_msg(ret == 0, "server lookup of the offer: %s",
                  ferry_last_error());
    ck_assert_msg(now_s() - t0 > 0.2,
                  "lookup returned before the offer was made");
    ck_assert_uint_eq(ferry_rmem_length(rc), C_LEN);
    tu_fill(slocal, C_LEN, 3);
    xfer_ok(ferry__oob_conn_peer(sconn), 1, slocal, slmem, rc, 0, C_LEN);
    bad = tu_check(c, C_LEN, 3);
    ck_assert_msg(bad == SIZE_MAX, "write-back differs at byte %zu", bad);

    /* A name never offered: ENOENT once the wait runs out. */
    t0 = now_s();
    ret = ferry__oob_lookup(sconn, "never", 200, &rx);
    ck_assert_msg(ret == FERRY_ENOENT, "server lookup of never gave %d: %s",
                  ret, ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "\"never\""));
    ck_assert_msg(now_s() - t0 >= 0.15 && now_s() - t0 < 2.0,
                  "waited %.3f s for a 200 ms lookup", now_s() - t0);

    ck_assert_int_eq(ferry_rmem_close(ra), 0);
    ck_assert_int_eq(ferry_rmem_close(rb), 0);
    ck_assert_int_eq(ferry_rmem_close(rc), 0);
    ferry__oob_disconnect(sconn);
    ferry__oob_disconnect(conn);
    ferry__oob_close(lis);
    ferry_context_close(cctx);
    ferry_context_close(sctx);
    tu_free_buf(a, A_LEN);
    tu_free_buf(b, B_LEN);
    tu_free_buf(c, C_LEN);
    tu_free_buf(local, A_LEN);
    tu_free_buf(slocal, C_LEN);
}
END_TEST

START_TEST(test_failed_exchange_closes_connection)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry__oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret;

    srv_open(&s, NULL);
    ctx = ctx_open(PROV, 0, NULL);
    ret = ferry__oob_connect(ctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    /* A deadline of now: the answer comes later, if at all. */
    ret = ferry__oob_lookup(conn, "reg", 0, &rmem);
    ck_assert_int_eq(ret, FERRY_ETIMEDOUT);
    /* The late answer must not be taken for the next lookup's: the
     * connection is closed, and the next call says so. */
    ret = ferry__oob_lookup(conn, "nosuch", 5000, &rmem);
    ck_assert_int_eq(ret, FERRY_ECONNRESET);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "closed after an earlier failure"));
    ferry__oob_disconnect(conn);
    ferry_context_close(ctx);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* Closing the listener leaves accepted conns valid (but detached). */
START_TEST(test_close_keeps_accepted_conn)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    uint8_t *c = tu_alloc_buf(4096);
    ferry_mem_t *cmem = tu_register(cctx, c, 4096, RW);
    ferry__oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret;

    srv_open(&s, NULL);
    ret = ferry__oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    ret = ferry__oob_offer(conn, "c1", cmem, 5000);
    ck_assert_msg(ret == 0, "offer: %s", ferry_last_error());
    ret = ferry__oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());

    ferry__oob_close(s.lis);
    s.lis = NULL;
    ck_assert_ptr_nonnull(ferry__oob_conn_peer(sconn));
    ret = ferry__oob_lookup(sconn, "c1", 100, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET, "lookup after close gave %d: %s",
                  ret, ferry_last_error());
    ret = ferry__oob_offer(sconn, "x", s.mem, 100);
    ck_assert_int_eq(ret, FERRY_EINVAL);
    ferry__oob_disconnect(sconn);

    /* The client's connection is gone with the listener. */
    ret = ferry__oob_lookup(conn, "reg", 2000, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET,
                  "client lookup after the listener closed gave %d: %s", ret,
                  ferry_last_error());
    ferry__oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_close(cmem), 0);
    ferry_context_close(cctx);
    tu_free_buf(c, 4096);
    srv_close(&s);
}
END_TEST

/* A server-side lookup ends early when the client goes away. */
START_TEST(test_accepted_lookup_sees_disconnect)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    double t0;
    int ret;

    srv_open(&s, NULL);
    ret = ferry__oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    ret = ferry__oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ferry__oob_disconnect(conn);
    t0 = now_s();
    ret = ferry__oob_lookup(sconn, "x", 5000, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET, "lookup gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "disconnected"));
    ck_assert_msg(now_s() - t0 < 2.0, "took %.3f s", now_s() - t0);
    ferry__oob_disconnect(sconn);
    ferry_context_close(cctx);
    srv_close(&s);
}
END_TEST

/* ---- two processes ------------------------------------------------------ */

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
    ferry__oob_t *lis = NULL;
    ferry__oob_conn_t *conn = NULL;
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
    if (ferry__oob_listen(ctx, "127.0.0.1:0", &lis) != 0)
        child_fail(out, 22, "listen");
    if (ferry__oob_publish(lis, "srv", mem) != 0)
        child_fail(out, 23, "publish");
    port = ferry__oob_port(lis);
    if (write(out, "p", 1) != 1 || write(out, &port, sizeof(port)) != 4)
        _exit(24);
    if (ferry__oob_accept(lis, 15000, &conn) != 0)
        child_fail(out, 25, "accept");
    if (ferry__oob_lookup(conn, "cli", 15000, &rmem) != 0)
        child_fail(out, 26, "lookup of the offer");
    if (ferry_rmem_length(rmem) != TP_LEN)
        child_fail(out, 27, "offered length");
    if (xfer(ferry__oob_conn_peer(conn), 1, local, lmem, rmem, 0, TP_LEN, err,
             sizeof(err)) != 0)
        child_fail(out, 28, err);
    if (write(out, "w", 1) != 1)
        _exit(29);
    while (read(in, &cmd, 1) == 1 && cmd == 'v') {
        char ok = tu_check(buf, TP_LEN, 12) == SIZE_MAX ? '1' : '0';
        if (write(out, &ok, 1) != 1)
            _exit(30);
    }
    ferry_rmem_close(rmem);
    ferry__oob_disconnect(conn);
    ferry__oob_close(lis);
    ferry_context_close(ctx);
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
    ferry__oob_conn_t *conn = NULL;
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
    lmem = tu_register(ctx, local, TP_LEN, RW);
    cmem = tu_register(ctx, cli, TP_LEN, RW);
    ret = ferry__oob_connect(ctx, hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect to the child at %s: %s", hostport,
                  ferry_last_error());
    ret = ferry__oob_lookup(conn, "srv", 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup srv: %s", ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), TP_LEN);
    xfer_ok(ferry__oob_conn_peer(conn), 0, local, lmem, rmem, 0, TP_LEN);
    bad = tu_check(local, TP_LEN, 11);
    ck_assert_msg(bad == SIZE_MAX, "read from the child differs at %zu", bad);
    tu_fill(local, TP_LEN, 12);
    xfer_ok(ferry__oob_conn_peer(conn), 1, local, lmem, rmem, 0, TP_LEN);

    ret = ferry__oob_offer(conn, "cli", cmem, 5000);
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

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry__oob_disconnect(conn);
    ferry_context_close(ctx);
    tu_free_buf(local, TP_LEN);
    tu_free_buf(cli, TP_LEN);
    close(up[0]);
    close(down[1]);
}
END_TEST

/* ---- several clients at once -------------------------------------------- */

#define NCLI 4
#define SLICE (16u * 1024u)

struct cli_job {
    const char *hostport;
    ferry_context_t *ctx;
    unsigned idx;
    ferry__oob_conn_t *conn;
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
    j->ret = ferry__oob_connect(j->ctx, j->hostport, 10000, &j->conn);
    if (j->ret == 0)
        j->ret = ferry__oob_lookup(j->conn, "slices", 10000, &rmem);
    if (j->ret == 0)
        j->ret = ferry_mem_register(j->ctx, local, SLICE, FERRY_MEM_HOST, 0,
                                    0, &lmem);
    if (j->ret != 0)
        snprintf(j->err, sizeof(j->err), "client %u: %s", j->idx,
                 ferry_last_error());
    else
        j->ret = xfer(ferry__oob_conn_peer(j->conn), 1, local, lmem, rmem,
                      (uint64_t)j->idx * SLICE, SLICE, j->err,
                      sizeof(j->err));
    ferry_rmem_close(rmem);
    ferry_mem_close(lmem);
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
    ferry__oob_conn_t *acc[NCLI] = {0};
    int ret;

    srv_open(&s, NULL);
    bmem = tu_register(s.ctx, big, NCLI * SLICE, RW);
    ck_assert_int_eq(ferry__oob_publish(s.lis, "slices", bmem), 0);
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
        ret = ferry__oob_accept(s.lis, 5000, &acc[i]);
        ck_assert_msg(ret == 0, "accept %u: %s", i, ferry_last_error());
        ck_assert_ptr_nonnull(ferry__oob_conn_peer(acc[i]));
        for (unsigned k = 0; k < i; k++)
            ck_assert_ptr_ne(acc[k], acc[i]);
    }
    ck_assert_int_eq(ferry__oob_accept(s.lis, 100, &acc[0]), FERRY_EAGAIN);
    for (unsigned i = 0; i < NCLI; i++) {
        ferry__oob_disconnect(acc[i]);
        ferry__oob_disconnect(jobs[i].conn);
        ferry_context_close(jobs[i].ctx);
    }
    ck_assert_int_eq(ferry_mem_close(bmem), 0);
    tu_free_buf(big, NCLI * SLICE);
    srv_close(&s);
}
END_TEST

/* ---- tokens ------------------------------------------------------------- */

static void connect_refused(struct srv *s, const char *token)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, token);
    ferry__oob_conn_t *conn = NULL;
    int ret = ferry__oob_connect(ctx, s->hostport, 5000, &conn);

    ck_assert_msg(ret == FERRY_EPROTO,
                  "client token %s: connect gave %d (%s), expected "
                  "FERRY_EPROTO",
                  token ? token : "(none)", ret, ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "token does not match") != NULL,
                  "sentence: %s", ferry_last_error());
    ck_assert_ptr_null(conn);
    ferry_context_close(ctx);
}

START_TEST(test_token_must_match)
{
    struct srv s;
    ferry_context_t *cctx;
    ferry__oob_conn_t *acc = NULL, *none = NULL, *conn = NULL;
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    srv_open(&s, "s3cret");
    connect_refused(&s, NULL);
    connect_refused(&s, "other");
    connect_refused(&s, "s3cre");
    /* The client with the token is the only one accept ever hands out. */
    cctx = ctx_open(PROV, 0, "s3cret");
    ret = ferry__oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect with the token: %s", ferry_last_error());
    ret = ferry__oob_accept(s.lis, 3000, &acc);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ret = ferry__oob_accept(s.lis, 300, &none);
    ck_assert_msg(ret == FERRY_EAGAIN, "second accept gave %d: %s", ret,
                  ferry_last_error());
    ferry__oob_disconnect(acc);
    ferry__oob_disconnect(conn);
    ferry_context_close(cctx);
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

/* A token given to the call beats the context's, on both sides. */
START_TEST(test_token_per_call)
{
    ferry_context_t *sctx, *cctx;
    ferry__oob_t *lis = NULL;
    ferry__oob_conn_t *conn = NULL;
    char hostport[64];
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    sctx = ctx_open(PROV, 0, "context-token");
    ret = ferry__oob_listen_token(sctx, "127.0.0.1:0", "call-token", &lis);
    ck_assert_msg(ret == 0, "listen: %s", ferry_last_error());
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ferry__oob_port(lis));
    cctx = ctx_open(PROV, 0, "context-token");
    ret = ferry__oob_connect(cctx, hostport, 5000, &conn);
    ck_assert_msg(ret == FERRY_EPROTO, "the context's token gave %d: %s", ret,
                  ferry_last_error());
    ret = ferry__oob_connect_token(cctx, hostport, "call-token", 5000, &conn);
    ck_assert_msg(ret == 0, "the call's token: %s", ferry_last_error());
    ferry__oob_disconnect(conn);
    conn = NULL;
    ret = ferry__oob_connect_token(cctx, hostport, NULL, 5000, &conn);
    ck_assert_msg(ret == FERRY_EPROTO, "NULL (the context's) gave %d: %s", ret,
                  ferry_last_error());
    ferry__oob_close(lis);
    ferry_context_close(cctx);
    ferry_context_close(sctx);
}
END_TEST

/* A token longer than a frame's token field is refused up front on both
 * sides instead of never matching. */
START_TEST(test_token_too_long)
{
    char tok[201];
    ferry_context_t *ctx;
    ferry__oob_t *lis = NULL;
    ferry__oob_conn_t *conn = NULL;
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    memset(tok, 'k', 200);
    tok[200] = '\0';
    ctx = ctx_open(PROV, 0, tok);
    ret = ferry__oob_listen(ctx, "127.0.0.1:0", &lis);
    ck_assert_msg(ret == FERRY_EINVAL, "listen gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "token"));
    ck_assert_ptr_null(lis);
    ret = ferry__oob_connect(ctx, "127.0.0.1:1", 300, &conn);
    ck_assert_msg(ret == FERRY_EINVAL, "connect gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "token"));
    ferry_context_close(ctx);

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

/* ---- nobody listening --------------------------------------------------- */

START_TEST(test_nobody_listening)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL;
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
    ret = ferry__oob_connect(ctx, hostport, 300, &conn);
    dt = now_s() - t0;
    ck_assert_msg(ret == FERRY_EHOSTUNREACH || ret == FERRY_ETIMEDOUT,
                  "connect gave %d: %s", ret, ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), hostport) != NULL, "%s",
                  ferry_last_error());
    ck_assert_msg(dt >= 0.25 && dt < 2.0,
                  "connect retried for %.3f s, expected about 0.3", dt);
    ck_assert_ptr_null(conn);
    close(fd);
    ferry_context_close(ctx);
}
END_TEST

/* ferry__oob_connect run in a thread of its own, with its result. */
struct dialer {
    ferry_context_t *ctx;
    const char *hostport;
    int timeout_ms;
    int ret;
    char said[512];
};

static void *dialer_main(void *arg)
{
    struct dialer *d = arg;
    ferry__oob_conn_t *conn = NULL;

    d->ret = ferry__oob_connect(d->ctx, d->hostport, d->timeout_ms, &conn);
    snprintf(d->said, sizeof(d->said), "%s", ferry_last_error());
    ferry__oob_disconnect(conn);
    return NULL;
}

/* Reads what is in the pipe at fd into buf (cap bytes, NUL-terminated),
 * waiting up to ms for the first byte; the bytes read. */
static size_t read_pipe(int fd, char *buf, size_t cap, int ms)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    size_t got = 0;
    ssize_t n;

    while (got < cap - 1 && poll(&pfd, 1, got == 0 ? ms : 0) == 1 &&
           (n = read(fd, buf + got, cap - 1 - got)) > 0)
        got += (size_t)n;
    buf[got] = '\0';
    return got;
}

/* stderr into a pipe, from capture_start to capture_end. */
struct capture {
    int pipe[2];
    int saved;
};

static void capture_start(struct capture *c)
{
    ck_assert_int_eq(pipe(c->pipe), 0);
    c->saved = dup(2);
    ck_assert_int_ge(c->saved, 0);
    ck_assert_int_eq(dup2(c->pipe[1], 2), 2);
}

/* stderr back; what is left in the pipe into buf (cap bytes). */
static void capture_end(struct capture *c, char *buf, size_t cap)
{
    ck_assert_int_eq(dup2(c->saved, 2), 2);
    close(c->saved);
    close(c->pipe[1]);
    read_pipe(c->pipe[0], buf, cap, 0);
    close(c->pipe[0]);
}

/* A refused connection is said at once, in one line naming the address
 * and that ferry retries until the deadline; the error at the deadline
 * names the address, "connection refused" and how long it tried. */
START_TEST(test_refused_said_at_once)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    struct dialer d = {.ctx = ctx_open(PROV, 0, NULL), .timeout_ms = 1500};
    char hostport[32], first[1024], rest[4096], want[128];
    const char *tried;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct capture cap;
    double t0, first_s, secs = 0;
    pthread_t th;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ntohs(sa.sin_port));
    d.hostport = hostport;
    capture_start(&cap);
    t0 = now_s();
    ck_assert_int_eq(pthread_create(&th, NULL, dialer_main, &d), 0);
    read_pipe(cap.pipe[0], first, sizeof(first), 1000);
    first_s = now_s() - t0;
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    capture_end(&cap, rest, sizeof(rest));
    printf("after %.3f s: %s%s; at the deadline: %s\n", first_s, first, rest,
           d.said);
    snprintf(want, sizeof(want), "bootstrap: %s refused the connection",
             hostport);
    ck_assert_msg(first_s < 0.5 && strstr(first, want) != NULL &&
                      strstr(first, "retrying until the deadline") != NULL,
                  "%.3f s into a 1.5 s connect to a port that refuses, "
                  "stderr held \"%s\": nothing said at once",
                  first_s, first);
    ck_assert_msg(strstr(rest, want) == NULL, "said again: \"%s\"", rest);
    ck_assert_msg(d.ret == FERRY_EHOSTUNREACH, "connect gave %d: %s", d.ret,
                  d.said);
    snprintf(want, sizeof(want), "bootstrap: cannot connect to %s: "
             "connection refused, tried for ", hostport);
    tried = strstr(d.said, want);
    ck_assert_msg(tried != NULL && sscanf(tried + strlen(want), "%lf", &secs) == 1,
                  "\"%s\" lacks \"%s<seconds>\"", d.said, want);
    ck_assert_msg(secs >= 1.4 && secs < 3.0, "tried for %.1f s of 1.5", secs);
    close(fd);
    ferry_context_close(d.ctx);
}
END_TEST

/* The metadata service's bootstrap backend looks for its hub before it
 * becomes the hub: a refusal is what it expects there, not news. */
START_TEST(test_hub_probe_says_no_refusal)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ret;
    char url[64], said[4096];
    struct capture cap;
    ferry_meta_t *meta = NULL;

    /* A free port: bound, read, let go (the hub takes it right after). */
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    snprintf(url, sizeof(url), "bootstrap://127.0.0.1:%d",
             ntohs(sa.sin_port));
    capture_start(&cap);
    ret = ferry_meta_open(ctx, url, "first", &meta);
    capture_end(&cap, said, sizeof(said));
    ck_assert_msg(ret == 0, "ferry_meta_open(%s): %s", url,
                  ferry_last_error());
    ck_assert_msg(strstr(said, "refused the connection") == NULL,
                  "becoming the hub printed \"%s\"", said);
    ferry_meta_close(meta);
    ferry_context_close(ctx);
}
END_TEST

/* ---- bad arguments ------------------------------------------------------ */

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
    ferry__oob_t *lis = NULL, *lis2 = NULL;
    char hostport[32];

    expect_err(ferry__oob_listen(NULL, "127.0.0.1:0", &lis), FERRY_EINVAL,
               "NULL", "listen(NULL ctx)");
    expect_err(ferry__oob_listen(ctx, NULL, &lis), FERRY_EINVAL, "NULL",
               "listen(NULL hostport)");
    expect_err(ferry__oob_listen(ctx, "127.0.0.1:0", NULL), FERRY_EINVAL,
               "NULL", "listen(NULL out)");
    expect_err(ferry__oob_listen(ctx, "nohostport", &lis), FERRY_EINVAL,
               "\"nohostport\" has no port", "listen(nohostport)");
    expect_err(ferry__oob_listen(ctx, "127.0.0.1:", &lis), FERRY_EINVAL,
               "has no port", "listen(empty port)");
    expect_err(ferry__oob_listen(ctx, ":abc", &lis), FERRY_EINVAL,
               "\"abc\" is not a number", "listen(:abc)");
    expect_err(ferry__oob_listen(ctx, "127.0.0.1:70000", &lis), FERRY_EINVAL,
               "70000", "listen(port 70000)");
    expect_err(ferry__oob_listen(ctx, "no.such.host.invalid:0", &lis),
               FERRY_EHOSTUNREACH, "no.such.host.invalid",
               "listen(unresolvable)");
    ck_assert_ptr_null(lis);
    ck_assert_int_eq(ferry__oob_port(NULL), FERRY_EINVAL);

    /* A port in use: FERRY_EEXIST, and the sentence names the address. */
    ck_assert_int_eq(ferry__oob_listen(ctx, "127.0.0.1:0", &lis), 0);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ferry__oob_port(lis));
    expect_err(ferry__oob_listen(ctx, hostport, &lis2), FERRY_EEXIST, hostport,
               "listen(port in use)");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "already in use"));
    ck_assert_ptr_null(lis2);
    ferry__oob_close(lis);
    ferry__oob_close(NULL);
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_bad_args_connect)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL;

    expect_err(ferry__oob_connect(NULL, "127.0.0.1:1", 1000, &conn),
               FERRY_EINVAL, "NULL", "connect(NULL ctx)");
    expect_err(ferry__oob_connect(ctx, NULL, 1000, &conn), FERRY_EINVAL,
               "NULL", "connect(NULL hostport)");
    expect_err(ferry__oob_connect(ctx, "127.0.0.1:1", 1000, NULL),
               FERRY_EINVAL, "NULL", "connect(NULL out)");
    /* A deadline of 0 is the default (10 s), as every deadline's. */
    expect_err(ferry__oob_connect(ctx, "127.0.0.1:1", 0, &conn),
               FERRY_EHOSTUNREACH, "tried for 10.0 s", "connect(timeout 0)");
    expect_err(ferry__oob_connect(ctx, "nohostport", 1000, &conn),
               FERRY_EINVAL, "has no port", "connect(nohostport)");
    expect_err(ferry__oob_connect(ctx, ":abc", 1000, &conn), FERRY_EINVAL,
               "not a number", "connect(:abc)");
    expect_err(ferry__oob_connect(ctx, "127.0.0.1:99999", 1000, &conn),
               FERRY_EINVAL, "99999", "connect(port 99999)");
    expect_err(ferry__oob_connect(ctx, "no.such.host.invalid:1234", 1000,
                                 &conn),
               FERRY_EHOSTUNREACH, "cannot resolve", "connect(unresolvable)");
    ck_assert_ptr_null(conn);
    ferry__oob_disconnect(NULL);
    ck_assert_ptr_null(ferry__oob_conn_peer(NULL));
    ferry_context_close(ctx);
}
END_TEST

START_TEST(test_bad_args_names)
{
    struct srv s;
    ferry_context_t *cctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL, *sconn = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *cbuf = tu_alloc_buf(4096);
    ferry_mem_t *cmem = tu_register(cctx, cbuf, 4096, RW);
    char longname[201], maxname[128];
    int ret;

    memset(longname, 'n', 200);
    longname[200] = '\0';
    memset(maxname, 'm', 127);
    maxname[127] = '\0';
    srv_open(&s, NULL);

    expect_err(ferry__oob_publish(NULL, "x", s.mem), FERRY_EINVAL, "NULL",
               "publish(NULL lis)");
    expect_err(ferry__oob_publish(s.lis, NULL, s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(NULL name)");
    expect_err(ferry__oob_publish(s.lis, "", s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(empty name)");
    expect_err(ferry__oob_publish(s.lis, longname, s.mem), FERRY_EINVAL,
               "1 to 127 characters", "publish(200-char name)");
    ck_assert_int_ne(ferry__oob_publish(s.lis, "x", NULL), 0);
    ck_assert_int_eq(ferry__oob_publish(s.lis, maxname, s.mem), 0);
    expect_err(ferry__oob_accept(NULL, 10, &sconn), FERRY_EINVAL, "NULL",
               "accept(NULL lis)");
    expect_err(ferry__oob_accept(s.lis, 10, NULL), FERRY_EINVAL, "NULL",
               "accept(NULL out)");

    ret = ferry__oob_connect(cctx, s.hostport, 5000, &conn);
    ck_assert_msg(ret == 0, "connect: %s", ferry_last_error());
    expect_err(ferry__oob_lookup(NULL, "reg", 1000, &rmem), FERRY_EINVAL,
               "NULL", "lookup(NULL conn)");
    expect_err(ferry__oob_lookup(conn, "reg", 1000, NULL), FERRY_EINVAL,
               "NULL", "lookup(NULL out)");
    expect_err(ferry__oob_lookup(conn, "", 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(empty name)");
    expect_err(ferry__oob_lookup(conn, longname, 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(200-char name)");
    expect_err(ferry__oob_offer(NULL, "c", cmem, 1000), FERRY_EINVAL, "NULL",
               "offer(NULL conn)");
    expect_err(ferry__oob_offer(conn, "", cmem, 1000), FERRY_EINVAL,
               "1 to 127 characters", "offer(empty name)");
    expect_err(ferry__oob_offer(conn, longname, cmem, 1000), FERRY_EINVAL,
               "1 to 127 characters", "offer(200-char name)");
    ck_assert_int_ne(ferry__oob_offer(conn, "c", NULL, 1000), 0);
    ck_assert_ptr_null(rmem);

    /* The longest name works end to end. */
    ret = ferry__oob_lookup(conn, maxname, 5000, &rmem);
    ck_assert_msg(ret == 0, "lookup of a 127-char name: %s",
                  ferry_last_error());
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    rmem = NULL;
    /* The connection still works after the refused calls (and < 0 is no
     * deadline). */
    ret = ferry__oob_offer(conn, "c", cmem, -1);
    ck_assert_msg(ret == 0, "offer: %s", ferry_last_error());

    /* Only the connecting side offers. */
    ret = ferry__oob_accept(s.lis, 5000, &sconn);
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    expect_err(ferry__oob_offer(sconn, "s", s.mem, 1000), FERRY_EINVAL,
               "only the connecting side offers", "offer(accepted conn)");
    expect_err(ferry__oob_lookup(sconn, "", 1000, &rmem), FERRY_EINVAL,
               "1 to 127 characters", "lookup(accepted, empty name)");
    ret = ferry__oob_lookup(sconn, "c", 5000, &rmem);
    ck_assert_msg(ret == 0, "server lookup: %s", ferry_last_error());
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);

    ferry__oob_disconnect(sconn);
    ferry__oob_disconnect(conn);
    ck_assert_int_eq(ferry_mem_close(cmem), 0);
    ferry_context_close(cctx);
    tu_free_buf(cbuf, 4096);
    srv_close(&s);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

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
    tcase_add_test(tc, test_token_per_call);
    tcase_add_test(tc, test_token_too_long);
    tc = tu_tcase(s, "fake-server", 60);
    tcase_add_test(tc, test_nobody_listening);
    tcase_add_test(tc, test_refused_said_at_once);
    tcase_add_test(tc, test_hub_probe_says_no_refusal);
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
