/*
 * Progress: completion queues, error translation, deadlines, every call
 * that waits, and the optional progress thread.  It drives the layers
 * below and dispatches what comes back to them; none of them calls it.
 */
#include "progress/progress.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include <stdio.h>
#include <time.h>

#include <rdma/fi_eq.h>

#include "base/yield.h"
#include "progress/aside.h"
#include "fabric/rails.h"
#include "xfer/live.h"
#include "xfer/notify.h"
#include "xfer/resume.h"
#include "xfer/stage.h"
#include "xfer/xfer.h"

#define CQ_BATCH 32
/* Progress calls without completions after which a rail's epoch moves
 * anyway, so that peers the provider pushed back try again (live.h). */
#define EPOCH_IDLE_POLLS 4
/* Progress-thread idling: spin this long after the last work, then nap. */
#define IDLE_SPIN_NS (100u * 1000u * 1000u)
#define IDLE_NAP_NS (100u * 1000u)
/* With CQ descriptors to sleep on: the spin before sleeping starts at the
 * first and doubles up to the second while traffic keeps waking the
 * thread sooner than the spin lasted (see progress_main). */
#define IDLE_FD_SPIN_MIN_NS (50u * 1000u)
#define IDLE_FD_SPIN_MAX_NS (1000u * 1000u)
/* Longest sleep on the CQ descriptors: bounds how late a stop is seen. */
#define IDLE_WAIT_MS 20
/* Empty polls of a spin (either kind) between two yields (base/yield.h).  A
 * tcp target taking a stream of writes polls 140-730 k times a second
 * (16-256 KiB blocks); yielding after every poll made a third of the
 * thread's system calls and cost 16 KiB writes ~7 % of their rate
 * (docs/performance.md).  Every 16th poll still lets anyone runnable on
 * the CPU in promptly, unless yields there have turned long. */
#define SPIN_YIELD_EVERY 16u
/* Without descriptors (shm), the wait between two empty polls while
 * regions are exposed: 8 pause hints on the CPU (26 ns each on this
 * machine's), with a yield every SPIN_YIELD_EVERY polls.  A
 * sched_yield after every poll (350 ns of system call here) served
 * shm's 16 KiB reads 9 % slower; yields alone every 16th poll cost shm's
 * 4 KiB writes 10 %, 8 pauses between polls 2 % (and 4 KiB reads 4 %),
 * 16 pauses lost the reads' gain (docs/performance.md). */
#define NOFD_BACKOFF_PAUSES 8u

/* The yields of this thread's polls: a waiter's, or the progress
 * thread's spin. */
static _Thread_local struct ferry__yield my_yield;

/*
 * The ferry code for an operation that came back with an error.  ferry
 * never cancels an operation it handed to a provider (ferry_req_cancel
 * only stops posting), so FI_ECANCELED here means the provider aborted it
 * itself because the connection under it went away: the tcp provider
 * flushes its queues with FI_ECANCELED when the socket closes, whether
 * the peer died or refused an operation (libfabric 1.17 drops the
 * connection on a key it does not know).  Its prov_errno is whatever
 * errno was at the flush (ENOTCONN, ECONNRESET, but as well ENOENT or
 * EAGAIN left over from an unrelated call), so it tells nothing apart.
 * Reporting FERRY_ECANCELED would tell the caller that they cancelled
 * the request.  Liveness tells a dead peer from a live one (live.h).
 */
static int op_error(const struct fi_cq_err_entry *err)
{
    if (err->err == FI_ECANCELED)
        return FERRY_ECONNRESET;
    return ferry__error_from_fi(-err->err);
}

static int read_cq_error(struct ferry_context *ctx, struct ferry__rail *rail)
{
    struct fi_cq_err_entry err = {0};
    char prov[128] = "";
    char why[256];
    ssize_t ret = fi_cq_readerr(rail->cq, &err, 0);

    if (ret != 1)
        return 0; /* raced with another reader; nothing to do */
    if (err.prov_errno != 0)
        snprintf(prov, sizeof(prov), " (provider says: %s)",
                 fi_cq_strerror(rail->cq, err.prov_errno, err.err_data, NULL,
                                0));
    snprintf(why, sizeof(why), "%s%s", fi_strerror(err.err), prov);
    if (err.flags & FI_RECV) {
        /* A receive failed (a message too long, or a peer gone mid-way):
         * nothing was delivered; the buffer goes back to work. */
        FERRY_LOG_WARN("a receive on domain %s failed: %s",
                   rail->info->domain_attr->name, why);
        ferry__notify_received(ferry__xfer_of(ctx), rail, err.op_context, 0);
    } else if (err.op_context != NULL)
        ferry__op_complete(err.op_context, op_error(&err), why);
    else
        FERRY_LOG_WARN("completion error without a context on domain %s: %s",
                   rail->info->domain_attr->name, why);
    return 1;
}

