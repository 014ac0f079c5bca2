/*
 * Liveness and flow control per peer (live.h).
 */
#include "xfer/live.h"

#include <stdarg.h>
#include <stdio.h>

#include <rdma/fi_errno.h>

#include "xfer/notify.h"

/* Checks per liveness period: the declaration is at most this late. */
#define PASSES_PER_PERIOD 8
/* Heartbeats per liveness period while the peer is silent. */
#define PINGS_PER_PERIOD 4

static const char *state_name(enum ferry_peer_state s)
{
    switch (s) {
    case FERRY_PEER_CONNECTING:
        return "connecting";
    case FERRY_PEER_UP:
        return "up";
    case FERRY_PEER_UNREACHABLE:
        return "unreachable";
    default:
        return "dead";
    }
}

int ferry__live_check_peer(const struct ferry_peer *peer, const char *call)
{
    if (!ferry__live_gone(peer))
        return 0;
    return ferry__error(FERRY_EPEERDEAD,
                        "%s: the peer is %s: %s; this handle stays so: "
                        "remove it, and add the peer again with "
                        "ferry_peer_add once it is back",
                        call, state_name(peer->live.state), peer->live.why);
}

void ferry__live_heard(struct ferry__xfer *x, struct ferry_peer *peer)
{
    peer->live.last_heard_ns = x->live.now_ns;
    peer->live.pings = 0;
    /* Over a new connection, if its old one dropped (the pass recounts). */
    peer->live.dropped = false;
    if (peer->live.state == FERRY_PEER_CONNECTING) {
        peer->live.state = FERRY_PEER_UP;
        peer->traffic.became[FERRY_PEER_UP]++;
    }
}

/* Whether a dropped connection to peer may be judged by its answer over a
 * new one: liveness is on, the peer has a pulse to read, and its handle
 * is still the caller's. */
static bool can_probe(const struct ferry__xfer *x,
                      const struct ferry_peer *peer)
{
    return x->reg.fab.cfg.liveness_ms != 0 && peer->pulse.present &&
           !peer->removed && !ferry__live_gone(peer);
}

bool ferry__live_holds(const struct ferry__xfer *x,
                       const struct ferry_peer *peer, int err)
{
    return err == FERRY_ECONNRESET && can_probe(x, peer);
}

void ferry__live_dropped(struct ferry__xfer *x, struct ferry_peer *peer,
                         const char *why)
{
    if (peer->live.dropped)
        return;
    peer->live.dropped = true;
    peer->live.dropped_ns = x->live.now_ns;
    snprintf(peer->live.dropped_why, sizeof(peer->live.dropped_why), "%s",
             why);
    x->live.dropped_peers++;
}

void ferry__live_op_failed(struct ferry__xfer *x, struct ferry_peer *peer,
                           int err, const char *why)
{
    /* With liveness off, nothing is declared: requests end by their own
     * errors and deadlines, as before liveness existed. */
    if (err != FERRY_ECONNRESET || x->reg.fab.cfg.liveness_ms == 0)
        return;
    if (can_probe(x, peer))
        ferry__live_dropped(x, peer, why);
    else
        ferry__live_declare(x, peer, "its connection was reset (%s)", why);
}

void ferry__live_declare(struct ferry__xfer *x, struct ferry_peer *peer,
                         const char *fmt, ...)
{
    struct ferry_notification down = {
        .kind = FERRY_NOTIFICATION_PEER_DOWN,
        .peer = peer,
    };
    char why[sizeof(peer->live.why) + 32];
    va_list ap;

    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    if (ferry__live_gone(peer))
        return;
    peer->live.dropped = false;
    peer->live.state = peer->live.last_heard_ns != 0 ? FERRY_PEER_DEAD
                                                      : FERRY_PEER_UNREACHABLE;
    peer->traffic.became[peer->live.state]++;
    va_start(ap, fmt);
    vsnprintf(peer->live.why, sizeof(peer->live.why), fmt, ap);
    va_end(ap);
    x->live.peers_declared++;
    FERRY_LOG_WARN("peer %s is %s: %s", peer->label,
                   state_name(peer->live.state), peer->live.why);
    snprintf(why, sizeof(why), "the peer is %s: %s",
             state_name(peer->live.state), peer->live.why);
    ferry__reqs_end_to(x, peer, FERRY_EPEERDEAD, why);
    ferry__notify_event(x, &down);
}

