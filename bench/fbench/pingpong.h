/*
 * ferry_bench: the initiator's pingpong runs: half round trips of a write
 * with a notification each way (pingpong.c).
 */
#ifndef FERRY_BENCH_PINGPONG_H
#define FERRY_BENCH_PINGPONG_H

#include "session.h"
#include "stats.h"

#include <stdint.h>

int run_pingpong(struct initiator *in, uint64_t block,
                 struct result *res);

#endif /* FERRY_BENCH_PINGPONG_H */
