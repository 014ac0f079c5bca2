/*
 * ferry_bench: loopback mode (the target as a child process) and the time
 * bound that keeps any session from hanging (loopback.c).
 */
#ifndef FERRY_BENCH_LOOPBACK_H
#define FERRY_BENCH_LOOPBACK_H

#include "options.h"

#include <stdio.h>

void arm_time_bound(double seconds);
int loopback_main(const struct options *o, double bound_s, FILE *csv);

#endif /* FERRY_BENCH_LOOPBACK_H */
