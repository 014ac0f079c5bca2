/*
 * ferry_bench: the target: serves one initiator, verifies what it wrote,
 * answers pings, measures itself at rest.
 */
#include "target.h"

#include "fbench.h"
#include "metrics.h"
#include "options.h"
#include "pattern.h"
#include "side.h"
#include "util.h"
#include "base/yield.h"

#include <ferry.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct target {
    struct side s;
    ferry_meta_t *meta;
    ferry_peer_t *peer;
    char initiator[160];     /* its name in meta */
    ferry_rmem_t *pong_rmem; /* --pingpong: the initiator's buffer */
    ferry_mem_t *regions[MAX_REGIONS]; /* --regions: the buffer cut */
    uint64_t deadline;       /* of the whole session */
    bool loud;               /* print a line per run (two-machine mode) */
};

/* What the target found at the end of a run. */
struct target_run {
    unsigned flags;
    uint64_t block;
    uint64_t cpu_ns;         /* UINT64_MAX: not measured */
    uint64_t notified;       /* data-plane notifications counted */
    uint64_t written;        /* blocks found written */
    uint64_t first_bad;      /* UINT64_MAX: none */
    unsigned verdict;
    /* what the initiator says it did */
    uint64_t i_written, i_block, i_nreq;
    /* an idle run's window: its length, what it cost */
    uint64_t idle_ns, idle_cpu_ns, wakeups, preempted;
};

/*
 * Write validation: every block of the buffer must be entirely B (written
 * at least once) or entirely A (never written), and the count of written
 * blocks must be the initiator's; the tail shorter than a block stays A.
 */
static void check_written(struct target *t, struct target_run *r)
{
    uint64_t block = r->i_block, nblocks = t->s.len / block;
    uint8_t *buf = side_view(&t->s);

    if (buf == NULL) {
        r->verdict |= VERDICT_DATA;
        return;
    }
    corrupt_for_self_test(buf, t->s.len);
    r->written = 0;
    r->first_bad = UINT64_MAX;
    for (uint64_t i = 0; i < nblocks; i++) {
        uint64_t off = i * block;
        uint64_t bad_b = pattern_mismatch(buf, off, block, PAT_B);

        if (bad_b == UINT64_MAX) {
            r->written++;
            continue;
        }
        /* Not B: it must be A, untouched.  A block that starts as B and
         * turns into A somewhere is torn: report where B stops. */
        uint64_t bad_a = pattern_mismatch(buf, off, block, PAT_A);
        if (bad_a != UINT64_MAX && r->first_bad == UINT64_MAX)
            r->first_bad = bad_b > off ? bad_b : bad_a;
    }
    if (r->first_bad == UINT64_MAX)
        r->first_bad = pattern_mismatch(buf, nblocks * block,
                                        t->s.len - nblocks * block, PAT_A);
    if (r->first_bad != UINT64_MAX || r->written != r->i_written)
        r->verdict |= VERDICT_DATA;
    /* Back to A for the next run. */
    if (side_fill(&t->s, PAT_A))
        r->verdict |= VERDICT_DATA;
}

/* --notify: the queue's count, ferry's counter and the initiator's. */
static int check_notified(struct target *t, struct target_run *r)
{
    uint64_t counter = 0;
    int ret;

    if (r->flags & RUN_NOTIFY) {
        /* Every request completed before NREQ was sent, and a request
         * completes only once its notification is delivered: the count
         * is final.  The short wait only guards against a provider that
         * reorders messages. */
        ret = ferry_counter_wait(t->s.ctx, ID_DATA, r->i_nreq, 2000);
        if (ret != 0 && ret != FERRY_EAGAIN)
            return fail("ferry_counter_wait", ret);
    }
    if (mbox_pump(&t->s))
        return 1;
    if ((ret = ferry_counter_get(t->s.ctx, ID_DATA, &counter)))
        return fail("ferry_counter_get", ret);
    r->notified = t->s.mb.data;
    if (counter != t->s.mb.data)
        r->verdict |= VERDICT_COUNTER;
    if (r->notified != ((r->flags & RUN_NOTIFY) ? r->i_nreq : 0))
        r->verdict |= VERDICT_NOTIFY;
    t->s.mb.data = 0;
    if ((ret = ferry_counter_reset(t->s.ctx, ID_DATA)))
        return fail("ferry_counter_reset", ret);
    return 0;
}

