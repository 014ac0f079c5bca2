/*
 * Peer death through the API: a target killed (-9) in the middle of large
 * writes, a target stopped (SIGSTOP) past the liveness and added again
 * after SIGCONT, a hundred targets started and killed in turn (nothing of
 * them may stay behind: descriptors, memory), and a side that only watches a peer
 * or waits on a counter for it; and a live peer left alone for longer
 * than the liveness, which is no death; and a target restarted behind the
 * same bootstrap address, reached again through a new handle.  The targets are forked children
 * (tu_child_start) on tcp (tu_tcp) over loopback, but one on shm killed
 * under a request of small writes that mostly do not wait.  (The liveness machinery
 * between two contexts of one process: test/api/check_live.c.)
 */
#include "peerutil.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROV tu_tcp()

/* Test 1: writes in flight when the target is killed. */
#define NWRITES 8
#define WLEN (8 * MiB)
/* Test 3: cycles, the cycle measured as the baseline, bytes per write. */
#define NCYCLES 100
#define BASE_CYCLE 10
#define CYCLE_LEN (64 * KiB)
/* Test 3: cycles run again because their live child was declared gone
 * on a starved CPU (cycle_write), at most. */
#define MAX_STARVED_CYCLES 5
/* Test 2: how long the target stays stopped. */
#define STOP_MS 10000

/* ---- helpers -------------------------------------------------------------- */

/* Reaps a child killed with SIGKILL and closes its pipes; tu_child_stop
 * is not for a killed child (it asserts a clean exit). */
static void reap_killed_child(struct tu_child *c)
{
    int status = 0;

    ck_assert(waitpid(c->pid, &status, 0) == c->pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
                  "the child did not die of SIGKILL (status 0x%x)", status);
    close(c->to_child);
    close(c->from_child);
    c->pid = 0;
}

/* Kills the child with SIGKILL and reaps it.  Returns the time of the
 * kill. */
static uint64_t kill_child(struct tu_child *c)
{
    uint64_t t = tu_now_ns();

    ck_assert_int_eq(kill(c->pid, SIGKILL), 0);
    reap_killed_child(c);
    return t;
}

/* Polls ctx's notifications until a PEER_DOWN event for peer comes, at
 * most limit_ms; returns the milliseconds it took.  Other events are
 * dropped; a PEER_DOWN for another peer fails the test. */
static uint64_t await_peer_down(ferry_context_t *ctx, ferry_peer_t *peer,
                                unsigned limit_ms, const char *what)
{
    uint64_t t0 = tu_now_ns();

    for (;;) {
        struct ferry_notification ev[16];
        int n = ferry_notify_poll(ctx, ev, TU_ARRAY_LEN(ev));

        ck_assert_msg(n >= 0, "%s: ferry_notify_poll failed with %s: %s", what,
                      ferry_strerror(n), ferry_last_error());
        for (int i = 0; i < n; i++) {
            if (ev[i].kind != FERRY_NOTIFICATION_PEER_DOWN)
                continue;
            ck_assert_msg(ev[i].peer == peer,
                          "%s: a PEER_DOWN event names peer %p, expected %p",
                          what, (void *)ev[i].peer, (void *)peer);
            ck_assert_msg(ev[i].id == 0 && ev[i].value == 0,
                          "%s: a PEER_DOWN event carries id %llu value %llu, "
                          "expected 0 and 0",
                          what, (unsigned long long)ev[i].id,
                          (unsigned long long)ev[i].value);
            return tu_ms_since(t0);
        }
        ck_assert_msg(tu_ms_since(t0) < limit_ms,
                      "%s: no FERRY_NOTIFICATION_PEER_DOWN event for the "
                      "peer within %u ms",
                      what, limit_ms);
        sleep_ms(1);
    }
}

/* The child while it is stopped: a failing test (which exits) kills it
 * rather than leave it stopped for good. */
static pid_t stopped_child;

static void kill_stopped_child(void)
{
    if (stopped_child > 0)
        kill(stopped_child, SIGKILL);
}

/* ---- 1: kill -9 in the middle of large writes ----------------------------- */

