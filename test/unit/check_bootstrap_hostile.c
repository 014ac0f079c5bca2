/*
 * The bootstrap (ferry__oob_*) facing hostile or careless peers, through
 * the public API and raw sockets of this process: a listener without a
 * token stays on loopback unless told otherwise; peers with different
 * tokens are refused both ways with a sentence, and the token never
 * crosses the wire; idle sockets do not lock a client out; offers are
 * capped per connection and go with it.  (Raw clients that need the
 * handshake's proofs, and the timeouts shortened for tests:
 * test/unit/check_oob.c.)
 *
 * Listeners bind 127.0.0.1:0 (ferry__oob_port tells the port) unless a
 * test is about other addresses, so suites running side by side never
 * collide.  Tests assert outcomes; how long things take is
 * bench/oob_bench's business.
 */
#include "bootutil.h"
#include "sockutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- listening without a token ------------------------------------------ */

static void insecure_listen_refused(ferry_context_t *ctx, const char *where)
{
    ferry__oob_t *lis = NULL;
    int ret = ferry__oob_listen(ctx, where, &lis);

    ck_assert_msg(ret == FERRY_EINVAL,
                  "listen on %s without a token gave %d "
                  "(%s)",
                  where, ret, ferry_last_error());
    ck_assert_ptr_null(lis);
    tu_assert_sentence("is not a loopback address and no bootstrap token is "
                       "set",
                       "anyone who reaches the port could import every "
                       "published region and write to it",
                       "FERRY_OOB_TOKEN", "config.oob_token",
                       "config.oob_insecure", "FERRY_OOB_INSECURE=1", NULL);
}

/* Listens on where, then shows a client reaches it over loopback. */
static void listen_ok(ferry_context_t *ctx, const char *where,
                      const char *token)
{
    ferry_context_t *cctx;
    ferry__oob_t *lis = NULL;
    ferry__oob_conn_t *conn = NULL;
    char hostport[32];
    int ret = ferry__oob_listen(ctx, where, &lis);

    ck_assert_msg(ret == 0, "listen on %s: %s", where, ferry_last_error());
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", ferry__oob_port(lis));
    cctx = ctx_open(PROV, 0, token);
    ret = ferry__oob_connect(cctx, hostport, 3000, &conn);
    ck_assert_msg(ret == 0, "connect to %s: %s", hostport, ferry_last_error());
    ferry__oob_disconnect(conn);
    ferry_context_close(cctx);
    ferry__oob_close(lis);
}

START_TEST(test_no_token_stays_on_loopback)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;

    unsetenv("FERRY_OOB_TOKEN");
    unsetenv("FERRY_OOB_INSECURE");
    ctx = ctx_open(PROV, 0, NULL);
    insecure_listen_refused(ctx, ":0");
    insecure_listen_refused(ctx, "0.0.0.0:0");
    listen_ok(ctx, "127.0.0.1:0", NULL);
    listen_ok(ctx, "localhost:0", NULL);
    ferry_context_close(ctx);

    /* Accepted by the configuration... */
    tu_config(&cfg, PROV);
    cfg.oob_insecure = 1;
    ctx = tu_context_cfg(&cfg);
    listen_ok(ctx, ":0", NULL);
    ferry_context_close(ctx);
    /* ...or by the environment, which ferry_config_init reads. */
    setenv("FERRY_OOB_INSECURE", "1", 1);
    ctx = ctx_open(PROV, 0, NULL);
    listen_ok(ctx, ":0", NULL);
    ferry_context_close(ctx);
    unsetenv("FERRY_OOB_INSECURE");

    /* With a token, any address. */
    ctx = ctx_open(PROV, 0, "t0ken");
    listen_ok(ctx, ":0", "t0ken");
    ferry_context_close(ctx);
}
END_TEST

/* ---- wrong tokens ------------------------------------------------------- */

/* A client with client_token is refused by a server with server_token,
 * with a sentence saying the tokens differ. */
static void tokens_differ(const char *server_token, const char *client_token)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry__oob_conn_t *conn = NULL, *acc = NULL;
    int ret;

    srv_open(&s, server_token);
    ctx = ctx_open(PROV, 0, client_token);
    ret = ferry__oob_connect(ctx, s.hostport, 3000, &conn);
    ck_assert_msg(ret == FERRY_EPROTO,
                  "server token %s, client token %s: connect gave %d (%s)",
                  server_token ? server_token : "(none)",
                  client_token ? client_token : "(none)", ret,
                  ferry_last_error());
    ck_assert_ptr_null(conn);
    tu_assert_sentence(s.hostport, "does not know this client's token",
                       "the bootstrap token does not match the server's",
                       "give both sides the same token: FERRY_OOB_TOKEN",
                       NULL);
    /* Nothing reaches the application. */
    ret = ferry__oob_accept(s.lis, 200, &acc);
    ck_assert_int_eq(ret, FERRY_EAGAIN);
    ferry_context_close(ctx);
    client_ok(&s, server_token);
    srv_close(&s);
}