/*
 * Waits for the ping counter to reach n and sets *v to it: busy polling
 * with ferry_counter_get, which progresses once per call (one call, not a
 * ferry_counter_wait and a ferry_counter_get, sees a ping and says whether
 * it was the last), looking up now and then whether the initiator went
 * away.
 */
static int wait_ping(struct target *t, uint64_t n, uint64_t *v)
{
    struct ferry__yield yield = {0};

    for (unsigned spins = 1;; spins++) {
        int ret = ferry_counter_get(t->s.ctx, ID_PING, v);

        if (ret != 0)
            return fail("waiting for a ping", ret);
        if (*v >= n)
            return 0;
        if (spins % 64 == 0)
            ferry__yield(&yield); /* the initiator may share this CPU */
        if (spins % 65536 != 0)
            continue;
        if (now_ns() >= t->deadline)
            return fail("waiting for a ping (the session's time bound "
                        "passed)",
                        FERRY_ETIMEDOUT);
        if (peer_gone())
            return complain("the initiator disconnected in the middle of "
                            "a pingpong run");
    }
}

/*
 * --pingpong: answer every ping with a pong (a write of the block into
 * the initiator's buffer with a notification), busy polling through
 * ferry_counter_wait, until the notification worth PING_STOP arrives.
 */
static int serve_pingpong(struct target *t, struct target_run *r,
                          uint64_t *pings)
{
    struct ferry_iov iov = {t->s.buf, t->s.mem, t->pong_rmem, 0, r->block};
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_req_t *prev = NULL;
    uint64_t seen = 0, v = 0;
    int ret;

    opts.timeout_ms = t->s.timeout_ms;
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ID_PONG;
    opts.notify_value = 1;
    for (;;) {
        if (wait_ping(t, seen + 1, &v))
            return 1;
        if (v >= PING_STOP)
            break;
        for (; seen < v; seen++) {
            /* The previous pong has been seen by the initiator (it sent
             * this ping after it): its completion is at most a poll away. */
            if (prev != NULL) {
                ret = ferry_req_wait(prev, -1);
                ferry_req_close(prev);
                prev = NULL;
                if (ret != 0)
                    return fail("a pong failed", ret);
            }
            if ((ret = ferry_write(t->peer, &iov, 1, &opts, &prev)))
                return fail("posting a pong", ret);
        }
        if (seen % 256 == 0 && mbox_pump(&t->s))
            return 1;
    }
    if (prev != NULL) {
        ret = ferry_req_wait(prev, -1);
        ferry_req_close(prev);
        if (ret != 0)
            return fail("a pong failed", ret);
    }
    *pings = v - PING_STOP;
    if ((ret = ferry_counter_reset(t->s.ctx, ID_PING)))
        return fail("ferry_counter_reset", ret);
    return 0;
}

/*
 * An idle run.  While the initiator's writes land, this thread dozes
 * outside ferry, looking for MEASURE now and then, as an application
 * that exposes memory and leaves ferry alone: only ferry's progress
 * thread handles the writes.  Then the idle window: this thread sleeps
 * on its own clock while the initiator sends nothing; the process's CPU
 * time and context switches over it are then ferry's at rest (its
 * progress thread, the bootstrap's threads), and one voluntary switch
 * this sleep's own.
 *
 * A target that polls (--target-polls, no progress thread) polls instead,
 * writes and window alike, as rma_raw's target does: the floor for the
 * first write after a gap, at the price of a core.
 */
static int idle_window(struct target *t, struct target_run *r)
{
    uint64_t ms, t0, cpu0, vol0, inv0, vol1, inv1;
    bool polls = !t->s.progress_thread;

    if ((polls ? mbox_wait1 : mbox_doze1)(&t->s, ID_MEASURE, t->deadline,
                                          "start of the idle window", &ms))
        return 1;
    context_switches(&vol0, &inv0);
    cpu0 = cpu_ns();
    t0 = now_ns();
    if (!polls)
        sleep_ns(ms * 1000000u);
    else if (mbox_poll_until(&t->s, t0 + ms * 1000000u))
        return 1;
    r->idle_ns = now_ns() - t0;
    r->idle_cpu_ns = cpu_ns() - cpu0;
    context_switches(&vol1, &inv1);
    r->wakeups = vol1 - vol0;
    r->preempted = inv1 - inv0;
    return 0;
}