START_TEST(test_kill_mid_transfer)
{
    const size_t total = NWRITES * WLEN;
    struct tu_child c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    ferry_req_t *req[NWRITES], *late = (ferry_req_t *)0x1;
    uint8_t *lbuf = tu_alloc_buf(total);
    struct ferry_iov iov;
    uint64_t t_kill, worst = 0;
    char why[256];
    int ret;

    tu_child_start(&c, PROV, total, 0xd100);
    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000; /* liveness must end them, not the deadline */
    ck_assert_uint_eq(cfg.liveness_ms, 2000);
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    rmem = import_child(peer, &c, total);
    lmem = tu_register(ctx, lbuf, total, 0);

    /* One small write first: the connection is made and the peer has
     * answered, so its death is DEAD, not UNREACHABLE. */
    tu_fill(lbuf, 4096, 0xd101);
    write_ok(peer, lbuf, lmem, rmem, 4096, "warm-up write");
    ck_assert_int_eq(peer_state(peer, why, sizeof(why)), FERRY_PEER_UP);

    /* The writes go to a stopped target, so that none can have come back
     * when it dies (a running one may take all 64 MiB before the kill,
     * as it does under ASan): their bytes fill the socket buffers, and
     * the target is killed with them half-delivered. */
    stopped_child = c.pid;
    ck_assert_int_eq(kill(c.pid, SIGSTOP), 0);
    tu_fill(lbuf, total, 0xd102);
    for (size_t i = 0; i < NWRITES; i++) {
        iov = (struct ferry_iov){lbuf + i * WLEN, lmem, rmem, i * WLEN, WLEN};
        ret = ferry_write(peer, &iov, 1, NULL, &req[i]);
        ck_assert_msg(ret == 0, "write %zu: %s (%s)", i, ferry_strerror(ret),
                      ferry_last_error());
    }
    /* 50 ms of progress: the first operations are on the wire. */
    {
        uint64_t t0 = tu_now_ns();

        while (tu_ms_since(t0) < 50)
            ck_assert_int_ge(ferry_progress(ctx), 0);
    }
    for (size_t i = 0; i < NWRITES; i++)
        ck_assert_msg(ferry_req_test(req[i]) == FERRY_EINPROGRESS,
                      "write %zu to the stopped target ended (%s) before "
                      "the kill",
                      i, ferry_last_error());

    t_kill = kill_child(&c);
    stopped_child = 0;
    for (size_t i = 0; i < NWRITES; i++) {
        uint64_t ms;

        ret = ferry_req_wait(req[i], -1);
        ms = tu_ms_since(t_kill);
        /* Still running at the kill, each could only fail: a write
         * completes once the target has taken its data. */
        ck_assert_msg(ret == FERRY_EPEERDEAD || ret == FERRY_ECONNRESET,
                      "write %zu ended with %s (%s) %llu ms after the kill; "
                      "expected FERRY_EPEERDEAD or FERRY_ECONNRESET",
                      i, ret == 0 ? "success" : ferry_strerror(ret),
                      ferry_last_error(), (unsigned long long)ms);
        ck_assert_msg(ms < 3000,
                      "write %zu ended (%s) %llu ms after the kill, expected "
                      "under 3000 ms with liveness_ms 2000",
                      i, ferry_strerror(ret), (unsigned long long)ms);
        printf("death: kill -9: write %zu ended with %s after %llu ms\n", i,
               ferry_strerror(ret), (unsigned long long)ms);
        if (ms > worst)
            worst = ms;
        /* An ended request keeps its answer. */
        ck_assert_int_eq(ferry_req_test(req[i]), ret);
    }
    printf("death: kill -9: %d writes of %zu MiB failed, the last %llu ms "
           "after the kill\n",
           NWRITES, WLEN / MiB, (unsigned long long)worst);

    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "after the kill the peer is not DEAD: \"%s\"", why);
    ck_assert_msg(why[0] != '\0', "ferry_peer_state gave no sentence");
    printf("death: kill -9: peer state DEAD: %s\n", why);

    /* A new request is refused at once. */
    {
        uint64_t t0 = tu_now_ns();

        iov = (struct ferry_iov){lbuf, lmem, rmem, 0, 4096};
        ret = ferry_write(peer, &iov, 1, NULL, &late);
        ck_assert_msg(ret == FERRY_EPEERDEAD,
                      "a write to the dead peer returned %s (%s), expected "
                      "FERRY_EPEERDEAD",
                      ferry_strerror(ret), ferry_last_error());
        ck_assert_msg(tu_ms_since(t0) < 100,
                      "refusing a write to the dead peer took %llu ms",
                      (unsigned long long)tu_ms_since(t0));
        ck_assert_ptr_eq(late, (ferry_req_t *)0x1);
        ck_assert_msg(strstr(ferry_last_error(), "dead") != NULL,
                      "the refusal does not say the peer is dead: \"%s\"",
                      ferry_last_error());
    }
    await_peer_down(ctx, peer, 3000, "kill -9 mid-transfer");

    for (size_t i = 0; i < NWRITES; i++)
        ferry_req_close(req[i]);
    retry_busy(ctx, rmem_free_fn, rmem, 5000, "ferry_rmem_close of the dead "
                                              "peer's region");
    retry_busy(ctx, deregister_fn, lmem, 5000, "ferry_mem_close of the "
                                               "written buffer");
    retry_busy(ctx, peer_remove_fn, peer, 5000, "ferry_peer_close of the "
                                                "dead peer");
    ferry_context_close(ctx);
    tu_free_buf(lbuf, total);
}
END_TEST

/*
 * The same on shm with a request of 64 small blocks, which shm before
 * libfabric 2.5 sends mostly without waiting for their delivery (covered
 * by the request's waiting writes): the target is stopped, so the
 * request cannot have ended, then killed; the request must fail, within
 * the liveness, and never succeed on the writes that did not wait.
 */
