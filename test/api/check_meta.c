/*
 * The metadata service (ferry.h "Metadata") against a real etcd that each
 * test starts on loopback (etcdutil.h): bad URLs and names; two processes
 * that meet by name and move data; a name held twice; a member killed
 * (its entries gone within its lease's TTL + 1 s, a watcher told, its
 * peer handle declared dead); etcd stopped, killed, restarted on its data
 * and on an empty one (every call keeps its deadline and names the
 * endpoint; the entries come back); a 3-member cluster losing the member
 * listed first; TLS with and without client certificates; and members
 * coming and going while a context keeps writing to them.  (What a broken
 * or hostile etcd answers: check_etcd_hostile.c, against a fake one.)
 *
 * The other members are processes of their own (test/api/meta_peer.c,
 * ferry_meta_util), started by posix_spawn: this process runs threads.
 * Without etcd the suite runs the tests that need none, then exits 77
 * saying what to install.
 */
#include "etcdutil.h"
#include "peerutil.h"
#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROV tu_tcp()
/* The region every member publishes as "kv". */
#define LEN (64 * KiB)
/* What a call may take past its deadline before the test calls it a hang:
 * the machine is small and may run sanitizers. */
#define SLACK_MS 700

/* The helper program (ferry_meta_util), found by main. */
static char helper[PATH_MAX];

/* ---- the other members ---------------------------------------------------- */

struct kid {
    pid_t pid;
    int to;   /* its stdin */
    int from; /* its stdout */
    char name[128];
    char buf[4096]; /* what it printed and we have not read as a line */
    size_t len;
};

/* Starts ferry_meta_util as name on url, publishing pattern seed, with a
 * lease of ttl_s seconds (through FERRY_METADATA_TTL) and calls bounded by
 * timeout_ms.  Does not wait for it: kid_ready does.  0 or an errno; no
 * Check call (main uses it too, outside any test). */
static int kid_try_spawn(struct kid *k, const char *url, const char *name,
                         uint64_t seed, unsigned ttl_s, int timeout_ms)
{
    char len_s[24], seed_s[24], to_s[16], ttl_env[48];
    char *argv[] = {helper, (char *)url, (char *)name, len_s, seed_s, to_s,
                    NULL};
    char *env[] = {ttl_env, NULL};
    int in[2], out[2], ret;

    memset(k, 0, sizeof(*k));
    snprintf(k->name, sizeof(k->name), "%s", name);
    snprintf(len_s, sizeof(len_s), "%zu", LEN);
    snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)seed);
    snprintf(to_s, sizeof(to_s), "%d", timeout_ms);
    snprintf(ttl_env, sizeof(ttl_env), "FERRY_METADATA_TTL=%u", ttl_s);
    if (pipe2(in, O_CLOEXEC) != 0)
        return errno;
    if (pipe2(out, O_CLOEXEC) != 0) {
        ret = errno;
        close(in[0]);
        close(in[1]);
        return ret;
    }
    ret = eu_spawn(argv, env, in[0], out[1], &k->pid);
    close(in[0]);
    close(out[1]);
    k->to = in[1];
    k->from = out[0];
    if (ret != 0) {
        close(in[1]);
        close(out[0]);
    }
    return ret;
}

static void kid_spawn(struct kid *k, const char *url, const char *name,
                      uint64_t seed, unsigned ttl_s, int timeout_ms)
{
    int ret = kid_try_spawn(k, url, name, seed, ttl_s, timeout_ms);

    ck_assert_msg(ret == 0, "starting %s: %s", helper, strerror(ret));
}

/* The next line the kid prints (without its newline), waiting up to
 * timeout_ms; false at the deadline or at its end. */
static bool kid_line(struct kid *k, int timeout_ms, char *line, size_t cap)
{
    uint64_t t0 = tu_now_ns();

    for (;;) {
        char *nl = memchr(k->buf, '\n', k->len);
        struct pollfd p = {k->from, POLLIN, 0};
        uint64_t spent = tu_ms_since(t0);
        ssize_t n;

        if (nl != NULL) {
            size_t l = (size_t)(nl - k->buf);
            snprintf(line, cap, "%.*s", (int)l, k->buf);
            memmove(k->buf, nl + 1, k->len - l - 1);
            k->len -= l + 1;
            return true;
        }
        if (spent >= (uint64_t)timeout_ms ||
            poll(&p, 1, (int)((uint64_t)timeout_ms - spent)) <= 0)
            return false;
        n = read(k->from, k->buf + k->len, sizeof(k->buf) - 1 - k->len);
        if (n <= 0)
            return false;
        k->len += (size_t)n;
    }
}

/* Waits for "ready"; fails with what the kid said instead. */
static void kid_ready(struct kid *k, int timeout_ms)
{
    char line[1024] = "";

    ck_assert_msg(kid_line(k, timeout_ms, line, sizeof(line)) &&
                      strcmp(line, "ready") == 0,
                  "member %s did not get ready within %d ms: \"%s\"", k->name,
                  timeout_ms, line);
}

static void kid_start(struct kid *k, const char *url, const char *name,
                      uint64_t seed, unsigned ttl_s, int timeout_ms)
{
    kid_spawn(k, url, name, seed, ttl_s, timeout_ms);
    kid_ready(k, 30000);
}

static void kid_send(struct kid *k, const char *cmd)
{
    tu_write_all(k->to, cmd, strlen(cmd));
}

/* Sends cmd and asserts that the answer is want. */
static void kid_say(struct kid *k, const char *cmd, const char *want)
{
    char line[1024] = "";

    kid_send(k, cmd);
    ck_assert_msg(kid_line(k, 20000, line, sizeof(line)) &&
                      strcmp(line, want) == 0,
                  "member %s answered \"%s\" to %.*s, expected \"%s\"",
                  k->name, line, (int)strcspn(cmd, "\n"), cmd, want);
}

/* Asks the kid whether its region holds pattern seed. */
static void kid_verify(struct kid *k, uint64_t seed)
{
    char cmd[64];

    snprintf(cmd, sizeof(cmd), "verify %llu\n", (unsigned long long)seed);
    kid_say(k, cmd, "ok");
}

static void kid_close_fds(struct kid *k)
{
    close(k->to);
    close(k->from);
    k->pid = 0;
}

static void kid_kill(struct kid *k)
{
    ck_assert_int_eq(kill(k->pid, SIGKILL), 0);
    ck_assert(waitpid(k->pid, NULL, 0) == k->pid);
    kid_close_fds(k);
}

/* Tells the kid to quit and asserts that it exits 0 (under ASan: with no
 * leak either). */
static void kid_quit(struct kid *k)
{
    uint64_t t0 = tu_now_ns();
    int status = 0;
    pid_t r;

    kid_send(k, "quit\n");
    while ((r = waitpid(k->pid, &status, WNOHANG)) == 0 &&
           tu_ms_since(t0) < 20000)
        sleep_ms(10);
    if (r == 0) {
        kill(k->pid, SIGKILL);
        waitpid(k->pid, &status, 0);
    }
    ck_assert_msg(r == k->pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "member %s ended with status 0x%x (%s)", k->name, status,
                  r == 0 ? "killed after 20 s" : "on its own");
    kid_close_fds(k);
}

/* ---- this side ------------------------------------------------------------ */

/* A config for the tests: loopback tcp, the lease and the call bound. */
static void meta_config(struct ferry_config *cfg, unsigned ttl_s,
                        int timeout_ms)
{
    tu_config(cfg, PROV);
    cfg->metadata_ttl_s = ttl_s;
    cfg->metadata_timeout_ms = timeout_ms;
}

static void cluster_start(struct eu_cluster *c, int members, unsigned flags)
{
    ck_assert_msg(eu_start(c, members, flags) == 0, "starting etcd: %s",
                  c->why);
}

