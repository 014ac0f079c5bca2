/*
 * ferry_bench: the initiator's pingpong runs: half round trips of a write
 * with a notification each way.
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

/*
 * Each round trip: write the block with a notification (ID_PING), wait
 * for the target's pong (its write back with ID_PONG) with
 * ferry_counter_wait, which busy polls.  Reports half the round trip.
 */
int run_pingpong(struct initiator *in, uint64_t block,
                 struct result *res)
{
    const struct options *o = in->o;
    struct ferry_iov iov = {in->s.buf, in->s.mem, in->rmem, 0, block};
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    size_t cap = o->iterations != 0 && o->iterations < RESERVOIR_TOTAL
                     ? (size_t)o->iterations
                     : RESERVOIR_TOTAL;
    uint64_t sent = 0, measured = 0, lat_sum = 0, t;
    struct timed_loop lp;
    struct reservoir lat;
    struct ticker tk;
    int ret, failed = 1;

    res->block = block;
    if (reservoir_init(&lat, cap, now_ns()))
        return 1;
    if (start_run(in, run_flags(o), block))
        goto out;
    opts.timeout_ms = in->s.timeout_ms;
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = ID_PING;
    opts.notify_value = 1;
    t = now_ns();
    ticker_start(&tk, t);
    timed_loop_start(&lp, o, t);
    for (;;) {
        ferry_req_t *req;
        uint64_t t0, t1;

        t = now_ns();
        if (timed_loop_step(&lp, o, t, measured))
            break;
        ticker_tick(&tk, t, 2 * block * sent, sent, 1, !lp.measuring);
        t0 = now_ns();
        if ((ret = ferry_write(in->peer, &iov, 1, &opts, &req))) {
            fail("posting a ping", ret);
            goto out;
        }
        sent++;
        ret = ferry_counter_wait(in->s.ctx, ID_PONG, sent, in->s.timeout_ms);
        t1 = now_ns();
        if (ret != 0) {
            ferry_req_free(req);
            fail("waiting for the pong", ret);
            goto out;
        }
        ret = ferry_req_wait(req, -1); /* delivered: the pong came after */
        ferry_req_free(req);
        if (ret != 0) {
            fail("a ping failed", ret);
            goto out;
        }
        note_first_completion(in);
        if (lp.measuring) {
            measured++;
            lat_sum += t1 - t0;
            reservoir_add(&lat, t1 - t0);
        }
        if (sent % 256 == 0 && mbox_pump(&in->s)) /* drain ferry's queue */
            goto out;
    }
    if (send_ctl(&in->s, in->peer, ID_PING, PING_STOP) ||
        (ret = ferry_counter_reset(in->s.ctx, ID_PONG)) || mbox_pump(&in->s))
        goto out;
    in->s.mb.pong = 0;
    res->bytes = 2 * block * measured;
    res->ops = res->reqs = res->measured = measured;
    res->mean_us = (double)lat_sum / (double)measured / 2 / 1e3;
    if (latency_summary(&lat, 1, 0.5, res) ||
        exchange_results(in, 0, block, sent, res))
        goto out;
    fill_common(in, &lp.win, res);
    failed = 0;
out:
    free(lat.v);
    return failed;
}