START_TEST(test_kill_mid_covered_writes)
{
    enum { N = 64, B = 4096 };
    struct tu_child c;
    struct ferry_config cfg;
    struct ferry_iov iov[N];
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    ferry_req_t *req;
    uint8_t *lbuf = tu_alloc_buf(N * B);
    uint64_t t_kill, t0, ms;
    int ret, status = 0;

    tu_child_start(&c, "shm", N * B, 0xd200);
    tu_config(&cfg, "shm");
    cfg.timeout_ms = 60000; /* liveness must end it, not the deadline */
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    rmem = import_child(peer, &c, N * B);
    lmem = tu_register(ctx, lbuf, N * B, 0);
    tu_fill(lbuf, B, 0xd201);
    write_ok(peer, lbuf, lmem, rmem, B, "warm-up write");

    /* Stopped for sure before the request: running, it could take all
     * 256 KiB in the moment a stop takes to land. */
    stopped_child = c.pid;
    ck_assert_int_eq(kill(c.pid, SIGSTOP), 0);
    ck_assert_int_eq(waitpid(c.pid, &status, WUNTRACED), c.pid);
    ck_assert_msg(WIFSTOPPED(status), "the target did not stop (0x%x)",
                  status);
    tu_fill(lbuf, N * B, 0xd202);
    for (size_t i = 0; i < N; i++)
        iov[i] = (struct ferry_iov){lbuf + (N - 1 - i) * B, lmem, rmem,
                                    (N - 1 - i) * B, B};
    ret = ferry_write(peer, iov, N, NULL, &req);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    for (t0 = tu_now_ns(); tu_ms_since(t0) < 50;)
        ck_assert_int_ge(ferry_progress(ctx), 0);
    ck_assert_msg(ferry_req_test(req) == FERRY_EINPROGRESS,
                  "the request to the stopped target ended (%s) before the "
                  "kill", ferry_last_error());

    t_kill = kill_child(&c);
    stopped_child = 0;
    ret = ferry_req_wait(req, -1);
    ms = tu_ms_since(t_kill);
    ck_assert_msg(ret == FERRY_EPEERDEAD || ret == FERRY_ECONNRESET,
                  "the request ended with %s (%s) %llu ms after the kill; "
                  "expected FERRY_EPEERDEAD or FERRY_ECONNRESET",
                  ret == 0 ? "success" : ferry_strerror(ret),
                  ferry_last_error(), (unsigned long long)ms);
    ck_assert_msg(ms < 3000,
                  "the request ended (%s) %llu ms after the kill, expected "
                  "under 3000 ms with liveness_ms 2000",
                  ferry_strerror(ret), (unsigned long long)ms);
    printf("death: kill -9 on shm: a request of %d small writes ended with "
           "%s after %llu ms\n",
           N, ferry_strerror(ret), (unsigned long long)ms);
    ferry_req_close(req);
    /* The context's close ends what the provider still holds: libfabric
     * 2.6's shm never hands back the operations of a peer that died, so
     * the region and the buffer would stay in use until then. */
    ferry_context_close(ctx);
    tu_free_buf(lbuf, N * B);
}
END_TEST

/* ---- 2: SIGSTOP for 10 s, past the liveness, then the peer added again - */

START_TEST(test_stopped_past_liveness)
{
    const size_t len = 4 * MiB;
    struct tu_child c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer, *again;
    ferry_rmem_t *rmem, *rmem2;
    ferry_mem_t *lmem;
    ferry_req_t *req = NULL;
    uint8_t *lbuf = tu_alloc_buf(len);
    struct ferry_iov iov;
    uint64_t t0, t_stop, ms;
    char why[256];
    int ret;

    tu_child_start(&c, PROV, len, 0xd200);
    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    cfg.liveness_ms = 500;
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    rmem = import_child(peer, &c, len);
    lmem = tu_register(ctx, lbuf, len, 0);

    tu_fill(lbuf, len, 0xd201);
    write_ok(peer, lbuf, lmem, rmem, len, "write before the stop");
    ck_assert_msg(tu_child_verify(&c, 0xd201),
                  "the child's buffer differs from the first write");
    ck_assert_int_eq(peer_state(peer, why, sizeof(why)), FERRY_PEER_UP);

    stopped_child = c.pid;
    ck_assert_int_eq(kill(c.pid, SIGSTOP), 0);
    t_stop = tu_now_ns();
    tu_fill(lbuf, len, 0xd202);
    t0 = tu_now_ns();
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, len};
    ret = ferry_write(peer, &iov, 1, NULL, &req);
    ck_assert_msg(ret == 0, "write to the stopped child: %s (%s)",
                  ferry_strerror(ret), ferry_last_error());
    /* Bounded, so that a peer never declared fails here, saying so,
     * rather than at the request's 60 s deadline or the test's timeout. */
    ret = ferry_req_wait(req, 5000);
    ms = tu_ms_since(t0);
    printf("death: SIGSTOP: the write ended with %s after %llu ms "
           "(liveness_ms 500): %s\n",
           ferry_strerror(ret), (unsigned long long)ms, ferry_last_error());
    if (ret == FERRY_EAGAIN) {
        enum ferry_peer_state st = peer_state(peer, why, sizeof(why));

        ck_abort_msg("the write to the stopped child is still running "
                     "after %llu ms, expected FERRY_EPEERDEAD after about "
                     "liveness_ms 500; the peer is %s (\"%s\")",
                     (unsigned long long)ms, state_name(st), why);
    }
    ck_assert_msg(ret == FERRY_EPEERDEAD,
                  "the write to the stopped child ended with %s (%s) after "
                  "%llu ms, expected FERRY_EPEERDEAD",
                  ferry_strerror(ret), ferry_last_error(),
                  (unsigned long long)ms);
    ck_assert_msg(ms < 2500,
                  "the write to the stopped child ended after %llu ms, "
                  "expected under 2500 ms with liveness_ms 500",
                  (unsigned long long)ms);
    ck_assert_msg(ms >= 400,
                  "the write to the stopped child ended after only %llu ms, "
                  "before liveness_ms 500 could pass",
                  (unsigned long long)ms);
    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "the stopped peer is not DEAD: \"%s\"", why);
    printf("death: SIGSTOP: peer state DEAD: %s\n", why);
    await_peer_down(ctx, peer, 1000, "SIGSTOP");

    /* Stopped for 10 s in all, then it runs again: the handle stays dead
     * and so does its request. */
    while (tu_ms_since(t_stop) < STOP_MS) {
        ck_assert_int_ge(ferry_progress(ctx), 0);
        sleep_ms(1);
    }
    ck_assert_int_eq(kill(c.pid, SIGCONT), 0);
    stopped_child = 0;
    t0 = tu_now_ns();
    while (tu_ms_since(t0) < 300) {
        ck_assert_int_ge(ferry_progress(ctx), 0);
        sleep_ms(1);
    }
    ret = ferry_req_test(req);
    ck_assert_msg(ret == FERRY_EPEERDEAD,
                  "after SIGCONT the failed write tests %s (%s), expected "
                  "FERRY_EPEERDEAD again",
                  ferry_strerror(ret), ferry_last_error());
    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "after SIGCONT the old handle is no longer DEAD: \"%s\"",
                  why);

    /* Added again: a new handle that works. */
    again = add_peer(ctx, &c);
    ck_assert_ptr_ne(again, peer);
    ck_assert_msg(peer_state(again, why, sizeof(why)) != FERRY_PEER_DEAD,
                  "the peer added again starts DEAD: \"%s\"", why);
    rmem2 = import_child(again, &c, len);

    /* The old handle goes once its operations came back (its write's
     * operations reach the resumed child); only then does the new write
     * go, so that none of the old one lands over it. */
    ferry_req_close(req);
    retry_busy(ctx, rmem_free_fn, rmem, 5000, "ferry_rmem_close of the old "
                                              "handle's region");
    retry_busy(ctx, peer_remove_fn, peer, 5000, "ferry_peer_close of the "
                                                "old handle");

    tu_fill(lbuf, len, 0xd203);
    write_ok(again, lbuf, lmem, rmem2, len, "write through the new handle");
    ck_assert_msg(tu_child_verify(&c, 0xd203),
                  "the child's buffer differs from the write through the "
                  "new handle");
    ck_assert_int_eq(peer_state(again, why, sizeof(why)), FERRY_PEER_UP);

    ck_assert_int_eq(ferry_rmem_close(rmem2), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ck_assert_int_eq(ferry_peer_close(again), 0);
    ferry_context_close(ctx);
    tu_child_stop(&c);
    tu_free_buf(lbuf, len);
}
END_TEST