static ferry_meta_t *meta_open(ferry_context_t *ctx, const char *url,
                               const char *name)
{
    ferry_meta_t *m = NULL;
    int ret = ferry_meta_open(ctx, url, name, &m);

    ck_assert_msg(ret == 0, "ferry_meta_open(%s, %s): %s (%s)",
                  url ? url : "NULL", name, ferry_strerror(ret),
                  ferry_last_error());
    ck_assert_ptr_nonnull(m);
    return m;
}

static void publish(ferry_meta_t *m, const char *region, ferry_mem_t *mem)
{
    int ret = ferry_meta_publish(m, region, mem);

    ck_assert_msg(ret == 0, "ferry_meta_publish(%s): %s (%s)", region,
                  ferry_strerror(ret), ferry_last_error());
}

static ferry_peer_t *meta_peer(ferry_meta_t *m, const char *name,
                               int timeout_ms)
{
    ferry_peer_t *peer = NULL;
    int ret = ferry_meta_peer(m, name, timeout_ms, &peer);

    ck_assert_msg(ret == 0, "ferry_meta_peer(%s): %s (%s)", name,
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(peer);
    return peer;
}

static ferry_rmem_t *lookup(ferry_meta_t *m, const char *name,
                            const char *region, int timeout_ms)
{
    ferry_rmem_t *rmem = NULL;
    int ret = ferry_meta_lookup(m, name, region, timeout_ms, &rmem);

    ck_assert_msg(ret == 0, "ferry_meta_lookup(%s, %s): %s (%s)", name, region,
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_ptr_nonnull(rmem);
    return rmem;
}

static long count_keys(struct eu_cluster *c, const char *prefix)
{
    long n = eu_count_keys(c, prefix);

    ck_assert_msg(n >= 0, "counting keys under %s: %s", prefix, c->why);
    return n;
}

/* Polls until prefix holds want keys, at most limit_ms; the ms it took. */
static uint64_t await_keys(struct eu_cluster *c, const char *prefix, long want,
                           unsigned limit_ms)
{
    uint64_t t0 = tu_now_ns();
    long n;

    while ((n = count_keys(c, prefix)) != want) {
        ck_assert_msg(tu_ms_since(t0) < limit_ms,
                      "%ld keys under %s after %u ms, expected %ld", n,
                      prefix, limit_ms, want);
        sleep_ms(50);
    }
    return tu_ms_since(t0);
}

/* A local buffer of LEN bytes, registered. */
struct local {
    uint8_t *buf;
    ferry_mem_t *mem;
};

static void local_open(struct local *l, ferry_context_t *ctx, uint64_t seed)
{
    l->buf = tu_alloc_buf(LEN);
    tu_fill(l->buf, LEN, seed);
    l->mem = tu_register(ctx, l->buf, LEN, RW);
}

static void local_close(struct local *l)
{
    ck_assert_int_eq(ferry_mem_close(l->mem), 0);
    tu_free_buf(l->buf, LEN);
}

/* Writes pattern seed over the whole remote region, reads it back into
 * the local buffer and checks it. */
static void write_check(ferry_peer_t *peer, ferry_rmem_t *rmem,
                        struct local *l, uint64_t seed, const char *what)
{
    struct ferry_iov iov = {l->buf, l->mem, rmem, 0, LEN};

    tu_fill(l->buf, LEN, seed);
    tu_xfer_ok(peer, true, &iov, 1, what);
    memset(l->buf, 0, LEN);
    tu_xfer_ok(peer, false, &iov, 1, what);
    tu_assert_pattern(l->buf, LEN, seed, "%s: read back", what);
}

/* Waits for the event kind about name, skipping others; the ms it took. */
static uint64_t await_event(ferry_meta_t *m, enum ferry_meta_event_kind kind,
                            const char *name, unsigned limit_ms)
{
    uint64_t t0 = tu_now_ns();

    for (;;) {
        struct ferry_meta_event ev;
        uint64_t spent = tu_ms_since(t0);
        int ret;

        ck_assert_msg(spent < limit_ms, "no %s of %s within %u ms",
                      kind == FERRY_META_JOIN ? "JOIN" : "LEAVE", name,
                      limit_ms);
        ret = ferry_meta_event(m, (int)(limit_ms - spent), &ev);
        if (ret == FERRY_EAGAIN)
            continue;
        ck_assert_msg(ret == 0, "ferry_meta_event: %s (%s)",
                      ferry_strerror(ret), ferry_last_error());
        if (ev.kind == kind && strcmp(ev.name, name) == 0)
            return tu_ms_since(t0);
    }
}

/* Asserts that the last error names the endpoint 127.0.0.1:port. */
static void assert_names_endpoint(const struct eu_cluster *c, int member,
                                  const char *what)
{
    char hp[64];

    eu_hostport(c, member, hp, sizeof(hp));
    ck_assert_msg(strstr(ferry_last_error(), hp) != NULL,
                  "%s: the sentence \"%s\" does not name %s", what,
                  ferry_last_error(), hp);
}

/* ---- no etcd needed --------------------------------------------------------- */

/* Asserts that url is refused for the port of its endpoint hostport, at
 * once: not tried for the whole metadata_timeout_ms (1000 ms here). */
static void assert_bad_port(ferry_context_t *ctx, const char *url,
                            const char *hostport, const char *port)
{
    char says[128];
    ferry_meta_t *m = NULL;
    uint64_t t0 = tu_now_ns();

    snprintf(says, sizeof(says), "endpoint \"%s\" has port \"%s\"", hostport,
             port);
    TU_EXPECT_ERROR(ferry_meta_open(ctx, url, "a", &m), FERRY_EINVAL, says);
    tu_assert_sentence(url, "a port is a number from 1 to 65535", NULL);
    ck_assert_msg(tu_ms_since(t0) < 500, "%s was refused after %llu ms, not "
                  "at once", url, (unsigned long long)tu_ms_since(t0));
    ck_assert_ptr_null(m);
}

START_TEST(test_bad_args)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *m = NULL;
    struct ferry_meta_event ev;
    ferry_peer_t *peer = NULL;
    ferry_rmem_t *rmem = NULL;
    char name[200];
    int ret;

    unsetenv("FERRY_METADATA");
    meta_config(&cfg, 2, 1000);
    ctx = tu_context_cfg(&cfg);

    /* URLs. */
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "http://127.0.0.1:2379", "a", &m),
                    FERRY_EINVAL, "names no service ferry knows");
    tu_assert_sentence("http://127.0.0.1:2379", "etcd://HOST:PORT", NULL);
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcdx://127.0.0.1:2379", "a", &m),
                    FERRY_EINVAL, "names no service ferry knows");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "127.0.0.1:2379", "a", &m),
                    FERRY_EINVAL, "names no service ferry knows");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://", "a", &m), FERRY_EINVAL,
                    "names no endpoint");
    {
        /* A URL too long to keep (ferry_meta_url hands it back). */
        char url[1100];

        memset(url, 'a', sizeof(url) - 1);
        url[sizeof(url) - 1] = '\0';
        memcpy(url, "etcd://", 7);
        TU_EXPECT_ERROR(ferry_meta_open(ctx, url, "a", &m), FERRY_EINVAL,
                        "the metadata URL is 1099 characters long; at most "
                        "1023");
        ck_assert_ptr_null(m);
    }
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd:///prefix", "a", &m),
                    FERRY_EINVAL, "names no endpoint");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcds://", "a", &m), FERRY_EINVAL,
                    "names no endpoint");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://localhost/p", "a", &m),
                    FERRY_EINVAL, "is not HOST:PORT");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://,127.0.0.1:1/p", "a", &m),
                    FERRY_EINVAL, "is not HOST:PORT");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:/p", "a", &m),
                    FERRY_EINVAL, "is not HOST:PORT");
    assert_bad_port(ctx, "etcd://127.0.0.1:0/p", "127.0.0.1:0", "0");
    assert_bad_port(ctx, "etcds://127.0.0.1:0", "127.0.0.1:0", "0");
    assert_bad_port(ctx, "etcd://127.0.0.1:65536/p", "127.0.0.1:65536",
                    "65536");
    assert_bad_port(ctx, "etcd://127.0.0.1:99999999999999999999/p",
                    "127.0.0.1:99999999999999999999", "99999999999999999999");
    assert_bad_port(ctx, "etcd://127.0.0.1:2379,127.0.0.1:70000/p",
                    "127.0.0.1:70000", "70000");
    assert_bad_port(ctx, "etcd://127.0.0.1:http/p", "127.0.0.1:http", "http");
    assert_bad_port(ctx, "etcd://127.0.0.1:-1/p", "127.0.0.1:-1", "-1");
    assert_bad_port(ctx, "etcd://[::1]:0/p", "[::1]:0", "0");
    /* The top of the range passes: what fails then is the service
     * (nobody listens there), named in the sentence. */
    ret = ferry_meta_open(ctx, "etcd://127.0.0.1:65535/p", "a", &m);
    ck_assert_msg(ret == FERRY_EHOSTUNREACH || ret == FERRY_ETIMEDOUT,
                  "port 65535 on a dead endpoint: %s (%s)", ferry_strerror(ret),
                  ferry_last_error());
    tu_assert_sentence("127.0.0.1:65535", NULL);
    TU_EXPECT_ERROR(ferry_meta_open(ctx, NULL, "a", &m), FERRY_EINVAL,
                    "no metadata service given");
    tu_assert_sentence("FERRY_METADATA", "config.metadata", NULL);
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "", "a", &m), FERRY_EINVAL,
                    "no metadata service given");
    ck_assert_ptr_null(m);

    /* Names. */
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", "", &m),
                    FERRY_EINVAL, "the name is empty");
    tu_assert_sentence("1 to 127 characters", NULL);
    memset(name, 'n', 128);
    name[128] = '\0';
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", name, &m),
                    FERRY_EINVAL, "the name is too long");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", "a/b", &m),
                    FERRY_EINVAL, "has '/' at 1");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", "a b", &m),
                    FERRY_EINVAL, "has ' ' at 1");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", NULL, &m),
                    FERRY_EINVAL, "the name is NULL");
    /* 127 characters pass the check: what fails then is the service
     * (nobody listens on port 1), named in the sentence. */
    name[127] = '\0';
    ret = ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", name, &m);
    ck_assert_msg(ret == FERRY_EHOSTUNREACH || ret == FERRY_ETIMEDOUT,
                  "a 127-character name on a dead endpoint: %s (%s)",
                  ferry_strerror(ret), ferry_last_error());
    tu_assert_sentence("127.0.0.1:1", NULL);
    ck_assert_ptr_null(m);

    /* NULL arguments. */
    TU_EXPECT_ERROR(ferry_meta_open(NULL, "etcd://127.0.0.1:1/p", "a", &m),
                    FERRY_EINVAL, "is NULL");
    TU_EXPECT_ERROR(ferry_meta_open(ctx, "etcd://127.0.0.1:1/p", "a", NULL),
                    FERRY_EINVAL, "meta is NULL");
    TU_EXPECT_ERROR(ferry_meta_publish(NULL, "kv", NULL), FERRY_EINVAL,
                    "meta is NULL");
    TU_EXPECT_ERROR(ferry_meta_withdraw(NULL, "kv"), FERRY_EINVAL,
                    "meta is NULL");
    TU_EXPECT_ERROR(ferry_meta_peer(NULL, "a", 0, &peer), FERRY_EINVAL,
                    "is NULL");
    TU_EXPECT_ERROR(ferry_meta_lookup(NULL, "a", "kv", 0, &rmem),
                    FERRY_EINVAL, "is NULL");
    TU_EXPECT_ERROR(ferry_meta_watch(NULL), FERRY_EINVAL, "meta is NULL");
    TU_EXPECT_ERROR(ferry_meta_event(NULL, 0, &ev), FERRY_EINVAL, "is NULL");
    ferry_meta_close(NULL);
    ck_assert_ptr_null(peer);
    ck_assert_ptr_null(rmem);
    ferry_context_close(ctx);
}
END_TEST

