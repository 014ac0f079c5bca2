/*
 * ferry_bench: --fanout N, ferry_fanout to N receiver processes on this
 * host (fanout.c).
 */
#ifndef FERRY_BENCH_FANOUT_H
#define FERRY_BENCH_FANOUT_H

#include "options.h"

int fanout_main(const struct options *o);

#endif /* FERRY_BENCH_FANOUT_H */