START_TEST(test_wrong_token_refused_both_ways)
{
    unsetenv("FERRY_OOB_TOKEN");
    tokens_differ("alpha", "beta");
    tokens_differ("alpha", NULL);
    tokens_differ(NULL, "beta");
    tokens_differ("alpha", "alph");
}
END_TEST

/* ---- the token on the wire ---------------------------------------------- */

/*
 * A relay between a client and the listener that keeps every byte the
 * client sends (and the listener's answers): what anyone on the path
 * would see.
 */
struct relay {
    int lfd;
    int port;
    int target_port;
    int stop[2];
    pthread_t th;
    uint8_t up[64 * 1024]; /* client to server */
    size_t up_len;
    uint8_t down[64 * 1024]; /* server to client */
    size_t down_len;
};

/* Moves what from has into to, keeping a copy; false once from closed. */
static bool relay_move(int from, int to, uint8_t *keep, size_t cap,
                       size_t *kept)
{
    uint8_t buf[4096];
    ssize_t n = recv(from, buf, sizeof(buf), 0);

    if (n <= 0)
        return false;
    if (send(to, buf, (size_t)n, MSG_NOSIGNAL) != n)
        return false;
    if (*kept + (size_t)n <= cap) {
        memcpy(keep + *kept, buf, (size_t)n);
        *kept += (size_t)n;
    }
    return true;
}

/* Relays one client at a time until told to stop. */
static void *relay_main(void *arg)
{
    struct relay *r = arg;

    for (;;) {
        struct pollfd pl[2] = {{.fd = r->lfd, .events = POLLIN},
                               {.fd = r->stop[0], .events = POLLIN}};
        int cfd, sfd;
        bool open = true;

        if (poll(pl, 2, 10000) <= 0 || pl[1].revents)
            return NULL;
        cfd = accept(r->lfd, NULL, NULL);
        sfd = su_dial(r->target_port);
        while (open && cfd >= 0 && sfd >= 0) {
            struct pollfd p[3] = {{.fd = cfd, .events = POLLIN},
                                  {.fd = sfd, .events = POLLIN},
                                  {.fd = r->stop[0], .events = POLLIN}};

            if (poll(p, 3, 10000) <= 0 || p[2].revents)
                open = false;
            else if (p[0].revents)
                open = relay_move(cfd, sfd, r->up, sizeof(r->up), &r->up_len);
            else if (p[1].revents)
                open = relay_move(sfd, cfd, r->down, sizeof(r->down),
                                  &r->down_len);
        }
        if (cfd >= 0)
            close(cfd);
        if (sfd >= 0)
            close(sfd);
    }
}

static void relay_start(struct relay *r, int target_port)
{
    memset(r, 0, sizeof(*r));
    r->target_port = target_port;
    r->lfd = su_listen(&r->port);
    ck_assert_int_ge(r->lfd, 0);
    ck_assert_int_eq(pipe(r->stop), 0);
    ck_assert_int_eq(pthread_create(&r->th, NULL, relay_main, r), 0);
}

static void relay_stop(struct relay *r)
{
    tu_write_all(r->stop[1], "x", 1);
    ck_assert_int_eq(pthread_join(r->th, NULL), 0);
    close(r->lfd);
    close(r->stop[0]);
    close(r->stop[1]);
}

static void assert_absent(const uint8_t *bytes, size_t len, const char *tok,
                          const char *what)
{
    ck_assert_msg(memmem(bytes, len, tok, strlen(tok)) == NULL,
                  "the token \"%s\" appears in the %zu bytes %s", tok, len,
                  what);
}

START_TEST(test_token_never_on_the_wire)
{
    static const char token[] = "Sh4red-S3cret-0f-the-Bootstrap";
    struct srv s;
    struct relay r;
    ferry_context_t *ctx;
    ferry__oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    char via[32];
    int ret;

    unsetenv("FERRY_OOB_TOKEN");
    srv_open(&s, token);
    relay_start(&r, s.port);
    snprintf(via, sizeof(via), "127.0.0.1:%d", r.port);
    ctx = ctx_open(PROV, 0, token);
    ret = ferry__oob_connect(ctx, via, 3000, &conn);
    ck_assert_msg(ret == 0, "connect through the relay: %s",
                  ferry_last_error());
    ret = ferry__oob_lookup(conn, "reg", 3000, &rmem);
    ck_assert_msg(ret == 0, "lookup through the relay: %s", ferry_last_error());
    ck_assert_int_eq(ferry__oob_offer(conn, "mine", s.mem, 3000), 0);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry__oob_disconnect(conn);
    ferry_context_close(ctx);
    relay_stop(&r);
    /* Hello, proof, lookup, offer: each a frame of 16 bytes or more. */
    ck_assert_msg(r.up_len >= 4 * 16 && r.down_len >= 4 * 16,
                  "the relay saw %zu bytes up, %zu down", r.up_len, r.down_len);
    assert_absent(r.up, r.up_len, token, "the client sent");
    assert_absent(r.down, r.down_len, token, "the server sent");
    /* Nor its first half, in case it went out in pieces. */
    assert_absent(r.up, r.up_len, "Sh4red-S3cret", "the client sent");
    srv_close(&s);
}
END_TEST