void ferry__live_sibling_closing(struct ferry__xfer *x, uint64_t incarnation)
{
    FERRY__ASSERT_LOCKED(&x->reg.fab.lock);
    for (struct ferry_peer *p = x->reg.peers; p != NULL; p = p->next) {
        if (!ferry__peer_transport(p)->shm || !p->pulse.present ||
            p->pulse.incarnation != incarnation)
            continue;
        ferry__live_declare(x, p, "its context was closed "
                                  "(ferry_context_close in this process)");
        ferry__peer_drop_addresses(&x->reg, p);
    }
}

/* Posts a heartbeat on the peer's first rail if there is a slot and the
 * provider takes it (the caller saw none out). */
static void send_ping(struct ferry__xfer *x, struct ferry_peer *peer)
{
    struct ferry__rail *rail = ferry__peer_rail(peer, 0);
    struct ferry__op *op = ferry__op_slot_control(x, peer, rail);

    if (op == NULL || !peer->pulse.present ||
        ferry__ping_post(peer, rail, op) != 0)
        return;
    ferry__op_take(ferry__txq_of(x, rail), op, NULL, peer, FERRY__OP_PING, 0);
    peer->live.ping_out = true;
    x->live.heartbeats++;
}

/* A heartbeat is due: sent unless one is out. */
static void ping(struct ferry__xfer *x, struct ferry_peer *peer)
{
    if (peer->live.ping_out)
        return;
    /* Counted when due, sent or not: a peer whose heartbeat the provider
     * cannot even take (no slot, pushed back, refused) stays silent and is
     * declared when its time is up. */
    peer->live.pings++;
    peer->live.ping_due_ns = x->live.now_ns;
    send_ping(x, peer);
}

/* Declares a peer whose pulse on this host says its context closed: it
 * could answer nothing, and nothing is posted to it (xfer.c). */
static void declare_closed(struct ferry__xfer *x, struct ferry_peer *peer)
{
    ferry__live_declare(x, peer, "its context was closed (its pulse on this "
                                 "host says so)");
}

/*
 * Every progress call while connections are down: a peer whose
 * connection dropped is sent heartbeats (rxm makes a new connection for
 * them) until one answers, which makes it heard again, or until an
 * eighth of the liveness passed: then it is declared.  A refused
 * operation (a stale key, on tcp;ofi_rxm) and a dead peer look alike
 * until then.  Counts the peers still down.
 */
static void probe_dropped(struct ferry__xfer *x, uint64_t now,
                          uint64_t period)
{
    unsigned down = 0;

    for (struct ferry_peer *p = x->reg.peers; p != NULL; p = p->next) {
        struct ferry__peer_live *l = &p->live;

        if (!l->dropped)
            continue;
        if (ferry__pulse_closed(&p->pulse))
            declare_closed(x, p);
        else if (now - l->dropped_ns >= period / PASSES_PER_PERIOD)
            ferry__live_declare(x, p,
                                "its connection was reset (%s), and it did "
                                "not answer over a new connection within "
                                "%llu ms",
                                l->dropped_why,
                                (unsigned long long)(period /
                                                     PASSES_PER_PERIOD /
                                                     1000000u));
        else {
            down++;
            /* One a tick of the coarse clock: a heartbeat posted before
             * rxm has seen the old connection close fails at once (one a
             * progress call made hundreds of such failures per drop). */
            if (!l->ping_out && l->ping_due_ns != now) {
                l->ping_due_ns = now;
                send_ping(x, p);
            }
        }
    }
    x->live.dropped_peers = down;
}

