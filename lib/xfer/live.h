/*
 * Liveness per peer (docs/semantics.md).
 *
 * A peer is waited on while it has requests in progress, a
 * ferry_counter_wait_peer waits on it, or it is watched.  Every operation
 * to it that comes back is a sign of life.  When none has come for a
 * quarter of config.liveness_ms while it is waited on, a heartbeat goes:
 * an 8-byte read of the peer's pulse word (fabric/pulse.h), whose
 * completion is the answer and whose value must be the incarnation its
 * address blob gave (a process that restarted at the same address is
 * another peer).  It needs nothing from the peer's application and
 * works for peers added from bare address blobs.  Silent for liveness_ms: the
 * peer is declared UNREACHABLE (never heard) or DEAD, and so is a peer
 * whose connection was reset and that does not answer a heartbeat over a
 * new one within liveness_ms / 8 (ferry__live_dropped says why it is
 * asked), or whose context closed (its pulse on this host says so).
 * Either is final for the handle: its
 * requests end with FERRY_EPEERDEAD, waits on it end, and a
 * FERRY_NOTIFICATION_PEER_DOWN event is queued.
 *
 * Flow control per peer lives with the operation slots (op.h,
 * ferry__op_slot).
 *
 * All of it runs with the lock held.
 */
#ifndef FERRY_XFER_LIVE_H
#define FERRY_XFER_LIVE_H

#include "xfer/op.h"

/* Whether peer was declared UNREACHABLE or DEAD. */
static inline bool ferry__live_gone(const struct ferry_peer *peer)
{
    return peer->live.state == FERRY_PEER_UNREACHABLE ||
           peer->live.state == FERRY_PEER_DEAD;
}

/* Refuses a new request to a peer that is gone (FERRY_EPEERDEAD with the
 * peer's sentence); 0 otherwise. */
int ferry__live_check_peer(const struct ferry_peer *peer, const char *call);

/* Something is about to wait on peer (a request, a counter wait, a
 * watch); under the lock, before it counts.  A peer nothing waited on
 * until now has its silence counted from the next check, not from the
 * wait before: no check may have run in the idle time between. */
void ferry__live_wait_begins(struct ferry_peer *peer);

/* An operation to peer came back: a sign of life (over a new connection,
 * if the old one dropped). */
void ferry__live_heard(struct ferry__xfer *x, struct ferry_peer *peer);

/*
 * An operation to peer came back with err.  A connection reset
 * (FERRY_ECONNRESET) makes the peer DEAD at once where it cannot be
 * probed (no pulse, or its handle removed); otherwise its connection is
 * marked dropped (ferry__live_dropped).
 */
void ferry__live_op_failed(struct ferry__xfer *x, struct ferry_peer *peer,
                           int err, const char *why);

/*
 * The connection to peer dropped under an operation (why: the provider's
 * words).  tcp;ofi_rxm drops it when the peer's side refuses one
 * operation (a stale key), and flushes every other operation to that
 * peer with it, exactly as when the peer dies: so the peer is sent
 * heartbeats over a new connection at once, and declared only if none is
 * answered within an eighth of the liveness (ferry__live_pass).
 */
void ferry__live_dropped(struct ferry__xfer *x, struct ferry_peer *peer,
                         const char *why);

/* Whether an operation to peer that came back with err is held until the
 * peer answers again (xfer/resume.c): a dropped connection, and a peer
 * that can be probed. */
bool ferry__live_holds(const struct ferry__xfer *x,
                       const struct ferry_peer *peer, int err);

/*
 * Declares peer UNREACHABLE (never heard from) or DEAD with the sentence
 * fmt makes: ends its requests with FERRY_EPEERDEAD, queues a peer-down
 * event.  Once only.
 */
void ferry__live_declare(struct ferry__xfer *x, struct ferry_peer *peer,
                         const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * A context of this process whose pulse shows incarnation is being
 * destroyed.  On a provider that reaches a peer of the same process
 * through that peer's own memory (shm maps its region, and the
 * destruction unmaps it: a later send, heartbeat or fi_av_remove there
 * would touch unmapped memory), its peers here are declared DEAD and
 * their addresses dropped now, while that memory is still mapped.
 * Elsewhere nothing changes: the provider reports the closed peer like
 * any other.  Under x's lock, before the other context's endpoints close.
 */
void ferry__live_sibling_closing(struct ferry__xfer *x, uint64_t incarnation);

/* The clock of a progress call, read once at its start (coarse). */
void ferry__live_clock(struct ferry__xfer *x, uint64_t now);

/* Heartbeats and declarations, once per progress call: returns at once
 * unless a check is due (every liveness_ms / 8). */
void ferry__live_pass(struct ferry__xfer *x);

/* A heartbeat's operation came back (err 0: answered). */
void ferry__live_ping_done(struct ferry__xfer *x, struct ferry__op *op,
                           int err);

#endif /* FERRY_XFER_LIVE_H */
