/*
 * ferry_bench: output: the human summary, the sweep table and its
 * progress line, --csv, --json and --plot (report.c).
 */
#ifndef FERRY_BENCH_REPORT_H
#define FERRY_BENCH_REPORT_H

#include "options.h"
#include "stats.h"

#include <ferry.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

extern FILE *g_out;
void print_header(const struct options *o,
                  const struct ferry_context_info *info);
void print_session(const struct result *r);
void print_json(const struct options *o,
                const struct ferry_context_info *info,
                const struct result *rs, size_t n, bool ok);
void report_start_run(const struct options *o, size_t i);
void report_run(const struct options *o, FILE *csv, size_t i,
                const struct result *r);
int report_sweep_done(const struct options *o, const char *over,
                      const struct result *rs, size_t n);

#endif /* FERRY_BENCH_REPORT_H */