static int poll_rail(struct ferry_context *ctx, struct ferry__rail *rail)
{
    struct ferry__req_part *reqs = &ferry__xfer_of(ctx)->req;
    struct fi_cq_data_entry e[CQ_BATCH];
    ssize_t n = fi_cq_read(rail->cq, e, CQ_BATCH);

    if (n == -FI_EAGAIN)
        return 0;
    if (n == -FI_EAVAIL)
        return read_cq_error(ctx, rail);
    if (n < 0)
        return ferry__error(ferry__error_from_fi((int)n),
                            "fi_cq_read on domain %s failed: %s",
                            rail->info->domain_attr->name,
                            fi_strerror((int)-n));
    /* The requests these completions end share one clock reading, where
     * one each was 22 ns of a 4 KiB shm write's 335; a batch that ends
     * none reads no clock (op.c, docs/performance.md). */
    reqs->in_batch = true;
    for (ssize_t i = 0; i < n; i++) {
        /* A peer's write with a notification as its CQ data (xfer.c):
         * it consumed no receive buffer (ferry does not ask for
         * FI_RX_CQ_DATA mode). */
        if ((e[i].flags & (FI_REMOTE_CQ_DATA | FI_RECV)) == FI_REMOTE_CQ_DATA)
            ferry__notify_data_received(ferry__xfer_of(ctx), rail, e[i].data);
        else if (e[i].flags & FI_RECV)
            ferry__notify_received(ferry__xfer_of(ctx), rail, e[i].op_context,
                                   e[i].len);
        else
            ferry__op_complete(e[i].op_context, 0, NULL);
    }
    reqs->in_batch = false;
    reqs->batch_ns = 0;
    return (int)n;
}

/* Ends the request if it is running past its deadline; says whether. */
static bool end_if_late(struct ferry_req *req, uint64_t now)
{
    if (req->status != FERRY_EINPROGRESS || req->deadline_ns == 0 ||
        now < req->deadline_ns)
        return false;
    ferry__req_end(req, FERRY_ETIMEDOUT,
                   "deadline passed after %llu bytes with %zu operation%s "
                   "still in flight; the peer may be gone or not progressing",
                   (unsigned long long)req->bytes_done, req->ops_in_flight,
                   req->ops_in_flight == 1 ? "" : "s");
    return true;
}

/* Ends the requests on l past their deadline (settling makes them
 * active). */
static void end_late_on(struct ferry__req_list *l, uint64_t now)
{
    struct ferry_req *req = l->head;

    while (req != NULL) {
        struct ferry_req *next = req->next; /* settle() moves req */

        if (end_if_late(req, now))
            ferry__req_settle(req);
        req = next;
    }
}

/*
 * Ends parked and blocked requests past their deadline.  Deadlines are
 * compared with the coarse clock: while it reads what it read at the
 * last look, no deadline can have passed since (a request that began
 * waiting after that look was made later, with a deadline at least a
 * millisecond beyond the coarse clock then), so one look per tick sees
 * each as soon as a look on every pass would.
 */
static void look_at_waiting(struct ferry_context *ctx)
{
    struct ferry__req_part *reqs = &ctx->xfer.req;
    uint64_t now = ctx->xfer.live.now_ns;

    if (now == reqs->waiting_looked_ns)
        return;
    reqs->waiting_looked_ns = now;
    end_late_on(&reqs->parked, now);
    /* Blocked requests are with the peers in line (settling leaves the
     * ring as it is). */
    for (struct ferry__peer_ring *link = reqs->blocked_peers.next;
         link != &reqs->blocked_peers && reqs->blocked > 0;
         link = link->next)
        for (unsigned r = 0; r < FERRY__MAX_RAILS; r++)
            end_late_on(&ferry__peer_in_line(link)->live.blocked[r], now);
}

/* Ends active requests past their deadline and posts what the others
 * still hold.  Returns how many requests are still in progress, parked
 * and blocked ones included. */
static unsigned visit_active(struct ferry_context *ctx)
{
    uint64_t now = ctx->xfer.live.now_ns;
    struct ferry_req *req = ctx->xfer.req.active.head;
    unsigned running = 0;

    while (req != NULL) {
        /* settle() may move req off the list: remember its successor. */
        struct ferry_req *next = req->next;
        bool freed;

        if (!end_if_late(req, now))
            ferry__req_post_pending(req);
        /* settle() may free a request the user freed (it has ended, so
         * it is not running): read the flag first.  It may park or block
         * it too, counted with those below. */
        freed = req->user_freed;
        ferry__req_settle(req);
        if (!freed && req->status == FERRY_EINPROGRESS &&
            req->list == &ctx->xfer.req.active)
            running++;
        req = next;
    }
    return running + (unsigned)ctx->xfer.req.parked.n + ctx->xfer.req.blocked;
}

/* Progress for a caller that waits: none when a progress thread runs. */
static int progress_poll(struct ferry_context *ctx)
{
    /* With a progress thread, a second poller only contends with it for
     * the lock and the provider's own locks. */
    if (ctx->progress.started)
        return 0;
    return ferry__progress_locked(ctx);
}