void ferry__live_ping_done(struct ferry__xfer *x, struct ferry__op *op,
                           int err)
{
    struct ferry_peer *peer = op->peer;

    uint64_t answer = ferry__ping_answer(op);

    peer->live.ping_out = false;
    if (err != 0)
        ferry__live_op_failed(x, peer, err, fi_strerror(-err));
    else if (answer != peer->pulse.incarnation)
        ferry__live_declare(x, peer,
                            "another process answers at its address (it "
                            "restarted: incarnation %016llx, not %016llx); "
                            "add the new one with ferry_peer_add",
                            (unsigned long long)answer,
                            (unsigned long long)peer->pulse.incarnation);
    else
        ferry__live_heard(x, peer);
}

static bool waited_on(const struct ferry_peer *peer)
{
    return peer->live.running > 0 || peer->live.waiters > 0 ||
           peer->live.watched;
}

void ferry__live_wait_begins(struct ferry_peer *peer)
{
    if (!waited_on(peer))
        peer->live.wait_since_ns = 0;
}

/* Whether op's data goes to its peer (else it comes from there). */
static bool goes_to_peer(const struct ferry__op *op)
{
    return op->kind != FERRY__OP_READ && op->kind != FERRY__OP_PING &&
           op->kind != FERRY__OP_CHECK;
}

/*
 * The answers that peer's operations out over shm wait for, moved on
 * once its process died (fabric/shm_mend.h): the provider hands those
 * operations back, and the operations to other peers of the host queued
 * behind them go on (up to 2.4), or the slots and requests they hold are
 * freed (2.6).  Only for a peer none of whose requests still runs
 * (declared, or removed): a write through bounce buffers comes back as
 * done.  Again at each check while any is out: an answer through bounce
 * buffers may take more than one turn.
 */
static void free_answers(struct ferry__xfer *x, struct ferry_peer *peer,
                         pid_t died)
{
    unsigned moved = 0;

    if (died == 0 || ferry__peer_ops_out(peer) == 0)
        return;
    for (unsigned r = 0; r < x->reg.fab.nrails; r++) {
        struct ferry__rail *rail = &x->reg.fab.rails[r];
        struct ferry__txq *tx = ferry__txq_of(x, rail);

        if (rail->mend.returns != NULL &&
            peer->live.rail_ops[rail->index] > 0)
            moved += ferry__shm_mend_returns(&rail->mend, rail->av,
                                             peer->fi_addr[rail->index],
                                             died);
        if (rail->mend.q == NULL)
            continue;
        for (size_t i = 0; i < ferry__rail_ops_max(&x->reg.fab); i++)
            if (tx->ops[i].peer == peer && tx->ops[i].answer != 0)
                moved += ferry__shm_mend_answer(
                    &rail->mend, tx->ops[i].answer,
                    goes_to_peer(&tx->ops[i]));
    }
    if (moved > 0)
        FERRY_LOG_INFO("peer %s: its process died with %u operation%s "
                       "unanswered over shm: answered in its place, "
                       "failed, so that they and the operations to other "
                       "peers behind them end",
                       peer->label, moved, moved == 1 ? "" : "s");
}

/* One peer's check: a heartbeat when it has been silent a while, the
 * declaration when it has been silent for the whole period. */