/* ---- 3: a hundred targets started and killed ------------------------------ */

static unsigned count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    unsigned n = 0;

    ck_assert_msg(d != NULL, "cannot open /proc/self/fd");
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static unsigned long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long kib = 0;

    ck_assert_msg(f != NULL, "cannot open /proc/self/status");
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %lu kB", &kib) == 1)
            break;
    fclose(f);
    ck_assert_msg(kib != 0, "no VmRSS in /proc/self/status");
    return kib;
}

#if defined(__SANITIZE_ADDRESS__)
/* AddressSanitizer keeps freed blocks in quarantine, resident: under it
 * VmRSS grows with every free, and the heap bytes still allocated are
 * what tells a leak. */
size_t __sanitizer_get_current_allocated_bytes(void);
#define HEAP_MEASURE "heap allocated (ASan)"
static unsigned long mem_kib(void)
{
    return (unsigned long)(__sanitizer_get_current_allocated_bytes() / 1024);
}
#else
#define HEAP_MEASURE "VmRSS"
static unsigned long mem_kib(void)
{
    return rss_kib();
}
#endif

/*
 * The cycle's write into a live child.  With a 300 ms liveness, a child
 * that gets no CPU for longer (this suite beside others on two CPUs) is
 * rightly declared gone while still alive: that is the contract, not a
 * death, so the cycle says so and is run again, a few times at most.
 * Returns whether the write landed.
 */
static bool cycle_write(ferry_peer_t *peer, const struct tu_child *c,
                        uint8_t *lbuf, ferry_mem_t *lmem, ferry_rmem_t *rmem,
                        const char *what)
{
    struct ferry_iov iov = {lbuf, lmem, rmem, 0, CYCLE_LEN};
    ferry_req_t *req = NULL;
    int ret = ferry_write(peer, &iov, 1, NULL, &req);
    bool starved;

    if (ret == 0)
        ret = ferry_req_wait(req, -1);
    starved = ret == FERRY_EPEERDEAD && waitpid(c->pid, NULL, WNOHANG) == 0;
    if (starved)
        printf("death: restart: %s: the live child was declared gone (%s); "
               "the cycle runs again\n",
               what, ferry_last_error());
    else
        ck_assert_msg(ret == 0, "%s: the write ended with %s: %s", what,
                      ferry_strerror(ret), ferry_last_error());
    if (req != NULL)
        ferry_req_close(req);
    return !starved;
}