/* ---- two processes meet ---------------------------------------------------- */

/*
 * The test (config.metadata, no URL) and a member process meet by name:
 * the peer handle, the member's region, a pattern written and read back
 * and checked by the member too; the keys in etcd as they should be;
 * withdraw and lookups of what is not there; close withdraws everything.
 */
START_TEST(test_meet)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *m, *m127;
    ferry_peer_t *peer, *again = NULL;
    ferry_rmem_t *rmem, *none = NULL;
    struct local l;
    struct kid k;
    char url[512], name[128];
    uint64_t t0;

    cluster_start(&c, 1, 0);
    eu_url(&c, "meet", 0, url, sizeof(url));
    meta_config(&cfg, 3, 2000);
    cfg.metadata = url;
    ctx = tu_context_cfg(&cfg);
    local_open(&l, ctx, 1);
    m = meta_open(ctx, NULL, "prefill");
    kid_start(&k, url, "decode0", 0x3e01, 3, 2000);

    peer = meta_peer(m, "decode0", 5000);
    rmem = lookup(m, "decode0", "kv", 5000);
    /* What is there is the member's pattern. */
    {
        struct ferry_iov iov = {l.buf, l.mem, rmem, 0, LEN};
        memset(l.buf, 0, LEN);
        tu_xfer_ok(peer, false, &iov, 1, "reading decode0's region");
        tu_assert_pattern(l.buf, LEN, 0x3e01, "decode0's region");
    }
    write_check(peer, rmem, &l, 0x3e02, "writing decode0's region");
    kid_verify(&k, 0x3e02);
    /* The same address: the same handle. */
    ck_assert_int_eq(ferry_meta_peer(m, "decode0", 0, &again), 0);
    ck_assert_ptr_eq(again, peer);

    /* The keys: two members' addresses and their regions. */
    publish(m, "p0", l.mem);
    ck_assert_int_eq(count_keys(&c, "meet/peers/"), 2);
    ck_assert_int_eq(count_keys(&c, "meet/regions/"), 2);
    ck_assert_int_eq(count_keys(&c, "meet/regions/prefill/p0"), 1);
    /* A second publication replaces the first. */
    publish(m, "p0", l.mem);
    ck_assert_int_eq(count_keys(&c, "meet/regions/prefill/"), 1);
    ck_assert_int_eq(ferry_meta_withdraw(m, "p0"), 0);
    ck_assert_int_eq(count_keys(&c, "meet/regions/prefill/"), 0);
    TU_EXPECT_ERROR(ferry_meta_withdraw(m, "p0"), FERRY_ENOENT,
                    "has published no region \"p0\"");
    TU_EXPECT_ERROR(ferry_meta_publish(m, "a/b", l.mem), FERRY_EINVAL,
                    "the region \"a/b\" has '/'");
    TU_EXPECT_ERROR(ferry_meta_publish(m, "kv", NULL), FERRY_EINVAL, "NULL");

    /* What is not there: FERRY_EAGAIN when the wait ends, not before. */
    t0 = tu_now_ns();
    TU_EXPECT_ERROR(ferry_meta_lookup(m, "decode0", "nothing", 300, &none),
                    FERRY_EAGAIN, "nothing is published under");
    ck_assert_uint_ge(tu_ms_since(t0), 250);
    ck_assert_uint_le(tu_ms_since(t0), 300 + SLACK_MS);
    TU_EXPECT_ERROR(ferry_meta_peer(m, "nobody", 0, &again), FERRY_EAGAIN,
                    "peers/nobody");
    TU_EXPECT_ERROR(ferry_meta_event(m, 0, &(struct ferry_meta_event){0}),
                    FERRY_EINVAL, "not watching");
    ck_assert_ptr_null(none);

    /* The longest name works. */
    memset(name, 'x', 127);
    name[127] = '\0';
    m127 = meta_open(ctx, url, name);
    ck_assert_int_eq(count_keys(&c, "meet/peers/xxxx"), 1);
    ferry_meta_close(m127);

    /* Closing withdraws at once (the lease is revoked). */
    ferry_meta_close(m);
    ck_assert_int_eq(count_keys(&c, "meet/peers/prefill"), 0);
    kid_say(&k, "close\n", "closed");
    ck_assert_int_eq(count_keys(&c, "meet/"), 0);
    /* The handles stay with the context and still work. */
    write_check(peer, rmem, &l, 0x3e03, "writing after both closed");
    kid_verify(&k, 0x3e03);
    kid_quit(&k);

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    local_close(&l);
    ferry_context_close(ctx);
    eu_stop(&c);
}
END_TEST

