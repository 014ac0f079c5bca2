/*
 * progress module from inside, with requests held out with the provider
 * by a target that never progresses: a wait that times out is not the
 * request's end, a wait after an idle while counts the peer's silence
 * from its own start, deadlines (and destruction after them), cancel (the
 * buffers held until the provider lets go, the request's list), a peer
 * killed in the middle of a transfer, and one killed with operations out
 * beside a live one; requests a progress pass skips
 * because they can only wait (parked, or blocked in line for a slot, a
 * notification too), and retired requests freed without the lock;
 * several threads posting while
 * another drives progress; a progress thread on the initiator, and a
 * caller testing in its place.  (Ended
 * requests, handle checks, a stopped child and a peer killed after a post,
 * through the API: test/api/check_progress.c.)
 */
#include "progressutil.h"

#include "progress/aside.h"
#include "progress/progress.h"
#include "fabric/pulse.h"
#include "fabric/shm_guard.h"
#include "fabric/shm_mend.h"
#include "xfer/op.h"
#include "xfer/xfer.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

/* ---- helpers ------------------------------------------------------------ */

static size_t ops_out(ferry_context_t *ctx)
{
    size_t n;

    ferry__lock_acquire(&ferry__fabric_of(ctx)->lock);
    n = ferry__xfer_of(ctx)->req.tx[0].ops_in_flight;
    ferry__lock_release(&ferry__fabric_of(ctx)->lock);
    return n;
}

/* Progresses both sides until init has no operation out (60 s at most). */
static void drain_both(ferry_context_t *init, ferry_context_t *target)
{
    uint64_t until = tu_now_ns() + 60000 * MS;

    for (;;) {
        ck_assert_int_ge(ferry_progress(target), 0);
        ck_assert_int_ge(ferry_progress(init), 0);
        if (ops_out(init) == 0)
            break;
        ck_assert_msg(tu_now_ns() < until,
                      "%zu operations still out after 60 s", ops_out(init));
    }
}

/* A write of the whole region on a stalled pair, its operation out with the
 * provider when this returns. */
static ferry_req_t *post_stuck(struct tu_fx *f, int timeout_ms)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov = {f->lbuf, f->lmem, f->rmem, 0, f->tlen};
    ferry_req_t *req;
    int ret;

    opts.timeout_ms = timeout_ms;
    tu_fill(f->lbuf, f->tlen, 0x5757);
    ret = ferry_write(f->p.peer, &iov, 1, &opts, &req);
    ck_assert_msg(ret == 0, "%s", ferry_last_error());
    for (int i = 0; i < 1000 && req->cur_iov < req->niov; i++)
        ck_assert_int_ge(ferry_progress(f->p.init), 0);
    ck_assert_uint_eq(req->ops_in_flight, 1);
    return req;
}

/* ---- test and wait ---------------------------------------------------------- */

START_TEST(test_wait_timeout_is_not_the_request)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *req;
    uint64_t t0;
    double el;
    int ret;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    req = post_stuck(&f, 0);
    t0 = tu_now_ns();
    ret = ferry_req_wait(req, 100);
    el = secs_since(t0);
    ck_assert_msg(ret == FERRY_EAGAIN, "%s: wait gave %s: %s", prov,
                  ferry_strerror(ret), ferry_last_error());
    tu_assert_sentence("100 ms", NULL);
    tu_assert_sentence("still running", NULL);
    ck_assert_msg(el >= 0.1 && el < 5.0, "wait(100 ms) took %.3f s", el);
    /* Only the wait gave up: the request goes on. */
    ck_assert_int_eq(req->status, FERRY_EINPROGRESS);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    ck_assert_str_eq(ferry_last_error(), "");
    ck_assert_int_eq(ferry_req_wait(req, 0), FERRY_EAGAIN);
    /* Once the target progresses it completes. */
    drain_both(f.p.init, f.p.target);
    ret = ferry_req_wait(req, 30000);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    tu_assert_pattern(f.tbuf, STUCK, 0x5757, "%s", prov);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

/*
 * A wait that begins after the peer was idle counts the peer's silence
 * from its own start.  A wait leaves its start behind when no liveness
 * check runs after it ends (no progress in the idle while), and a write
 * made then to a stopped peer was declared dead after 381 ms of
 * liveness_ms 500, its silence counted from the wait before (the ASan
 * run of check_death's test_stopped_past_liveness).
 */
START_TEST(test_wait_after_idle_starts_afresh)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *req;
    uint64_t t0, since;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    /* What the warm-up write's wait leaves when no check ran after it. */
    f.p.peer->live.wait_since_ns = 1;
    t0 = tu_now_ns();
    req = post_stuck(&f, 0);
    since = f.p.peer->live.wait_since_ns;
    ck_assert_msg(since == 0 || since + 20 * MS >= t0,
                  "%s: the new wait starts %.3f s before it was made",
                  prov, (double)(t0 - since) / 1e9);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

/* ---- deadlines ----------------------------------------------------------------- */

START_TEST(test_deadline_stalled_target)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry__req_part *reqs;
    ferry_req_t *req;
    uint64_t t0;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    reqs = &ferry__xfer_of(f.p.init)->req;
    t0 = tu_now_ns();
    req = post_stuck(&f, 200);
    /* Parked: passes look at it once per coarse clock tick. */
    ck_assert_ptr_eq(req->list, &reqs->parked);
    expect_deadline(req, 200, prov);
    ck_assert_msg(secs_since(t0) >= 0.2, "ended before its deadline");
    /* Ended, its operation out: active until that comes back. */
    ck_assert_ptr_eq(req->list, &reqs->active);
    /* The provider still holds the operation: so are the regions. */
    ck_assert_int_eq(ferry_mem_close(f.lmem), FERRY_EBUSY);
    ck_assert_int_eq(ferry_rmem_close(f.rmem), FERRY_EBUSY);
    ferry_req_close(req);
    drain_both(f.p.init, f.p.target);
    tu_fx_close(&f);
}
END_TEST

/* The same, but the contexts are destroyed with the operation still out. */
START_TEST(test_deadline_then_destroy)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *req;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    req = post_stuck(&f, 200);
    expect_deadline(req, 200, prov);
    ferry_req_close(req);
    tu_pair_close(&f.p);
    tu_free_buf(f.tbuf, f.tlen);
    tu_free_buf(f.lbuf, f.llen);
}
END_TEST

/* The context's default deadline applies when opts gives none; a negative
 * timeout in opts means none at all. */
START_TEST(test_deadline_from_context)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    ferry_req_t *req;

    /* One operation, as tu_fx_open_stalled's default. */
    tu_stalled_config(&cfg, prov, STUCK);
    cfg.timeout_ms = 200;
    tu_fx_open_stalled(&f, prov, &cfg, STUCK, STUCK, NULL);
    req = post_stuck(&f, 0); /* 0: the context's */
    expect_deadline(req, 200, prov);
    ferry_req_close(req);
    drain_both(f.p.init, f.p.target);

    req = post_stuck(&f, -1);
    ck_assert_uint_eq(req->deadline_ns, 0);
    ck_assert_int_eq(ferry_req_wait(req, 400), FERRY_EAGAIN);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    tu_assert_pattern(f.tbuf, STUCK, 0x5757, "%s", prov);
    ferry_req_close(req);
    tu_fx_close(&f);
}
END_TEST

/* ---- cancel -------------------------------------------------------------------- */

