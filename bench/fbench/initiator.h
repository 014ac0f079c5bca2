/*
 * ferry_bench: the initiator: meets a target, drives every run, says BYE
 * (initiator.c).
 */
#ifndef FERRY_BENCH_INITIATOR_H
#define FERRY_BENCH_INITIATOR_H

#include "options.h"

#include <stdio.h>

/* url: the metadata service or bootstrap both sides join; target: the
 * target's name there. */
int initiator_main(const struct options *o, const char *url,
                   const char *target, double bound_s, FILE *csv);

#endif /* FERRY_BENCH_INITIATOR_H */
