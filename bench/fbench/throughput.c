/*
 * ferry_bench: the initiator's throughput runs: worker threads keeping
 * requests in flight over a grid of slots.
 */
#include "throughput.h"

#include "calls.h"
#include "fbench.h"
#include "options.h"
#include "pattern.h"
#include "session.h"
#include "side.h"
#include "stats.h"
#include "util.h"
#include "base/yield.h"

#include <ferry.h>

#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct grid {
    uint64_t block, batch, threads, inflight;
    uint64_t slot;             /* batch x block */
    uint64_t slots_per_thread; /* S */
    bool same_block;           /* every lane posts to slot 0 */
};

static void grid_init(struct grid *g, const struct options *o,
                      uint64_t block, uint64_t buffer)
{
    g->block = block;
    g->batch = o->batch;
    g->threads = o->threads;
    g->inflight = o->inflight;
    g->slot = g->batch * block; /* check_buffer made sure this fits */
    g->slots_per_thread = buffer / g->threads / g->slot;
    g->same_block = o->same_block;
}

static uint64_t lane_slots(const struct grid *g, uint64_t lane)
{
    if (g->same_block) /* slot 0, counted once: by lane 0 */
        return lane == 0;
    return (g->slots_per_thread - lane + g->inflight - 1) / g->inflight;
}

static uint64_t slot_offset(const struct grid *g, uint64_t thread,
                            uint64_t slot)
{
    return (thread * g->slots_per_thread + slot) * g->slot;
}

enum phase { PH_WARMUP, PH_MEASURE, PH_STOP };

struct run {
    struct initiator *in;
    struct grid g;
    bool read, notify, descending;
    bool call_times; /* --call-times: the workers time ferry's calls */
    uint64_t iterations; /* measured requests per thread; 0: a duration */
    struct call_tally calls; /* the workers', summed by gather */
    int event_fd; /* --event-loop: the context's descriptor; else -1 */
    _Atomic int phase;
    _Atomic bool abort;
};

struct lane {
    struct ferry_iov *iov;
    ferry_req_t *req;
    uint64_t t_post, posts;
    bool counted; /* posted in the measured phase (--iterations) */
    bool sampled; /* timed for the latency figures (LAT_SAMPLE_EVERY) */
};

struct worker {
    pthread_t tid;
    bool started;
    struct run *run;
    uint64_t index;
    struct lane *lanes;
    struct reservoir lat;
    /* measured */
    uint64_t bytes, ops, reqs, lat_sum, lat_n, t_last;
    uint64_t measured_posts;
    struct call_tally calls; /* --call-times, in the measured window */
    uint64_t completed; /* every request, warmup included */
    /* read by the main thread while the worker runs */
    _Atomic uint64_t live_bytes, live_ops, inflight;
    _Atomic bool done;
    int err;
    char errmsg[700];
};

static int worker_error(struct worker *w, const char *what, int err)
{
    snprintf(w->errmsg, sizeof(w->errmsg), "thread %" PRIu64 ": %s: %s (%s)",
             w->index, what, ferry_strerror(err), ferry_last_error());
    w->err = err;
    atomic_store(&w->run->abort, true);
    return 1;
}

/*
 * One request in this many is timed, post to completion, for the latency
 * figures; every one with --iterations.  Two clock readings per request
 * cost 40 ns here, a tenth of a 4 KiB write's round trip on shm, and
 * rma_raw, the reference, reads none.
 */
#define LAT_SAMPLE_EVERY 8

/* Adds delta to a counter that only its worker writes and the main thread
 * reads: a load and a store, not a locked read-modify-write per request
 * (relaxed: the main thread only reports the values). */
static void own_add(_Atomic uint64_t *counter, int64_t delta)
{
    uint64_t v = atomic_load_explicit(counter, memory_order_relaxed);

    atomic_store_explicit(counter, v + (uint64_t)delta, memory_order_relaxed);
}

/* Whether the worker times the call it makes now (--call-times). */
static bool timing(const struct run *r)
{
    return r->call_times && atomic_load_explicit(&r->phase,
                                                 memory_order_relaxed) ==
                                PH_MEASURE;
}