static int send_all(struct target *t, const uint64_t (*msgs)[2], size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (send_ctl(&t->s, t->peer, msgs[i][0], msgs[i][1]))
            return 1;
    return 0;
}

/* An idle run's figures, sent as soon as its window closes. */
static int idle_reply(struct target *t, const struct target_run *r)
{
    const uint64_t msgs[][2] = {
        {ID_T_IDLE_NS, r->idle_ns}, {ID_T_IDLE_CPU, r->idle_cpu_ns},
        {ID_T_WAKEUPS, r->wakeups}, {ID_T_PREEMPTED, r->preempted},
    };

    return send_all(t, msgs, sizeof(msgs) / sizeof(msgs[0]));
}

static int target_reply(struct target *t, const struct target_run *r)
{
    const uint64_t msgs[][2] = {
        {ID_T_NOTIFIED, r->notified}, {ID_T_WRITTEN, r->written},
        {ID_T_CPU, r->cpu_ns},        {ID_T_REG, t->s.reg_ns},
        {ID_T_BAD, r->first_bad},     {ID_T_VERDICT, r->verdict},
    };

    return send_all(t, msgs, sizeof(msgs) / sizeof(msgs[0]));
}

static void target_report(const struct target *t, size_t n,
                          const struct target_run *r)
{
    char b1[32], b2[32];

    if (!t->loud)
        return;
    printf("target: run %zu: block %s", n,
           fmt_iec(b1, sizeof(b1), r->i_block));
    if (r->cpu_ns != UINT64_MAX)
        printf(", CPU %.3f s in the measured window", (double)r->cpu_ns / 1e9);
    if (r->flags & RUN_NOTIFY)
        printf(", %" PRIu64 " notifications counted of %" PRIu64,
               r->notified, r->i_nreq);
    if (r->flags & RUN_PINGPONG)
        printf(", %" PRIu64 " pings answered of %" PRIu64, r->notified,
               r->i_nreq);
    if (r->flags & RUN_IDLE)
        printf(", at rest %.3f s: CPU %.3f s, %" PRIu64 " wake-ups, %" PRIu64
               " preemptions",
               (double)r->idle_ns / 1e9, (double)r->idle_cpu_ns / 1e9,
               r->wakeups, r->preempted);
    if ((r->flags & RUN_VALIDATE) && !(r->flags & RUN_READ))
        printf(", %s verified (%" PRIu64 " blocks written)",
               fmt_iec(b2, sizeof(b2), t->s.len), r->written);
    if (r->first_bad != UINT64_MAX)
        printf(", first bad byte at offset %" PRIu64, r->first_bad);
    printf(": %s\n", r->verdict == 0 ? "OK" : "FAILED");
    fflush(stdout);
}

