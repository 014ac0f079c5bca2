/*
 * Liveness across a real link: this test's process and a target child each
 * in a network namespace of their own, joined by a veth pair, on
 * tcp (tu_tcp).  The link goes down for 5 s under a transfer (the peer
 * is declared dead within the liveness, and after the link is back the
 * same process is reached again through a new handle), and the target's
 * end of the pair is deleted (the peer is declared dead, and nothing
 * hangs).  And a namespace whose one ephemeral port is taken: the tcp
 * provider's listener finds its port in use on every try, and creating a
 * context says so and how often it tried.  Needs root and iproute2;
 * exits 77 (skip) otherwise, saying why.
 */
#include "peerutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PROV tu_tcp()
#define LEN (8 * MiB)
/* The liveness these tests run with: the default. */
#define LIVENESS_MS 2000
/* Declared by liveness_ms + one check period (1/8) + scheduling slack. */
#define DECLARE_LIMIT_MS (LIVENESS_MS + LIVENESS_MS / 8 + 1000)
#define LINK_DOWN_MS 5000

/* Two namespaces joined by a veth pair: names and addresses. */
struct netpair {
    char ns_a[32], ns_b[32]; /* this process's, the target's */
    char veth_a[16], veth_b[16];
    char addr_a[32], addr_b[32];
};

/* Named after the suite's process, so that it removes at exit what a
 * failed test (a process of its own) left behind. */
static unsigned suite_pid;

/* The last command sh() ran, for sh_ok's sentence. */
static char last_cmd[512];

/* Runs a shell command; returns its exit status (-1: not run). */
__attribute__((format(printf, 1, 2))) static int sh(const char *fmt, ...)
{
    va_list ap;
    int st;

    va_start(ap, fmt);
    vsnprintf(last_cmd, sizeof(last_cmd), fmt, ap);
    va_end(ap);
    st = system(last_cmd);
    return st == -1 || !WIFEXITED(st) ? -1 : WEXITSTATUS(st);
}

/* sh() that must succeed. */
#define sh_ok(...)                                                             \
    do {                                                                       \
        int st_ = sh(__VA_ARGS__);                                             \
        ck_assert_msg(st_ == 0, "`%s` failed (exit status %d)", last_cmd,     \
                      st_);                                                    \
    } while (0)

static void netpair_names(struct netpair *np)
{
    unsigned id = suite_pid;

    snprintf(np->ns_a, sizeof(np->ns_a), "ferry-a-%u", id);
    snprintf(np->ns_b, sizeof(np->ns_b), "ferry-b-%u", id);
    snprintf(np->veth_a, sizeof(np->veth_a), "fva%u", id % 1000000u);
    snprintf(np->veth_b, sizeof(np->veth_b), "fvb%u", id % 1000000u);
    snprintf(np->addr_a, sizeof(np->addr_a), "10.213.%u.1", id % 250u);
    snprintf(np->addr_b, sizeof(np->addr_b), "10.213.%u.2", id % 250u);
}

static void netpair_remove(void)
{
    struct netpair np;

    netpair_names(&np);
    /* Deleting a namespace deletes the interfaces in it. */
    sh("ip netns del %s 2>/dev/null", np.ns_a);
    sh("ip netns del %s 2>/dev/null", np.ns_b);
}

/* Waits (5 s at most) until ns's interface dev has its carrier: a
 * context made before that does not see it as a domain. */
static void await_carrier(const char *ns, const char *dev)
{
    uint64_t t0 = tu_now_ns();

    while (sh("ip -n %s link show dev %s | grep -q LOWER_UP", ns, dev) != 0) {
        ck_assert_msg(tu_ms_since(t0) < 5000,
                      "%s in namespace %s has no carrier after 5 s", dev, ns);
        sleep_ms(10);
    }
}

/* Makes the namespaces and the link between them, up, addressed, and
 * moves this process into the first. */
static void netpair_make(struct netpair *np)
{
    netpair_names(np);
    netpair_remove();
    sh_ok("ip netns add %s", np->ns_a);
    sh_ok("ip netns add %s", np->ns_b);
    sh_ok("ip -n %s link add %s type veth peer name %s netns %s", np->ns_a,
          np->veth_a, np->veth_b, np->ns_b);
    sh_ok("ip -n %s addr add %s/24 dev %s", np->ns_a, np->addr_a,
          np->veth_a);
    sh_ok("ip -n %s addr add %s/24 dev %s", np->ns_b, np->addr_b,
          np->veth_b);
    sh_ok("ip -n %s link set %s up", np->ns_a, np->veth_a);
    sh_ok("ip -n %s link set %s up", np->ns_b, np->veth_b);
    await_carrier(np->ns_a, np->veth_a);
    await_carrier(np->ns_b, np->veth_b);
    ck_assert_msg(tu_become_host(np->ns_a) == 0,
                  "becoming host %s (network, mount and UTS namespaces) "
                  "failed: %s",
                  np->ns_a, strerror(errno));
}

