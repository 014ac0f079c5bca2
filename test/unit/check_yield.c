/*
 * A poller's yields (base/yield.h): a long yield starts a quiet time that
 * doubles with each further long yield up to its cap, the short yields
 * between long ones do not end it, a run of short ones does, and a yield
 * is due again once the quiet time has passed.  Times are given, not
 * measured: what is tested is the rule, not the scheduler.
 */
#include "testutil.h"

#include "base/yield.h"

#define MS (1000u * 1000u)

/* A yield starting at t that took took_ns; the end of the quiet time. */
static uint64_t yield_at(struct ferry__yield *y, uint64_t t, uint64_t took_ns)
{
    ck_assert_msg(ferry__yield_due(y, t), "no yield due at %llu ns",
                  (unsigned long long)t);
    ferry__yield_took(y, t, took_ns);
    return y->quiet_until_ns;
}

START_TEST(test_short_yields_never_quiet)
{
    struct ferry__yield y = {0};
    uint64_t t = 5 * MS;

    for (unsigned i = 0; i < 1000; i++, t += 20000)
        yield_at(&y, t, FERRY__YIELD_LONG_NS - 1);
    ck_assert_uint_eq(y.quiet_ns, 0);
    ck_assert(ferry__yield_due(&y, t));
}
END_TEST

START_TEST(test_long_yield_starts_quiet_time)
{
    struct ferry__yield y = {0};
    uint64_t t = 5 * MS, until;

    until = yield_at(&y, t, 3 * MS);
    ck_assert_uint_eq(until, t + 3 * MS + FERRY__YIELD_QUIET_MIN_NS);
    ck_assert(!ferry__yield_due(&y, t + 3 * MS));
    ck_assert(!ferry__yield_due(&y, until - 1));
    ck_assert(ferry__yield_due(&y, until));
}
END_TEST

START_TEST(test_quiet_time_doubles_to_its_cap)
{
    struct ferry__yield y = {0};
    uint64_t t = 5 * MS, expect = FERRY__YIELD_QUIET_MIN_NS;

    for (unsigned i = 0; i < 12; i++) {
        /* Short yields between the long ones, as against a busy loop
         * that has just had its share (two in three of them were, on
         * Linux 6.18 here): the quiet time still grows. */
        t = yield_at(&y, t, 2 * MS);
        ck_assert_msg(y.quiet_ns == expect,
                      "long yield %u: quiet %llu ns, expected %llu", i,
                      (unsigned long long)y.quiet_ns,
                      (unsigned long long)expect);
        for (unsigned s = 0; s < 8; s++, t += 1000)
            yield_at(&y, t, 500);
        if (expect < FERRY__YIELD_QUIET_MAX_NS)
            expect *= 2;
    }
    ck_assert_uint_eq(y.quiet_ns, FERRY__YIELD_QUIET_MAX_NS);
}
END_TEST

START_TEST(test_short_run_ends_quiet)
{
    struct ferry__yield y = {0};
    uint64_t t = 5 * MS;

    t = yield_at(&y, t, 4 * MS);
    t = yield_at(&y, t, 4 * MS);
    ck_assert_uint_eq(y.quiet_ns, 2 * FERRY__YIELD_QUIET_MIN_NS);
    for (unsigned s = 0; s < FERRY__YIELD_SHORT_RUN; s++, t += 1000)
        yield_at(&y, t, 500);
    ck_assert_uint_eq(y.quiet_ns, 0);
    /* The next long yield starts from the shortest quiet time again. */
    yield_at(&y, t, 4 * MS);
    ck_assert_uint_eq(y.quiet_ns, FERRY__YIELD_QUIET_MIN_NS);
}
END_TEST

/* The whole call: within a quiet time it does nothing; outside one it
 * yields and takes note of it, as a short yield or as a long one. */
START_TEST(test_yield_keeps_quiet_time)
{
    struct ferry__yield y = {0};

    y.quiet_until_ns = ferry__yield_clock() + 60000u * MS;
    y.quiet_ns = 4 * MS;
    ferry__yield(&y);
    ck_assert_uint_eq(y.short_run, 0);
    ck_assert_uint_eq(y.quiet_ns, 4 * MS);
    y.quiet_until_ns = 0;
    ferry__yield(&y);
    ck_assert_msg(y.short_run == 1 || y.quiet_ns == 8 * MS,
                  "a due yield left no note: short run %u, quiet %llu ns",
                  y.short_run, (unsigned long long)y.quiet_ns);
}
END_TEST

static Suite *yield_suite(void)
{
    Suite *s = suite_create("yield");
    TCase *tc = tcase_create("quiet time");

    tcase_add_test(tc, test_short_yields_never_quiet);
    tcase_add_test(tc, test_long_yield_starts_quiet_time);
    tcase_add_test(tc, test_quiet_time_doubles_to_its_cap);
    tcase_add_test(tc, test_short_run_ends_quiet);
    tcase_add_test(tc, test_yield_keeps_quiet_time);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run(yield_suite());
}