/*
 * A name held by a live context is refused (FERRY_EEXIST, with a
 * sentence), from another context and from the same one; once the holder
 * closed, the name is free at the first try.  The URL comes from
 * FERRY_METADATA here.
 */
START_TEST(test_duplicate)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *a, *b;
    ferry_meta_t *ma, *mb = NULL;
    char url[512];
    uint64_t t0;

    cluster_start(&c, 1, 0);
    eu_url(&c, "dup", 0, url, sizeof(url));
    setenv("FERRY_METADATA", url, 1);
    meta_config(&cfg, 3, 2000);
    ck_assert_str_eq(cfg.metadata, url);
    a = tu_context_cfg(&cfg);
    b = tu_context_cfg(&cfg);
    ma = meta_open(a, NULL, "same");

    TU_EXPECT_ERROR(ferry_meta_open(b, NULL, "same", &mb), FERRY_EEXIST,
                    "is held by another live context");
    tu_assert_sentence("dup/peers/same", "choose another name", NULL);
    ck_assert_ptr_null(mb);
    TU_EXPECT_ERROR(ferry_meta_open(a, url, "same", &mb), FERRY_EEXIST,
                    "is held by another live context");
    /* The refused ones left nothing behind. */
    ck_assert_int_eq(count_keys(&c, "dup/"), 1);

    ferry_meta_close(ma);
    t0 = tu_now_ns();
    mb = meta_open(b, NULL, "same");
    printf("meta: duplicate: the name was taken again %llu ms after the "
           "holder closed\n",
           (unsigned long long)tu_ms_since(t0));
    ck_assert_int_eq(count_keys(&c, "dup/peers/"), 1);
    ferry_meta_close(mb);
    ck_assert_int_eq(count_keys(&c, "dup/"), 0);
    unsetenv("FERRY_METADATA");
    ferry_context_close(a);
    ferry_context_close(b);
    eu_stop(&c);
}
END_TEST

/* ---- a member killed ----------------------------------------------------------- */

#define KILL_TTL 2

/*
 * A publisher killed with SIGKILL: its keys are gone within its lease's
 * TTL + 1 s (ferry_meta_peer says FERRY_ENOENT, etcdctl counts none), a
 * watcher gets its LEAVE, and the handle ferry_meta_peer gave is declared
 * dead (PEER_DOWN) by the metadata service, liveness being off here.  The
 * member's lease comes from FERRY_METADATA_TTL, this side's from
 * config.metadata_ttl_s.
 */
START_TEST(test_kill_publisher)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *m;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem, *none = NULL;
    struct local l;
    struct kid k;
    char url[512], why[256];
    uint64_t t0, gone_ms = 0, leave_ms = 0, down_ms = 0;
    bool gone = false, left = false, down = false;
    enum ferry_peer_state st;

    cluster_start(&c, 1, 0);
    eu_url(&c, "kill", 0, url, sizeof(url));
    meta_config(&cfg, KILL_TTL, 2000);
    cfg.liveness_ms = 0; /* only the metadata service declares it dead */
    ctx = tu_context_cfg(&cfg);
    local_open(&l, ctx, 2);
    m = meta_open(ctx, url, "watcher");
    ck_assert_int_eq(ferry_meta_watch(m), 0);
    await_event(m, FERRY_META_JOIN, "watcher", 5000);
    kid_start(&k, url, "victim", 0x4b01, KILL_TTL, 2000);
    await_event(m, FERRY_META_JOIN, "victim", 5000);
    peer = meta_peer(m, "victim", 5000);
    rmem = lookup(m, "victim", "kv", 5000);
    write_check(peer, rmem, &l, 0x4b02, "writing the victim's region");
    ck_assert_int_eq(count_keys(&c, "kill/peers/victim"), 1);
    ck_assert_int_eq(count_keys(&c, "kill/regions/victim/"), 1);

    ck_assert_int_eq(kill(k.pid, SIGKILL), 0);
    t0 = tu_now_ns();
    ck_assert(waitpid(k.pid, NULL, 0) == k.pid);
    kid_close_fds(&k);
    while (!(gone && left && down)) {
        struct ferry_meta_event ev;
        struct ferry_notification n[8];
        ferry_peer_t *p = NULL;
        int ret;

        ck_assert_msg(tu_ms_since(t0) < (KILL_TTL + 10) * 1000,
                      "%llu ms after the kill: keys gone %d, LEAVE %d, "
                      "PEER_DOWN %d",
                      (unsigned long long)tu_ms_since(t0), gone, left, down);
        if (!gone) {
            ret = ferry_meta_peer(m, "victim", 0, &p);
            if (ret == FERRY_EAGAIN) {
                gone = true;
                gone_ms = tu_ms_since(t0);
            } else {
                ck_assert_msg(ret == 0, "ferry_meta_peer: %s (%s)",
                              ferry_strerror(ret), ferry_last_error());
                ck_assert_ptr_eq(p, peer);
            }
        }
        while (ferry_meta_event(m, 0, &ev) == 0)
            if (ev.kind == FERRY_META_LEAVE &&
                strcmp(ev.name, "victim") == 0 && !left) {
                left = true;
                leave_ms = tu_ms_since(t0);
                /* Whoever reads the leave finds the handle dead already. */
                ck_assert_int_eq(ferry_peer_state(peer, &st, NULL, 0), 0);
                ck_assert_msg(st == FERRY_PEER_DEAD,
                              "the LEAVE was readable before the peer was "
                              "declared dead (state %d)",
                              (int)st);
            }
        ret = ferry_notify_poll(ctx, n, TU_ARRAY_LEN(n));
        ck_assert_msg(ret >= 0, "ferry_notify_poll: %s", ferry_last_error());
        for (int i = 0; i < ret; i++)
            if (n[i].kind == FERRY_NOTIFICATION_PEER_DOWN &&
                n[i].peer == peer && !down) {
                down = true;
                down_ms = tu_ms_since(t0);
            }
        sleep_ms(10);
    }
    printf("meta: kill -9 of a member (TTL %d s): its keys gone after %llu "
           "ms, LEAVE after %llu ms, PEER_DOWN after %llu ms\n",
           KILL_TTL, (unsigned long long)gone_ms,
           (unsigned long long)leave_ms, (unsigned long long)down_ms);
    ck_assert_msg(gone_ms <= (KILL_TTL + 1) * 1000,
                  "the keys of a killed member lasted %llu ms, past its "
                  "TTL (%d s) + 1 s",
                  (unsigned long long)gone_ms, KILL_TTL);
    ck_assert_int_eq(count_keys(&c, "kill/peers/victim"), 0);
    ck_assert_int_eq(count_keys(&c, "kill/regions/victim/"), 0);
    TU_EXPECT_ERROR(ferry_meta_lookup(m, "victim", "kv", 0, &none),
                    FERRY_EAGAIN, "nothing is published under");
    ck_assert_ptr_null(none);
    st = peer_state(peer, why, sizeof(why));
    ck_assert_msg(st == FERRY_PEER_DEAD || st == FERRY_PEER_UNREACHABLE,
                  "the killed member's peer is %s (%s)", state_name(st), why);
    ck_assert_msg(strstr(why, "metadata") != NULL,
                  "the peer's death is not the metadata service's: %s", why);
    TU_EXPECT_ERROR(ferry_write(peer,
                                &(struct ferry_iov){l.buf, l.mem, rmem, 0, LEN},
                                1, NULL, &(ferry_req_t *){NULL}),
                    FERRY_EPEERDEAD, "dead");
    /* The watcher itself is still there. */
    ck_assert_int_eq(count_keys(&c, "kill/peers/"), 1);

    retry_busy(ctx, rmem_free_fn, rmem, 5000, "freeing the victim's region");
    retry_busy(ctx, peer_remove_fn, peer, 5000, "removing the victim");
    ferry_meta_close(m);
    local_close(&l);
    ferry_context_close(ctx);
    eu_stop(&c);
}
END_TEST

