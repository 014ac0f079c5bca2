/*
 * ferry_bench: --memcpy: the single-thread memcpy reference for shared
 * memory (memcpy.c).
 */
#ifndef FERRY_BENCH_MEMCPY_H
#define FERRY_BENCH_MEMCPY_H

#include "options.h"

#include <stdio.h>

int memcpy_main(const struct options *o, FILE *csv);

#endif /* FERRY_BENCH_MEMCPY_H */
