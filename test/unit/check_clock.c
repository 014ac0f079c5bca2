/*
 * Request times through the time stamp counter (base/clock.h): a thread
 * reads the precise clock until it has measured the counter's rate, then
 * scales the counter from its last precise reading, reads the clock
 * again once that reading is FERRY__CLOCK_ANCHOR_NS old or the counter
 * went back, and never gives a value below the last.  The counter and
 * the clock are given, not read: what is tested is the arithmetic.
 */
#include "testutil.h"

#include <time.h>

#include "base/clock.h"

#define MS (1000u * 1000u)

/* The given clock: what precise() returns, and how often it was asked. */
static uint64_t clock_now;
static unsigned clock_reads;

static uint64_t given_clock(void)
{
    clock_reads++;
    return clock_now;
}

/* A counter of 3 ticks a nanosecond, from an offset: its value at clock
 * time ns. */
#define TICKS_PER_NS 3u
static uint64_t tsc_at(uint64_t ns) { return ns * TICKS_PER_NS + 12345u; }

/* The given counter: at the given clock's time plus counter_ahead_ns,
 * and counter_step more ticks at every reading (0: a tight pair). */
static int64_t counter_ahead_ns;
static uint64_t counter_step, counter_steps;

static uint64_t given_counter(void)
{
    return tsc_at((uint64_t)((int64_t)clock_now + counter_ahead_ns)) +
           counter_step * counter_steps++;
}

/* One reading at clock time ns, the counter agreeing with it. */
static uint64_t read_at(struct ferry__clock_scale *s, uint64_t ns)
{
    clock_now = ns;
    counter_ahead_ns = 0;
    counter_step = 0;
    return ferry__clock_scale_read(s, given_counter, given_clock);
}

/* s with its rate measured, as two readings FERRY__CLOCK_MEASURE_NS apart
 * leave it; the clock time of the second. */
static uint64_t measured(struct ferry__clock_scale *s)
{
    uint64_t t = 1000 * MS;

    read_at(s, t);
    t += FERRY__CLOCK_MEASURE_NS;
    read_at(s, t);
    ck_assert_msg(s->ns_per_tick_q32 != 0, "no rate after %u ms",
                  FERRY__CLOCK_MEASURE_NS / MS);
    return t;
}

START_TEST(test_precise_until_the_rate_is_measured)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = 1000 * MS;

    clock_reads = 0;
    for (unsigned i = 0; i < 10; i++, t += FERRY__CLOCK_MEASURE_NS / 20)
        ck_assert_uint_eq(read_at(&s, t), t);
    ck_assert_uint_eq(clock_reads, 10);
    ck_assert_uint_eq(s.ns_per_tick_q32, 0);
}
END_TEST

START_TEST(test_scaled_once_measured)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = measured(&s);
    clock_reads = 0;
    for (unsigned i = 1; i <= 1000; i++) {
        uint64_t at = t + i * 19u * 1000u; /* up to 19 ms on */
        uint64_t v = read_at(&s, at);

        ck_assert_msg(v + 1 >= at && v <= at + 1,
                      "at %llu ns the scaled counter read %llu",
                      (unsigned long long)at, (unsigned long long)v);
    }
    ck_assert_msg(clock_reads == 0,
                  "the clock was read %u times while the scale held",
                  clock_reads);
}
END_TEST

START_TEST(test_anchored_again_when_old)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = measured(&s);
    clock_reads = 0;
    read_at(&s, t + FERRY__CLOCK_ANCHOR_NS - MS);
    ck_assert_uint_eq(clock_reads, 0);
    read_at(&s, t + FERRY__CLOCK_ANCHOR_NS + MS);
    ck_assert_uint_eq(clock_reads, 1);
    ck_assert_uint_eq(s.ns, t + FERRY__CLOCK_ANCHOR_NS + MS);
}
END_TEST

/* The clock runs slower than the counter said (or steps back): values
 * hold at the last one given instead of going back. */