START_TEST(test_restart_loop)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *lmem;
    uint8_t *lbuf = tu_alloc_buf(CYCLE_LEN);
    unsigned fds_base = 0, fds_end;
    unsigned long rss_base = 0, rss_end, mem_base = 0, mem_end;
    uint64_t t_start = tu_now_ns(), worst = 0, sum = 0;
    unsigned starved = 0;

    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    /* Short, so that a hundred deaths are seen quickly; the watch makes
     * the peer waited on once its write is done. */
    cfg.liveness_ms = 300;
    ctx = tu_context_cfg(&cfg);
    lmem = tu_register(ctx, lbuf, CYCLE_LEN, 0);

    for (unsigned cycle = 1; cycle <= NCYCLES; cycle++) {
        uint64_t seed = 0xd300 + cycle, t_kill, ms;
        struct tu_child c;
        ferry_peer_t *peer;
        ferry_rmem_t *rmem;
        char what[64];

        snprintf(what, sizeof(what), "cycle %u", cycle);
        tu_child_start(&c, PROV, CYCLE_LEN, seed);
        peer = add_peer(ctx, &c);
        rmem = import_child(peer, &c, CYCLE_LEN);
        tu_fill(lbuf, CYCLE_LEN, seed + 1);
        if (!cycle_write(peer, &c, lbuf, lmem, rmem, what)) {
            ck_assert_msg(++starved <= MAX_STARVED_CYCLES,
                          "%u live children were declared gone before "
                          "their kill, at most %d expected under load",
                          starved, MAX_STARVED_CYCLES);
            ck_assert_int_eq(ferry_rmem_close(rmem), 0);
            retry_busy(ctx, peer_remove_fn, peer, 3000, what);
            tu_child_stop(&c);
            cycle--; /* the same cycle, with a new child */
            continue;
        }
        ck_assert_msg(tu_child_verify(&c, seed + 1),
                      "cycle %u: the child's buffer differs from the write",
                      cycle);
        ck_assert_int_eq(ferry_peer_watch(peer, 1), 0);

        t_kill = kill_child(&c);
        await_state(ctx, peer, FERRY_PEER_DEAD, 3000, what);
        ms = tu_ms_since(t_kill);
        sum += ms;
        if (ms > worst)
            worst = ms;
        ck_assert_int_eq(ferry_rmem_close(rmem), 0);
        retry_busy(ctx, peer_remove_fn, peer, 3000, what);

        if (cycle == BASE_CYCLE) {
            fds_base = count_fds();
            rss_base = rss_kib();
            mem_base = mem_kib();
        }
    }
    fds_end = count_fds();
    rss_end = rss_kib();
    mem_end = mem_kib();
    printf("death: restart: %d cycles in %llu ms; death seen %llu ms after "
           "the kill on average, %llu at worst (liveness_ms 300)\n",
           NCYCLES, (unsigned long long)tu_ms_since(t_start),
           (unsigned long long)(sum / NCYCLES), (unsigned long long)worst);
    printf("death: restart: open fds %u after cycle %d, %u after cycle %d\n",
           fds_base, BASE_CYCLE, fds_end, NCYCLES);
    printf("death: restart: VmRSS %lu KiB after cycle %d, %lu KiB after "
           "cycle %d (%+ld KiB)\n",
           rss_base, BASE_CYCLE, rss_end, NCYCLES,
           (long)rss_end - (long)rss_base);
    ck_assert_msg(fds_end <= fds_base + 2,
                  "open descriptors grew from %u after cycle %d to %u after "
                  "cycle %d: dead peers leave descriptors behind",
                  fds_base, BASE_CYCLE, fds_end, NCYCLES);
#if defined(__SANITIZE_ADDRESS__)
    printf("death: restart: " HEAP_MEASURE " %lu KiB after cycle %d, %lu KiB "
           "after cycle %d (%+ld KiB)\n",
           mem_base, BASE_CYCLE, mem_end, NCYCLES,
           (long)mem_end - (long)mem_base);
#endif
    ck_assert_msg(mem_end < mem_base + 8 * 1024,
                  HEAP_MEASURE " grew from %lu KiB after cycle %d to %lu KiB "
                  "after cycle %d, expected under 8 MiB of growth",
                  mem_base, BASE_CYCLE, mem_end, NCYCLES);

    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ferry_context_close(ctx);
    tu_free_buf(lbuf, CYCLE_LEN);
}
END_TEST

/* ---- 4: a side that only watches or waits on a counter ------------------ */

/* _i: whether the watching context runs a progress thread. */
START_TEST(test_watch_sees_death)
{
    struct tu_child c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    uint64_t t_kill, ms;
    char why[256];
    int ret;

    tu_child_start(&c, PROV, 4096, 0xd400);
    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    cfg.progress_thread = _i;
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    ck_assert_int_eq(peer_state(peer, why, sizeof(why)),
                     FERRY_PEER_CONNECTING);
    ret = ferry_peer_watch(peer, 1);
    ck_assert_msg(ret == 0, "ferry_peer_watch: %s", ferry_last_error());
    /* The watch's heartbeats are answered: the peer comes UP. */
    ms = await_state(ctx, peer, FERRY_PEER_UP, 3000, "watched peer");
    printf("death: watch (progress thread %d): UP after %llu ms\n", _i,
           (unsigned long long)ms);

    t_kill = kill_child(&c);
    await_peer_down(ctx, peer, 3000, "watched peer killed");
    ms = tu_ms_since(t_kill);
    printf("death: watch (progress thread %d): PEER_DOWN %llu ms after the "
           "kill\n",
           _i, (unsigned long long)ms);
    ck_assert_msg(ms < 3000, "PEER_DOWN came %llu ms after the kill, expected "
                             "under 3000 ms",
                  (unsigned long long)ms);
    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "the watched peer is not DEAD after its PEER_DOWN event: "
                  "\"%s\"",
                  why);

    /* A wait on the dead peer ends at once. */
    {
        uint64_t t0 = tu_now_ns();

        ret = ferry_counter_wait_peer(peer, 7, 1, 60000);
        ms = tu_ms_since(t0);
        ck_assert_msg(ret == FERRY_EPEERDEAD,
                      "ferry_counter_wait_peer on the dead peer returned %s "
                      "(%s) after %llu ms, expected FERRY_EPEERDEAD",
                      ferry_strerror(ret), ferry_last_error(),
                      (unsigned long long)ms);
        ck_assert_msg(ms < 1000,
                      "ferry_counter_wait_peer on the dead peer took %llu "
                      "ms, expected well under 1 s",
                      (unsigned long long)ms);
    }
    /* Only one event per death. */
    {
        struct ferry_notification ev[4];
        int n = ferry_notify_poll(ctx, ev, TU_ARRAY_LEN(ev));

        ck_assert_msg(n == 0, "%d more notifications after the PEER_DOWN "
                              "event, expected none",
                      n);
    }
    ck_assert_int_eq(ferry_peer_watch(peer, 0), 0);
    retry_busy(ctx, peer_remove_fn, peer, 3000, "ferry_peer_close of the "
                                                "watched peer");
    ferry_context_close(ctx);
}
END_TEST

