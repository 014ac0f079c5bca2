/*
 * ferry_bench: the initiator's idle runs (--idle).  The target runs
 * ferry's defaults (a progress thread, its buffer exposed); its
 * application thread leaves ferry alone, dozing (target.c).  The
 * operation timed is one write of the block with a notification, from its
 * post to its completion: with FI_DELIVERY_COMPLETE it completes once the
 * target's side has placed it, which only the target's progress does, so
 * the time holds how long that progress took to notice.  In order:
 *
 *   warm writes, back to back (--warmup, then --iterations);
 *   --idle-gaps gaps of --gap-length, each followed by one write;
 *   the idle window: --idle seconds in which nothing is sent, the target's
 *   application thread sleeps outside ferry, and the target measures its
 *   own process's CPU time and context switches.
 *
 * The target counts the notifications, and the run fails unless it saw
 * every one.
 */
#include "idle.h"

#include "fbench.h"
#include "options.h"
#include "pingpong.h"
#include "session.h"
#include "side.h"
#include "stats.h"
#include "util.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t ms_of(double seconds)
{
    return (uint64_t)(seconds * 1e3 + 0.5);
}

/* One write after each gap; their latencies into res->idle. */
static int after_gaps(struct pinger *p, struct result *res)
{
    const struct options *o = p->in->o;
    struct reservoir first;
    struct result sum;
    uint64_t ns;
    int failed = 1;

    if (reservoir_init(&first, (size_t)o->idle_gaps, now_ns()))
        return 1;
    for (uint64_t g = 0; g < o->idle_gaps; g++) {
        sleep_ns((uint64_t)(o->gap_length * 1e9));
        if (ping_once(p, &ns))
            goto out;
        reservoir_add(&first, ns);
    }
    result_init(&sum);
    if (latency_summary(&first, 1, 1.0, &sum))
        goto out;
    res->idle.first_p50_us = sum.p50_us;
    res->idle.first_p99_us = sum.p99_us;
    res->idle.first_samples = sum.samples;
    failed = 0;
out:
    free(first.v);
    return failed;
}

/* The window: this side sleeps as long as the target does, then dozes
 * until it hears what the target measured (the target opens the window
 * when it next looks, up to PROBE_NS late), so that nothing it sends
 * lands inside and this side takes no CPU from the target meanwhile. */
static int idle_window(struct initiator *in, struct result *res)
{
    uint64_t ns, cpu, wakeups, preempted;

    if (send_ctl(&in->s, in->peer, ID_MEASURE, ms_of(in->o->idle)))
        return 1;
    sleep_ns(ms_of(in->o->idle) * 1000000u);
    if (mbox_doze1(&in->s, ID_T_IDLE_NS, in->deadline, "idle window's end",
                   &ns) ||
        mbox_wait1(&in->s, ID_T_IDLE_CPU, in->deadline, "idle CPU time",
                   &cpu) ||
        mbox_wait1(&in->s, ID_T_WAKEUPS, in->deadline, "idle wake-ups",
                   &wakeups) ||
        mbox_wait1(&in->s, ID_T_PREEMPTED, in->deadline, "idle preemptions",
                   &preempted))
        return 1;
    res->idle.window_s = (double)ns / 1e9;
    res->idle.cpu_s = (double)cpu / 1e9;
    res->idle.wakeups = wakeups;
    res->idle.preemptions = preempted;
    return 0;
}

int run_idle(struct initiator *in, uint64_t block, struct result *res)
{
    const struct options *o = in->o;
    struct pinger p;
    int failed = 1;

    res->block = block;
    if (pinger_init(&p, in, block, false))
        return 1;
    if (start_run(in, RUN_IDLE | RUN_NOTIFY, block) || ping_loop(&p))
        goto out;
    fprintf(stderr, "%s: %" PRIu64 " gaps of %.3g s, then %.3g s idle\n",
            g_role, o->idle_gaps, o->gap_length, o->idle);
    if (after_gaps(&p, res) || idle_window(in, res))
        goto out;
    failed = pinger_result(&p, res);
out:
    pinger_free(&p);
    return failed;
}
