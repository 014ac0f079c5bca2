/*
 * ferry_bench: results, latency samples (a fixed reservoir) and the
 * once-a-second line.
 */
#include "stats.h"

#include "options.h"
#include "progress.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int reservoir_init(struct reservoir *r, size_t cap, uint64_t seed)
{
    r->v = malloc((cap ? cap : 1) * sizeof(*r->v));
    r->cap = cap;
    r->n = 0;
    r->seen = 0;
    r->rng = seed | 1;
    return r->v == NULL ? complain("out of memory for latency samples") : 0;
}

void reservoir_add(struct reservoir *r, uint64_t x)
{
    r->seen++;
    if (r->n < r->cap) {
        r->v[r->n++] = x;
        return;
    }
    /* xorshift64* */
    r->rng ^= r->rng >> 12;
    r->rng ^= r->rng << 25;
    r->rng ^= r->rng >> 27;
    uint64_t j = (r->rng * UINT64_C(2685821657736338717)) % r->seen;
    if (j < r->cap)
        r->v[j] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least num/den of them <= it. */
static double percentile(const uint64_t *v, size_t n, uint64_t num,
                         uint64_t den)
{
    size_t rank;

    if (n == 0)
        return -1;
    rank = (size_t)(((uint64_t)n * num + den - 1) / den);
    return (double)v[rank == 0 ? 0 : rank - 1];
}

/*
 * Percentiles over several reservoirs.  When some overflowed, each gives
 * samples in proportion to what it saw, at the lowest sampling rate among
 * them, so that a busy thread is not under-represented.  scale: 0.5 turns
 * round trips into half round trips.
 */
int latency_summary(struct reservoir *rs, size_t nrs, double scale,
                    struct result *res)
{
    double rate = 1.0;
    size_t total = 0, k = 0;
    uint64_t *all;

    for (size_t i = 0; i < nrs; i++)
        if (rs[i].seen > 0 && (double)rs[i].n / (double)rs[i].seen < rate)
            rate = (double)rs[i].n / (double)rs[i].seen;
    for (size_t i = 0; i < nrs; i++)
        total += rs[i].n;
    all = malloc((total ? total : 1) * sizeof(*all));
    if (all == NULL)
        return complain("out of memory for latency samples");
    for (size_t i = 0; i < nrs; i++) {
        size_t take = (size_t)((double)rs[i].seen * rate + 0.5);
        if (take > rs[i].n)
            take = rs[i].n;
        memcpy(all + k, rs[i].v, take * sizeof(*all));
        k += take;
    }
    qsort(all, k, sizeof(*all), cmp_u64);
    res->samples = k;
    res->p50_us = percentile(all, k, 50, 100) * scale / 1e3;
    res->p99_us = percentile(all, k, 99, 100) * scale / 1e3;
    res->p999_us = percentile(all, k, 999, 1000) * scale / 1e3;
    free(all);
    return 0;
}

void ticker_start(struct ticker *tk, uint64_t t)
{
    memset(tk, 0, sizeof(*tk));
    tk->t0 = tk->t_last = t;
    tk->next = t + (progress_on() ? PROGRESS_REDRAW_NS : 1000000000u);
}

void ticker_tick(struct ticker *tk, uint64_t t, uint64_t bytes,
                 uint64_t ops, long inflight, bool warmup)
{
    double dt;

    /* Once per tick at most, so that a loop may call this every step. */
    if (t < tk->next)
        return;
    /* A sweep on a terminal: the progress line says it in place. */
    if (progress_on()) {
        progress_tick(t, bytes, ops, warmup);
        tk->next = t + PROGRESS_REDRAW_NS;
        return;
    }
    dt = (double)(t - tk->t_last) / 1e9;
    fprintf(stderr,
            "%s: %6.1f s  %8.3f GB/s  %12.0f ops/s  %4ld in flight%s\n",
            g_role, (double)(t - tk->t0) / 1e9,
            (double)(bytes - tk->bytes_last) / dt / 1e9,
            (double)(ops - tk->ops_last) / dt, inflight,
            warmup ? "  (warmup)" : "");
    tk->t_last = t;
    tk->bytes_last = bytes;
    tk->ops_last = ops;
    tk->next = t + 1000000000u;
}

void result_init(struct result *r)
{
    memset(r, 0, sizeof(*r));
    r->cpu_here_s = r->cpu_target_s = r->conn_ms = -1;
    r->p50_us = r->p99_us = r->p999_us = r->mean_us = -1;
    r->idle.first_p50_us = r->idle.first_p99_us = -1;
    r->first_bad = UINT64_MAX;
    r->local_check = -1;
}

static void timed_loop_open(struct timed_loop *l, const struct options *o,
                            uint64_t t)
{
    l->measuring = true;
    l->win.t_start = t;
    l->win.cpu_start = cpu_ns();
    l->stop_at = t + (uint64_t)(o->duration * 1e9);
}

void timed_loop_start(struct timed_loop *l, const struct options *o,
                      uint64_t t)
{
    memset(l, 0, sizeof(*l));
    l->warm_end = t + (uint64_t)(o->warmup * 1e9);
    if (o->warmup <= 0)
        timed_loop_open(l, o, t);
}

bool timed_loop_step(struct timed_loop *l, const struct options *o,
                     uint64_t t, uint64_t measured)
{
    if (!l->measuring && t >= l->warm_end)
        timed_loop_open(l, o, t);
    if (!l->measuring || (o->iterations != 0 ? measured < o->iterations
                                             : t < l->stop_at))
        return false;
    l->win.t_end = t;
    l->win.cpu_end = cpu_ns();
    return true;
}
