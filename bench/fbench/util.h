/*
 * ferry_bench: small utilities: clocks, messages, sizes and durations for
 * people (util.c).
 */
#ifndef FERRY_BENCH_UTIL_H
#define FERRY_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>

extern const char *g_role;
uint64_t now_ns(void);
uint64_t cpu_ns(void);
void context_switches(uint64_t *voluntary, uint64_t *involuntary);
void sleep_ns(uint64_t ns);
int complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int fail(const char *what, int err);
const char *fmt_iec(char *out, size_t n, uint64_t v);
const char *fmt_flag(char *out, size_t n, uint64_t v);
const char *fmt_ns(char *out, size_t n, double ns);

#endif /* FERRY_BENCH_UTIL_H */