/* What progresses above this layer (the fan-out), after a pass; without
 * the lock.  The hook was set before any thread could progress. */
static void after_pass(struct ferry_context *ctx)
{
    if (ctx->progress.after_pass != NULL)
        ctx->progress.after_pass(ctx);
}

static void wake_waiters(struct ferry_context *ctx);

/*
 * Progress for a caller that tests (ferry_req_test); under the lock.
 * With a progress thread, the test is counted, and progresses only while
 * the thread stands aside for such tests (aside.h); in its place, the
 * caller wakes the waiters as the thread would.
 */
static int progress_test(struct ferry_context *ctx)
{
    struct ferry__progress_part *pp = &ctx->progress;
    int n;

    if (!pp->started)
        return ferry__progress_locked(ctx);
    /* Relaxed, loads and stores: only callers holding the lock store
     * these, and the thread only looks at them to stand aside. */
    atomic_store_explicit(
        &pp->tester_calls,
        atomic_load_explicit(&pp->tester_calls, memory_order_relaxed) + 1,
        memory_order_relaxed);
    if (atomic_load_explicit(&pp->tester_armed, memory_order_relaxed))
        atomic_store_explicit(&pp->tester_armed, false, memory_order_relaxed);
    if (!atomic_load_explicit(&pp->thread_aside, memory_order_relaxed))
        return 0;
    if ((n = ferry__progress_locked(ctx)) > 0)
        wake_waiters(ctx);
    return n;
}

/* The thread hands back to the testers, or takes over from them. */
static void set_aside(struct ferry__progress_part *pp, bool on)
{
    if (atomic_load_explicit(&pp->thread_aside, memory_order_relaxed) != on)
        atomic_store_explicit(&pp->thread_aside, on, memory_order_relaxed);
}

/*
 * Whether the progress thread leaves the progress to the testers for now
 * (aside.h says when); it then naps, until an arm or the nap's end.
 * Without the lock but to nap.
 */
static bool stand_aside(struct ferry_context *ctx, struct ferry__aside *a)
{
    struct ferry__progress_part *pp = &ctx->progress;
    uint64_t calls =
        atomic_load_explicit(&pp->tester_calls, memory_order_relaxed);
    struct ferry__lock *lock = &ferry__fabric_of(ctx)->lock;
    struct timespec until;
    uint64_t nap;

    if (calls == a->seen && a->since_ns == 0)
        return false; /* no test since the last look: no clock reading */
    nap = ferry__aside_look(
        a, calls,
        atomic_load_explicit(&pp->tester_armed, memory_order_relaxed),
        ferry__now_ns());
    set_aside(pp, nap != 0);
    if (nap == 0)
        return false;
    /* A caller that arms next sleeps on the descriptor until the thread
     * writes it: the arm ends the nap (ferry_context_arm). */
    until = ferry__realtime_after_ns(nap);
    ferry__lock_acquire(lock);
    if (!atomic_load_explicit(&pp->tester_armed, memory_order_relaxed))
        ferry__lock_wait(lock, &pp->handed_back, &until);
    ferry__lock_release(lock);
    return true;
}

void ferry__progress_pause(struct ferry_context *ctx, unsigned spins)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    struct timespec until;

    /* A waiter without a progress thread forwards fan-out chunks too. */
    after_pass(ctx);
    /* Without a progress thread the waiter is the one polling: it lets
     * a peer's process on its CPU run now and then, while that pays
     * (base/yield.h). */
    if (!ctx->progress.started) {
        if (spins % 64 == 0)
            ferry__yield(&my_yield);
        return;
    }
    /* With one, the waiter sleeps until the thread has handled events.
     * The timeout bounds the wait for what is not signalled (deadlines). */
    until = ferry__realtime_after(1);
    ferry__lock_acquire(&fab->lock);
    ctx->progress.waiters++;
    ferry__lock_wait(&fab->lock, &ctx->progress.progressed, &until);
    ctx->progress.waiters--;
    ferry__lock_release(&fab->lock);
}

/* ---- the event descriptor ------------------------------------------------ */

/* What the descriptor tells of: requests ended and notifications
 * received; under the lock. */
static uint64_t events_now(const struct ferry_context *ctx)
{
    return ctx->xfer.req.ended + ctx->xfer.notify.received;
}

/* Writes the descriptor when it is armed and an event came since; under
 * the lock. */
static void events_tell(struct ferry_context *ctx)
{
    struct ferry__progress_part *pp = &ctx->progress;

    if (!pp->armed || events_now(ctx) == pp->armed_events)
        return;
    pp->armed = false;
    /* A failure (EAGAIN) leaves the counter at its maximum: readable. */
    (void)eventfd_write(pp->event_fd, 1);
}

