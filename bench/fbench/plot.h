/*
 * ferry_bench: --plot: a sweep's GB/s and p50 latency against the block
 * size, drawn by gnuplot (plot.c).
 */
#ifndef FERRY_BENCH_PLOT_H
#define FERRY_BENCH_PLOT_H

#include "options.h"
#include "stats.h"

#include <stdbool.h>
#include <stddef.h>

/* Before the sweep: whether --plot's directory takes a new file (false:
 * already reported). */
bool plot_writable(const struct options *o);
/* After it: the n runs in rs into --plot, over (the provider; NULL for
 * --memcpy) in the title.  Returns 0, also when gnuplot is not installed
 * (it says so), or 1 when gnuplot failed. */
int plot_sweep(const struct options *o, const char *over,
               const struct result *rs, size_t n);

#endif /* FERRY_BENCH_PLOT_H */