/* ---- etcd down ----------------------------------------------------------------- */

#define OUT_TTL 3
#define OUT_TIMEOUT 1000

/* What an outage test has running: this side (one context, a member
 * "steady" with region kv, and "closer", to be closed during the outage)
 * and a member process "other". */
struct outage {
    struct eu_cluster c;
    char url[512];
    struct ferry_config cfg;
    ferry_context_t *ctx, *ctx2;
    struct local l;
    ferry_meta_t *steady, *closer;
    struct kid other;
};

static void outage_open(struct outage *o, const char *prefix)
{
    cluster_start(&o->c, 1, 0);
    eu_url(&o->c, prefix, 0, o->url, sizeof(o->url));
    meta_config(&o->cfg, OUT_TTL, OUT_TIMEOUT);
    o->ctx = tu_context_cfg(&o->cfg);
    o->ctx2 = tu_context_cfg(&o->cfg);
    local_open(&o->l, o->ctx, 3);
    o->steady = meta_open(o->ctx, o->url, "steady");
    publish(o->steady, "kv", o->l.mem);
    o->closer = meta_open(o->ctx, o->url, "closer");
    kid_start(&o->other, o->url, "other", 0x5a01, OUT_TTL, OUT_TIMEOUT);
}

static void outage_close(struct outage *o)
{
    kid_quit(&o->other);
    ferry_meta_close(o->steady);
    local_close(&o->l);
    ferry_context_close(o->ctx);
    ferry_context_close(o->ctx2);
    eu_stop(&o->c);
}

/* Runs call's statement, then asserts that it failed within its deadline
 * (OUT_TIMEOUT) with a sentence naming the endpoint. */
#define EXPECT_BOUNDED(o, what, stmt)                                         \
    do {                                                                      \
        uint64_t t0_ = tu_now_ns();                                           \
        int ret_ = (stmt);                                                    \
        uint64_t ms_ = tu_ms_since(t0_);                                      \
        printf("meta: %s with etcd down: %s after %llu ms: %s\n", (what),     \
               ferry_strerror(ret_), (unsigned long long)ms_,                 \
               ferry_last_error());                                           \
        ck_assert_msg(ret_ != 0, "%s succeeded with etcd down", (what));      \
        ck_assert_msg(ms_ <= OUT_TIMEOUT + SLACK_MS,                          \
                      "%s took %llu ms, past its %d ms deadline", (what),     \
                      (unsigned long long)ms_, OUT_TIMEOUT);                  \
        assert_names_endpoint(&(o)->c, 0, (what));                            \
    } while (0)

/* What every outage checks while etcd does not answer: publish, lookup
 * (1 s) and open keep their deadline and name the endpoint; close
 * returns promptly; data still moves. */
static void outage_checks(struct outage *o)
{
    ferry_meta_t *late = NULL;
    ferry_rmem_t *r = NULL;
    uint64_t t0;

    EXPECT_BOUNDED(o, "ferry_meta_publish",
                   ferry_meta_publish(o->steady, "kv2", o->l.mem));
    EXPECT_BOUNDED(o, "ferry_meta_lookup",
                   ferry_meta_lookup(o->steady, "other", "kv", OUT_TIMEOUT,
                                     &r));
    ck_assert_ptr_null(r);
    EXPECT_BOUNDED(o, "ferry_meta_open",
                   ferry_meta_open(o->ctx2, o->url, "late", &late));
    ck_assert_ptr_null(late);
    /* Close: the keeper's call in flight, then the revoke, each bounded. */
    t0 = tu_now_ns();
    ferry_meta_close(o->closer);
    o->closer = NULL;
    printf("meta: ferry_meta_close with etcd down took %llu ms\n",
           (unsigned long long)tu_ms_since(t0));
    ck_assert_uint_le(tu_ms_since(t0), 2 * OUT_TIMEOUT + SLACK_MS);
}

/* After the outage: the entries are there (waiting for them if they must
 * be published again), new calls work, and data moves. */
static void outage_after(struct outage *o)
{
    ferry_peer_t *peer = meta_peer(o->steady, "other", 10000);
    ferry_rmem_t *rmem = lookup(o->steady, "other", "kv", 10000);
    ferry_rmem_t *own = lookup(o->steady, "steady", "kv", 10000);
    ferry_meta_t *late = meta_open(o->ctx2, o->url, "late");

    publish(o->steady, "kv2", o->l.mem);
    write_check(peer, rmem, &o->l, 0x5a02, "writing other's region after");
    kid_verify(&o->other, 0x5a02);
    /* The one closed during the outage never comes back: its lease ends. */
    await_keys(&o->c, "out/peers/closer", 0, (OUT_TTL + 2) * 1000);
    ferry_meta_close(late);
    ck_assert_int_eq(ferry_rmem_close(own), 0);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
}

/* etcd stopped (SIGSTOP): it accepts connections and answers nothing. */
START_TEST(test_outage_stopped)
{
    struct outage o;

    outage_open(&o, "out");
    ck_assert_int_eq(eu_signal(&o.c, 0, SIGSTOP), 0);
    outage_checks(&o);
    ck_assert_int_eq(eu_signal(&o.c, 0, SIGCONT), 0);
    outage_after(&o);
    outage_close(&o);
}
END_TEST

/* etcd killed (connections refused), then started on its data. */
START_TEST(test_outage_restarted)
{
    struct outage o;

    outage_open(&o, "out");
    ck_assert_int_eq(eu_signal(&o.c, 0, SIGKILL), 0);
    outage_checks(&o);
    ck_assert_msg(eu_restart(&o.c, 0, false) == 0, "%s", o.c.why);
    outage_after(&o);
    outage_close(&o);
}
END_TEST

/*
 * etcd killed and started on an EMPTY data directory: every lease is
 * lost, and the keepers publish everything again within seconds.  The
 * watcher's last word on the member is a JOIN, and ferry_meta_peer gives
 * a handle that works (outage_after).
 *
 * What the watcher says in between is printed, not asserted: today it
 * reports a LEAVE of every member it listed before the keepers were back
 * (and so declares their handles dead although they never went).
 */
START_TEST(test_outage_wiped)
{
    struct outage o;
    ferry_meta_t *dup = NULL;
    ferry_peer_t *before;
    struct ferry_meta_event ev;
    enum ferry_meta_event_kind last = 0;
    unsigned leaves = 0;
    enum ferry_peer_state st;
    char why[256];
    uint64_t ms;

    outage_open(&o, "out");
    ferry_meta_close(o.closer);
    o.closer = NULL;
    ck_assert_int_eq(ferry_meta_watch(o.steady), 0);
    await_event(o.steady, FERRY_META_JOIN, "other", 5000);
    before = meta_peer(o.steady, "other", 5000);
    /* steady: address and kv; other: address and kv. */
    ck_assert_int_eq(count_keys(&o.c, "out/"), 4);
    ck_assert_int_eq(eu_signal(&o.c, 0, SIGKILL), 0);
    ck_assert_msg(eu_restart(&o.c, 0, true) == 0, "%s", o.c.why);
    ms = await_keys(&o.c, "out/", 4, 15000);
    printf("meta: etcd restarted empty: the 4 entries were back %llu ms "
           "after it was healthy\n",
           (unsigned long long)ms);
    /* The names are held again. */
    TU_EXPECT_ERROR(ferry_meta_open(o.ctx2, o.url, "other", &dup),
                    FERRY_EEXIST, "is held by another live context");

    /* The watcher lists again within REWATCH (0.5 s) of etcd's return. */
    sleep_ms(2000);
    while (ferry_meta_event(o.steady, 0, &ev) == 0)
        if (strcmp(ev.name, "other") == 0) {
            last = ev.kind;
            leaves += ev.kind == FERRY_META_LEAVE;
        }
    ck_assert_msg(last == 0 || last == FERRY_META_JOIN,
                  "the watcher's last event about other (alive) is a LEAVE");
    st = peer_state(before, why, sizeof(why));
    printf("meta: etcd restarted empty: the watcher reported %u LEAVE of "
           "other, which never went; the handle it had is %s (%s)\n",
           leaves, state_name(st), why);
    outage_after(&o);
    outage_close(&o);
}
END_TEST