/* One run, from RUN (already taken) to the replies. */
static int target_run(struct target *t, size_t n, uint64_t run_value,
                      bool pingpong, unsigned *verdicts)
{
    struct target_run r = {0};
    uint64_t cpu0 = 0, pings = 0;

    r.flags = (unsigned)(run_value & 0xff);
    r.block = run_value >> 8;
    r.cpu_ns = UINT64_MAX;
    r.first_bad = UINT64_MAX;
    if (!!(r.flags & RUN_PINGPONG) != pingpong) {
        send_ctl(&t->s, t->peer, ID_T_READY, VERDICT_MODE);
        return complain("the initiator asked for %s but this target was "
                        "started %s --pingpong: give both sides the same "
                        "--pingpong",
                        pingpong ? "throughput" : "--pingpong",
                        pingpong ? "with" : "without");
    }
    if (pingpong && (r.block > t->s.len ||
                     r.block > ferry_rmem_length(t->pong_rmem))) {
        send_ctl(&t->s, t->peer, ID_T_READY, VERDICT_MODE);
        return complain("--pingpong block of %" PRIu64 " bytes is larger "
                        "than a buffer; give both sides the same sizes",
                        r.block);
    }
    if (send_ctl(&t->s, t->peer, ID_T_READY, 0))
        return 1;
    if (pingpong) {
        if (serve_pingpong(t, &r, &pings))
            return 1;
    } else if (r.flags & RUN_IDLE) {
        if (idle_window(t, &r) || idle_reply(t, &r))
            return 1;
    } else {
        uint64_t unused;

        if (mbox_wait1(&t->s, ID_MEASURE, t->deadline, "start of the "
                       "measured window", &unused))
            return 1;
        cpu0 = cpu_ns();
        if (mbox_wait1(&t->s, ID_STOP, t->deadline, "end of the measured "
                       "window", &unused))
            return 1;
        r.cpu_ns = cpu_ns() - cpu0;
    }
    if (mbox_wait1(&t->s, ID_WRITTEN, t->deadline, "end of the run",
                   &r.i_written) ||
        mbox_wait1(&t->s, ID_BLOCK, t->deadline, "end of the run",
                   &r.i_block) ||
        mbox_wait1(&t->s, ID_NREQ, t->deadline, "end of the run", &r.i_nreq))
        return 1;
    if (r.i_block == 0 || r.i_block > t->s.len)
        return complain("protocol error: block of %" PRIu64 " bytes",
                        r.i_block);
    if (pingpong) {
        r.notified = pings;
        if (pings != r.i_nreq)
            r.verdict |= VERDICT_PINGS;
    } else if (check_notified(t, &r)) {
        return 1;
    }
    if ((r.flags & RUN_VALIDATE) && !(r.flags & RUN_READ))
        check_written(t, &r);
    *verdicts |= r.verdict;
    target_report(t, n, &r);
    return target_reply(t, &r);
}

/* Runs until BYE.  Returns 1 when a run failed or a check did. */
static int target_session(struct target *t, bool pingpong)
{
    const uint64_t run_or_bye[] = {ID_RUN, ID_BYE};
    struct ferry_notification n;
    unsigned verdicts = 0;
    uint64_t bound_ms;

    if (mbox_wait1(&t->s, ID_BOUND, now_ns() + 60000000000u,
                   "session start", &bound_ms))
        return 1;
    t->deadline = now_ns() + bound_ms * 1000000u;
    for (size_t run = 1;; run++) {
        if (mbox_wait(&t->s, run_or_bye, 2, t->deadline, "next run", &n))
            return 1;
        if (n.id == ID_BYE)
            return verdicts != 0;
        if (target_run(t, run, n.value, pingpong, &verdicts))
            return 1;
    }
}

/* Says what the target serves, once it is findable. */
static void announce(struct target *t, const char *where_text)
{
    char b1[32];

    printf("target: provider %s, domain %s: %s\n", t->s.info.provider,
           t->s.info.domain, t->s.info.why);
    printf("target: %s buffer registered in %.3f ms; waiting for an "
           "initiator %s\n",
           fmt_iec(b1, sizeof(b1), t->s.len), (double)t->s.reg_ns / 1e6,
           where_text);
    fflush(stdout);
}

/* --regions N: the buffer registered again as N regions of equal size,
 * published as SLICE_REGION_NAME. */
static int publish_regions(struct target *t, const struct options *o)
{
    uint64_t len = t->s.len / o->regions;
    char name[64];
    int ret;

    for (unsigned k = 0; o->regions > 1 && k < o->regions; k++) {
        if ((ret = ferry_mem_register(t->s.ctx, t->s.buf + k * len, len,
                                      FERRY_MEM_HOST, -1,
                                      FERRY_ACCESS_REMOTE_READ |
                                          FERRY_ACCESS_REMOTE_WRITE,
                                      &t->regions[k])))
            return fail("ferry_mem_register of a --regions region", ret);
        snprintf(name, sizeof(name), SLICE_REGION_NAME, k);
        if ((ret = ferry_meta_publish(t->meta, name, t->regions[k])))
            return fail("ferry_meta_publish of a --regions region", ret);
    }
    return 0;
}

