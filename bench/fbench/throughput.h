/*
 * ferry_bench: the initiator's throughput runs: worker threads keeping
 * requests in flight over a grid of slots (throughput.c).
 */
#ifndef FERRY_BENCH_THROUGHPUT_H
#define FERRY_BENCH_THROUGHPUT_H

#include "session.h"
#include "stats.h"

#include <stdint.h>

int run_throughput(struct initiator *in, uint64_t block,
                   struct result *res);

#endif /* FERRY_BENCH_THROUGHPUT_H */