struct killer {
    pid_t pid;
    unsigned delay_ms;
    _Atomic uint64_t kill_ns;
};

static void *killer_main(void *arg)
{
    struct killer *k = arg;

    sleep_ms(k->delay_ms);
    atomic_store(&k->kill_ns, tu_now_ns());
    kill(k->pid, SIGKILL);
    return NULL;
}

/* _i: whether the waiting context runs a progress thread. */
START_TEST(test_counter_wait_peer_death)
{
    struct tu_child c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf = tu_alloc_buf(4096);
    struct killer k;
    pthread_t thread;
    uint64_t t0, ms, waited;
    char why[256];
    int ret;

    tu_child_start(&c, PROV, 4096, 0xd500);
    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    cfg.progress_thread = _i;
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    rmem = import_child(peer, &c, 4096);
    lmem = tu_register(ctx, lbuf, 4096, 0);
    /* One write: the peer has answered before the wait starts. */
    tu_fill(lbuf, 4096, 0xd501);
    write_ok(peer, lbuf, lmem, rmem, 4096, "write before the wait");
    ck_assert_int_eq(peer_state(peer, why, sizeof(why)), FERRY_PEER_UP);

    k = (struct killer){.pid = c.pid, .delay_ms = 300};
    atomic_init(&k.kill_ns, 0);
    ck_assert_int_eq(pthread_create(&thread, NULL, killer_main, &k), 0);
    t0 = tu_now_ns();
    ret = ferry_counter_wait_peer(peer, 7, 1, 60000);
    waited = tu_ms_since(t0);
    ck_assert_msg(atomic_load(&k.kill_ns) != 0,
                  "ferry_counter_wait_peer returned %s (%s) after %llu ms, "
                  "before the child was killed",
                  ferry_strerror(ret), ferry_last_error(),
                  (unsigned long long)waited);
    ms = (tu_now_ns() - atomic_load(&k.kill_ns)) / 1000000u;
    printf("death: counter wait (progress thread %d): %s %llu ms after the "
           "kill: %s\n",
           _i, ferry_strerror(ret), (unsigned long long)ms,
           ferry_last_error());
    ck_assert_msg(ret == FERRY_EPEERDEAD,
                  "ferry_counter_wait_peer returned %s (%s) %llu ms after "
                  "the kill, expected FERRY_EPEERDEAD",
                  ferry_strerror(ret), ferry_last_error(),
                  (unsigned long long)ms);
    ck_assert_msg(ms < 3000,
                  "ferry_counter_wait_peer returned %llu ms after the kill, "
                  "expected under 3000 ms",
                  (unsigned long long)ms);
    ck_assert_int_eq(pthread_join(thread, NULL), 0);
    reap_killed_child(&c);

    ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_DEAD,
                  "the peer is not DEAD after the wait ended: \"%s\"", why);
    await_peer_down(ctx, peer, 1000, "counter wait");

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    retry_busy(ctx, peer_remove_fn, peer, 3000, "ferry_peer_close after the "
                                                "counter wait");
    ferry_context_close(ctx);
    tu_free_buf(lbuf, 4096);
}
END_TEST

/* ---- 5: no false death after a pause ------------------------------------- */

/*
 * A live peer left alone (no request to it, no ferry call at all) for
 * longer than liveness_ms, then written to again: silence while nothing
 * waited on it is no sign of death, so the write succeeds and the peer
 * stays UP.  _i: whether the context runs a progress thread.
 */
START_TEST(test_pause_is_not_death)
{
    const size_t len = 64 * KiB;
    struct tu_child c;
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *lmem;
    uint8_t *lbuf = tu_alloc_buf(len);
    struct ferry_iov iov;
    char why[256];

    tu_child_start(&c, PROV, len, 0xd600);
    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    cfg.progress_thread = _i;
    ck_assert_uint_eq(cfg.liveness_ms, 2000);
    ctx = tu_context_cfg(&cfg);
    peer = add_peer(ctx, &c);
    rmem = import_child(peer, &c, len);
    lmem = tu_register(ctx, lbuf, len, 0);
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, len};

    for (uint64_t round = 0; round < 2; round++) {
        uint64_t seed = 0xd601 + round, t0 = tu_now_ns();
        ferry_req_t *req = NULL;
        int ret;

        tu_fill(lbuf, len, seed);
        ret = ferry_write(peer, &iov, 1, NULL, &req);
        ck_assert_msg(ret == 0, "round %llu: posting failed with %s (%s)",
                      (unsigned long long)round, ferry_strerror(ret),
                      ferry_last_error());
        ret = ferry_req_wait(req, 10000);
        ck_assert_msg(ret == 0,
                      "round %llu (%s): the write to the live child ended "
                      "with %s after %llu ms, expected success: %s",
                      (unsigned long long)round,
                      round ? "after 2500 ms without a ferry call, "
                              "liveness_ms 2000"
                            : "the first write",
                      ferry_strerror(ret),
                      (unsigned long long)tu_ms_since(t0),
                      ferry_last_error());
        ferry_req_close(req);
        ck_assert_msg(tu_child_verify(&c, seed),
                      "round %llu: the child's buffer differs from the write",
                      (unsigned long long)round);
        ck_assert_msg(peer_state(peer, why, sizeof(why)) == FERRY_PEER_UP,
                      "round %llu: the live child is not UP: \"%s\"",
                      (unsigned long long)round, why);
        /* Nothing waits on the peer now, and no ferry call is made. */
        if (round == 0)
            sleep_ms(2500);
    }
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ck_assert_int_eq(ferry_peer_close(peer), 0);
    ferry_context_close(ctx);
    tu_child_stop(&c);
    tu_free_buf(lbuf, len);
}
END_TEST