START_TEST(test_cancel_in_flight)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *req;
    int ret;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    req = post_stuck(&f, 0);
    ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    ck_assert_int_eq(ferry_req_cancel(req), 0);
    ret = ferry_req_test(req);
    ck_assert_msg(ret == FERRY_ECANCELED, "%s: test after cancel gave %s: %s",
                  prov, ferry_strerror(ret), ferry_last_error());
    tu_assert_sentence("cancelled", NULL);
    ck_assert_int_eq(ferry_req_wait(req, -1), FERRY_ECANCELED);
    ck_assert_int_eq(ferry_req_cancel(req), 0);
    ck_assert_int_eq(ferry_req_test(req), FERRY_ECANCELED);

    /* The provider may still read the buffer: it stays registered. */
    ck_assert_uint_eq(req->ops_in_flight, 1);
    ck_assert_ptr_eq(req->list, &ferry__xfer_of(f.p.init)->req.active);
    ret = ferry_mem_close(f.lmem);
    ck_assert_msg(ret == FERRY_EBUSY, "deregister gave %s",
                  ferry_strerror(ret));
    ck_assert_int_eq(ferry_rmem_close(f.rmem), FERRY_EBUSY);

    /* Once the operation is back, the request retires and lets go. */
    drain_both(f.p.init, f.p.target);
    ck_assert_ptr_eq(req->list, &ferry__xfer_of(f.p.init)->req.done);
    ck_assert_int_eq(ferry_req_test(req), FERRY_ECANCELED);
    ferry_req_close(req);
    tu_fx_close(&f); /* asserts the deregistrations succeed */
}
END_TEST

/* 4 KiB registered on the initiator for requests that will find no slot. */
struct spare {
    uint8_t *buf;
    ferry_mem_t *mem; /* NULL once a test deregistered it itself */
};

/*
 * A stalled pair with one operation slot, taken by a stuck write of the
 * whole region (returned), and the spare 4 KiB.
 */
static ferry_req_t *post_holding_the_slot(struct tu_fx *f, const char *prov,
                                          struct spare *sp)
{
    struct ferry_config cfg;
    ferry_req_t *first;

    tu_config(&cfg, prov);
    cfg.tx_depth = 1;
    cfg.endpoints_per_domain = 1; /* one rail: one slot in all */
    tu_fx_open_stalled(f, prov, &cfg, STUCK, STUCK, NULL);
    first = post_stuck(f, 0);
    sp->buf = tu_alloc_buf(4096);
    ck_assert_int_eq(ferry_mem_register(f->p.init, sp->buf, 4096,
                                        FERRY_MEM_HOST, 0, 0, &sp->mem),
                     0);
    return first;
}

/* Closes what post_holding_the_slot opened, once its requests are freed. */
static void close_holding_the_slot(struct tu_fx *f, struct spare *sp)
{
    if (sp->mem != NULL)
        ck_assert_int_eq(ferry_mem_close(sp->mem), 0);
    tu_fx_close(f);
    tu_free_buf(sp->buf, 4096);
}

/* A request cancelled before any of it was posted lets go at once. */
START_TEST(test_cancel_queued)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *first, *queued;
    struct spare sp;
    struct ferry_iov iov;

    first = post_holding_the_slot(&f, prov, &sp);
    iov = (struct ferry_iov){sp.buf, sp.mem, f.rmem, 0, 4096};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &queued), 0);
    ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_uint_eq(queued->ops_in_flight, 0);
    ck_assert_uint_eq(queued->cur_iov, 0);
    ck_assert_int_eq(ferry_mem_close(sp.mem), FERRY_EBUSY);
    ck_assert_int_eq(ferry_req_cancel(queued), 0);
    ck_assert_int_eq(ferry_req_test(queued), FERRY_ECANCELED);
    ck_assert_ptr_eq(queued->list, &ferry__xfer_of(f.p.init)->req.done);
    /* Nothing of it is out: its own buffer can go now. */
    ck_assert_int_eq(ferry_mem_close(sp.mem), 0);
    sp.mem = NULL;
    ferry_req_close(queued);
    /* The first one is unaffected and completes. */
    ck_assert_int_eq(ferry_req_test(first), FERRY_EINPROGRESS);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(first, 30000), 0);
    tu_assert_pattern(f.tbuf, STUCK, 0x5757, "%s", prov);
    ferry_req_close(first);
    close_holding_the_slot(&f, &sp);
}
END_TEST

/* ---- requests a pass skips ---------------------------------------------------- */

/*
 * Requests that wait for a slot are blocked, on their peer's list for the
 * rail (one with its operation out is parked instead:
 * test_deadline_stalled_target).  They still end by their deadline and
 * go on as soon as there is a slot.
 */
START_TEST(test_waiting_requests)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *first, *queued, *late;
    struct spare sp;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_iov iov;
    struct ferry__req_part *reqs;
    struct ferry__req_list *blocked;

    first = post_holding_the_slot(&f, prov, &sp);
    reqs = &ferry__xfer_of(f.p.init)->req;
    tu_fill(sp.buf, 4096, 0x4242);
    iov = (struct ferry_iov){sp.buf, sp.mem, f.rmem, 0, 4096};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &queued), 0);
    opts.timeout_ms = 200;
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, &opts, &late), 0);
    for (int i = 0; i < 10; i++)
        ck_assert_int_ge(ferry_progress(f.p.init), 0);
    /* The first's write is larger than an operation: the rest of it
     * waits for the slot too.  All three wait on the peer's list for
     * rail 0, in the order they were made. */
    blocked = &f.p.peer->live.blocked[0];
    ck_assert_msg(first->list == blocked && queued->list == blocked &&
                      late->list == blocked,
                  "%s: requests without a slot are not blocked", prov);
    ck_assert_ptr_eq(blocked->head, first);
    ck_assert_ptr_eq(blocked->tail, late);
    ck_assert_uint_eq(reqs->blocked, 3);
    ck_assert_uint_eq(reqs->running, 3);
    ck_assert_uint_eq(queued->cur_iov, 0);
    /* Waiting, the third still ends at its deadline, and is not waiting
     * any more. */
    expect_deadline(late, 200, prov);
    ck_assert_ptr_eq(late->list, &reqs->done);
    ck_assert_uint_eq(reqs->blocked, 2);
    ferry_req_close(late);
    /* Once the first is back, it retires and the queued one gets the
     * slot. */
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(first, 30000), 0);
    ck_assert_ptr_eq(first->list, &reqs->done);
    for (int i = 0; i < 1000 && queued->cur_iov == 0; i++)
        ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_msg(queued->cur_iov == 1, "%s: the queued request was never "
                  "posted", prov);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(queued, 30000), 0);
    tu_assert_pattern(f.tbuf, 4096, 0x4242, "%s", prov);
    ferry_req_close(queued);
    ferry_req_close(first);
    ck_assert_uint_eq(reqs->parked.n + reqs->active.n + reqs->blocked, 0);
    close_holding_the_slot(&f, &sp);
}
END_TEST

/*
 * A notification that finds no slot waits in the same line as the writes
 * before it, not beside them: a stream of writes that took every slot
 * as it came free left a control message waiting 20 s (ferry_bench, 256
 * writes in flight on shm).
 */
