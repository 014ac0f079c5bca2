/*
 * ferry_stat: what its parts share (util.c): growing arrays, and numbers
 * for people.
 */
#ifndef FERRY_STAT_UTIL_H
#define FERRY_STAT_UTIL_H

#include <stddef.h>

/*
 * array (n elements of size bytes, room for *cap) with room for one more:
 * itself, or a larger copy (*cap updated); NULL when out of memory, array
 * then unchanged.
 */
void *grow(void *array, size_t *cap, size_t n, size_t size);
/* CLOCK_REALTIME in seconds, as the snapshots' `written`. */
double now_s(void);
/* Sleeps s seconds, interruptions included. */
void sleep_s(double s);
/* Bytes per second: "2.00 MB/s", decimal units as links are sold. */
const char *fmt_rate(char *buf, size_t len, double bytes_per_s);
/* A duration: "850 ns", "12.0 us", "3.5 ms", "1.20 s". */
const char *fmt_duration(char *buf, size_t len, double s);

#endif /* FERRY_STAT_UTIL_H */
