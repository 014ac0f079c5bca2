/*
 * ferry_bench: the target: serves one initiator, verifies what it wrote,
 * answers pings (target.c).
 */
#ifndef FERRY_BENCH_TARGET_H
#define FERRY_BENCH_TARGET_H

#include "options.h"

int target_main(const struct options *o, int report_fd);

#endif /* FERRY_BENCH_TARGET_H */