/* ---- a cluster of three ------------------------------------------------------------ */

#define C3_TTL 2

/*
 * Three members; the one listed first in the URL is killed: publishing,
 * lookups, opening and watching go on through the others, and the
 * leases stay kept (the entries outlive 3 TTLs).
 */
START_TEST(test_cluster_member_killed)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *m, *late;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem, *rmem2;
    struct local l;
    struct kid k;
    char url[512];
    uint64_t t0;
    int ret;

    cluster_start(&c, 3, 0);
    eu_url(&c, "c3", 0, url, sizeof(url));
    meta_config(&cfg, C3_TTL, 5000);
    ctx = tu_context_cfg(&cfg);
    local_open(&l, ctx, 4);
    m = meta_open(ctx, url, "p");
    ck_assert_int_eq(ferry_meta_watch(m), 0);
    kid_start(&k, url, "c", 0x6c01, C3_TTL, 5000);
    await_event(m, FERRY_META_JOIN, "c", 5000);
    peer = meta_peer(m, "c", 5000);
    rmem = lookup(m, "c", "kv", 5000);
    write_check(peer, rmem, &l, 0x6c02, "writing c's region");

    ck_assert_int_eq(eu_signal(&c, 0, SIGKILL), 0);
    t0 = tu_now_ns();
    ret = ferry_meta_publish(m, "kv", l.mem);
    printf("meta: 3 members, the first killed: a publish took %llu ms (%s)\n",
           (unsigned long long)tu_ms_since(t0), ferry_strerror(ret));
    ck_assert_msg(ret == 0, "publish with the first member dead: %s",
                  ferry_last_error());
    rmem2 = lookup(m, "c", "kv", 5000);
    write_check(peer, rmem2, &l, 0x6c03, "writing c's region again");
    kid_verify(&k, 0x6c03);
    late = meta_open(ctx, url, "late");
    await_event(m, FERRY_META_JOIN, "late", 10000);
    /* The keepers keep the leases through the other members. */
    sleep_ms(3 * C3_TTL * 1000);
    ck_assert_int_eq(count_keys(&c, "c3/peers/"), 3);
    ck_assert_int_eq(count_keys(&c, "c3/regions/"), 2);
    ck_assert_int_eq(ferry_meta_peer(m, "c", 0, &(ferry_peer_t *){NULL}), 0);

    /* The member comes back, and the next one goes. */
    ck_assert_msg(eu_restart(&c, 0, false) == 0, "%s", c.why);
    ck_assert_int_eq(eu_signal(&c, 1, SIGKILL), 0);
    publish(m, "kv", l.mem);
    ferry_meta_close(late);
    await_event(m, FERRY_META_LEAVE, "late", 10000);
    kid_quit(&k);
    await_event(m, FERRY_META_LEAVE, "c", 10000);
    ck_assert_int_eq(count_keys(&c, "c3/peers/"), 1);

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_rmem_close(rmem2), 0);
    ferry_meta_close(m);
    local_close(&l);
    ferry_context_close(ctx);
    eu_stop(&c);
}
END_TEST

/* ---- TLS -------------------------------------------------------------------------- */

/*
 * etcds:// to a member serving TLS (_i 1: asking for client certificates
 * too): with FERRY_ETCD_CACERT (and FERRY_ETCD_CERT/KEY) two contexts
 * meet and move data; without the CA, or without the client certificate
 * the member asks for, ferry_meta_open fails saying which variable to set.
 */
START_TEST(test_tls)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *a, *b;
    ferry_meta_t *ma, *mb, *mc = NULL;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    struct local la, lb;
    char url[512];
    bool client_auth = _i == 1;
    int ret;

    cluster_start(&c, 1, EU_TLS | (client_auth ? EU_CLIENT_AUTH : 0));
    eu_url(&c, "tls", 0, url, sizeof(url));
    ck_assert_ptr_nonnull(strstr(url, "etcds://"));
    /* Without FERRY_ETCD_CACERT, curl reads the system's CA bundle at
     * each handshake: slow under ASan (every malloc unwinds), so a
     * generous bound lets the verification failure, not a timeout, end
     * the attempt. */
    meta_config(&cfg, 3, 10000);
    cfg.progress_thread = 1; /* a is written to by b, in this process */
    a = tu_context_cfg(&cfg);
    b = tu_context_cfg(&cfg);
    local_open(&la, a, 5);
    local_open(&lb, b, 6);

    setenv("FERRY_ETCD_CACERT", c.ca, 1);
    if (client_auth) {
        setenv("FERRY_ETCD_CERT", c.cert, 1);
        setenv("FERRY_ETCD_KEY", c.key, 1);
    }
    ma = meta_open(a, url, "a");
    publish(ma, "kv", la.mem);
    mb = meta_open(b, url, "b");
    peer = meta_peer(mb, "a", 5000);
    rmem = lookup(mb, "a", "kv", 5000);
    write_check(peer, rmem, &lb, 0x7101, "writing a's region over TLS meta");
    tu_assert_pattern(la.buf, LEN, 0x7101, "a's region");
    ck_assert_int_eq(count_keys(&c, "tls/peers/"), 2);

    /* Without the CA, the server's certificate cannot be verified. */
    unsetenv("FERRY_ETCD_CACERT");
    ret = ferry_meta_open(b, url, "c", &mc);
    printf("meta: TLS without FERRY_ETCD_CACERT: %s: %s\n",
           ferry_strerror(ret), ferry_last_error());
    ck_assert_int_ne(ret, 0);
    tu_assert_sentence("FERRY_ETCD_CACERT", NULL);
    assert_names_endpoint(&c, 0, "TLS without the CA");
    ck_assert_ptr_null(mc);
    if (client_auth) {
        /* With the CA and no client certificate, the server says no. */
        setenv("FERRY_ETCD_CACERT", c.ca, 1);
        unsetenv("FERRY_ETCD_CERT");
        unsetenv("FERRY_ETCD_KEY");
        ret = ferry_meta_open(b, url, "c", &mc);
        printf("meta: TLS without FERRY_ETCD_CERT: %s: %s\n",
               ferry_strerror(ret), ferry_last_error());
        ck_assert_int_ne(ret, 0);
        tu_assert_sentence("FERRY_ETCD_CERT", NULL);
        ck_assert_ptr_null(mc);
    }
    /* A plain etcd:// to a TLS member fails too, naming it. */
    {
        char plain[512];
        snprintf(plain, sizeof(plain), "etcd://%s", url + strlen("etcds://"));
        ret = ferry_meta_open(b, plain, "c", &mc);
        ck_assert_int_ne(ret, 0);
        assert_names_endpoint(&c, 0, "etcd:// to a TLS member");
        ck_assert_ptr_null(mc);
    }
    unsetenv("FERRY_ETCD_CACERT");
    unsetenv("FERRY_ETCD_CERT");
    unsetenv("FERRY_ETCD_KEY");

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry_meta_close(mb);
    ferry_meta_close(ma);
    ck_assert_int_eq(count_keys(&c, "tls/"), 0);
    local_close(&la);
    local_close(&lb);
    ferry_context_close(a);
    ferry_context_close(b);
    eu_stop(&c);
}
END_TEST

/* ---- members come and go while data moves -------------------------------------------- */

#define CHURN_TTL 2
#define CHURN_MAX 6

struct decode {
    struct kid kid;
    bool started, removed, killed, left, down;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    uint64_t removed_at; /* tu_now_ns() */
    uint64_t leave_ms;   /* from removed_at */
    unsigned writes;
    uint64_t last_seed;
};

