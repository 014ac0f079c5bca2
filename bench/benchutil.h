/*
 * What the small bench programs share: the clock and dying with ferry's
 * sentence.  Header-only: each bench is still one file plus this one.
 */
#ifndef FERRY_BENCHUTIL_H
#define FERRY_BENCHUTIL_H

#include <ferry.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline double ms_since(uint64_t t0)
{
    return (double)(now_ns() - t0) / 1e6;
}

/* "PROGRAM: what: code (ferry's sentence)", then exit 1. */
__attribute__((noreturn)) static inline void die(const char *what, int err)
{
    fprintf(stderr, "%s: %s: %s (%s)\n", program_invocation_short_name, what,
            ferry_strerror(err), ferry_last_error());
    exit(1);
}

#endif /* FERRY_BENCHUTIL_H */
