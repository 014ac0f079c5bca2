/*
 * ferry_bench: small utilities: clocks, messages, sizes and durations for
 * people.
 */
#include "util.h"

#include "progress.h"

#include <ferry.h>

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

/* Who speaks in messages: "ferry_bench", or "ferry_bench (target)". */
const char *g_role = "ferry_bench";

uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the whole process (every thread), user + system. */
uint64_t cpu_ns(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) *
               1000000000u +
           ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) *
               1000u;
}

/* The whole process's context switches: voluntary ones are a thread
 * blocking (each a wake-up later), involuntary ones the scheduler taking
 * the CPU from a thread that would have gone on running. */
void context_switches(uint64_t *voluntary, uint64_t *involuntary)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    *voluntary = (uint64_t)ru.ru_nvcsw;
    *involuntary = (uint64_t)ru.ru_nivcsw;
}

/* The whole time, even when a signal interrupts the sleep. */
void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000u),
                          (long)(ns % 1000000000u)};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int complain(const char *fmt, ...)
{
    va_list ap;

    progress_clear(); /* a message never continues the progress line */
    fprintf(stderr, "%s: ", g_role);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

/* A ferry call failed: what we were doing, the code, and ferry's sentence. */
int fail(const char *what, int err)
{
    progress_clear();
    fprintf(stderr, "%s: %s: %s (%s)\n", g_role, what, ferry_strerror(err),
            ferry_last_error());
    return 1;
}

/* "4 KiB", "1.5 MiB", "512 B". */
const char *fmt_iec(char *out, size_t n, uint64_t v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB",
                                       "PiB", "EiB"};
    double d = (double)v;
    unsigned u = 0;

    while (d >= 1024 && u < 6) {
        d /= 1024;
        u++;
    }
    if (u == 0 || (v & ((UINT64_C(1) << (10 * u)) - 1)) == 0)
        snprintf(out, n, "%.0f %s", d, unit[u]);
    else
        snprintf(out, n, "%.3g %s", d, unit[u]);
    return out;
}

/* How a size flag is written: "1M" when exact, else the number of bytes. */
const char *fmt_flag(char *out, size_t n, uint64_t v)
{
    static const char suffix[] = "KMGTPE";
    unsigned u = 0;

    while (v != 0 && u < 6 && (v & 1023) == 0) {
        v >>= 10;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%" PRIu64, v);
    else
        snprintf(out, n, "%" PRIu64 "%c", v, suffix[u - 1]);
    return out;
}

/* "2.05 ms", "812 ns". */
const char *fmt_ns(char *out, size_t n, double ns)
{
    if (ns < 1e3)
        snprintf(out, n, "%.0f ns", ns);
    else if (ns < 1e6)
        snprintf(out, n, "%.3g us", ns / 1e3);
    else if (ns < 1e9)
        snprintf(out, n, "%.3g ms", ns / 1e6);
    else
        snprintf(out, n, "%.3g s", ns / 1e9);
    return out;
}