START_TEST(test_notification_waits_in_line)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    ferry_req_t *first, *queued, *note;
    struct spare sp;
    struct ferry_iov iov;
    struct ferry_notification got;
    struct ferry__req_list *blocked;
    int n = 0;

    first = post_holding_the_slot(&f, prov, &sp);
    blocked = &f.p.peer->live.blocked[0];
    iov = (struct ferry_iov){sp.buf, sp.mem, f.rmem, 0, 4096};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &queued), 0);
    ck_assert_int_eq(ferry_notify_send(f.p.peer, 7, 70, NULL, &note), 0);
    for (int i = 0; i < 10; i++)
        ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_msg(note->list == blocked && blocked->tail == note &&
                      note->prev == queued,
                  "%s: the notification does not wait behind the write "
                  "made before it", prov);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(first, 30000), 0);
    for (int i = 0; i < 100000 && ferry_req_test(note) == FERRY_EINPROGRESS;
         i++)
        drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_test(queued), 0);
    ck_assert_int_eq(ferry_req_test(note), 0);
    for (int i = 0; i < 100000 && n == 0; i++)
        n = ferry_notify_poll(f.p.target, &got, 1);
    ck_assert_int_eq(n, 1);
    ck_assert_uint_eq(got.id, 7);
    ck_assert_uint_eq(got.value, 70);
    ferry_req_close(note);
    ferry_req_close(queued);
    ferry_req_close(first);
    close_holding_the_slot(&f, &sp);
}
END_TEST

/*
 * Peers take turns at the slots that come free: with one slot, a long
 * line of writes to one peer does not keep another peer's write waiting
 * until the line is done.  Only peers with blocked requests are in line
 * (a pass walks them, not every peer).  (Peers are listed newest first, so the line
 * goes to the newer peer, which would otherwise always go first.)
 */
START_TEST(test_peers_take_turns)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_config cfg;
    ferry_context_t *target_b;
    ferry_peer_t *peer_b;
    struct spare sp;
    ferry_mem_t *tmem_b;
    ferry_rmem_t *rmem_b;
    uint8_t *tbuf_b = tu_alloc_buf(4096);
    uint8_t addr[512];
    size_t len = sizeof(addr);
    ferry_req_t *first, *line[4], *other;
    struct ferry_iov iov;
    struct ferry__peer_ring *ring;

    first = post_holding_the_slot(&f, prov, &sp);
    tu_config(&cfg, prov);
    cfg.progress_thread = 0; /* stalled, as the first target */
    target_b = tu_context_cfg(&cfg);
    ck_assert_int_eq(ferry_context_address(target_b, addr, &len), 0);
    ck_assert_int_eq(ferry_peer_add(f.p.init, addr, len, &peer_b), 0);
    tmem_b = tu_register(target_b, tbuf_b, 4096, FERRY_ACCESS_REMOTE_WRITE);
    rmem_b = tu_share(tmem_b, peer_b);
    iov = (struct ferry_iov){sp.buf, sp.mem, rmem_b, 0, 4096};
    /* The connection to the second peer is made first: while it is being
     * made, the provider pushes back and the other peer's write would go
     * ahead anyway. */
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(first, 30000), 0);
    ferry_req_close(first);
    ck_assert_int_eq(ferry_write(peer_b, &iov, 1, NULL, &line[0]), 0);
    for (int i = 0; i < 100000 && ferry_req_test(line[0]) != 0; i++)
        ck_assert_int_ge(ferry_progress(target_b), 0);
    ck_assert_int_eq(ferry_req_test(line[0]), 0);
    ferry_req_close(line[0]);
    /* The slot held again, by a write to the first peer. */
    first = post_stuck(&f, 0);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(ferry_write(peer_b, &iov, 1, NULL, &line[i]), 0);
    iov.rmem = f.rmem;
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &other), 0);
    ck_assert_ptr_eq(line[3]->list, &peer_b->live.blocked[0]);
    ck_assert_ptr_eq(other->list, &f.p.peer->live.blocked[0]);
    /* Both peers are in line, in the order their requests blocked (the
     * rest of the first peer's long write first): a pass walks them, and
     * no other peer. */
    ring = &ferry__xfer_of(f.p.init)->req.blocked_peers;
    ck_assert_ptr_eq(ring->next, &f.p.peer->live.in_line);
    ck_assert_ptr_eq(ring->next->next, &peer_b->live.in_line);
    ck_assert_ptr_eq(ring->prev, &peer_b->live.in_line);
    for (int i = 0; i < 100000 && ferry_req_test(other) == FERRY_EINPROGRESS;
         i++) {
        ck_assert_int_ge(ferry_progress(f.p.target), 0);
        ck_assert_int_ge(ferry_progress(target_b), 0);
    }
    ck_assert_int_eq(ferry_req_test(other), 0);
    ck_assert_msg(ferry_req_test(line[3]) == FERRY_EINPROGRESS,
                  "%s: the other peer's write waited for the whole line",
                  prov);
    for (int i = 0; i < 4; i++) {
        for (int k = 0; k < 100000 &&
                        ferry_req_test(line[i]) == FERRY_EINPROGRESS;
             k++) {
            ck_assert_int_ge(ferry_progress(f.p.target), 0);
            ck_assert_int_ge(ferry_progress(target_b), 0);
        }
        ck_assert_int_eq(ferry_req_test(line[i]), 0);
        ferry_req_close(line[i]);
    }
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(first, 30000), 0);
    /* With nothing blocked, nobody is in line. */
    ck_assert_ptr_eq(ring->next, ring);
    ck_assert(!ferry__peer_ring_on(&peer_b->live.in_line));
    ck_assert(!ferry__peer_ring_on(&f.p.peer->live.in_line));
    ferry_req_close(other);
    ferry_req_close(first);
    ck_assert_int_eq(ferry_rmem_close(rmem_b), 0);
    ck_assert_int_eq(ferry_peer_close(peer_b), 0);
    ck_assert_int_eq(ferry_mem_close(tmem_b), 0);
    ferry_context_close(target_b);
    tu_free_buf(tbuf_b, 4096);
    close_holding_the_slot(&f, &sp);
}
END_TEST

/* n iovs of a 4 KiB block each, the i-th at i x 4 KiB on both sides. */
static void block_iovs(const struct tu_fx *f, struct ferry_iov *iov, int n)
{
    for (int i = 0; i < n; i++)
        iov[i] = (struct ferry_iov){f->lbuf + i * 4096, f->lmem, f->rmem,
                                    (uint64_t)i * 4096, 4096};
}

/*
 * A peer reached over the context's second transport (shared memory
 * beside tcp: config.shm_peers) has rails that do not start at the
 * context's first.  A request of its that finds no slot waits in the line
 * of the rail it waits for, by that rail's index in the context; it was
 * taken for the first tcp rail's, which had a slot, so the request was
 * never parked and every progress pass tried it again.
 */