/* ---- 6: a target restarted behind the same bootstrap address --------------- */

#define REJOIN_LEN (1 * MiB)

/*
 * A target reached through the bootstrap: opens the metadata service at
 * bootstrap://127.0.0.1:port (0: any port) as its hub, under the name
 * "target", publishes a region filled with seed as "kv", sends its port
 * up the pipe and serves until killed.  Never returns.
 */
static void bootstrap_target(int out, int port, uint64_t seed)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    ferry_meta_t *meta;
    const char *url;
    char want[48];
    uint8_t *buf = malloc(REJOIN_LEN);
    uint64_t t0 = tu_now_ns();
    int ret;

    /* A program of its own, outside Check: no tu_config (its asserts
     * need a running test). */
    if (buf == NULL || ferry_config_init(&cfg) != 0)
        _exit(11);
    cfg.provider = PROV;
    cfg.domain = "lo";
    cfg.local_only = 1;
    cfg.progress_thread = 1;
    if (ferry_context_create(&cfg, &ctx) != 0)
        _exit(11);
    tu_fill(buf, REJOIN_LEN, seed);
    if (ferry_mem_register(ctx, buf, REJOIN_LEN, FERRY_MEM_HOST, 0,
                           FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE,
                           &mem) != 0)
        _exit(11);
    snprintf(want, sizeof(want), "bootstrap://127.0.0.1:%d", port);
    /* The port of a killed predecessor may take a moment to be free. */
    while ((ret = ferry_meta_open(ctx, want, "target", &meta)) != 0 &&
           tu_ms_since(t0) < 5000)
        sleep_ms(10);
    if (ret != 0 || ferry_meta_publish(meta, "kv", mem) != 0)
        _exit(16);
    url = ferry_meta_url(meta);
    port = atoi(strrchr(url, ':') + 1);
    if (write(out, &port, sizeof(port)) != (ssize_t)sizeof(port))
        _exit(12);
    for (;;)
        pause();
}

/*
 * Starts a bootstrap target as a new program (this one, exec'd with
 * --bootstrap-target): the test process runs threads by then, and a
 * child forked from it that starts a context of its own can deadlock on
 * a lock another thread held at the fork (it did under ASan).
 */
static pid_t bootstrap_target_start(int port, uint64_t seed, int *bound)
{
    char port_s[16], seed_s[24], fd_s[16];
    int fds[2], status = 0;
    pid_t pid;

    ck_assert_int_eq(pipe(fds), 0);
    snprintf(port_s, sizeof(port_s), "%d", port);
    snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)seed);
    snprintf(fd_s, sizeof(fd_s), "%d", fds[1]);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        execl("/proc/self/exe", "check_death", "--bootstrap-target", port_s,
              seed_s, fd_s, (char *)NULL);
        _exit(17);
    }
    close(fds[1]);
    if (read(fds[0], bound, sizeof(*bound)) != (ssize_t)sizeof(*bound)) {
        waitpid(pid, &status, 0);
        ck_abort_msg("the bootstrap target ended (status 0x%x) before "
                     "listening: 11 context or registration, 16 becoming "
                     "the hub or publishing failed, 17 exec failed",
                     status);
    }
    close(fds[0]);
    return pid;
}

/* Joins the target's hub at port: its peer and its "kv" region. */
static ferry_meta_t *bootstrap_reach(ferry_context_t *ctx, int port,
                                     ferry_peer_t **peer, ferry_rmem_t **rmem)
{
    ferry_meta_t *meta = NULL;
    char url[48];
    int ret;

    snprintf(url, sizeof(url), "bootstrap://127.0.0.1:%d", port);
    ret = ferry_meta_open(ctx, url, "client", &meta);
    ck_assert_msg(ret == 0, "joining %s: %s (%s)", url, ferry_strerror(ret),
                  ferry_last_error());
    ret = ferry_meta_lookup(meta, "target", "kv", 5000, rmem);
    ck_assert_msg(ret == 0, "looking up kv: %s (%s)", ferry_strerror(ret),
                  ferry_last_error());
    ret = ferry_meta_peer(meta, "target", 5000, peer);
    ck_assert_msg(ret == 0, "the target's peer: %s (%s)", ferry_strerror(ret),
                  ferry_last_error());
    return meta;
}