int ferry_context_fd(ferry_context_t *ctx, int *fd)
{
    struct ferry__progress_part *pp;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_fd")))
        return ret;
    if (fd == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_context_fd: fd is NULL");
    pp = &ctx->progress;
    if (!pp->started)
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_fd: the context has no progress "
                            "thread, so nothing would progress while the "
                            "caller sleeps on the descriptor; create it with "
                            "config.progress_thread = 1");
    ferry__lock_acquire(&ctx->xfer.reg.fab.lock);
    if (!pp->has_fd) {
        pp->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        pp->has_fd = pp->event_fd >= 0;
        pp->armed_events = events_now(ctx);
    }
    ferry__lock_release(&ctx->xfer.reg.fab.lock);
    if (!pp->has_fd)
        return ferry__error(FERRY_ENOMEM,
                            "ferry_context_fd: eventfd failed: %s",
                            strerror(errno));
    *fd = pp->event_fd;
    return 0;
}

int ferry_context_arm(ferry_context_t *ctx)
{
    struct ferry__progress_part *pp;
    eventfd_t drained;
    uint64_t now;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_context_arm")))
        return ret;
    pp = &ctx->progress;
    ferry__lock_acquire(&ctx->xfer.reg.fab.lock);
    if (!pp->has_fd) {
        ferry__lock_release(&ctx->xfer.reg.fab.lock);
        return ferry__error(FERRY_EINVAL,
                            "ferry_context_arm: call ferry_context_fd first");
    }
    (void)eventfd_read(pp->event_fd, &drained);
    now = events_now(ctx);
    pp->armed = now == pp->armed_events;
    pp->armed_events = now;
    ret = pp->armed ? 0 : FERRY_EAGAIN;
    /* Who arms is about to sleep on the descriptor: the thread, standing
     * aside for its tests, takes over now (stand_aside), from a nap too. */
    if (pp->armed) {
        atomic_store_explicit(&pp->tester_armed, true, memory_order_relaxed);
        pthread_cond_signal(&pp->handed_back);
    }
    ferry__lock_release(&ctx->xfer.reg.fab.lock);
    /* EAGAIN is not an error: events came since the last arm, look
     * again. */
    return ret;
}

void ferry__progress_fd_close(struct ferry_context *ctx)
{
    if (ctx->progress.has_fd)
        close(ctx->progress.event_fd);
    ctx->progress.has_fd = false;
}

/*
 * Rings again the bells of sleeping peers that still hold operations of
 * ours: a transfer shm moves in steps (its SAR protocol) needs the
 * target's progress for each, and a target that slept between two would
 * otherwise leave the rest waiting.  Once per tick of the coarse clock,
 * not on every pass: the walk over the peers (a fence each) would
 * otherwise tax every poll of a waiting caller.
 */
static void ring_busy_peers(struct ferry_context *ctx, uint64_t now)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);

    if (fab->pulse.peer_bells == 0 || now == fab->pulse.rung_ns)
        return;
    fab->pulse.rung_ns = now;
    for (struct ferry_peer *p = ctx->xfer.reg.peers; p != NULL; p = p->next)
        if (ferry__peer_ops_out(p) > 0)
            ferry__pulse_ring(&p->pulse);
}

int ferry__progress_locked(struct ferry_context *ctx)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    int total = 0, err = 0;
    uint64_t now;

    FERRY__ASSERT_LOCKED(&fab->lock);
    /* One clock reading serves the call: signs of life, deadlines, the
     * liveness pass and the bells. */
    now = ferry__now_coarse_ns();
    ferry__live_clock(ferry__xfer_of(ctx), now);
    ferry__reqs_free_given_back(ferry__xfer_of(ctx));
    for (unsigned i = 0; i < fab->nrails; i++) {
        struct ferry__rail *rail = &fab->rails[i];
        struct ferry__txq *tx = ferry__txq_of(ferry__xfer_of(ctx), rail);
        int n = poll_rail(ctx, rail);

        if (n < 0)
            err = n;
        else
            total += n;
        /* Peers the provider pushed back post again once completions
         * made room, or after a few calls in case what they waited for
         * was not one of ours (a connection being made). */
        if (n > 0 || ++tx->idle_polls >= EPOCH_IDLE_POLLS) {
            tx->epoch++;
            tx->idle_polls = 0;
        }
    }
    ring_busy_peers(ctx, now);
    if (ferry__stage_progress(ferry__xfer_of(ctx)))
        ferry__notify_release_held(ferry__xfer_of(ctx));
    ferry__live_pass(ferry__xfer_of(ctx));
    ferry__resume_pass(ferry__xfer_of(ctx));
    /* Deadlines are enforced even when a CQ keeps failing. */
    look_at_waiting(ctx);
    ferry__reqs_unblock(ferry__xfer_of(ctx));
    ctx->xfer.req.running = visit_active(ctx);
    events_tell(ctx);
    return err != 0 ? err : total;
}

int ferry_progress(ferry_context_t *ctx)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_progress")))
        return ret;
    ferry__lock_acquire(&fab->lock);
    ret = ferry__progress_locked(ctx);
    ferry__lock_release(&fab->lock);
    after_pass(ctx);
    return ret;
}

/* The request's status; for an error, its sentence becomes the thread's. */
static int report(const struct ferry_req *req, int status)
{
    if (status == 0 || status == FERRY_EINPROGRESS)
        return status;
    return ferry__error(status, "%s", req->errmsg[0] ? req->errmsg
                                                     : ferry_strerror(status));
}