static bool may_post(const struct worker *w)
{
    const struct run *r = w->run;
    int ph = atomic_load(&r->phase);

    if (atomic_load(&r->abort) || ph == PH_STOP)
        return false;
    return r->iterations == 0 || ph == PH_WARMUP ||
           w->measured_posts < r->iterations;
}

static int worker_post(struct worker *w, uint64_t k)
{
    struct run *r = w->run;
    const struct grid *g = &r->g;
    struct lane *ln = &w->lanes[k];
    uint64_t slot =
        g->same_block ? 0 : k + (ln->posts % lane_slots(g, k)) * g->inflight;
    uint64_t off = slot_offset(g, w->index, slot);
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    bool timed = timing(r);
    uint64_t t0;
    int ret;

    for (uint64_t b = 0; b < g->batch; b++) {
        uint64_t at = off + (r->descending ? g->batch - 1 - b : b) * g->block;

        ln->iov[b].local = r->in->s.buf + at;
        ln->iov[b].roffset = at;
        if (r->in->region_len != 0) { /* --regions */
            ln->iov[b].rmem = r->in->regions[at / r->in->region_len];
            ln->iov[b].roffset = at % r->in->region_len;
        }
    }
    opts.timeout_ms = r->in->s.timeout_ms;
    if (r->notify) {
        opts.flags = FERRY_XFER_NOTIFY;
        opts.notify_id = ID_DATA;
        opts.notify_value = 1;
    }
    ln->counted = atomic_load(&r->phase) == PH_MEASURE;
    ln->sampled = r->iterations != 0 || ln->posts % LAT_SAMPLE_EVERY == 0;
    if (ln->sampled)
        ln->t_post = now_ns();
    t0 = timed ? call_ticks() : 0;
    ret = r->read ? ferry_read(r->in->peer, ln->iov, g->batch, &opts, &ln->req)
                  : ferry_write(r->in->peer, ln->iov, g->batch, &opts,
                                &ln->req);
    if (timed)
        call_note(&w->calls.post, t0);
    if (ret != 0) {
        ln->req = NULL;
        return worker_error(w, r->read ? "ferry_read" : "ferry_write", ret);
    }
    ln->posts++;
    if (ln->counted)
        w->measured_posts++;
    own_add(&w->inflight, 1);
    return 0;
}

static void worker_complete(struct worker *w, uint64_t k)
{
    struct run *r = w->run;
    struct lane *ln = &w->lanes[k];
    uint64_t t = ln->sampled ? now_ns() : 0, lat;
    /* --duration counts what completes inside the window; --iterations
     * counts the requests posted in it. */
    bool count = r->iterations != 0 ? ln->counted
                                    : atomic_load(&r->phase) == PH_MEASURE;
    bool timed = timing(r);
    uint64_t t0 = timed ? call_ticks() : 0;

    ferry_req_close(ln->req);
    if (timed)
        call_note(&w->calls.close, t0);
    ln->req = NULL;
    own_add(&w->inflight, -1);
    w->completed++;
    own_add(&w->live_bytes, (int64_t)r->g.slot);
    own_add(&w->live_ops, (int64_t)r->g.batch);
    note_first_completion(r->in);
    if (!count)
        return;
    w->bytes += r->g.slot;
    w->ops += r->g.batch;
    w->reqs++;
    if (!ln->sampled)
        return;
    lat = t - ln->t_post;
    w->lat_sum += lat;
    w->lat_n++;
    w->t_last = t; /* --iterations, where every request is timed */
    reservoir_add(&w->lat, lat);
}

/* --event-loop: the longest sleep on the descriptor, which bounds how late
 * an abort is seen (the requests in flight end the sleep otherwise). */
#define EVENT_WAIT_MS 100

/* A pass over the lanes found nothing ended.  With --event-loop: arm the
 * context's descriptor and sleep on it, as an event loop does (the arm
 * refuses when a request ended since the last: look again).  Else poll
 * again, letting the target run now and then on a small machine. */
static void rest(const struct run *r, unsigned *idle, struct ferry__yield *y)
{
    if (r->event_fd >= 0) {
        struct pollfd p = {.fd = r->event_fd, .events = POLLIN};

        if (ferry_context_arm(r->in->s.ctx) == 0)
            (void)poll(&p, 1, EVENT_WAIT_MS);
        return;
    }
    if (++*idle % 64 == 0)
        ferry__yield(y);
}