/* Reads the target's region back and checks it holds pattern seed. */
static void read_back(ferry_peer_t *peer, uint8_t *buf, ferry_mem_t *lmem,
                      ferry_rmem_t *rmem, uint64_t seed, const char *what)
{
    struct ferry_iov iov = {buf, lmem, rmem, 0, REJOIN_LEN};

    memset(buf, 0, REJOIN_LEN);
    tu_xfer_ok(peer, false, &iov, 1, what);
    ck_assert_msg(tu_check(buf, REJOIN_LEN, seed) == SIZE_MAX,
                  "%s: the region does not hold the expected pattern", what);
}

/*
 * A target killed and started again on the same bootstrap host:port
 * (a new process, a new fabric address): the old handle answers
 * FERRY_EPEERDEAD, connecting again gives a new peer that works, and the
 * old one is removed once its operations came back.
 */
START_TEST(test_rejoin_through_bootstrap)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_meta_t *meta, *meta2;
    ferry_peer_t *peer, *peer2;
    ferry_rmem_t *rmem, *rmem2;
    ferry_mem_t *lmem;
    ferry_req_t *req = NULL;
    uint8_t *lbuf = tu_alloc_buf(REJOIN_LEN);
    struct ferry_iov iov;
    pid_t pid;
    int port, port2, ret;
    uint64_t t0;
    char why[256];

    tu_config(&cfg, PROV);
    cfg.timeout_ms = 60000;
    cfg.liveness_ms = 500;
    ctx = tu_context_cfg(&cfg);
    lmem = tu_register(ctx, lbuf, REJOIN_LEN, 0);

    pid = bootstrap_target_start(0, 0xd700, &port);
    meta = bootstrap_reach(ctx, port, &peer, &rmem);
    read_back(peer, lbuf, lmem, rmem, 0xd700, "first incarnation");

    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert(waitpid(pid, NULL, 0) == pid);
    iov = (struct ferry_iov){lbuf, lmem, rmem, 0, REJOIN_LEN};
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_write(peer, &iov, 1, NULL, &req), 0);
    ret = ferry_req_wait(req, 5000);
    ck_assert_msg(ret == FERRY_EPEERDEAD || ret == FERRY_ECONNRESET,
                  "a write to the killed target ended with %s (%s), "
                  "expected FERRY_EPEERDEAD",
                  ferry_strerror(ret), ferry_last_error());
    ferry_req_close(req);
    printf("death: rejoin: a write to the killed target ended with %s "
           "after %llu ms\n",
           ferry_strerror(ret), (unsigned long long)tu_ms_since(t0));

    /* Started again behind the same bootstrap address. */
    pid = bootstrap_target_start(port, 0xd701, &port2);
    ck_assert_int_eq(port2, port);
    meta2 = bootstrap_reach(ctx, port, &peer2, &rmem2);
    ck_assert_ptr_ne(peer2, peer);
    read_back(peer2, lbuf, lmem, rmem2, 0xd701, "second incarnation");
    ck_assert_int_eq(peer_state(peer2, why, sizeof(why)), FERRY_PEER_UP);

    /* The old handle stays dead and refuses new requests. */
    ck_assert_int_eq(peer_state(peer, why, sizeof(why)), FERRY_PEER_DEAD);
    req = NULL;
    TU_EXPECT_ERROR(ferry_write(peer, &iov, 1, NULL, &req), FERRY_EPEERDEAD,
                    "the peer is dead");
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "ferry_peer_add"));
    ck_assert_ptr_null(req);
    retry_busy(ctx, rmem_free_fn, rmem, 5000, "freeing the old region");
    ck_assert_int_eq(ferry_meta_close(meta), 0);
    retry_busy(ctx, peer_remove_fn, peer, 5000, "removing the old handle");

    ck_assert_int_eq(ferry_rmem_close(rmem2), 0);
    ck_assert_int_eq(ferry_meta_close(meta2), 0);
    ck_assert_int_eq(ferry_mem_close(lmem), 0);
    ferry_context_close(ctx);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    tu_free_buf(lbuf, REJOIN_LEN);
}
END_TEST

/* ---- suite -------------------------------------------------------------- */

static Suite *death_suite(void)
{
    Suite *s = suite_create("death");
    TCase *tc;

    tc = tu_tcase(s, "kill", 60);
    tcase_add_test(tc, test_kill_mid_transfer);
    tcase_add_test(tc, test_kill_mid_covered_writes);
    tc = tu_tcase(s, "stop", 60);
    tcase_add_test(tc, test_stopped_past_liveness);
    tc = tu_tcase(s, "restart", 300);
    tcase_add_test(tc, test_restart_loop);
    tc = tu_tcase(s, "watch", 60);
    tcase_add_loop_test(tc, test_watch_sees_death, 0, 2);
    tcase_add_loop_test(tc, test_counter_wait_peer_death, 0, 2);
    tc = tu_tcase(s, "rejoin", 60);
    tcase_add_test(tc, test_rejoin_through_bootstrap);
    tc = tu_tcase(s, "pause", 60);
    tcase_add_loop_test(tc, test_pause_is_not_death, 0, 2);
    return s;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--bootstrap-target") == 0)
        bootstrap_target(atoi(argv[4]), atoi(argv[2]),
                         strtoull(argv[3], NULL, 10));
    /* The liveness these tests reason about is the config's, not one the
     * environment sets. */
    unsetenv("FERRY_LIVENESS_MS");
    tu_clear_ferry_env();
    /* Line by line: what a test printed survives its timeout. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    atexit(kill_stopped_child);
    return tu_run(death_suite());
}