START_TEST(test_second_transport_waits_in_its_rails_line)
{
    struct ferry_config cfg;
    struct tu_fx f;
    struct ferry__rail *shm_rail;
    struct ferry_iov iov[2];
    ferry_req_t *held, *waits;

    tu_config(&cfg, tu_tcp());
    cfg.shm_peers = 1;
    cfg.tx_depth = 1;
    cfg.endpoints_per_domain = 1;
    tu_fx_open_stalled(&f, tu_tcp(), &cfg, STUCK, STUCK, NULL);
    shm_rail = ferry__peer_rail(f.p.peer, 0);
    ck_assert_msg(shm_rail->index != 0, "the peer of this host is not on "
                  "the second transport (rail %u)", shm_rail->index);
    tu_fill(f.lbuf, 2 * 4096, 0x7171);
    block_iovs(&f, iov, 2);
    ck_assert_int_eq(ferry_write(f.p.peer, &iov[0], 1, NULL, &held), 0);
    ck_assert_uint_eq(held->ops_in_flight, 1);
    ck_assert_int_eq(ferry_write(f.p.peer, &iov[1], 1, NULL, &waits), 0);
    ck_assert_msg(waits->list == &f.p.peer->live.blocked[shm_rail->index],
                  "a request without a slot on rail %u is not in its line "
                  "(%s)", shm_rail->index,
                  waits->list == &ferry__xfer_of(f.p.init)->req.active
                      ? "it is active: every pass tries it"
                      : "some other list");
    for (int i = 0; i < 100000 && ferry_req_test(waits) == FERRY_EINPROGRESS;
         i++)
        drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(held, 30000), 0);
    ck_assert_int_eq(ferry_req_wait(waits, 30000), 0);
    tu_assert_pattern(f.tbuf, 2 * 4096, 0x7171, "tcp with shm peers");
    ferry_req_close(held);
    ferry_req_close(waits);
    tu_fx_close(&f);
}
END_TEST

/*
 * Once the provider pushed back while the peer had operations out on the
 * rail, their count is the peer's window there: later writes wait for one
 * to come back instead of being offered again whenever the rail's epoch
 * moves (a few idle progress calls).  libfabric 1.17's shm takes one 4 KiB
 * write that waits for its delivery at a time per endpoint and peer, and
 * every write of a stream drew one futile offer.  The window grows again,
 * twice as wide for every FERRY__WINDOW_GROWS_AFTER operations that came
 * back.
 * (The push-back is the provider's answer, given here as it would be.)
 */
START_TEST(test_push_back_sets_a_window)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_fx f;
    struct ferry__xfer *x;
    struct ferry__lock *lock;
    struct ferry__rail *rail;
    struct ferry__peer_live *live;
    struct ferry_iov iov[2];
    ferry_req_t *out, *waits;
    unsigned back;

    tu_config(&cfg, prov);
    cfg.endpoints_per_domain = 1;
    tu_fx_open_stalled(&f, prov, &cfg, STUCK, STUCK, NULL);
    x = ferry__xfer_of(f.p.init);
    lock = &ferry__fabric_of(f.p.init)->lock;
    rail = ferry__peer_rail(f.p.peer, 0);
    live = &f.p.peer->live;
    tu_fill(f.lbuf, (2 + FERRY__WINDOW_GROWS_AFTER) * 4096, 0x5151);
    block_iovs(&f, iov, 2);
    ck_assert_int_eq(ferry_write(f.p.peer, &iov[0], 1, NULL, &out), 0);
    ck_assert_uint_eq(out->ops_in_flight, 1);
    ck_assert_uint_eq(live->window[rail->index], 0);
    ferry__lock_acquire(lock);
    ferry__op_pushed_back(x, f.p.peer, rail);
    ferry__lock_release(lock);
    ck_assert_uint_eq(live->window[rail->index], 1);
    ck_assert_int_eq(ferry_write(f.p.peer, &iov[1], 1, NULL, &waits), 0);
    for (int i = 0; i < 100; i++)
        ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_msg(waits->ops_in_flight == 0 &&
                      waits->list == &live->blocked[rail->index],
                  "%s: a write went out beyond the window of 1 the provider "
                  "set (%zu in flight)",
                  prov, waits->ops_in_flight);
    /* The one out comes back: the waiting write goes. */
    for (int i = 0; i < 100000 && ferry_req_test(waits) == FERRY_EINPROGRESS;
         i++)
        drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(out, 30000), 0);
    ck_assert_int_eq(ferry_req_wait(waits, 30000), 0);
    ferry_req_close(out);
    ferry_req_close(waits);
    /* Two came back; after FERRY__WINDOW_GROWS_AFTER, twice as many may
     * go. */
    back = live->window_age[rail->index];
    ck_assert_uint_ge(back, 2);
    for (unsigned i = back; i < FERRY__WINDOW_GROWS_AFTER; i++) {
        struct ferry_iov one = {f.lbuf + (2 + i) * 4096, f.lmem, f.rmem,
                                (2 + i) * 4096, 4096};
        ferry_req_t *req;

        ck_assert_int_eq(ferry_write(f.p.peer, &one, 1, NULL, &req), 0);
        tu_finish_on_stalled(f.p.target, req, "a write after the window");
    }
    ck_assert_uint_eq(live->window[rail->index], 2);
    tu_assert_pattern(f.tbuf, 2 * 4096, 0x5151, "%s", prov);
    tu_fx_close(&f);
}
END_TEST

/*
 * ferry_req_close of a retired request takes no lock: the request waits on
 * the given-back stack for the next progress pass.  A second free of
 * the handle before then changes nothing.
 */
START_TEST(test_free_retired_without_lock)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct ferry_iov iov;
    struct ferry__req_part *reqs;
    ferry_req_t *req;

    tu_fx_open_stalled(&f, prov, NULL, STUCK, STUCK, NULL);
    reqs = &ferry__xfer_of(f.p.init)->req;
    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, 64};
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
    drain_both(f.p.init, f.p.target);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    ck_assert_ptr_eq(req->list, &reqs->done);
    ck_assert_uint_eq(reqs->done.n, 1);
    ferry_req_close(req);
    ck_assert_ptr_eq(atomic_load(&reqs->given_back), req);
    ck_assert_ptr_null(req->stack_next);
    ferry_req_close(req); /* the caller's mistake: ignored */
    ck_assert_ptr_eq(atomic_load(&reqs->given_back), req);
    ck_assert_ptr_null(req->stack_next);
    ck_assert_uint_eq(reqs->done.n, 1);
    ck_assert_int_ge(ferry_progress(f.p.init), 0);
    ck_assert_ptr_null(atomic_load(&reqs->given_back));
    ck_assert_uint_eq(reqs->done.n, 0);
    tu_fx_close(&f);
}
END_TEST

/* ---- peer killed ------------------------------------------------------------- */

/*
 * Killed while data flows: 1 MiB operations, at most four out, so once
 * 2 MiB have completed the rest (at least 58 MiB) cannot finish without
 * this side posting more, which it does only after the kill.
 */
START_TEST(test_peer_killed_mid_transfer)
{
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct victim v;
    struct ferry_iov iov;
    ferry_req_t *req;
    uint64_t t0;
    int ret;

    tu_config(&cfg, prov);
    cfg.max_msg_size = MiB;
    cfg.tx_depth = 4;
    victim_open(&v, prov, &cfg);
    iov = (struct ferry_iov){v.buf, NULL, v.rmem, 0, BIG};
    opts.timeout_ms = KILL_DEADLINE_MS;
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_write(v.peer, &iov, 1, &opts, &req), 0);
    do {
        ret = ferry_req_test(req);
        ck_assert_msg(ret == FERRY_EINPROGRESS,
                      "%s: the transfer ended with %s after %llu bytes before "
                      "the kill: %s",
                      prov, ferry_strerror(ret),
                      (unsigned long long)req->bytes_done, ferry_last_error());
    } while (req->bytes_done < 2 * MiB);
    /* At most four 1 MiB operations are out: the rest needs posting. */
    ck_assert_uint_lt(req->bytes_done + 4 * MiB, BIG);
    reap_killed(&v.c);
    victim_finish(&v, req, t0, prov);
}
END_TEST

