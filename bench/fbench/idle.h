/*
 * ferry_bench: the initiator's idle runs (--idle): what a target at rest
 * costs, and what the first write after a gap takes beside warm ones
 * (idle.c).
 */
#ifndef FERRY_BENCH_IDLE_H
#define FERRY_BENCH_IDLE_H

#include "session.h"
#include "stats.h"

#include <stdint.h>

int run_idle(struct initiator *in, uint64_t block, struct result *res);

#endif /* FERRY_BENCH_IDLE_H */