/* One look at a checked request, progressing first while it runs: as a
 * tester (progress_test) or as a waiter (progress_poll). */
static int test_once(ferry_req_t *req, bool tester)
{
    struct ferry_context *ctx = req->ctx;
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    int ret = 0, status;

    /* A retired request's outcome is final: no lock, no progress.
     * Acquire pairs with the release that published it (xfer.c). */
    status = atomic_load_explicit(&req->outcome, memory_order_acquire);
    if (status != FERRY_EINPROGRESS)
        return report(req, status);
    ferry__lock_acquire(&fab->lock);
    if (req->status == FERRY_EINPROGRESS)
        ret = tester ? progress_test(ctx) : progress_poll(ctx);
    status = req->status;
    ferry__lock_release(&fab->lock);
    /* In the thread's place, the tester forwards fan-out chunks too. */
    if (tester && ctx->progress.started &&
        atomic_load_explicit(&ctx->progress.thread_aside,
                             memory_order_relaxed))
        after_pass(ctx);
    if (ret < 0 && status == FERRY_EINPROGRESS)
        return ret;
    return report(req, status);
}

static int test_req(ferry_req_t *req, bool tester)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_req(req, "ferry_req_test")))
        return ret;
    return test_once(req, tester);
}

int ferry_req_test(ferry_req_t *req)
{
    return test_req(req, true);
}

int ferry__req_look(ferry_req_t *req)
{
    return test_req(req, false);
}

uint64_t ferry__wait_until(int timeout_ms)
{
    if (timeout_ms < 0)
        return 0;
    /* 0 ms: one look, so an end every clock has passed. */
    if (timeout_ms == 0)
        return 1;
    return ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
}

/* The coarse clock lags the precise one the end was taken from: a wait
 * is never cut short, at most a tick long. */
bool ferry__wait_over(uint64_t until)
{
    return until != 0 && ferry__now_coarse_ns() >= until;
}

int ferry_req_wait(ferry_req_t *req, int timeout_ms)
{
    uint64_t until;
    unsigned spins = 0;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_req(req, "ferry_req_wait")))
        return ret;
    until = ferry__wait_until(timeout_ms);
    for (;;) {
        /* A waiter, not a tester: with a thread it sleeps between looks
         * and relies on the thread, which must not step aside for it. */
        ret = test_once(req, false);
        if (ret != FERRY_EINPROGRESS)
            return ret;
        if (ferry__wait_over(until))
            return ferry__error(FERRY_EAGAIN,
                                "ferry_req_wait: %d ms passed; the request is "
                                "still running (wait again)",
                                timeout_ms);
        ferry__progress_pause(req->ctx, ++spins);
    }
}

/* The first of the n requests that has ended, or n; under the lock. */
static size_t first_ended(ferry_req_t *const *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (reqs[i] != NULL && reqs[i]->status != FERRY_EINPROGRESS)
            return i;
    return n;
}

/* The one context of the requests (NULL entries skipped) into *ctx: 0,
 * or the error, said. */
static int context_of_all(ferry_req_t *const *reqs, size_t n,
                          struct ferry_context **ctx)
{
    size_t first = 0;
    int ret;

    *ctx = NULL;
    for (size_t i = 0; reqs != NULL && i < n; i++) {
        if (reqs[i] == NULL)
            continue;
        if ((ret = ferry__check_req(reqs[i], "ferry_req_wait_any")))
            return ferry__error(ret, "reqs[%zu]: %s", i, ferry_last_error());
        if (*ctx == NULL) {
            *ctx = reqs[i]->ctx;
            first = i;
        } else if (reqs[i]->ctx != *ctx) {
            return ferry__error(FERRY_EINVAL,
                                "ferry_req_wait_any: reqs[%zu] belongs to "
                                "another context than reqs[%zu]: wait on "
                                "each context's requests apart",
                                i, first);
        }
    }
    if (*ctx == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_req_wait_any: no request among the %zu "
                            "entries (reqs is NULL, or every entry is)",
                            n);
    return 0;
}

