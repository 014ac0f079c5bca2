/*
 * ferry_bench: the initiator's pingpong runs: half round trips of a write
 * with a notification each way; and the loop of one write at a time,
 * which idle runs drive too, without the pongs.
 */
#include "pingpong.h"

#include "fbench.h"
#include "options.h"
#include "session.h"
#include "side.h"
#include "stats.h"
#include "util.h"

#include <ferry.h>

#include <stdlib.h>

int pinger_init(struct pinger *p, struct initiator *in, uint64_t block,
                bool pongs)
{
    const struct options *o = in->o;
    size_t cap = o->iterations != 0 && o->iterations < RESERVOIR_TOTAL
                     ? (size_t)o->iterations
                     : RESERVOIR_TOTAL;

    *p = (struct pinger){.in = in,
                         .iov = {in->s.buf, in->s.mem, in->rmem, 0, block},
                         .opts = FERRY_XFER_OPTS_INIT,
                         .pongs = pongs};
    p->opts.timeout_ms = in->s.timeout_ms;
    p->opts.flags = FERRY_XFER_NOTIFY;
    p->opts.notify_id = pongs ? ID_PING : ID_DATA;
    p->opts.notify_value = 1;
    return reservoir_init(&p->lat, cap, now_ns());
}

void pinger_free(struct pinger *p)
{
    free(p->lat.v);
    p->lat.v = NULL;
}

/*
 * Writes the block with a notification and waits, busy polling, for the
 * target's pong (its write back with ID_PONG, through ferry_counter_wait)
 * or, without pongs, for the write to complete (FI_DELIVERY_COMPLETE: the
 * target's side has placed it, which takes its progress).
 */
int ping_once(struct pinger *p, uint64_t *ns)
{
    struct initiator *in = p->in;
    ferry_req_t *req;
    uint64_t t0;
    int ret;

    t0 = now_ns();
    if ((ret = ferry_write(in->peer, &p->iov, 1, &p->opts, &req)))
        return fail(p->pongs ? "posting a ping" : "posting a write", ret);
    p->sent++;
    if (p->pongs) {
        ret = ferry_counter_wait(in->s.ctx, ID_PONG, p->sent,
                                 in->s.timeout_ms);
        *ns = now_ns() - t0;
        if (ret != 0) {
            ferry_req_close(req);
            return fail("waiting for the pong", ret);
        }
    }
    ret = ferry_req_wait(req, -1); /* with pongs: delivered, the pong came
                                      after */
    if (!p->pongs)
        *ns = now_ns() - t0;
    ferry_req_close(req);
    if (ret != 0)
        return fail(p->pongs ? "a ping failed" : "a write failed", ret);
    note_first_completion(in);
    return 0;
}

int ping_loop(struct pinger *p)
{
    const struct options *o = p->in->o;
    uint64_t t = now_ns(), ns;
    struct ticker tk;

    ticker_start(&tk, t);
    timed_loop_start(&p->lp, o, t);
    for (;;) {
        t = now_ns();
        if (timed_loop_step(&p->lp, o, t, p->measured))
            return 0;
        ticker_tick(&tk, t, (p->pongs ? 2 : 1) * p->iov.len * p->sent,
                    p->sent, 1, !p->lp.measuring);
        if (ping_once(p, &ns))
            return 1;
        if (p->lp.measuring) {
            p->measured++;
            p->lat_sum += ns;
            reservoir_add(&p->lat, ns);
        }
        if (p->sent % 256 == 0 && mbox_pump(&p->in->s)) /* drain ferry's queue */
            return 1;
    }
}

/* What moved and the latencies (halves of the round trips, with pongs). */
int pinger_result(struct pinger *p, struct result *res)
{
    unsigned ways = p->pongs ? 2 : 1;

    res->bytes = ways * p->iov.len * p->measured;
    res->ops = res->reqs = res->measured = p->measured;
    res->mean_us = (double)p->lat_sum / (double)p->measured / ways / 1e3;
    if (latency_summary(&p->lat, 1, 1.0 / ways, res) ||
        exchange_results(p->in, 0, p->iov.len, p->sent, res))
        return 1;
    fill_common(p->in, &p->lp.win, res);
    return 0;
}

/* Tells the target the round trips are over and clears the pong count. */
static int pings_end(struct pinger *p)
{
    struct initiator *in = p->in;
    int ret;

    if (send_ctl(&in->s, in->peer, ID_PING, PING_STOP))
        return 1;
    if ((ret = ferry_counter_reset(in->s.ctx, ID_PONG)))
        return fail("ferry_counter_reset", ret);
    if (mbox_pump(&in->s))
        return 1;
    in->s.mb.pong = 0;
    return 0;
}

/* Reports half the round trip. */
int run_pingpong(struct initiator *in, uint64_t block,
                 struct result *res)
{
    struct pinger p;
    int failed = 1;

    res->block = block;
    if (pinger_init(&p, in, block, true))
        return 1;
    if (start_run(in, run_flags(in->o), block) || ping_loop(&p) ||
        pings_end(&p))
        goto out;
    failed = pinger_result(&p, res);
out:
    pinger_free(&p);
    return failed;
}