/* Keeps the lanes busy until told to stop, then lets them drain. */
static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    uint64_t active = 0;
    unsigned idle = 0;
    struct ferry__yield yield = {0};

    for (uint64_t k = 0; k < r->g.inflight && may_post(w); k++) {
        if (worker_post(w, k))
            goto out;
        active++;
    }
    while (active > 0 && !atomic_load(&r->abort)) {
        bool any = false;

        for (uint64_t k = 0; k < r->g.inflight; k++) {
            struct lane *ln = &w->lanes[k];
            bool timed;
            uint64_t t0;
            int ret;

            if (ln->req == NULL)
                continue;
            timed = timing(r);
            t0 = timed ? call_ticks() : 0;
            ret = ferry_req_test(ln->req);
            if (timed)
                call_note(ret == FERRY_EINPROGRESS ? &w->calls.test_running
                                                   : &w->calls.test_ended,
                          t0);
            if (ret == FERRY_EINPROGRESS)
                continue;
            if (ret != 0) {
                worker_error(w, "a request failed", ret);
                goto out;
            }
            any = true;
            worker_complete(w, k);
            if (!may_post(w))
                active--;
            else if (worker_post(w, k))
                goto out;
        }
        if (!any)
            rest(r, &idle, &yield);
    }
out:
    for (uint64_t k = 0; k < r->g.inflight; k++)
        if (w->lanes[k].req != NULL) {
            ferry_req_close(w->lanes[k].req); /* cancels: we are aborting */
            w->lanes[k].req = NULL;
        }
    atomic_store(&w->inflight, 0);
    atomic_store(&w->done, true);
    return NULL;
}

static void workers_free(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; ws != NULL && i < n; i++) {
        for (uint64_t k = 0; ws[i].lanes != NULL && k < ws[i].run->g.inflight;
             k++)
            free(ws[i].lanes[k].iov);
        free(ws[i].lanes);
        free(ws[i].lat.v);
    }
    free(ws);
}

/* Everything a worker needs is allocated here, before the run. */
static struct worker *workers_new(struct run *r)
{
    const struct grid *g = &r->g;
    struct worker *ws = calloc(g->threads, sizeof(*ws));
    size_t cap = RESERVOIR_TOTAL / g->threads;

    if (r->iterations != 0 && r->iterations < cap)
        cap = (size_t)r->iterations;
    for (uint64_t i = 0; ws != NULL && i < g->threads; i++) {
        struct worker *w = &ws[i];

        w->run = r;
        w->index = i;
        w->lanes = calloc(g->inflight, sizeof(*w->lanes));
        if (w->lanes == NULL ||
            reservoir_init(&w->lat, cap, now_ns() ^ (i << 32)) != 0)
            goto fail;
        for (uint64_t k = 0; k < g->inflight; k++) {
            struct ferry_iov *iov = calloc(g->batch, sizeof(*iov));
            if (iov == NULL)
                goto fail;
            for (uint64_t b = 0; b < g->batch; b++) {
                iov[b].lmem = r->in->s.mem;
                iov[b].rmem = r->in->rmem;
                iov[b].len = g->block;
            }
            w->lanes[k].iov = iov;
        }
    }
    if (ws == NULL)
        complain("out of memory for %" PRIu64 " threads", g->threads);
    return ws;
fail:
    complain("out of memory for the requests of %" PRIu64 " threads",
             g->threads);
    workers_free(ws, g->threads);
    return NULL;
}

static int begin_measure(struct run *r, struct window *win)
{
    atomic_store(&r->phase, PH_MEASURE);
    win->t_start = now_ns();
    win->cpu_start = cpu_ns();
    return send_ctl(&r->in->s, r->in->peer, ID_MEASURE, 0);
}

static int end_measure(struct run *r)
{
    if (send_ctl(&r->in->s, r->in->peer, ID_STOP, 0) == 0)
        return 0;
    atomic_store(&r->abort, true);
    return 1;
}