int ferry_req_wait_any(ferry_req_t *const *reqs, size_t n, int timeout_ms,
                       size_t *index)
{
    struct ferry_context *ctx;
    struct ferry__fabric *fab;
    unsigned spins = 0;
    uint64_t until;
    int ret;

    ferry__error_clear();
    if (index == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_req_wait_any: index is NULL");
    *index = n;
    if ((ret = context_of_all(reqs, n, &ctx)))
        return ret;
    fab = ferry__fabric_of(ctx);
    until = ferry__wait_until(timeout_ms);
    for (;;) {
        int status = 0;
        size_t i;

        /* One progress pass for all of them, not one per request. */
        ret = 0;
        ferry__lock_acquire(&fab->lock);
        if ((i = first_ended(reqs, n)) == n) {
            ret = progress_poll(ctx);
            i = first_ended(reqs, n);
        }
        if (i < n)
            status = reqs[i]->status;
        ferry__lock_release(&fab->lock);
        if (i < n) {
            *index = i;
            return report(reqs[i], status);
        }
        if (ret < 0)
            return ret;
        if (ferry__wait_over(until))
            return ferry__error(FERRY_EAGAIN,
                                "ferry_req_wait_any: %d ms passed; none of "
                                "the requests has ended (wait again)",
                                timeout_ms);
        ferry__progress_pause(ctx, ++spins);
    }
}

/* ---- notifications and counters ------------------------------------------ */

int ferry_notify_poll(ferry_context_t *ctx, struct ferry_notification *out,
                      size_t max)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    size_t n;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_notify_poll")))
        return ret;
    if (out == NULL && max > 0)
        return ferry__error(FERRY_EINVAL, "ferry_notify_poll: out is NULL");
    /* The count comes back as an int: never take more than it can say.
     * (It used to move up to max and return INT32_MAX, so a caller with
     * max > INT32_MAX lost every notification past the count.) */
    if (max > INT32_MAX)
        max = INT32_MAX;
    /* A progress thread holds the lock while the provider moves data (tcp
     * copies it in there): a poller that waited for it each time would
     * stall the stream, and most polls find nothing. */
    if (ctx->progress.started && !ferry__notify_queued(ferry__xfer_of(ctx)))
        return 0;
    ferry__lock_acquire(&fab->lock);
    ret = progress_poll(ctx);
    n = ferry__notify_take(ferry__xfer_of(ctx), out, max);
    ferry__lock_release(&fab->lock);
    if (ret < 0 && n == 0)
        return ret;
    return (int)n;
}

/* Longest sleep of ferry_notify_wait between two looks at the queue: a
 * wake is signalled, so this is only the period of a wait without a
 * limit. */
#define NOTIFY_SLEEP_MAX_MS 1000

/* Wakes the threads sleeping in ferry__progress_pause and notify_sleep;
 * under the lock. */
static void wake_waiters(struct ferry_context *ctx)
{
    if (ctx->progress.waiters > 0)
        pthread_cond_broadcast(&ctx->progress.progressed);
}

/* Called under the lock when a notification is queued (on_queued). */
static void wake_notify_waiters(struct ferry__xfer *x)
{
    struct ferry_context *ctx =
        ferry__container_of(x, struct ferry_context, xfer);

    wake_waiters(ctx);
    events_tell(ctx);
}

/*
 * With a progress thread: sleeps until a notification is queued or until
 * `until` (0: no limit).  The queue is looked at under the lock that
 * on_queued signals under, so a notification queued after the caller's
 * last look is never slept through; nothing else wakes this sleep, where
 * ferry__progress_pause wakes every millisecond.
 */
static void notify_sleep(struct ferry_context *ctx, uint64_t until)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    uint64_t now = ferry__now_ns(), ms = NOTIFY_SLEEP_MAX_MS;
    struct timespec wake;

    if (until != 0 && until > now && (until - now) / 1000000u + 1 < ms)
        ms = (until - now) / 1000000u + 1;
    wake = ferry__realtime_after(ms);
    ferry__lock_acquire(&fab->lock);
    if (!ferry__notify_queued(ferry__xfer_of(ctx))) {
        ctx->progress.waiters++;
        ferry__lock_wait(&fab->lock, &ctx->progress.progressed, &wake);
        ctx->progress.waiters--;
    }
    ferry__lock_release(&fab->lock);
}

int ferry_notify_wait(ferry_context_t *ctx, struct ferry_notification *out,
                      size_t max, int timeout_ms)
{
    uint64_t until = ferry__wait_until(timeout_ms);
    unsigned spins = 0;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_notify_wait")))
        return ret;
    if (max == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_notify_wait: max is 0, so no notification "
                            "could end the wait; pass the number of entries "
                            "out has room for");
    for (;;) {
        if ((ret = ferry_notify_poll(ctx, out, max)) != 0)
            return ret;
        if (ferry__wait_over(until))
            return ferry__error(FERRY_EAGAIN,
                                "ferry_notify_wait: no notification arrived "
                                "within %d ms (wait again)",
                                timeout_ms);
        if (ctx->progress.started)
            notify_sleep(ctx, until);
        else
            ferry__progress_pause(ctx, ++spins);
    }
}

/* Progresses, then reads id's sum and abort; under the lock. */
static int counter_read(ferry_context_t *ctx, uint64_t id, uint64_t *value,
                        int *aborted)
{
    int ret = progress_poll(ctx);

    *value = ferry__counter_sum(ferry__xfer_of(ctx), id, aborted);
    return ret < 0 ? ret : 0;
}

int ferry_counter_get(ferry_context_t *ctx, uint64_t id, uint64_t *value)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    int ret, aborted;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_counter_get")))
        return ret;
    if (value == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_counter_get: value is NULL");
    ferry__lock_acquire(&fab->lock);
    ret = counter_read(ctx, id, value, &aborted);
    ferry__lock_release(&fab->lock);
    return ret;
}

