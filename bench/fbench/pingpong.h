/*
 * ferry_bench: the initiator's pingpong runs: half round trips of a write
 * with a notification each way; and the loop of one write at a time,
 * which idle runs drive too, without the pongs (pingpong.c).
 */
#ifndef FERRY_BENCH_PINGPONG_H
#define FERRY_BENCH_PINGPONG_H

#include "session.h"
#include "stats.h"

#include <ferry.h>

#include <stdbool.h>
#include <stdint.h>

/* One write of the block with a notification at a time: a ping (ID_PING)
 * the target answers with a pong, or, without pongs, a write (ID_DATA)
 * that is over when it completes. */
struct pinger {
    struct initiator *in;
    struct ferry_iov iov;
    struct ferry_xfer_opts opts;
    bool pongs;
    uint64_t sent;          /* writes posted */
    struct timed_loop lp;   /* ping_loop's warm-up and measured window */
    struct reservoir lat;   /* the latencies of that window */
    uint64_t lat_sum, measured;
};

int pinger_init(struct pinger *p, struct initiator *in, uint64_t block,
                bool pongs);
void pinger_free(struct pinger *p);
/* One write; *ns from its post to its pong, or to its completion. */
int ping_once(struct pinger *p, uint64_t *ns);
/* Writes back to back through a warm-up and a measured window
 * (--warmup, then --duration or --iterations). */
int ping_loop(struct pinger *p);
/* The run's result from that window, and the target's verdict. */
int pinger_result(struct pinger *p, struct result *res);

int run_pingpong(struct initiator *in, uint64_t block,
                 struct result *res);

#endif /* FERRY_BENCH_PINGPONG_H */