/* ---- idle connections --------------------------------------------------- */

#define IDLE_SOCKETS 1000
/* The listener keeps at most this many connections in the handshake. */
#define HANDSHAKE_SLOTS 256

/* Raises the soft limit on descriptors to the hard one; false when even
 * that is too low for n more. */
static bool room_for(size_t n)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return false;
    rl.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        return false;
    return rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= n + 512;
}

/* How many of fds the far end closed, waiting up to timeout_ms for at
 * least want. */
static size_t count_closed(const int *fds, size_t n, size_t want,
                           int timeout_ms)
{
    double end = now_s() + timeout_ms / 1000.0;
    size_t closed = 0;
    bool *seen = calloc(n, sizeof(*seen));

    ck_assert_ptr_nonnull(seen);
    while (closed < want && now_s() < end) {
        for (size_t i = 0; i < n; i++) {
            struct pollfd p = {.fd = fds[i], .events = POLLIN};
            char buf[512];

            /* A sentence may come first; then the end. */
            while (!seen[i] && poll(&p, 1, 0) == 1) {
                if (recv(fds[i], buf, sizeof(buf), MSG_DONTWAIT) <= 0) {
                    seen[i] = true;
                    closed++;
                }
            }
        }
        usleep(20 * 1000);
    }
    free(seen);
    return closed;
}

/* A client connects and looks up within 2 s each. */
static void client_gets_through(struct srv *s, const char *among)
{
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret = ferry__oob_connect(ctx, s->hostport, 2000, &conn);

    ck_assert_msg(ret == 0, "connect among %s: %s", among, ferry_last_error());
    ret = ferry__oob_lookup(conn, "reg", 2000, &rmem);
    ck_assert_msg(ret == 0, "lookup among %s: %s", among, ferry_last_error());
    ck_assert_uint_eq(ferry_rmem_length(rmem), SRV_LEN);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry__oob_disconnect(conn);
    ferry_context_close(ctx);
}

/*
 * A thousand sockets that connect and say nothing, then a thousand that
 * send the first byte of a frame and nothing more: a client that answers
 * still connects and looks up within 2 s each time.  The silent ones the
 * kernel keeps from the listener; the others the listener takes, and
 * keeps no more than its handshake slots of them (it closes the rest).
 */