/*
 * One look of a counter wait, under the lock: 0 when reached, the error
 * that ends the wait, or FERRY_EINPROGRESS.
 */
static int counter_look(ferry_context_t *ctx, struct ferry_peer *peer,
                        uint64_t id, uint64_t expected, uint64_t *value)
{
    int ret, aborted;

    if ((ret = counter_read(ctx, id, value, &aborted)) != 0)
        return ret;
    if (*value >= expected)
        return 0;
    if (aborted != 0)
        return ferry__error(FERRY_EABORTED,
                            "counter %llu reached %llu of %llu, and a sender "
                            "abandoned a transfer that was to add to it "
                            "(it ended with: %s); reset the counter to use "
                            "the id again",
                            (unsigned long long)id, (unsigned long long)*value,
                            (unsigned long long)expected,
                            ferry_strerror(aborted));
    if (peer != NULL && (ret = ferry__live_check_peer(peer,
                                                      "ferry_counter_wait_peer")))
        return ret;
    return FERRY_EINPROGRESS;
}

static int counter_wait(ferry_context_t *ctx, struct ferry_peer *peer,
                        uint64_t id, uint64_t expected, int timeout_ms)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    uint64_t until = ferry__wait_until(timeout_ms);
    uint64_t value = 0;
    unsigned spins = 0;
    int ret;

    ferry__lock_acquire(&fab->lock);
    if (peer != NULL) {
        ferry__live_wait_begins(peer);
        peer->live.waiters++;
    }
    for (;;) {
        if ((ret = counter_look(ctx, peer, id, expected, &value)) !=
            FERRY_EINPROGRESS)
            break;
        if (ferry__wait_over(until)) {
            ret = ferry__error(FERRY_EAGAIN,
                               "counter %llu reached %llu of %llu within "
                               "%d ms: notifications are missing (a peer "
                               "failed or has not sent them yet)",
                               (unsigned long long)id,
                               (unsigned long long)value,
                               (unsigned long long)expected, timeout_ms);
            break;
        }
        ferry__lock_release(&fab->lock);
        ferry__progress_pause(ctx, ++spins);
        ferry__lock_acquire(&fab->lock);
    }
    if (peer != NULL)
        peer->live.waiters--;
    ferry__lock_release(&fab->lock);
    return ret;
}

int ferry_counter_wait(ferry_context_t *ctx, uint64_t id, uint64_t expected,
                       int timeout_ms)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_counter_wait")))
        return ret;
    return counter_wait(ctx, NULL, id, expected, timeout_ms);
}

int ferry_counter_wait_peer(ferry_peer_t *peer, uint64_t id,
                            uint64_t expected, int timeout_ms)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_counter_wait_peer")))
        return ret;
    return counter_wait(peer->ctx, peer, id, expected, timeout_ms);
}

/* ---- the progress thread ------------------------------------------------- */

/*
 * Sleeps until a rail's CQ descriptor or the bell is readable or
 * timeout_ms passes.  Returns true when something arrived.  fi_trywait
 * says whether blocking on a descriptor is safe: it fails when events
 * are already queued, so none is missed; it is asked per rail, each of
 * its own fabric (transports differ).  Rails without a descriptor (shm)
 * are covered by the bell: raised, then polled once more (pulse.h).
 */
static bool wait_for_events(struct ferry_context *ctx, int timeout_ms)
{
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    struct pollfd pfd[FERRY__MAX_RAILS + 1];
    int bell = ferry__pulse_bell_fd(fab), ret = 0;
    nfds_t n = 0;

    ferry__lock_acquire(&fab->lock);
    if (bell >= 0) {
        ferry__pulse_sleep(fab, true);
        if (ferry__progress_locked(ctx) > 0) {
            wake_waiters(ctx);
            ret = 1;
        }
        pfd[n++] = (struct pollfd){.fd = bell, .events = POLLIN};
    }
    for (unsigned i = 0; i < fab->nrails && ret == 0; i++) {
        struct fid *cq = &fab->rails[i].cq->fid;

        if (!fab->rails[i].has_wait_fd)
            continue;
        pfd[n++] = (struct pollfd){.fd = fab->rails[i].wait_fd,
                                   .events = POLLIN};
        ret = fi_trywait(fab->rails[i].fabric, &cq, 1);
    }
    ferry__lock_release(&fab->lock);
    /* Events pending: progress now; else sleep. */
    ret = ret != 0 || poll(pfd, n, timeout_ms) > 0;
    if (bell >= 0)
        ferry__pulse_sleep(fab, false);
    return ret;
}

/* Whether the progress thread can sleep: every rail has a descriptor, or
 * those that have none are covered by the bell. */
static bool can_sleep(const struct ferry__fabric *fab)
{
    bool all = fab->nrails > 0;

    for (unsigned i = 0; i < fab->nrails; i++)
        all &= fab->rails[i].has_wait_fd;
    return all || ferry__pulse_bell_fd(fab) >= 0;
}