static void check_peer(struct ferry__xfer *x, struct ferry_peer *peer,
                       uint64_t now, uint64_t period)
{
    struct ferry__peer_live *l = &peer->live;
    pid_t died = ferry__pulse_owner_died(&peer->pulse);
    uint64_t since;

    if (ferry__live_gone(peer)) {
        free_answers(x, peer, died);
        /* Its addresses go once the provider holds nothing of it, so a
         * dead peer costs no connection state (docs/semantics.md). */
        if (ferry__peer_ops_out(peer) == 0 &&
            peer->fi_addr[0] != FI_ADDR_NOTAVAIL)
            ferry__peer_drop_addresses(&x->reg, peer);
        return;
    }
    if (!waited_on(peer)) {
        /* Removed with operations out, say: its requests have ended. */
        free_answers(x, peer, died);
        l->wait_since_ns = 0;
        return;
    }
    /* Its table on this host says its context closed: nothing is posted
     * to it any more (xfer.c), and no heartbeat could be answered. */
    if (ferry__pulse_closed(&peer->pulse)) {
        declare_closed(x, peer);
        return;
    }
    if (died != 0) {
        ferry__live_declare(x, peer,
                            "its process (%d) on this host died",
                            (int)died);
        free_answers(x, peer, died);
        return;
    }
    if (l->wait_since_ns == 0)
        l->wait_since_ns = now;
    since = l->last_heard_ns > l->wait_since_ns ? l->last_heard_ns
                                                : l->wait_since_ns;
    if (x->live.resumed_ns > since)
        since = x->live.resumed_ns;
    if (now - since >= period)
        ferry__live_declare(
            x, peer,
            "no sign of life for %llu ms while waited on (%u heartbeat%s "
            "unanswered%s)",
            (unsigned long long)((now - since) / 1000000u), l->pings,
            l->pings == 1 ? "" : "s",
            l->last_heard_ns == 0 ? "; it never answered: nothing listens "
                                    "at its address, or no route leads there"
                                  : "");
    else if (now - since >= period / PINGS_PER_PERIOD &&
             now - l->ping_due_ns >= period / PINGS_PER_PERIOD)
        ping(x, peer);
}

void ferry__live_clock(struct ferry__xfer *x, uint64_t now)
{
    uint64_t period = (uint64_t)x->reg.fab.cfg.liveness_ms * 1000000u;
    uint64_t prev = x->live.now_ns;

    x->live.now_ns = now;
    /* Nobody progressed this context for a good part of the period (an
     * application busy elsewhere, without a progress thread): whatever
     * the peers said meanwhile was not heard, so their silence counts
     * from now. */
    if (prev != 0 && now - prev > period / PINGS_PER_PERIOD)
        x->live.resumed_ns = now;
}

void ferry__live_pass(struct ferry__xfer *x)
{
    uint64_t period = (uint64_t)x->reg.fab.cfg.liveness_ms * 1000000u;
    uint64_t now = x->live.now_ns;

    if (period == 0)
        return;
    if (x->live.dropped_peers > 0)
        probe_dropped(x, now, period);
    if (now < x->live.next_pass_ns)
        return;
    x->live.next_pass_ns = now + period / PASSES_PER_PERIOD;
    for (struct ferry_peer *p = x->reg.peers; p != NULL; p = p->next)
        check_peer(x, p, now, period);
}

int ferry_peer_state(ferry_peer_t *peer, enum ferry_peer_state *state,
                     char *why, size_t len)
{
    struct ferry__lock *lock;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_peer_state")))
        return ret;
    if (state == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_peer_state: state is NULL");
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    *state = peer->live.state;
    if (why != NULL && len > 0)
        snprintf(why, len, "%s", ferry__live_gone(peer) ? peer->live.why
                                 : peer->live.state == FERRY_PEER_UP
                                     ? "it answered"
                                     : "not heard from yet");
    ferry__lock_release(lock);
    return 0;
}

int ferry_peer_watch(ferry_peer_t *peer, int on)
{
    struct ferry__lock *lock;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_peer_watch")))
        return ret;
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    if (on)
        ferry__live_wait_begins(peer);
    peer->live.watched = on != 0;
    ferry__lock_release(lock);
    return 0;
}

int ferry_peer_declare_dead(ferry_peer_t *peer, const char *why)
{
    struct ferry__lock *lock;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_peer_declare_dead")))
        return ret;
    lock = &ferry__fabric_of(peer->ctx)->lock;
    ferry__lock_acquire(lock);
    ferry__live_declare(ferry__xfer_of(peer->ctx), peer, "%s",
                        why != NULL ? why : "declared dead by the application");
    ferry__lock_release(lock);
    return 0;
}