static bool workers_done(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (!atomic_load(&ws[i].done))
            return false;
    return true;
}

/*
 * The main thread while the workers run: phases, the measured window,
 * the line per second.  Returns 1 when a worker failed.
 */
static int monitor(struct run *r, struct worker *ws, double warmup,
                   double duration, struct window *win)
{
    uint64_t n = r->g.threads, t = now_ns(), stop_at = 0;
    uint64_t warm_end = t + (uint64_t)(warmup * 1e9);
    struct ticker tk;

    ticker_start(&tk, t);
    if (atomic_load(&r->phase) == PH_MEASURE)
        stop_at = win->t_start + (uint64_t)(duration * 1e9);
    for (;;) {
        uint64_t bytes = 0, ops = 0;
        long inflight = 0;

        t = now_ns();
        if (atomic_load(&r->abort))
            return 1;
        if (atomic_load(&r->phase) == PH_WARMUP && t >= warm_end) {
            if (begin_measure(r, win)) {
                atomic_store(&r->abort, true);
                return 1;
            }
            stop_at = win->t_start + (uint64_t)(duration * 1e9);
        }
        /* The window closes; the target reads its CPU time on STOP
         * while the workers let their last requests drain. */
        if (r->iterations == 0 && atomic_load(&r->phase) == PH_MEASURE &&
            t >= stop_at) {
            atomic_store(&r->phase, PH_STOP);
            win->t_end = t;
            win->cpu_end = cpu_ns();
            return end_measure(r);
        }
        if (r->iterations != 0 && workers_done(ws, n)) {
            win->cpu_end = cpu_ns();
            win->t_end = win->t_start;
            for (uint64_t i = 0; i < n; i++)
                if (ws[i].t_last > win->t_end)
                    win->t_end = ws[i].t_last;
            return end_measure(r);
        }
        for (uint64_t i = 0; i < n; i++) {
            bytes += atomic_load_explicit(&ws[i].live_bytes,
                                          memory_order_relaxed);
            ops += atomic_load_explicit(&ws[i].live_ops,
                                        memory_order_relaxed);
            inflight += (long)atomic_load_explicit(&ws[i].inflight,
                                                   memory_order_relaxed);
        }
        ticker_tick(&tk, t, bytes, ops, inflight,
                    atomic_load(&r->phase) == PH_WARMUP);
        /* Wake in time for the next event, at most 10 ms from now. */
        uint64_t next = t + 10000000u;
        if (atomic_load(&r->phase) == PH_WARMUP && warm_end < next)
            next = warm_end;
        if (stop_at != 0 && r->iterations == 0 && stop_at < next)
            next = stop_at;
        if (next > t)
            sleep_ns(next - t);
    }
}

/* --validate --op read: what this side read must be the target's A. */
static int check_read_back(const struct run *r, const struct worker *ws,
                           struct result *res)
{
    const struct grid *g = &r->g;
    uint8_t *buf = side_view(&r->in->s);
    uint64_t used = g->threads * g->slots_per_thread * g->slot, bad;

    if (buf == NULL)
        return 1;
    corrupt_for_self_test(buf, r->in->s.len);
    res->local_check = 0;
    for (uint64_t t = 0; t < g->threads; t++)
        for (uint64_t s = 0; s < g->slots_per_thread; s++) {
            uint64_t k = s % g->inflight, m = s / g->inflight;
            bool visited = m < ws[t].lanes[k].posts;
            uint64_t off = slot_offset(g, t, s);

            bad = pattern_mismatch(buf, off, g->slot,
                                   visited ? PAT_A : PAT_B);
            if (bad != UINT64_MAX)
                goto bad;
        }
    bad = pattern_mismatch(buf, used, r->in->s.len - used, PAT_B);
    if (bad == UINT64_MAX)
        return 0;
bad:
    res->local_check = 1;
    res->first_bad = bad;
    return complain("validation failed: byte %" PRIu64 " of what was read "
                    "is 0x%02x, the target's pattern there is 0x%02x",
                    bad, buf[bad], pattern_byte(PAT_A, bad));
}