/* One more empty poll of the thread's spin: gives the CPU up on every
 * SPIN_YIELD_EVERY-th. */
static void spin_turn(unsigned *spins)
{
    if (++*spins % SPIN_YIELD_EVERY == 0)
        ferry__yield(&my_yield);
}

static void *progress_main(void *arg)
{
    struct ferry_context *ctx = arg;
    struct ferry__fabric *fab = ferry__fabric_of(ctx);
    uint64_t last_work = ferry__now_ns();
    const struct timespec nap = {0, IDLE_NAP_NS};
    bool fd_wait = can_sleep(fab);
    uint64_t fd_spin = IDLE_FD_SPIN_MIN_NS;
    struct ferry__aside aside = FERRY__ASIDE_INIT;
    unsigned idle_spins = 0;

    /* Near the NIC it drives, when the topology said which CPUs those are. */
    if (ctx->progress.cpus[0] != '\0' &&
        !ferry__bind_to_cpus(ctx->progress.cpus))
        FERRY_LOG_INFO("progress thread left unbound: cannot bind it to "
                       "CPUs %s",
                       ctx->progress.cpus);

    while (!atomic_load_explicit(&ctx->progress.stopping,
                                 memory_order_acquire)) {
        int n;
        bool busy;

        if (stand_aside(ctx, &aside)) {
            last_work = ferry__now_ns();
            continue;
        }
        ferry__lock_acquire(&fab->lock);
        n = ferry__progress_locked(ctx);
        /* Requests that ended but wait for operations a dead peer will
         * never complete are no reason to spin. */
        busy = ctx->xfer.req.running != 0;
        if (n > 0)
            wake_waiters(ctx);
        ferry__lock_release(&fab->lock);
        /* Fan-out chunks that landed go on to the children now. */
        after_pass(ctx);
        if (n > 0 || busy) {
            last_work = ferry__now_ns();
            continue;
        }
        /* A target gets no completions for data peers write into it, yet
         * must keep progressing for that data to land.  Where the CQs
         * have descriptors, whatever arrives (data included: the tcp
         * provider waits on its sockets) wakes them, so after a short
         * spin the thread sleeps on them and leaves the CPU to the rest
         * of the machine.  A stream of writes wakes it again and again,
         * each wake a system call and a context switch the data waits
         * for: when the sleep ended sooner than the spin lasted, a longer
         * spin would have caught the data, so the spin doubles (up to
         * IDLE_FD_SPIN_MAX_NS); a sleep that outlasts it, or ends with
         * nothing, brings it back to the minimum; the spin yields the CPU
         * now and then (SPIN_YIELD_EVERY).  Rails without descriptors
         * (shm) are covered by the bell peers of this host ring
         * (fabric/pulse.h), so the thread sleeps the same way.  Without
         * descriptors or a bell (no /dev/shm) it keeps polling while it
         * exposes regions or for a while after the last sign of work
         * (backing off a little between polls and yielding the CPU now
         * and then: NOFD_BACKOFF_PAUSES), and naps otherwise. */
        if (fd_wait) {
            uint64_t now = ferry__now_ns(), slept;

            if (now - last_work < fd_spin) {
                spin_turn(&idle_spins);
                continue;
            }
            if (!wait_for_events(ctx, IDLE_WAIT_MS)) {
                fd_spin = IDLE_FD_SPIN_MIN_NS;
                continue;
            }
            last_work = ferry__now_ns();
            slept = last_work - now;
            fd_spin = slept < fd_spin ? fd_spin * 2 : IDLE_FD_SPIN_MIN_NS;
            if (fd_spin > IDLE_FD_SPIN_MAX_NS)
                fd_spin = IDLE_FD_SPIN_MAX_NS;
        } else if (atomic_load_explicit(
                       &ferry__reg_of(ctx)->mem.exposed_regions,
                       memory_order_relaxed) != 0 ||
                   ferry__now_ns() - last_work < IDLE_SPIN_NS) {
            ferry__cpu_pause(NOFD_BACKOFF_PAUSES);
            spin_turn(&idle_spins);
        } else
            nanosleep(&nap, NULL);
    }
    return NULL;
}

int ferry__progress_thread_start(struct ferry_context *ctx)
{
    int ret;

    ferry__xfer_of(ctx)->notify.on_queued = wake_notify_waiters;
    atomic_store(&ctx->progress.stopping, false);
    ret = pthread_create(&ctx->progress.thread, NULL, progress_main, ctx);
    if (ret != 0)
        return ferry__error(FERRY_ENOMEM,
                            "could not start the progress thread (error %d)",
                            ret);
    ctx->progress.started = true;
    return 0;
}

void ferry__progress_thread_stop(struct ferry_context *ctx)
{
    if (!ctx->progress.started)
        return;
    /* Release pairs with the thread's acquire load: it sees the flag. */
    atomic_store_explicit(&ctx->progress.stopping, true, memory_order_release);
    pthread_join(ctx->progress.thread, NULL);
    ctx->progress.started = false;
}