START_TEST(test_never_back_within_a_thread)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = measured(&s), high, v;
    high = read_at(&s, t + FERRY__CLOCK_ANCHOR_NS - MS);
    /* Anchored again on a clock 3 ms behind what the counter gives,
     * and behind the value given last. */
    clock_now = t + FERRY__CLOCK_ANCHOR_NS - 2 * MS;
    counter_ahead_ns = 3 * MS;
    v = ferry__clock_scale_read(&s, given_counter, given_clock);
    ck_assert_uint_eq(v, high);
}
END_TEST

/* A counter that went back (a machine that reset it) is not scaled. */
START_TEST(test_counter_going_back_reads_the_clock)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = measured(&s), v;
    clock_reads = 0;
    clock_now = t + 5 * MS;
    counter_ahead_ns = -(int64_t)(5 * MS + 1000u);
    v = ferry__clock_scale_read(&s, given_counter, given_clock);
    ck_assert_uint_eq(clock_reads, 1);
    ck_assert_uint_eq(v, t + 5 * MS);
}
END_TEST

/* A thread preempted between the halves of a pair: the clock's reading
 * is given, but the scale is not anchored on it, nor measured. */
START_TEST(test_loose_pair_does_not_anchor)
{
    struct ferry__clock_scale s = {0};
    uint64_t t = 1000 * MS;

    read_at(&s, t);
    clock_now = t + FERRY__CLOCK_MEASURE_NS;
    counter_ahead_ns = 0;
    counter_step = FERRY__CLOCK_PAIR_TICKS + 1;
    counter_steps = 0;
    ck_assert_uint_eq(ferry__clock_scale_read(&s, given_counter, given_clock),
                      t + FERRY__CLOCK_MEASURE_NS);
    ck_assert_uint_eq(s.ns, t);
    ck_assert_uint_eq(s.ns_per_tick_q32, 0);
    /* A tight pair then measures the rate as before. */
    read_at(&s, t + FERRY__CLOCK_MEASURE_NS + MS);
    ck_assert_uint_eq(s.ns, t + FERRY__CLOCK_MEASURE_NS + MS);
    ck_assert(s.ns_per_tick_q32 != 0);
}
END_TEST

START_TEST(test_clocksource_names)
{
    ck_assert(ferry__clock_source_is_tsc("tsc\n"));
    ck_assert(ferry__clock_source_is_tsc("tsc"));
    ck_assert(!ferry__clock_source_is_tsc("kvm-clock\n"));
    ck_assert(!ferry__clock_source_is_tsc("hpet\n"));
    ck_assert(!ferry__clock_source_is_tsc(""));
}
END_TEST

/* The real thing, on whatever this machine's clocksource is: it follows
 * CLOCK_MONOTONIC and does not go back.  The bounds leave room for the
 * thread to be preempted between the two readings (make check runs
 * suites side by side). */
START_TEST(test_follows_the_monotonic_clock)
{
    struct timespec pause = {0, 2 * MS};
    uint64_t last = 0;

    for (unsigned i = 0; i < 60; i++) {
        uint64_t v = ferry__clock_ns(), mono = tu_now_ns();

        ck_assert_msg(v >= last, "went back: %llu after %llu",
                      (unsigned long long)v, (unsigned long long)last);
        ck_assert_msg(v <= mono + 100000u && v + 200 * MS >= mono,
                      "read %llu ns where CLOCK_MONOTONIC read %llu",
                      (unsigned long long)v, (unsigned long long)mono);
        last = v;
        nanosleep(&pause, NULL);
    }
}
END_TEST

static Suite *clock_suite(void)
{
    Suite *s = suite_create("clock");
    TCase *tc = tcase_create("scale");

    tcase_add_test(tc, test_precise_until_the_rate_is_measured);
    tcase_add_test(tc, test_scaled_once_measured);
    tcase_add_test(tc, test_anchored_again_when_old);
    tcase_add_test(tc, test_never_back_within_a_thread);
    tcase_add_test(tc, test_counter_going_back_reads_the_clock);
    tcase_add_test(tc, test_loose_pair_does_not_anchor);
    tcase_add_test(tc, test_clocksource_names);
    tcase_add_test(tc, test_follows_the_monotonic_clock);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(clock_suite());
}
