/*
 * ferry_stat: growing arrays, clocks, and numbers for people.
 */
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *grow(void *array, size_t *cap, size_t n, size_t size)
{
    size_t more = *cap != 0 ? *cap * 2 : 16;
    void *bigger;

    if (n < *cap)
        return array;
    if (more > SIZE_MAX / size)
        return NULL;
    bigger = realloc(array, more * size);
    if (bigger != NULL)
        *cap = more;
    return bigger;
}

double now_s(void)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void sleep_s(double s)
{
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    while (nanosleep(&t, &t) != 0 && errno == EINTR)
        ;
}

const char *fmt_rate(char *buf, size_t len, double bytes_per_s)
{
    static const char *const unit[] = {"B/s", "kB/s", "MB/s", "GB/s",
                                       "TB/s"};
    size_t u = 0;

    while (u + 1 < sizeof(unit) / sizeof(unit[0]) && bytes_per_s >= 1000) {
        bytes_per_s /= 1000;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%.0f %s", bytes_per_s, unit[u]);
    else
        snprintf(buf, len, "%.2f %s", bytes_per_s, unit[u]);
    return buf;
}

const char *fmt_duration(char *buf, size_t len, double s)
{
    if (s < 1e-6)
        snprintf(buf, len, "%.0f ns", s * 1e9);
    else if (s < 1e-3)
        snprintf(buf, len, "%.1f us", s * 1e6);
    else if (s < 1)
        snprintf(buf, len, "%.1f ms", s * 1e3);
    else
        snprintf(buf, len, "%.2f s", s);
    return buf;
}