/* The plan: each step after_ms after the one before (and a member goes
 * only once it has joined), what happens to whom. */
struct step {
    unsigned after_ms;
    char what; /* 's' start, 'k' kill -9, 'c' close (the process stays) */
    int who;
};

static const struct step plan[] = {
    {0, 's', 0},    {0, 's', 1},    {0, 's', 2},    {1500, 's', 3},
    {1500, 'k', 0}, {1500, 'c', 1}, {1500, 's', 4}, {1500, 'k', 2},
    {500, 's', 5},  {1500, 'c', 5},
};

static int decode_index(const char *name)
{
    int i;

    if (sscanf(name, "decode%d", &i) != 1 || i < 0 || i >= CHURN_MAX)
        return -1;
    return i;
}

/*
 * One "prefill" context keeps writing to the decode members it finds
 * through ferry_meta_watch and ferry_meta_peer, while they are started,
 * killed (SIGKILL) or closed (ferry_meta_close) on a plan: every write to
 * a member still there succeeds and reads back, every member that goes
 * yields a LEAVE (within TTL + 1 s of a kill) and a PEER_DOWN of its
 * handle, and no member still there is reported gone.
 */
START_TEST(test_membership_churn)
{
    struct eu_cluster c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *m;
    struct decode d[CHURN_MAX];
    struct local l;
    char url[512], name[32];
    size_t next = 0;
    uint64_t t0, seed = 0x8000, last_change = 0, last_step = 0;
    unsigned rounds_after = 0;
    bool done = false;

    memset(d, 0, sizeof(d));
    cluster_start(&c, 1, 0);
    eu_url(&c, "churn", 0, url, sizeof(url));
    meta_config(&cfg, CHURN_TTL, 2000);
    ctx = tu_context_cfg(&cfg);
    local_open(&l, ctx, 7);
    m = meta_open(ctx, url, "prefill");
    ck_assert_int_eq(ferry_meta_watch(m), 0);

    t0 = tu_now_ns();
    while (!done) {
        uint64_t now = tu_ms_since(t0);
        struct ferry_meta_event ev;
        struct ferry_notification n[16];
        int ret;

        ck_assert_msg(now < 60000, "the churn did not settle in 60 s");
        /* What the plan says now. */
        for (; next < TU_ARRAY_LEN(plan); next++) {
            struct decode *x = &d[plan[next].who];

            if (now < last_step + plan[next].after_ms ||
                (plan[next].what != 's' && x->peer == NULL))
                break;
            snprintf(name, sizeof(name), "decode%d", plan[next].who);
            last_change = last_step = now;
            rounds_after = 0;
            if (plan[next].what == 's') {
                kid_spawn(&x->kid, url, name, 0x8100 + (uint64_t)plan[next].who,
                          CHURN_TTL, 2000);
                x->started = true;
                continue;
            }
            x->removed = true;
            x->removed_at = tu_now_ns();
            if (plan[next].what == 'k') {
                x->killed = true;
                kid_kill(&x->kid);
            } else {
                kid_send(&x->kid, "close\n");
            }
        }
        /* Joins and leaves. */
        while ((ret = ferry_meta_event(m, 0, &ev)) == 0) {
            int i = decode_index(ev.name);
            struct decode *x = i >= 0 ? &d[i] : NULL;

            if (x == NULL)
                continue; /* prefill itself */
            if (ev.kind == FERRY_META_JOIN) {
                ck_assert_msg(x->started && !x->removed && x->peer == NULL,
                              "unexpected JOIN of %s", ev.name);
                kid_ready(&x->kid, 30000);
                x->peer = meta_peer(m, ev.name, 5000);
                x->rmem = lookup(m, ev.name, "kv", 5000);
            } else {
                ck_assert_msg(x->removed,
                              "LEAVE of %s, which is still there", ev.name);
                ck_assert_msg(!x->left, "a second LEAVE of %s", ev.name);
                x->left = true;
                x->leave_ms = tu_ms_since(x->removed_at);
            }
        }
        ck_assert_int_eq(ret, FERRY_EAGAIN);
        ret = ferry_notify_poll(ctx, n, TU_ARRAY_LEN(n));
        ck_assert_msg(ret >= 0, "ferry_notify_poll: %s", ferry_last_error());
        for (int k = 0; k < ret; k++)
            for (int i = 0; i < CHURN_MAX; i++)
                if (n[k].kind == FERRY_NOTIFICATION_PEER_DOWN &&
                    n[k].peer == d[i].peer && d[i].peer != NULL) {
                    ck_assert_msg(d[i].removed,
                                  "PEER_DOWN of decode%d, which is there", i);
                    d[i].down = true;
                }
        /* A write to every member still there. */
        for (int i = 0; i < CHURN_MAX; i++) {
            char what[64];

            if (d[i].peer == NULL || d[i].removed)
                continue;
            snprintf(what, sizeof(what), "write %u to decode%d", d[i].writes,
                     i);
            write_check(d[i].peer, d[i].rmem, &l, ++seed, what);
            d[i].last_seed = seed;
            d[i].writes++;
        }
        rounds_after++;
        /* Done: the plan run, every removed member seen leaving and down,
         * and the survivors written a while since the last change. */
        done = next == TU_ARRAY_LEN(plan) && rounds_after >= 20 &&
               now - last_change >= 1000;
        for (int i = 0; i < CHURN_MAX; i++)
            if (d[i].started && (d[i].removed ? !(d[i].left && d[i].down)
                                              : d[i].peer == NULL))
                done = false;
        sleep_ms(5);
    }

    for (int i = 0; i < CHURN_MAX; i++) {
        struct decode *x = &d[i];

        printf("meta: churn: decode%d %s, %u writes%s", i,
               !x->removed ? "stayed" : x->killed ? "killed" : "closed",
               x->writes, x->removed ? "" : "\n");
        if (x->removed)
            printf(", LEAVE %llu ms after\n",
                   (unsigned long long)x->leave_ms);
        ck_assert_uint_gt(x->writes, 0);
        if (x->killed)
            ck_assert_msg(x->leave_ms <= (CHURN_TTL + 1) * 1000,
                          "decode%d's LEAVE came %llu ms after its kill, "
                          "past its TTL (%d s) + 1 s",
                          i, (unsigned long long)x->leave_ms, CHURN_TTL);
        if (x->removed && !x->killed) {
            char line[256] = "";
            ck_assert_msg(kid_line(&x->kid, 5000, line, sizeof(line)) &&
                              strcmp(line, "closed") == 0,
                          "decode%d answered \"%s\" to close", i, line);
        }
        if (!x->killed)
            kid_verify(&x->kid, x->last_seed);
    }
    ck_assert_int_eq(count_keys(&c, "churn/peers/"), 3); /* prefill, 3, 4 */
    for (int i = 0; i < CHURN_MAX; i++) {
        if (!d[i].killed)
            kid_quit(&d[i].kid);
        retry_busy(ctx, rmem_free_fn, d[i].rmem, 5000, "freeing a region");
    }
    ferry_meta_close(m);
    local_close(&l);
    ferry_context_close(ctx);
    eu_stop(&c);
}
END_TEST

/* ---- suite -------------------------------------------------------------------------- */

/* ---- the bootstrap backend -------------------------------------------------- */

/* A loopback port nobody listens on now. */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/*
 * bootstrap://: the first context to open becomes the hub, a member in
 * another process and one in this process find each other and the hub
 * through it, names are unique, a member's entries go with its
 * connection, and there is no watch.
 */
