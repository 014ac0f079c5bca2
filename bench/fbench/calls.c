/*
 * ferry_bench --call-times: tallies of the time spent in ferry's calls
 * (calls.h).
 */
#include "calls.h"

static void sum_add(struct call_sum *a, const struct call_sum *b)
{
    a->n += b->n;
    a->ticks += b->ticks;
}

void call_tally_add(struct call_tally *a, const struct call_tally *b)
{
    sum_add(&a->post, &b->post);
    sum_add(&a->test_ended, &b->test_ended);
    sum_add(&a->test_running, &b->test_running);
    sum_add(&a->close, &b->close);
}

void call_numbers_fill(struct call_numbers *out, const struct call_tally *t,
                       uint64_t reqs, uint64_t threads, double window_ns,
                       struct call_mark from, struct call_mark to)
{
    double rate = call_rate(from, to);
    double tests = (double)(t->test_ended.ticks + t->test_running.ticks);

    out->present = false;
    if (reqs == 0 || rate <= 0 || t->post.n == 0)
        return;
    out->post_ns = call_ns_each(&t->post, rate);
    out->test_ns = tests / rate / (double)reqs;
    out->running_tests = (double)t->test_running.n / (double)reqs;
    out->running_test_ns = call_ns_each(&t->test_running, rate);
    out->close_ns = call_ns_each(&t->close, rate);
    out->request_ns = window_ns * (double)threads / (double)reqs;
    out->present = true;
}
