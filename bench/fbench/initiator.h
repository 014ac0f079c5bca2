/*
 * ferry_bench: the initiator: connects to a target, drives every run,
 * says BYE (initiator.c).
 */
#ifndef FERRY_BENCH_INITIATOR_H
#define FERRY_BENCH_INITIATOR_H

#include "options.h"

#include <stdio.h>

int initiator_main(const struct options *o, const char *where,
                   double bound_s, FILE *csv);

#endif /* FERRY_BENCH_INITIATOR_H */