START_TEST(test_bootstrap_hub)
{
    struct ferry_config cfg;
    ferry_context_t *ctx, *ctx2;
    ferry_meta_t *hub, *member, *dup = NULL;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem, *gone = NULL;
    struct local l, l2;
    struct kid k;
    char url[64];
    uint64_t t0;
    int ret;

    snprintf(url, sizeof(url), "bootstrap://127.0.0.1:%d", free_port());
    meta_config(&cfg, 3, 2000);
    /* Both contexts here are targets of the other's writes. */
    cfg.progress_thread = 1;
    ctx = tu_context_cfg(&cfg);
    ctx2 = tu_context_cfg(&cfg);
    local_open(&l, ctx, 1);
    local_open(&l2, ctx2, 2);
    hub = meta_open(ctx, url, "hub");
    kid_start(&k, url, "decode0", 0x4b01, 3, 2000);

    /* The hub finds the member in the other process, and writes to it. */
    peer = meta_peer(hub, "decode0", 5000);
    rmem = lookup(hub, "decode0", "kv", 5000);
    write_check(peer, rmem, &l, 0x4b02, "the hub writing decode0's region");
    kid_verify(&k, 0x4b02);
    ferry_rmem_close(rmem);

    /* A member here finds the hub's region and the other member's. */
    member = meta_open(ctx2, url, "member");
    publish(hub, "h", l.mem);
    rmem = lookup(member, "hub", "h", 5000);
    write_check(meta_peer(member, "hub", 0), rmem, &l2, 0x4b03,
                "a member writing the hub's region");
    ferry_rmem_close(rmem);
    rmem = lookup(member, "decode0", "kv", 5000);
    ferry_rmem_close(rmem);
    publish(member, "m", l2.mem);
    rmem = lookup(hub, "member", "m", 5000);
    ferry_rmem_close(rmem);

    /* Names are unique; there is no watch. */
    TU_EXPECT_ERROR(ferry_meta_open(ctx2, url, "decode0", &dup), FERRY_EEXIST,
                    "is held by another live context");
    TU_EXPECT_ERROR(ferry_meta_watch(member), FERRY_ENOTSUP, "use etcd://");
    ck_assert_int_eq(ferry_meta_withdraw(member, "m"), 0);
    TU_EXPECT_ERROR(ferry_meta_withdraw(member, "m"), FERRY_ENOENT,
                    "has published no region \"m\"");

    /* A member's entries go with its connection. */
    ferry_meta_close(member);
    t0 = tu_now_ns();
    while ((ret = ferry_meta_peer(hub, "member", 0, &peer)) == 0) {
        ck_assert_msg(tu_ms_since(t0) < 3000, "the closed member's address "
                      "is still published after 3 s");
        sleep_ms(20);
    }
    ck_assert_int_eq(ret, FERRY_EAGAIN);
    TU_EXPECT_ERROR(ferry_meta_lookup(hub, "member", "m", 0, &gone),
                    FERRY_EAGAIN, "nothing is published under");
    kid_quit(&k);
    ferry_meta_close(hub);
    local_close(&l);
    local_close(&l2);
    ferry_context_close(ctx);
    ferry_context_close(ctx2);
}
END_TEST

/*
 * A hub that closes ends its members' connections, and a member's calls
 * say so at once, with why: a lookup that would wait for an entry to
 * appear does not wait out its timeout, or for ever, on a hub it can no
 * longer reach.  (It waited the whole timeout: 30 s in the Python suite.)
 */
START_TEST(test_bootstrap_hub_gone)
{
    struct ferry_config cfg;
    ferry_context_t *ctx, *ctx2;
    ferry_meta_t *hub, *member;
    ferry_peer_t *peer = NULL;
    ferry_rmem_t *rmem = NULL;
    char url[64];
    uint64_t t0;
    int ret;

    snprintf(url, sizeof(url), "bootstrap://127.0.0.1:%d", free_port());
    meta_config(&cfg, 3, 2000);
    ctx = tu_context_cfg(&cfg);
    ctx2 = tu_context_cfg(&cfg);
    hub = meta_open(ctx, url, "hub");
    member = meta_open(ctx2, url, "member");
    meta_peer(member, "hub", 5000);
    ferry_meta_close(hub);

    t0 = tu_now_ns();
    ret = ferry_meta_peer(member, "hub", 20000, &peer);
    ck_assert_msg(ret == FERRY_ECONNRESET,
                  "a lookup on the closed hub gave %s (%s), expected "
                  "FERRY_ECONNRESET",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(tu_ms_since(t0) < 5000,
                  "a lookup on the closed hub answered after %llu ms of its "
                  "20000: it waited on a connection that had ended",
                  (unsigned long long)tu_ms_since(t0));
    tu_assert_sentence("closed the connection", NULL);
    /* Never giving up (-1) cannot mean for ever on a lost hub. */
    TU_EXPECT_ERROR(ferry_meta_lookup(member, "hub", "kv", -1, &rmem),
                    FERRY_ECONNRESET, "join again (ferry_meta_open)");
    ck_assert_ptr_null(rmem);
    ferry_meta_close(member);
    ferry_context_close(ctx);
    ferry_context_close(ctx2);
}
END_TEST

static Suite *meta_suite(bool etcd)
{
    Suite *s = suite_create("meta");
    TCase *tc;

    tc = tu_tcase(s, "args", 30);
    tcase_add_test(tc, test_bad_args);
    tc = tu_tcase(s, "bootstrap", 60);
    tcase_add_test(tc, test_bootstrap_hub);
    tcase_add_test(tc, test_bootstrap_hub_gone);
    if (!etcd)
        return s;
    tc = tu_tcase(s, "meet", 60);
    tcase_add_test(tc, test_meet);
    tcase_add_test(tc, test_duplicate);
    tc = tu_tcase(s, "kill", 60);
    tcase_add_test(tc, test_kill_publisher);
    tc = tu_tcase(s, "outage", 90);
    tcase_add_test(tc, test_outage_stopped);
    tcase_add_test(tc, test_outage_restarted);
    tcase_add_test(tc, test_outage_wiped);
    tc = tu_tcase(s, "cluster", 120);
    tcase_add_test(tc, test_cluster_member_killed);
    tc = tu_tcase(s, "tls", 60);
    tcase_add_loop_test(tc, test_tls, 0, 2);
    tc = tu_tcase(s, "churn", 120);
    tcase_add_test(tc, test_membership_churn);
    return s;
}

/* The helper beside this program: $abs_top_builddir/test/api, as make
 * check sets it, else the current directory's test/api. */
static void find_helper(void)
{
    const char *top = getenv("abs_top_builddir");

    snprintf(helper, sizeof(helper), "%s/test/api/ferry_meta_util",
             top != NULL && top[0] != '\0' ? top : ".");
}

/*
 * Whether this ferry has the etcd backend: the helper, given a URL
 * nobody serves, says why it could not join.  NULL: it has; else why not.
 */
static const char *etcd_backend_missing(void)
{
    static char why[1024];
    struct kid k;
    char line[1024] = "";
    bool got;

    if (kid_try_spawn(&k, "etcd://127.0.0.1:1/probe", "probe", 1, 2, 300))
        return NULL; /* the tests will say why */
    got = kid_line(&k, 30000, line, sizeof(line));
    kill(k.pid, SIGKILL);
    waitpid(k.pid, NULL, 0);
    close(k.to);
    close(k.from);
    if (got && strstr(line, "without the etcd backend") != NULL) {
        snprintf(why, sizeof(why), "%s", line);
        return why;
    }
    return NULL;
}

int main(void)
{
    const char *missing;
    int ret;

    tu_clear_ferry_env();
    unsetenv("FERRY_METADATA");
    unsetenv("FERRY_METADATA_TTL");
    unsetenv("FERRY_ETCD_CACERT");
    unsetenv("FERRY_ETCD_CERT");
    unsetenv("FERRY_ETCD_KEY");
    /* Line by line: what a test printed survives its timeout. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    find_helper();
    if (access(helper, X_OK) != 0) {
        fprintf(stderr, "check_meta: no helper program %s (%s): run make "
                "check, which builds it\n", helper, strerror(errno));
        return 1;
    }
    missing = eu_missing();
    if (missing == NULL)
        missing = etcd_backend_missing();
    ret = tu_run(meta_suite(missing == NULL));
    if (ret == 0 && missing != NULL) {
        printf("check_meta: skipping the tests that need etcd: %s\n",
               missing);
        return 77;
    }
    return ret;
}
