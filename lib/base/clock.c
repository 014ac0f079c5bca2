/*
 * Request times through the time stamp counter (clock.h).
 */
#include "base/clock.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/env.h"

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

/* Where Linux says which clocksource keeps its clocks. */
#define CLOCKSOURCE_PATH \
    "/sys/devices/system/clocksource/clocksource0/current_clocksource"

bool ferry__clock_source_is_tsc(const char *text)
{
    return strcmp(text, "tsc") == 0 || strcmp(text, "tsc\n") == 0;
}

#if defined(__x86_64__)
static _Thread_local struct ferry__clock_scale my_scale;
static pthread_once_t counter_once = PTHREAD_ONCE_INIT;
static bool counter_usable;

static uint64_t read_counter(void)
{
    return __rdtsc();
}

static void look_at_counter(void)
{
    char text[32] = "";
    FILE *f = fopen(CLOCKSOURCE_PATH, "re");

    if (f == NULL)
        return;
    if (fgets(text, sizeof(text), f) != NULL)
        counter_usable = ferry__clock_source_is_tsc(text);
    fclose(f);
}
#endif

/* s's rate measured from where its measurement began to (tsc, ns), once
 * that is FERRY__CLOCK_MEASURE_NS long; then it begins again there. */
static void measure_rate(struct ferry__clock_scale *s, uint64_t tsc,
                         uint64_t ns)
{
    if (s->from_ns == 0 || tsc <= s->from_tsc || ns < s->from_ns) {
        s->from_tsc = tsc;
        s->from_ns = ns;
        return;
    }
    if (ns - s->from_ns < FERRY__CLOCK_MEASURE_NS)
        return;
    s->ns_per_tick_q32 = (uint64_t)(((unsigned __int128)(ns - s->from_ns)
                                     << 32) /
                                    (tsc - s->from_tsc));
    s->from_tsc = tsc;
    s->from_ns = ns;
}

uint64_t ferry__clock_scale_read(struct ferry__clock_scale *s,
                                 uint64_t (*counter)(void),
                                 uint64_t (*precise)(void))
{
    uint64_t tsc = counter(), v = 0;
    bool scaled = false;

    if (s->ns_per_tick_q32 != 0 && tsc >= s->tsc) {
        uint64_t since = (uint64_t)(((unsigned __int128)(tsc - s->tsc) *
                                     s->ns_per_tick_q32) >>
                                    32);

        scaled = since < FERRY__CLOCK_ANCHOR_NS;
        v = s->ns + since;
    }
    if (!scaled) {
        v = precise();
        /* A pair read with anything between its halves (the thread
         * preempted) would put the scale off by as much: only a tight
         * one anchors it. */
        if (counter() - tsc <= FERRY__CLOCK_PAIR_TICKS) {
            measure_rate(s, tsc, v);
            s->tsc = tsc;
            s->ns = v;
        }
    }
    /* A scaled value runs a little ahead of or behind the next precise
     * one: within a thread, time does not go back. */
    if (v < s->last)
        v = s->last;
    s->last = v;
    return v;
}

uint64_t ferry__clock_ns(void)
{
#if defined(__x86_64__)
    pthread_once(&counter_once, look_at_counter);
    if (counter_usable)
        return ferry__clock_scale_read(&my_scale, read_counter,
                                       ferry__now_ns);
#endif
    return ferry__now_ns();
}