START_TEST(test_idle_sockets_do_not_lock_out)
{
    static int fds[2][IDLE_SOCKETS];
    struct srv s;
    size_t closed;

    if (!room_for(2 * IDLE_SOCKETS)) {
        fprintf(stderr,
                "test_idle_sockets_do_not_lock_out: skipped: the "
                "hard limit on open files is below %d\n",
                2 * IDLE_SOCKETS + 512);
        return;
    }
    srv_open(&s, NULL);
    for (size_t i = 0; i < IDLE_SOCKETS; i++) {
        fds[0][i] = su_dial(s.port);
        ck_assert_msg(fds[0][i] >= 0, "idle socket %zu: %s", i,
                      strerror(errno));
    }
    client_gets_through(&s, "1000 silent sockets");
    for (size_t i = 0; i < IDLE_SOCKETS; i++) {
        fds[1][i] = su_dial(s.port);
        ck_assert_msg(fds[1][i] >= 0, "half-hello socket %zu: %s", i,
                      strerror(errno));
        ck_assert_int_eq(send(fds[1][i], "F", 1, MSG_NOSIGNAL), 1);
    }
    client_gets_through(&s, "1000 half hellos");
    closed = count_closed(fds[1], IDLE_SOCKETS, IDLE_SOCKETS - HANDSHAKE_SLOTS,
                          3000);
    ck_assert_msg(closed >= IDLE_SOCKETS - HANDSHAKE_SLOTS,
                  "the listener dropped only %zu of %d half hellos", closed,
                  IDLE_SOCKETS);
    for (size_t i = 0; i < IDLE_SOCKETS; i++) {
        close(fds[0][i]);
        close(fds[1][i]);
    }
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* ---- offers ------------------------------------------------------------- */

#define MAX_OFFERS 1024

/* Looks name up through conn until it gives want (a client's going
 * reaches the listener in its own time). */
static void lookup_until(ferry__oob_conn_t *conn, const char *name, int want)
{
    ferry_rmem_t *rmem = NULL;
    int ret = ferry__oob_lookup(conn, name, 2000, &rmem);

    for (int i = 0; i < 200 && ret != want; i++) {
        if (ret == 0)
            ferry_rmem_close(rmem);
        usleep(10 * 1000);
        ret = ferry__oob_lookup(conn, name, 2000, &rmem);
    }
    ck_assert_msg(ret == want, "lookup of \"%s\" gave %d, expected %d: %s",
                  name, ret, want, ferry_last_error());
    if (ret == 0)
        ck_assert_int_eq(ferry_rmem_close(rmem), 0);
}

/*
 * One connection offers at most 1024 regions: beyond, each offer is
 * refused with a sentence and the connection stays; a name offered again
 * replaces its offer.  The listener finds them until the connection that
 * made them goes; another client never does (ferry__oob_lookup imports
 * through the listener's peer: only the listener's own regions).
 */
START_TEST(test_offers_capped_and_gone_with_connection)
{
    struct srv s;
    ferry_context_t *ca, *cb;
    ferry__oob_conn_t *a = NULL, *b = NULL, *acc = NULL;
    ferry_rmem_t *rmem = NULL;
    uint8_t *buf = tu_alloc_buf(4096);
    ferry_mem_t *mem;
    char name[32];
    int ret;

    srv_open(&s, NULL);
    ca = ctx_open(PROV, 0, NULL);
    cb = ctx_open(PROV, 0, NULL);
    mem = tu_register(ca, buf, 4096, RW);
    ck_assert_int_eq(ferry__oob_connect(ca, s.hostport, 3000, &a), 0);
    ret = ferry__oob_accept(s.lis, 3000, &acc); /* a's, the only one */
    ck_assert_msg(ret == 0, "accept: %s", ferry_last_error());
    ck_assert_int_eq(ferry__oob_connect(cb, s.hostport, 3000, &b), 0);
    for (int i = 0; i < MAX_OFFERS; i++) {
        snprintf(name, sizeof(name), "offer-%d", i);
        ret = ferry__oob_offer(a, name, mem, 3000);
        ck_assert_msg(ret == 0, "offer %d: %s", i, ferry_last_error());
    }
    for (int i = MAX_OFFERS; i < MAX_OFFERS + 200; i++) {
        snprintf(name, sizeof(name), "offer-%d", i);
        ret = ferry__oob_offer(a, name, mem, 3000);
        ck_assert_msg(ret == FERRY_ENOSPC, "offer %d gave %d: %s", i, ret,
                      ferry_last_error());
    }
    tu_assert_sentence("refused", "already offers 1024 regions",
                       "withdraw one first", NULL);
    ret = ferry__oob_offer(a, "offer-7", mem, 3000);
    ck_assert_msg(ret == 0, "offering a name again: %s", ferry_last_error());
    /* The listener finds them; the one beyond the cap is not there. */
    ret = ferry__oob_lookup(acc, "offer-1023", 3000, &rmem);
    ck_assert_msg(ret == 0, "the listener's lookup: %s", ferry_last_error());
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ret = ferry__oob_lookup(acc, "offer-1024", 100, &rmem);
    ck_assert_msg(ret == FERRY_ENOENT, "offer beyond the cap: %d: %s", ret,
                  ferry_last_error());
    /* Another client's lookups see the listener's regions only. */
    lookup_until(b, "reg", 0);
    lookup_until(b, "offer-7", FERRY_ENOENT);
    /* Gone with a's connection. */
    ferry__oob_disconnect(a);
    lookup_until(acc, "offer-7", FERRY_ECONNRESET);
    tu_assert_sentence("disconnected before offering a region named "
                       "\"offer-7\"",
                       NULL);
    ferry__oob_disconnect(acc);
    ferry__oob_disconnect(b);
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    ferry_context_close(ca);
    ferry_context_close(cb);
    tu_free_buf(buf, 4096);
    srv_close(&s);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *oob_hostile_suite(void)
{
    Suite *s = suite_create("oob_hostile");
    TCase *tc;

    tc = tu_tcase(s, "exposure", 60);
    tcase_add_test(tc, test_no_token_stays_on_loopback);
    tc = tu_tcase(s, "tokens", 60);
    tcase_add_test(tc, test_wrong_token_refused_both_ways);
    tcase_add_test(tc, test_token_never_on_the_wire);
    tc = tu_tcase(s, "crowds", 60);
    tcase_add_test(tc, test_idle_sockets_do_not_lock_out);
    tc = tu_tcase(s, "offers", 60);
    tcase_add_test(tc, test_offers_capped_and_gone_with_connection);
    return s;
}

int main(void)
{
    return tu_run(oob_hostile_suite());
}