/*
 * Killed holding its region's lock.  libfabric's shm before 1.19 keeps a
 * spin lock in each region that the owner takes to progress and a peer
 * takes to post there (fabric/shm_guard.h): here the lock of each of the
 * child's regions is taken as its progress takes it, then the child is
 * killed.  A write must end as a dead peer's does, not spin for ever
 * inside fi_write, and the locks are free again.  Where the regions have
 * another layout (1.19 on) the write ends all the same.
 */
struct region_lock {
    _Atomic int *lock; /* in a mapping of the region's head */
    void *map;
};

/* Where the lock lies in the head of a region of libfabric 1.17's layout
 * (u8 version 4, u8, u16, i32 owner, u8, u8, u32, a pointer, the lock),
 * and the head's length. */
#define V4_LOCK_AT (16 + sizeof(void *))
#define V4_HEAD (V4_LOCK_AT + sizeof(int))

/* Takes the locks of pid's regions of libfabric 1.17's layout; returns
 * how many, their mappings in out. */
static unsigned take_region_locks(pid_t pid, struct region_lock *out,
                                  unsigned cap)
{
    int free_value = ferry__spin_free_value();
    char prefix[32];
    unsigned n = 0;
    struct dirent *e;
    DIR *d = opendir("/dev/shm");

    ck_assert_ptr_nonnull(d);
    snprintf(prefix, sizeof(prefix), "ferry_%d_", (int)pid);
    while ((e = readdir(d)) != NULL && n < cap) {
        int fd;
        uint8_t *h;

        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        fd = openat(dirfd(d), e->d_name, O_RDWR);
        ck_assert_int_ge(fd, 0);
        h = mmap(NULL, V4_HEAD, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        ck_assert_ptr_ne(h, MAP_FAILED);
        if (h[0] != 4 || *(int32_t *)(void *)(h + 4) != pid) {
            munmap(h, V4_HEAD);
            continue;
        }
        out[n] = (struct region_lock){(_Atomic int *)(void *)(h + V4_LOCK_AT), h};
        /* Taken as pthread_spin_lock takes it, spinning while the child's
         * progress holds it. */
        for (int expect = free_value; !atomic_compare_exchange_weak(
                 out[n].lock, &expect, !free_value);
             expect = free_value)
            ;
        n++;
    }
    closedir(d);
    return n;
}

/* The guard releases a dead owner's locks together, 10 ms after its
 * death; the write may end as soon as the one it spins on is free, so the
 * others are waited for, this long at most. */
#define GUARD_WAIT_MS 2000

/* Whether lock is free within ms milliseconds. */
static bool lock_freed_within(_Atomic int *lock, unsigned ms)
{
    uint64_t until = tu_now_ns() + ms * MS;

    while (atomic_load(lock) != ferry__spin_free_value()) {
        if (tu_now_ns() >= until)
            return false;
        usleep(1000);
    }
    return true;
}

START_TEST(test_peer_killed_holding_its_lock)
{
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct region_lock locks[8];
    struct victim v;
    struct ferry_iov iov;
    ferry_req_t *req;
    uint64_t t0;
    unsigned n;

    tu_config(&cfg, "shm");
    victim_open(&v, "shm", &cfg);
    n = take_region_locks(v.c.pid, locks, TU_ARRAY_LEN(locks));
    ck_assert_msg(n > 0 || FI_VERSION_GE(fi_version(), FI_VERSION(1, 19)),
                  "libfabric %u.%u: no region of the child's has the lock "
                  "of 1.17's layout",
                  FI_MAJOR(fi_version()), FI_MINOR(fi_version()));
    reap_killed(&v.c);
    iov = (struct ferry_iov){v.buf, NULL, v.rmem, 0, 64 * KiB};
    opts.timeout_ms = KILL_DEADLINE_MS;
    t0 = tu_now_ns();
    ck_assert_int_eq(ferry_write(v.peer, &iov, 1, &opts, &req), 0);
    victim_finish(&v, req, t0, "shm");
    for (unsigned i = 0; i < n; i++) {
        ck_assert_msg(lock_freed_within(locks[i].lock, GUARD_WAIT_MS),
                      "region %u of the dead child: its lock is still held "
                      "%d ms after the write ended",
                      i, GUARD_WAIT_MS);
        munmap(locks[i].map, V4_HEAD);
    }
}
END_TEST

/*
 * A peer of this host killed with operations out leaves the host's other
 * peers reachable from the same context.  libfabric's shm up to 2.4 hands
 * an endpoint's operations back in the order they were posted, each once
 * its peer answered (fabric/shm_mend.h): a dead peer's never are, and
 * the operations to every other peer of the host waited behind them
 * until liveness declared those peers too.  Here operations to the child
 * are posted just after its death, 4 KiB writes (through bounce buffers)
 * and 256 KiB writes and reads (copied by the target), and a write to a
 * live child behind them; the live child must then take writes for twice the
 * liveness period and stay up, while the dead one is declared dead.
 * Where the provider then gives the dead one's operations back (up to
 * 2.4 and on 2.6, with ferry's mend), every slot they held must come
 * back; on 2.6 they would be held until the context closed otherwise
 * (its commands never come back).  With _i 1 both children are then
 * removed and a third takes the dead one's entry in shm's tables, which
 * still held the dead one's id for this endpoint (fabric/shm_mend.h): it
 * must be reached, and live.
 */
#define LIVENESS_MS 1000
#define OUT_TO_DEAD 8
#define SLOTS_BACK_MS 5000

START_TEST(test_killed_peer_leaves_the_others)
{
    struct ferry_config cfg;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct victim v;
    struct tu_child live, third;
    ferry_peer_t *live_peer;
    ferry_rmem_t *live_rmem;
    ferry_req_t *to_dead[OUT_TO_DEAD], *req;
    struct ferry_iov iov;
    enum ferry_peer_state state;
    char why[256];
    uint64_t t0;
    int ret;

    /* Every child before the first context: a process with threads
     * forks none under ThreadSanitizer. */
    tu_child_start(&live, "shm", MiB, 0x7171);
    tu_child_start(&third, "shm", 64 * KiB, 0x7272);
    tu_config(&cfg, "shm");
    cfg.liveness_ms = LIVENESS_MS;
    victim_open(&v, "shm", &cfg);
    tu_child_reach(v.ctx, &live, &live_peer, &live_rmem);
    /* Both answer once: connected, up. */
    iov = (struct ferry_iov){v.buf, NULL, v.rmem, 0, 4 * KiB};
    ck_assert_int_eq(ferry_write(v.peer, &iov, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    ferry_req_close(req);
    iov = (struct ferry_iov){v.buf, NULL, live_rmem, 0, 4 * KiB};
    ck_assert_int_eq(ferry_write(live_peer, &iov, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 30000), 0);
    ferry_req_close(req);

    reap_killed(&v.c);
    t0 = tu_now_ns();
    for (int i = 0; i < OUT_TO_DEAD; i++) {
        size_t len = i % 2 == 0 ? 4 * KiB : 256 * KiB;

        iov = (struct ferry_iov){v.buf + (size_t)i * 256 * KiB, NULL, v.rmem,
                                 (uint64_t)i * 256 * KiB, len};
        ck_assert_int_eq(i % 4 == 3
                             ? ferry_read(v.peer, &iov, 1, NULL, &to_dead[i])
                             : ferry_write(v.peer, &iov, 1, NULL, &to_dead[i]),
                         0);
    }
    do {
        iov = (struct ferry_iov){v.buf, NULL, live_rmem, 0, 4 * KiB};
        ck_assert_int_eq(ferry_write(live_peer, &iov, 1, &opts, &req), 0);
        ret = ferry_req_wait(req, 30000);
        ck_assert_msg(ret == 0,
                      "a write to the live peer, %.3f s after the other's "
                      "death, gave %s: %s",
                      secs_since(t0), ferry_strerror(ret), ferry_last_error());
        ferry_req_close(req);
    } while (secs_since(t0) < 2 * LIVENESS_MS / 1000.0);
    ck_assert_int_eq(ferry_peer_state(live_peer, &state, why, sizeof(why)),
                     0);
    ck_assert_msg(state == FERRY_PEER_UP, "the live peer: state %d: %s",
                  (int)state, why);
    for (int i = 0; i < OUT_TO_DEAD; i++) {
        ret = ferry_req_wait(to_dead[i], 30000);
        ck_assert_msg(ret == FERRY_EPEERDEAD, "write %d to the dead peer: %s: %s",
                      i, ferry_strerror(ret), ferry_last_error());
        ferry_req_close(to_dead[i]);
    }
    ck_assert_int_eq(ferry_peer_state(v.peer, &state, why, sizeof(why)), 0);
    ck_assert_msg(state == FERRY_PEER_DEAD, "the dead peer: state %d: %s",
                  (int)state, why);
    /* The guard saw the death and said so. */
    ck_assert_msg(strstr(why, "on this host died") != NULL,
                  "the dead peer was declared for another reason: %s", why);
    if (ferry__shm_mend_gives_back(fi_version())) {
        t0 = tu_now_ns();
        while (ops_out(v.ctx) > 0 && secs_since(t0) * 1000 < SLOTS_BACK_MS)
            ck_assert_int_ge(ferry_progress(v.ctx), 0);
        ck_assert_msg(ops_out(v.ctx) == 0,
                      "%zu operations still out %d ms after the dead "
                      "peer's requests ended",
                      ops_out(v.ctx), SLOTS_BACK_MS);
    }
    if (_i == 0) {
        tu_child_stop(&live);
        tu_child_stop(&third);
        ferry_context_close(v.ctx);
        tu_free_buf(v.buf, BIG);
        return;
    }
    ck_assert_int_eq(ferry_rmem_close(v.rmem), 0);
    ck_assert_int_eq(ferry_peer_close(v.peer), 0);
    ck_assert_int_eq(ferry_rmem_close(live_rmem), 0);
    ck_assert_int_eq(ferry_peer_close(live_peer), 0);
    tu_child_stop(&live);
    tu_child_reach(v.ctx, &third, &live_peer, &live_rmem);
    tu_fill(v.buf, 64 * KiB, 0x7373);
    iov = (struct ferry_iov){v.buf, NULL, live_rmem, 0, 64 * KiB};
    ck_assert_int_eq(ferry_write(live_peer, &iov, 1, NULL, &req), 0);
    ret = ferry_req_wait(req, 10000);
    ck_assert_msg(ret == 0, "a write to a peer added after the dead one "
                            "was removed gave %s: %s",
                  ferry_strerror(ret), ferry_last_error());
    ferry_req_close(req);
    ck_assert(tu_child_verify(&third, 0x7373));
    tu_child_stop(&third);
    ferry_context_close(v.ctx);
    tu_free_buf(v.buf, BIG);
}
END_TEST

/* ---- threads ---------------------------------------------------------------- */

enum { NTHREADS = 4, NREQS = 64, PIECE = 4096 + 17 };
#define SLICE ((size_t)NREQS * 8 * KiB)

struct poster {
    pthread_t tid;
    struct tu_fx *f;
    unsigned index;
    char error[256];
};

static atomic_bool progress_stop;
static _Atomic unsigned long progress_calls;

static void *progress_loop(void *arg)
{
    ferry_context_t *ctx = arg;

    while (!atomic_load(&progress_stop)) {
        if (ferry_progress(ctx) < 0)
            break;
        atomic_fetch_add(&progress_calls, 1);
    }
    return NULL;
}

static void *poster_main(void *arg)
{
    struct poster *p = arg;
    struct tu_fx *f = p->f;
    size_t base = p->index * SLICE;
    uint8_t *local = f->lbuf + base;
    int ret;

    tu_fill(local, SLICE, 0xa000 + p->index);
    for (size_t k = 0; k < NREQS; k++) {
        /* Each piece at its own offset inside the thread's slice. */
        size_t off = k * 8 * KiB + (k % 3);
        struct ferry_iov iov = {local + off, k % 2 ? f->lmem : NULL, f->rmem,
                                base + off, PIECE};
        ferry_req_t *req = NULL;

        ret = ferry_write(f->p.peer, &iov, 1, NULL, &req);
        if (ret == 0)
            ret = ferry_req_wait(req, -1);
        ferry_req_close(req);
        if (ret != 0) {
            snprintf(p->error, sizeof(p->error),
                     "thread %u request %zu: %s: %s", p->index, k,
                     ferry_strerror(ret), ferry_last_error());
            return NULL;
        }
    }
    /* Read the whole slice back through the same peer. */
    {
        uint8_t *back = malloc(SLICE);
        struct ferry_iov iov = {back, NULL, f->rmem, base, SLICE};
        ferry_req_t *req;

        if (back == NULL) {
            snprintf(p->error, sizeof(p->error), "out of memory");
            return NULL;
        }
        ret = ferry_read(f->p.peer, &iov, 1, NULL, &req);
        if (ret == 0)
            ret = ferry_req_wait(req, -1);
        if (ret == 0)
            ferry_req_close(req);
        for (size_t k = 0; ret == 0 && k < NREQS; k++) {
            size_t off = k * 8 * KiB + (k % 3);
            if (memcmp(back + off, local + off, PIECE) != 0)
                snprintf(p->error, sizeof(p->error),
                         "thread %u: piece %zu read back differs", p->index,
                         k);
        }
        if (ret != 0)
            snprintf(p->error, sizeof(p->error), "thread %u read: %s: %s",
                     p->index, ferry_strerror(ret), ferry_last_error());
        free(back);
    }
    return NULL;
}

START_TEST(test_threads_post_while_one_progresses)
{
    const char *prov = tu_providers[_i];
    struct tu_fx f;
    struct poster posters[NTHREADS];
    pthread_t prog;

    tu_fx_open(&f, prov, NULL, 0, 1, NTHREADS * SLICE, NTHREADS * SLICE);
    atomic_store(&progress_stop, false);
    ck_assert_int_eq(pthread_create(&prog, NULL, progress_loop, f.p.init), 0);
    for (unsigned t = 0; t < NTHREADS; t++) {
        posters[t] = (struct poster){.f = &f, .index = t};
        ck_assert_int_eq(
            pthread_create(&posters[t].tid, NULL, poster_main, &posters[t]),
            0);
    }
    for (unsigned t = 0; t < NTHREADS; t++)
        ck_assert_int_eq(pthread_join(posters[t].tid, NULL), 0);
    atomic_store(&progress_stop, true);
    ck_assert_int_eq(pthread_join(prog, NULL), 0);
    for (unsigned t = 0; t < NTHREADS; t++)
        ck_assert_msg(posters[t].error[0] == '\0', "%s: %s", prov,
                      posters[t].error);
    ck_assert_uint_gt(atomic_load(&progress_calls), 0);
    /* Every piece landed where its thread put it. */
    for (unsigned t = 0; t < NTHREADS; t++) {
        for (size_t k = 0; k < NREQS; k++) {
            size_t off = t * SLICE + k * 8 * KiB + (k % 3);

            ck_assert_msg(memcmp(f.tbuf + off, f.lbuf + off, PIECE) == 0,
                          "%s: thread %u piece %zu differs at the target",
                          prov, t, k);
        }
        /* And the local slice is the thread's pattern throughout. */
        tu_assert_pattern(f.lbuf + t * SLICE, SLICE, 0xa000 + t, "%s", prov);
    }
    ck_assert_ptr_null(ferry__xfer_of(f.p.init)->req.active.head);
    tu_fx_close(&f);
}
END_TEST

/* ---- progress thread on the initiator ------------------------------------------ */

/* Whether target's progress thread raised its SLEEPING word within
 * ms milliseconds: it sleeps on its bell (fabric/pulse.h). */
static bool sleeps_within(ferry_context_t *target, unsigned ms)
{
    const struct ferry__fabric *fab = ferry__fabric_of(target);
    uint64_t until = tu_now_ns() + ms * MS;

    while (tu_now_ns() < until) {
        if (atomic_load(&fab->pulse.words[FERRY__PULSE_SLEEPING]) != 0)
            return true;
        usleep(1000);
    }
    return false;
}

/*
 * An idle shm target exposing a region sleeps on its bell instead of
 * polling (it used to keep a core busy for ever), and the writes of a
 * peer of this host wake it: each lands, and the thread sleeps again.
 */
START_TEST(test_idle_shm_target_sleeps_and_wakes)
{
    struct tu_fx f;

    tu_fx_open(&f, "shm", NULL, 0, 1, 64 * KiB, 64 * KiB);
    ck_assert_int_ge(ferry__pulse_bell_fd(ferry__fabric_of(f.p.target)), 0);
    for (unsigned round = 0; round < 3; round++) {
        struct ferry_iov iov = {f.lbuf, f.lmem, f.rmem, 0, 64 * KiB};
        ferry_req_t *req;

        ck_assert_msg(sleeps_within(f.p.target, 2000),
                      "round %u: the idle target never slept", round);
        tu_fill(f.lbuf, 64 * KiB, 0xe000 + round);
        ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
        ck_assert_msg(ferry_req_wait(req, 10000) == 0, "round %u: %s", round,
                      ferry_last_error());
        ferry_req_close(req);
        tu_assert_pattern(f.tbuf, 64 * KiB, 0xe000 + round, "round %u",
                          round);
    }
    tu_fx_close(&f);
}
END_TEST

START_TEST(test_initiator_progress_thread)
{
    enum { N = 16 };
    const char *prov = tu_providers[_i];
    struct ferry_config cfg;
    struct tu_pair p;
    uint8_t *tbuf = tu_alloc_buf(N * 64 * KiB), *lbuf = tu_alloc_buf(N * 64 * KiB);
    uint8_t addr[512];
    size_t alen = sizeof(addr);
    ferry_mem_t *tmem;
    ferry_rmem_t *rmem;
    ferry_req_t *req[N];
    int ret;

    tu_config(&cfg, prov);
    cfg.progress_thread = 1;
    ck_assert_int_eq(ferry_context_create(&cfg, &p.init), 0);
    ck_assert_int_eq(ferry_context_create(&cfg, &p.target), 0);
    ck_assert(p.init->progress.started);
    ck_assert_int_eq(ferry_context_address(p.target, addr, &alen), 0);
    ck_assert_int_eq(ferry_peer_add(p.init, addr, alen, &p.peer), 0);
    ck_assert_int_eq(ferry_mem_register(p.target, tbuf, N * 64 * KiB,
                                        FERRY_MEM_HOST, 0, RW, &tmem),
                     0);
    rmem = tu_share(tmem, p.peer);

    /* Many requests out at once, waited in reverse order. */
    for (size_t i = 0; i < N; i++) {
        struct ferry_iov iov = {lbuf + i * 64 * KiB, NULL, rmem,
                                (N - 1 - i) * 64 * KiB, 64 * KiB - i};
        tu_fill(iov.local, iov.len, 0xb000 + i);
        ret = ferry_write(p.peer, &iov, 1, NULL, &req[i]);
        ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    }
    for (size_t i = N; i-- > 0;) {
        ret = ferry_req_wait(req[i], 30000);
        ck_assert_msg(ret == 0, "%s: request %zu: %s: %s", prov, i,
                      ferry_strerror(ret), ferry_last_error());
        ferry_req_close(req[i]);
    }
    for (size_t i = 0; i < N; i++)
        tu_assert_pattern(tbuf + (N - 1 - i) * 64 * KiB, 64 * KiB - i,
                          0xb000 + i, "%s", prov);

    /* A read, with the thread alone making progress: poll without driving
     * (ferry_req_wait would drive it too), by watching the status. */
    memset(lbuf, 0, 64 * KiB);
    {
        struct ferry_iov iov = {lbuf, NULL, rmem, (N - 1) * 64 * KiB,
                                64 * KiB};
        uint64_t until = tu_now_ns() + 30000 * MS;
        int st;

        ck_assert_int_eq(ferry_read(p.peer, &iov, 1, NULL, &req[0]), 0);
        for (;;) {
            ferry__lock_acquire(&ferry__fabric_of(p.init)->lock);
            st = req[0]->status;
            ferry__lock_release(&ferry__fabric_of(p.init)->lock);
            if (st != FERRY_EINPROGRESS)
                break;
            ck_assert_msg(tu_now_ns() < until,
                          "%s: the progress thread did not finish a read",
                          prov);
            usleep(1000);
        }
        ck_assert_int_eq(ferry_req_wait(req[0], 0), 0);
        ferry_req_close(req[0]);
        tu_assert_pattern(lbuf, 64 * KiB, 0xb000, "%s", prov);
    }
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(tmem), 0);
    tu_pair_close(&p);
    tu_free_buf(tbuf, N * 64 * KiB);
    tu_free_buf(lbuf, N * 64 * KiB);
}
END_TEST

/*
 * When the progress thread stands aside for callers that test (aside.h),
 * look by look on a made-up clock: not for a round of tests shorter than
 * TESTER_SUSTAIN_NS; for tests that keep coming, with naps that double
 * up to TESTER_NAP_MAX_NS; never once they pause for TESTER_QUIET_NS or
 * a caller arms; and from the start again after that.
 */
START_TEST(test_aside_policy)
{
    struct ferry__aside a = FERRY__ASIDE_INIT;
    uint64_t t = 1000, calls = 0, nap, last = 0;

    ck_assert_uint_eq(ferry__aside_look(&a, calls, false, t), 0);
    /* A round of 10 tests, one a microsecond, then an arm. */
    for (unsigned i = 0; i < 10; i++)
        ck_assert_uint_eq(ferry__aside_look(&a, ++calls, false, t += 1000),
                          0);
    ck_assert_uint_eq(ferry__aside_look(&a, calls, true, t += 500), 0);
    /* Tests that keep coming: aside once TESTER_SUSTAIN_NS have passed. */
    for (uint64_t from = t; t - from < TESTER_SUSTAIN_NS;)
        ck_assert_uint_eq(ferry__aside_look(&a, ++calls, false, t += 1000),
                          0);
    nap = ferry__aside_look(&a, ++calls, false, t += 1000);
    ck_assert_uint_eq(nap, TESTER_NAP_MIN_NS);
    /* Still coming after each nap: the naps double, up to the bound. */
    for (unsigned i = 0; i < 8; i++) {
        last = nap;
        nap = ferry__aside_look(&a, ++calls, false, t += nap);
        ck_assert_uint_eq(nap, last * 2 > TESTER_NAP_MAX_NS
                                   ? TESTER_NAP_MAX_NS
                                   : last * 2);
    }
    ck_assert_uint_eq(nap, TESTER_NAP_MAX_NS);
    /* No test during a nap: the thread takes over. */
    ck_assert_uint_eq(ferry__aside_look(&a, calls, false, t += nap), 0);
    /* Coming again, it starts over, and an arm hands back at once. */
    ck_assert_uint_eq(ferry__aside_look(&a, ++calls, false, t += 1000), 0);
    for (uint64_t from = t; t - from < TESTER_SUSTAIN_NS;)
        ferry__aside_look(&a, ++calls, false, t += 1000);
    ck_assert_uint_eq(ferry__aside_look(&a, ++calls, false, t += 1000),
                      TESTER_NAP_MIN_NS * 2);
    ck_assert_uint_eq(ferry__aside_look(&a, calls, true, t += 100), 0);
    /* A pause shorter than TESTER_QUIET_NS is not the end of them. */
    for (uint64_t from = t; t - from <= TESTER_SUSTAIN_NS;)
        ferry__aside_look(&a, ++calls, false, t += 1000);
    ck_assert_uint_ne(ferry__aside_look(&a, calls, false,
                                        t += TESTER_QUIET_NS - 1),
                      0);
}
END_TEST

/*
 * With a progress thread, a caller's tests are counted and, while the
 * thread stands aside for them, progress in its place; a caller that
 * arms the descriptor hands back; waiters and ferry's own looks
 * (ferry__req_look, the fan-out's) are not counted and leave the
 * progress to the thread.  Here the initiator says it has a thread but
 * runs none, so only what the caller does moves its completions.
 */
START_TEST(test_tester_takes_the_threads_place)
{
    const char *prov = tu_providers[_i];
    struct ferry__progress_part *pp;
    struct ferry_iov iov;
    struct tu_fx f;
    ferry_req_t *req;
    uint64_t until, calls;
    int fd, ret;

    tu_fx_open(&f, prov, NULL, 0, 1, 64 * KiB, 64 * KiB);
    pp = &f.p.init->progress;
    pp->started = true; /* no thread: the caller alone progresses */
    ck_assert_int_eq(ferry_context_fd(f.p.init, &fd), 0);
    ck_assert_int_eq(ferry_context_arm(f.p.init), 0);
    ck_assert(atomic_load(&pp->tester_armed));

    iov = (struct ferry_iov){f.lbuf, f.lmem, f.rmem, 0, 64 * KiB};
    tu_fill(f.lbuf, 64 * KiB, 0xd100);
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
    /* ferry's own looks leave it to the thread, uncounted. */
    for (unsigned i = 0; i < 100; i++)
        ck_assert_int_eq(ferry__req_look(req), FERRY_EINPROGRESS);
    ck_assert_uint_eq(atomic_load(&pp->tester_calls), 0);
    ck_assert(atomic_load(&pp->tester_armed));
    /* Tests while the thread works: counted, and they leave it to it. */
    for (unsigned i = 0; i < 100; i++)
        ck_assert_int_eq(ferry_req_test(req), FERRY_EINPROGRESS);
    ck_assert_uint_eq(atomic_load(&pp->tester_calls), 100);
    ck_assert(!atomic_load(&pp->tester_armed));
    /* The thread stands aside: the tests complete it. */
    atomic_store(&pp->thread_aside, true);
    until = tu_now_ns() + 30000 * MS;
    while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS)
        ck_assert_msg(tu_now_ns() < until,
                      "%s: a tester did not progress in the thread's place",
                      prov);
    ck_assert_msg(ret == 0, "%s: %s", prov, ferry_last_error());
    calls = atomic_load(&pp->tester_calls);
    ferry_req_close(req);
    tu_assert_pattern(f.tbuf, 64 * KiB, 0xd100, "%s", prov);

    /* A waiter relies on the thread: it is not counted, and does not
     * stand in for it. */
    ck_assert_int_eq(ferry_write(f.p.peer, &iov, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_req_wait(req, 50), FERRY_EAGAIN);
    ck_assert_uint_eq(atomic_load(&pp->tester_calls), calls);
    while ((ret = ferry_req_test(req)) == FERRY_EINPROGRESS)
        ck_assert_msg(tu_now_ns() < until, "%s: the second write", prov);
    ck_assert_int_eq(ret, 0);
    ferry_req_close(req);
    pp->started = false; /* no thread to stop at close */
    tu_fx_close(&f);
}
END_TEST

/* ---- suite ------------------------------------------------------------------ */

static Suite *progress_suite(void)
{
    Suite *s = suite_create("progress");
    int np = (int)tu_nproviders;
    TCase *tc;

    tc = tu_tcase(s, "req", 60);
    tcase_add_loop_test(tc, test_wait_timeout_is_not_the_request, 0, np);

    tc = tu_tcase(s, "deadline", 60);
    tcase_add_loop_test(tc, test_deadline_stalled_target, 0, np);
    tcase_add_loop_test(tc, test_wait_after_idle_starts_afresh, 0, np);
    tcase_add_loop_test(tc, test_deadline_then_destroy, 0, np);
    tcase_add_loop_test(tc, test_deadline_from_context, 0, np);

    tc = tu_tcase(s, "cancel", 60);
    tcase_add_loop_test(tc, test_cancel_in_flight, 0, np);
    tcase_add_loop_test(tc, test_cancel_queued, 0, np);

    tc = tu_tcase(s, "waiting", 60);
    tcase_add_loop_test(tc, test_waiting_requests, 0, np);
    tcase_add_loop_test(tc, test_notification_waits_in_line, 0, np);
    tcase_add_loop_test(tc, test_peers_take_turns, 0, np);
    tcase_add_test(tc, test_second_transport_waits_in_its_rails_line);
    tcase_add_loop_test(tc, test_push_back_sets_a_window, 0, np);
    tcase_add_loop_test(tc, test_free_retired_without_lock, 0, np);

    tc = tu_tcase(s, "killed", 60);
    tcase_add_loop_test(tc, test_peer_killed_mid_transfer, 0, np);
    tcase_add_test(tc, test_peer_killed_holding_its_lock);
    tcase_add_loop_test(tc, test_killed_peer_leaves_the_others, 0,
                        ferry__shm_mend_gives_back(fi_version()) ? 2 : 1);

    tc = tu_tcase(s, "threads", 60);
    tcase_add_loop_test(tc, test_threads_post_while_one_progresses, 0, np);
    tcase_add_loop_test(tc, test_initiator_progress_thread, 0, np);
    tcase_add_loop_test(tc, test_tester_takes_the_threads_place, 0, np);
    tcase_add_test(tc, test_aside_policy);
    tcase_add_test(tc, test_idle_shm_target_sleeps_and_wakes);
    return s;
}

int main(void)
{
    return tu_run(progress_suite());
}