/* This side's context, on its end of the pair, default liveness. */
static ferry_context_t *context_on(const struct netpair *np)
{
    struct ferry_config cfg;

    tu_config(&cfg, PROV);
    cfg.domain = np->veth_a;
    cfg.local_only = 0;
    cfg.timeout_ms = 60000;
    ck_assert_uint_eq(cfg.liveness_ms, LIVENESS_MS);
    return tu_context_cfg(&cfg);
}

/* Posts a write of the whole region and waits for it to end, at most
 * wait_ms; returns its result, the request in *req (not freed). */
static int write_and_wait(ferry_peer_t *peer, uint8_t *buf, ferry_mem_t *lmem,
                          ferry_rmem_t *rmem, int wait_ms, ferry_req_t **req)
{
    struct ferry_iov iov = {buf, lmem, rmem, 0, LEN};
    int ret = ferry_write(peer, &iov, 1, NULL, req);

    ck_assert_msg(ret == 0, "posting a write: %s (%s)", ferry_strerror(ret),
                  ferry_last_error());
    return ferry_req_wait(*req, wait_ms);
}

/* Asserts that a write ended with FERRY_EPEERDEAD within the bound, and
 * the peer is DEAD; prints the time. */
static void expect_declared(int ret, uint64_t ms, ferry_peer_t *peer,
                            const char *what)
{
    char why[256];

    printf("netns: %s: the write ended with %s %llu ms after it (liveness "
           "%u ms): %s\n",
           what, ferry_strerror(ret), (unsigned long long)ms, LIVENESS_MS,
           ferry_last_error());
    ck_assert_msg(ret == FERRY_EPEERDEAD,
                  "%s: the write ended with %s (%s) after %llu ms, expected "
                  "FERRY_EPEERDEAD",
                  what, ferry_strerror(ret), ferry_last_error(),
                  (unsigned long long)ms);
    ck_assert_msg(ms < DECLARE_LIMIT_MS,
                  "%s: the peer was declared after %llu ms, expected under "
                  "%u ms",
                  what, (unsigned long long)ms, DECLARE_LIMIT_MS);
    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "%s: the peer is not DEAD: \"%s\"", what, why);
}

/* Progresses ctx until ms have passed since t0. */
static void progress_until(ferry_context_t *ctx, uint64_t t0, unsigned ms)
{
    while (tu_ms_since(t0) < ms) {
        ck_assert_int_ge(ferry_progress(ctx), 0);
        sleep_ms(1);
    }
}

/* Both namespaces, a target child in the second, and this side's
 * context with the child's region imported, one write verified. */
struct link_fx {
    struct netpair np;
    struct tu_child c;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf;
};

static void link_fx_open(struct link_fx *f, uint64_t seed)
{
    netpair_make(&f->np);
    tu_child_start_in(&f->c, PROV, LEN, seed, f->np.ns_b, f->np.veth_b);
    f->ctx = context_on(&f->np);
    f->peer = add_peer(f->ctx, &f->c);
    f->rmem = import_child(f->peer, &f->c, LEN);
    f->lbuf = tu_alloc_buf(LEN);
    f->lmem = tu_register(f->ctx, f->lbuf, LEN, 0);
    tu_fill(f->lbuf, LEN, seed + 1);
    write_ok(f->peer, f->lbuf, f->lmem, f->rmem, LEN, "write over the link");
    ck_assert_msg(tu_child_verify(&f->c, seed + 1),
                  "the child's buffer differs from the write over the link");
}

/* Stops the child and removes the namespaces (the context is gone). */
static void link_fx_close(struct link_fx *f)
{
    tu_child_stop(&f->c);
    tu_free_buf(f->lbuf, LEN);
    netpair_remove();
}

/* ---- 1: the link down for 5 s under a transfer --------------------------- */

START_TEST(test_link_down)
{
    struct link_fx f;
    ferry_peer_t *again;
    ferry_rmem_t *rmem2;
    ferry_req_t *req = NULL;
    uint64_t t_down, t0;
    int ret;

    link_fx_open(&f, 0xe100);
    sh_ok("ip -n %s link set %s down", f.np.ns_b, f.np.veth_b);
    t_down = tu_now_ns();
    tu_fill(f.lbuf, LEN, 0xe102);
    ret = write_and_wait(f.peer, f.lbuf, f.lmem, f.rmem, 5000, &req);
    expect_declared(ret, tu_ms_since(t_down), f.peer, "link down");

    /* The link comes back after 5 s: the handle stays dead. */
    progress_until(f.ctx, t_down, LINK_DOWN_MS);
    sh_ok("ip -n %s link set %s up", f.np.ns_b, f.np.veth_b);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EPEERDEAD);

    /* The same process through a new handle, once the old one's
     * operations came back (TCP retransmits them when the link is up). */
    again = add_peer(f.ctx, &f.c);
    rmem2 = import_child(again, &f.c, LEN);
    ferry_req_close(req);
    t0 = tu_now_ns();
    retry_busy(f.ctx, rmem_free_fn, f.rmem, 30000, "freeing the old region");
    retry_busy(f.ctx, peer_remove_fn, f.peer, 30000,
               "removing the old handle");
    printf("netns: link down: the old handle's operations came back %llu ms "
           "after the link was up\n",
           (unsigned long long)tu_ms_since(t0));
    tu_fill(f.lbuf, LEN, 0xe103);
    write_ok(again, f.lbuf, f.lmem, rmem2, LEN, "write through the new handle");
    ck_assert_msg(tu_child_verify(&f.c, 0xe103),
                  "the child's buffer differs from the write through the new "
                  "handle");

    ck_assert_int_eq(ferry_rmem_close(rmem2), 0);
    ck_assert_int_eq(ferry_mem_close(f.lmem), 0);
    ferry_context_close(f.ctx);
    link_fx_close(&f);
}
END_TEST