/* Totals of the workers, the blocks written, the requests notified. */
static int gather(struct run *r, struct worker *ws, struct result *res,
                  uint64_t *written, uint64_t *completed)
{
    const struct grid *g = &r->g;
    uint64_t lat_sum = 0, lat_n = 0;

    *written = *completed = 0;
    for (uint64_t i = 0; i < g->threads; i++) {
        call_tally_add(&r->calls, &ws[i].calls);
        res->bytes += ws[i].bytes;
        res->ops += ws[i].ops;
        res->reqs += ws[i].reqs;
        lat_sum += ws[i].lat_sum;
        lat_n += ws[i].lat_n;
        *completed += ws[i].completed;
        for (uint64_t k = 0; k < g->inflight; k++) {
            uint64_t n = lane_slots(g, k), p = ws[i].lanes[k].posts;
            *written += (p < n ? p : n) * g->batch;
        }
    }
    res->measured = res->reqs;
    res->mean_us = lat_n ? (double)lat_sum / (double)lat_n / 1e3 : -1;
    if (res->reqs == 0)
        return complain("no request completed in the measured window; "
                        "give a longer --duration");
    struct reservoir *rs = malloc(g->threads * sizeof(*rs));
    if (rs == NULL)
        return complain("out of memory");
    for (uint64_t i = 0; i < g->threads; i++)
        rs[i] = ws[i].lat;
    int ret = latency_summary(rs, g->threads, 1.0, res);
    free(rs);
    return ret;
}

static int start_workers(struct worker *ws, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        int ret = pthread_create(&ws[i].tid, NULL, worker_main, &ws[i]);
        if (ret != 0) {
            atomic_store(&ws[0].run->abort, true);
            return complain("pthread_create: %s", strerror(ret));
        }
        ws[i].started = true;
    }
    return 0;
}

static int join_workers(struct worker *ws, uint64_t n)
{
    int failed = 0;

    for (uint64_t i = 0; i < n; i++)
        if (ws[i].started)
            pthread_join(ws[i].tid, NULL);
    for (uint64_t i = 0; i < n; i++)
        if (ws[i].err != 0)
            failed = complain("%s", ws[i].errmsg);
    return failed;
}

int run_throughput(struct initiator *in, uint64_t block,
                   struct result *res)
{
    const struct options *o = in->o;
    struct run r = {.in = in, .read = o->read, .notify = o->notify,
                    .descending = o->descending,
                    .call_times = o->call_times,
                    .iterations = o->iterations, .event_fd = -1};
    struct window win = {0};
    struct worker *ws;
    struct call_mark from, to;
    uint64_t written, completed;
    int failed, ret;

    grid_init(&r.g, o, block, in->s.len);
    if (o->event_loop && (ret = ferry_context_fd(in->s.ctx, &r.event_fd)))
        return complain("ferry_context_fd: %s (%s)", ferry_strerror(ret),
                        ferry_last_error());
    atomic_init(&r.phase, o->warmup > 0 ? PH_WARMUP : PH_MEASURE);
    atomic_init(&r.abort, false);
    if ((ws = workers_new(&r)) == NULL)
        return 1;
    if (o->validate && o->read && side_fill(&in->s, PAT_B)) /* reads bring A */
        return 1;
    failed = start_run(in, run_flags(o), block);
    if (!failed && o->warmup <= 0)
        failed = begin_measure(&r, &win);
    from = call_mark_now();
    if (!failed)
        failed = start_workers(ws, r.g.threads);
    if (!failed)
        failed = monitor(&r, ws, o->warmup, o->duration, &win);
    if (failed)
        atomic_store(&r.abort, true);
    failed |= join_workers(ws, r.g.threads);
    to = call_mark_now();
    res->block = block;
    if (!failed)
        failed = gather(&r, ws, res, &written, &completed);
    if (!failed && r.call_times)
        call_numbers_fill(&res->calls, &r.calls, res->reqs, r.g.threads,
                          (double)(win.t_end - win.t_start), from, to);
    if (!failed && o->validate && o->read)
        check_read_back(&r, ws, res); /* reported; the exchange goes on */
    if (!failed)
        failed = exchange_results(in, written, block,
                                  o->notify ? completed : 0, res);
    fill_common(in, &win, res);
    workers_free(ws, r.g.threads);
    return failed;
}