/*
 * Joins the metadata service as --name: --metadata, or else the
 * bootstrap at --port, whose hub this side becomes unless the initiator
 * came first (*report_fd >= 0, loopback: on 127.0.0.1 only, any free
 * port unless --port given, and the URL the initiator opens goes there,
 * then it is closed).  Publishes the buffer and waits for the initiator,
 * which joins as NAME-initiator.
 */
static int target_meet(struct target *t, const struct options *o,
                       int *report_fd)
{
    char boot[48], text[FBENCH_URL_MAX + 200];
    const char *url = o->metadata, *have;
    int ret;

    if (url == NULL) {
        if (*report_fd >= 0)
            snprintf(boot, sizeof(boot), "bootstrap://127.0.0.1:%u",
                     o->port_set ? o->port : 0);
        else
            snprintf(boot, sizeof(boot), "bootstrap://:%u", o->port);
        url = boot;
    }
    snprintf(t->initiator, sizeof(t->initiator), "%s-initiator", o->name);
    if ((ret = ferry_meta_open(t->s.ctx, url, o->name, &t->meta)))
        return fail("ferry_meta_open", ret);
    if ((ret = ferry_meta_publish(t->meta, REGION_NAME, t->s.mem)))
        return fail("ferry_meta_publish", ret);
    if (publish_regions(t, o))
        return 1;
    /* With port 0, the URL names the port the hub got. */
    have = ferry_meta_url(t->meta);
    if (*report_fd >= 0) {
        char msg[FBENCH_URL_MAX] = "";

        snprintf(msg, sizeof(msg), "%s", have);
        if (write(*report_fd, msg, sizeof(msg)) != sizeof(msg))
            return 1;
        close(*report_fd);
        *report_fd = -1;
    } else {
        if (o->metadata != NULL)
            snprintf(text, sizeof(text), "as \"%s\" in %s", o->name, have);
        else
            snprintf(text, sizeof(text), "on port %s", strrchr(have, ':') + 1);
        announce(t, text);
    }
    if ((ret = ferry_meta_peer(t->meta, t->initiator,
                               t->loud ? -1 : CONNECT_TIMEOUT_MS, &t->peer)))
        return fail("waiting for the initiator", ret);
    set_probe(t->meta, t->initiator, t->peer);
    /* The initiator publishes it right after joining. */
    if (o->pingpong &&
        (ret = ferry_meta_lookup(t->meta, t->initiator, PONG_REGION_NAME,
                                 10000, &t->pong_rmem)))
        return fail("looking up the initiator's buffer (--pingpong on both "
                    "sides?)",
                    ret);
    return 0;
}

/*
 * The target process.  report_fd >= 0 (loopback): the bootstrap's URL
 * goes there once it listens, and the initiator prints everything.
 */
int target_main(const struct options *o, int report_fd)
{
    struct target t = {0};
    int code = 1;

    t.loud = report_fd < 0;
    /* A progress thread, as a target that only exposes memory would run,
     * unless told to poll itself (ping-pongs always do). */
    if (open_context(o, !o->pingpong && !o->target_polls, &t.s) ||
        setup_buffer(&t.s, o->buffer, PAT_A,
                     FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE))
        goto out;
    if (target_meet(&t, o, &report_fd))
        goto out;
    code = target_session(&t, o->pingpong);
    if (code == 0 && o->metrics != NULL) {
        char path[4096];

        /* Loopback (not loud): beside the initiator's, which takes it
         * in (loopback.c). */
        if (!t.loud)
            metrics_target_path(o->metrics, path, sizeof(path));
        code = metrics_write(&t.s, t.loud ? o->metrics : path);
    }
out:
    if (report_fd >= 0)
        close(report_fd);
    set_probe(NULL, NULL, NULL);
    if (t.pong_rmem != NULL)
        ferry_rmem_close(t.pong_rmem);
    ferry_meta_close(t.meta);
    for (unsigned k = 0; k < MAX_REGIONS; k++)
        if (t.regions[k] != NULL)
            ferry_mem_close(t.regions[k]);
    side_close(&t.s);
    return code;
}