/* ---- 2: the target's end of the link deleted ----------------------------- */

START_TEST(test_veth_deleted)
{
    struct link_fx f;
    ferry_req_t *req = NULL;
    uint64_t t0;
    int ret;

    link_fx_open(&f, 0xe200);
    /* Deleting one end of a veth pair deletes both. */
    sh_ok("ip -n %s link del %s", f.np.ns_b, f.np.veth_b);
    t0 = tu_now_ns();
    ret = write_and_wait(f.peer, f.lbuf, f.lmem, f.rmem, 5000, &req);
    expect_declared(ret, tu_ms_since(t0), f.peer, "veth deleted");
    ferry_req_close(req);

    /* Its operations may never come back; closing the context ends them. */
    t0 = tu_now_ns();
    ferry_context_close(f.ctx);
    printf("netns: veth deleted: the context closed in %llu ms\n",
           (unsigned long long)tu_ms_since(t0));
    link_fx_close(&f);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

/* Why these tests cannot run here, or NULL. */
static const char *cannot_run(void)
{
    char ns[32];

    if (geteuid() != 0)
        return "network namespaces need root";
    if (sh("ip -V >/dev/null 2>&1") != 0)
        return "iproute2's `ip` is not installed";
    snprintf(ns, sizeof(ns), "ferry-probe-%u", (unsigned)getpid());
    if (sh("ip netns add %s 2>/dev/null", ns) != 0)
        return "`ip netns add` fails here (no namespace support)";
    sh("ip netns del %s", ns);
    return NULL;
}

/* A listening socket on 127.0.0.1:port, address reuse on, as the tcp
 * provider's own listeners are. */
static int listen_on(unsigned port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one,
                                sizeof(one)),
                     0);
    ck_assert_msg(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
                      listen(fd, 1) == 0,
                  "port %u: %s", port, strerror(errno));
    return fd;
}

/*
 * In a namespace of this test's own, the ephemeral range is one port and
 * a listener holds it: the provider's listener, bound to a port the
 * kernel chooses, finds it in use on every try (endpoint_open tries
 * again), and ferry_context_create says so.  With the port free, the
 * same context opens.
 */
START_TEST(test_ports_taken)
{
    enum { PORT = 40123 };
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;
    const char *err;
    int fd, ret;

    ck_assert_msg(unshare(CLONE_NEWNET) == 0, "unshare: %s", strerror(errno));
    sh_ok("ip link set lo up");
    sh_ok("echo '%d %d' >/proc/sys/net/ipv4/ip_local_port_range", PORT,
          PORT);
    fd = listen_on(PORT);
    tu_config(&cfg, PROV);
    ret = ferry_context_create(&cfg, &ctx);
    err = ferry_last_error();
    ck_assert_msg(ret != 0 && ctx == NULL,
                  "a context opened with every port taken");
    ck_assert_msg(strstr(err, "Address already in use") != NULL &&
                      strstr(err, "4 tries, each on a port the kernel "
                                  "chose") != NULL &&
                      strstr(err, "ip_local_port_range") != NULL,
                  "the error does not say the ports were taken, tried 4 "
                  "times: %s",
                  err);
    close(fd);
    ctx = tu_context_cfg(&cfg);
    ferry_context_close(ctx);
}
END_TEST

static Suite *netns_suite(void)
{
    Suite *s = suite_create("netns");
    TCase *tc;

    tc = tu_tcase(s, "link", 120);
    tcase_add_test(tc, test_link_down);
    tcase_add_test(tc, test_veth_deleted);
    tc = tu_tcase(s, "ports", 60);
    tcase_add_test(tc, test_ports_taken);
    return s;
}

int main(void)
{
    const char *why = cannot_run();

    if (why != NULL) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    unsetenv("FERRY_LIVENESS_MS");
    tu_clear_ferry_env();
    setvbuf(stdout, NULL, _IOLBF, 0);
    suite_pid = (unsigned)getpid();
    atexit(netpair_remove);
    return tu_run(netns_suite());
}
