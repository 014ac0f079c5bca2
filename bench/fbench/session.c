/*
 * ferry_bench: the initiator's state and the exchanges with the target that
 * open and close every run, for throughput.c and pingpong.c alike.
 */
#include "session.h"

#include "fbench.h"
#include "options.h"
#include "side.h"
#include "stats.h"
#include "util.h"

#include <stdatomic.h>
#include <stdint.h>

void note_first_completion(struct initiator *in)
{
    uint64_t zero = 0;

    /* Called on every completion: after the first, one load, not a clock
     * reading and a locked compare-exchange. */
    if (atomic_load_explicit(&in->t_first, memory_order_relaxed) != 0)
        return;
    atomic_compare_exchange_strong(&in->t_first, &zero, now_ns());
}

/* The end of every run: tell the target what to find, hear its verdict. */
int exchange_results(struct initiator *in, uint64_t written,
                     uint64_t block, uint64_t nreq, struct result *res)
{
    uint64_t cpu, reg, verdict, bad;

    if (send_ctl(&in->s, in->peer, ID_WRITTEN, written) ||
        send_ctl(&in->s, in->peer, ID_BLOCK, block) ||
        send_ctl(&in->s, in->peer, ID_NREQ, nreq) ||
        mbox_wait1(&in->s, ID_T_NOTIFIED, in->deadline, "result",
                   &res->target_notified) ||
        mbox_wait1(&in->s, ID_T_WRITTEN, in->deadline, "result",
                   &res->target_written) ||
        mbox_wait1(&in->s, ID_T_CPU, in->deadline, "result", &cpu) ||
        mbox_wait1(&in->s, ID_T_REG, in->deadline, "result", &reg) ||
        mbox_wait1(&in->s, ID_T_BAD, in->deadline, "result", &bad) ||
        mbox_wait1(&in->s, ID_T_VERDICT, in->deadline, "verdict", &verdict))
        return 1;
    res->cpu_target_s = cpu == UINT64_MAX ? -1 : (double)cpu / 1e9;
    res->reg_ms_target = (double)reg / 1e6;
    res->verdict = (unsigned)verdict;
    if (bad != UINT64_MAX)
        res->first_bad = bad;
    res->notified = nreq;
    res->written = written;
    return 0;
}

/* RUN, then READY: the target agrees and its buffer is ready. */
int start_run(struct initiator *in, unsigned flags, uint64_t block)
{
    uint64_t ready;

    if (send_ctl(&in->s, in->peer, ID_RUN, flags | block << 8) ||
        mbox_wait1(&in->s, ID_T_READY, in->deadline, "answer to the start "
                   "of a run", &ready))
        return 1;
    if (ready != 0)
        return complain("the target refused the run: start both sides with "
                        "the same --pingpong and sizes (its own message "
                        "says more)");
    return 0;
}

unsigned run_flags(const struct options *o)
{
    return (o->pingpong ? RUN_PINGPONG : 0u) | (o->read ? RUN_READ : 0u) |
           (o->validate ? RUN_VALIDATE : 0u) | (o->notify ? RUN_NOTIFY : 0u);
}

void fill_common(struct initiator *in, const struct window *win,
                 struct result *res)
{
    uint64_t first = atomic_load(&in->t_first);

    res->seconds = (double)(win->t_end - win->t_start) / 1e9;
    res->cpu_here_s = (double)(win->cpu_end - win->cpu_start) / 1e9;
    res->conn_ms = first != 0 ? (double)(first - in->t_connect) / 1e6 : -1;
    res->reg_ms_here = (double)in->s.reg_ns / 1e6;
    res->reg_bytes = in->s.len;
}
