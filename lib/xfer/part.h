/*
 * The xfer part of a context: what the transfer layer keeps per context,
 * above the reg part it embeds first (fabric.h says why parts nest).
 * Each module of the layer owns one member; they are declared here
 * together so that every module's header can include this one without a
 * circle.
 */
#ifndef FERRY_XFER_PART_H
#define FERRY_XFER_PART_H

#include "reg/part.h"
#include "reg/peer.h"
#include "xfer/hist.h"

struct ferry__op;
struct ferry__recv;
struct ferry__stage;
struct ferry_req;

/* op.c: a rail's operation slots, ferry__rail_ops_max of them: at most
 * tx_depth of the data's are ever in flight (xfer/op.h). */
struct ferry__txq {
    struct ferry__op *ops;
    struct ferry__op *free_ops;
    size_t ops_in_flight;
    /* Moves on (from 1) when the rail's CQ gives completions back, or
     * after a few progress calls without: a peer the provider pushed back
     * on this rail posts here again only then (op.h), so a full queue
     * or a peer still connecting costs one refused call per epoch, and
     * never stops the other peers.  Under the lock. */
    uint64_t epoch;
    unsigned idle_polls;
    uint64_t bytes_posted;   /* statistics */
    uint64_t rma_ops_posted; /* writes and reads */
    uint64_t writes_covered; /* of those, writes that did not wait */
};

/* xfer.c and op.c: requests, and the operation slots of every rail. */
struct ferry__req_part {
    /*
     * Requests under way are on one of three kinds of list.  Parked ones
     * have everything posted and wait for nothing but their operations:
     * each completion settles its request.  Blocked ones wait for a slot
     * on a rail, on their peer's list for that rail (reg/peer.h): they are
     * posted in order, from the first, when the rail's epoch moves, until
     * the provider takes no more.  Progress passes look at either kind
     * only for deadlines, once per tick of the coarse clock the deadlines
     * are compared with (waiting_looked_ns).  The others are active, looked
     * at by every pass.  A pass then costs what its completions and posts
     * cost, not what the requests in flight do: with one look per request
     * per pass, shm moved 4 KiB writes 40 % slower 256 deep than 16 deep
     * (docs/performance.md).
     */
    struct ferry__req_list active;
    struct ferry__req_list parked; /* all still in progress */
    unsigned blocked;              /* requests on the peers' blocked lists */
    /* Peers with blocked requests, whose lines take turns (xfer.c). */
    struct ferry__peer_ring blocked_peers;
    uint64_t waiting_looked_ns;
    struct ferry__req_list done;   /* retired, waiting for ferry_req_close */
    /* Retired requests ferry_req_close gave back without the lock, freed
     * by the next progress pass (xfer.c). */
    _Atomic(struct ferry_req *) given_back;
    /* Freed requests kept for the next ones (xfer.c), linked by
     * stack_next; spares counts them.  Under the lock. */
    struct ferry_req *spare;
    unsigned spares;
    unsigned running;              /* requests still in progress */
    /* Requests that ended (ferry__req_end): what the context's event
     * descriptor tells of, with the notifications received (progress.c). */
    uint64_t ended;
    /* While a batch of completions is handed out (in_batch, progress.c),
     * the requests it ends share one clock reading, taken by the first of
     * them to end (batch_ns; 0 until then and outside a batch, op.c). */
    bool in_batch;
    uint64_t batch_ns;
    unsigned next_rail;    /* rail of the next unstriped request */
    struct ferry__txq tx[FERRY__MAX_RAILS];
    uint64_t oneshot_registrations;   /* statistics */
    uint64_t notifications_in_writes; /* sent as a write's CQ data */
    /* Metrics (lib/metrics.c): the ended requests' durations and sizes,
     * by kind (FERRY__OP_WRITE, _READ, _SEND: a notification alone). */
    struct ferry__req_hist hist[FERRY__REQ_KINDS];
};

struct ferry__notify_queue {
    struct ferry_notification *items; /* ring */
    size_t cap, head, count;
};

struct ferry__counter {
    uint64_t id;
    uint64_t sum;
    int aborted; /* a sender's abort: the error it ended with, or 0 */
    bool used;
};

/* id -> sum, open addressing, power-of-two capacity. */
struct ferry__counters {
    struct ferry__counter *slots;
    size_t cap, used;
};

/* A rail's receive buffers for notifications, and the registrations of
 * them and of the op slots' message buffers where the provider wants
 * FI_MR_LOCAL. */
struct ferry__rxq {
    struct ferry__recv *recvs;
    struct fid_mr *recv_mr;
    struct fid_mr *send_mr;
};

struct ferry__xfer;

/* notify.c: notifications that arrived, and the counters they feed. */
struct ferry__notify_part {
    struct ferry__rxq rx[FERRY__MAX_RAILS];
    struct ferry__notify_queue queue;
    /* queue.count, published for ferry_notify_poll's look without the
     * lock (ferry__notify_queued). */
    atomic_size_t queued;
    /* Arrived while mirror copies were queued (stage.c): delivered once
     * they are done. */
    struct ferry__notify_queue held;
    struct ferry__counters counters;
    uint64_t received; /* statistics */
    uint64_t unqueued; /* counted, not queued: the queue was full */
    /* Notifications with ids from FERRY_NOTIFY_ID_RESERVED up go here,
     * not to the queue and counters: the fan-out's (set by the context to
     * fan.c's; NULL drops them).  Called with the lock held. */
    void (*fan_sink)(struct ferry__xfer *x, uint64_t id, uint64_t value);
    /* Called with the lock held once a notification is queued: set by
     * the progress thread to wake the threads in ferry_notify_wait (NULL:
     * nobody sleeps on the queue). */
    void (*on_queued)(struct ferry__xfer *x);
};

/* stage.c: the staging buffers (made on first need), and statistics. */
struct ferry__stage_part {
    struct ferry__stage *stage;
    uint64_t bytes, chunks, max_in_flight;
    uint64_t mirror_syncs;
};

/* live.c: the clock of this progress call, and when to check peers. */
struct ferry__live_part {
    uint64_t now_ns;  /* coarse, read once per progress call */
    uint64_t next_pass_ns;
    /* The last time this context itself went without progress for a
     * while: peers are not blamed for silence nobody listened to. */
    uint64_t resumed_ns;
    /* Peers whose connection dropped, and operations held for them
     * (counts a pass may skip on: 0 when there are none). */
    unsigned dropped_peers;
    unsigned held_ops;
    uint64_t heartbeats; /* statistics */
    uint64_t peers_declared;
    uint64_t interrupted; /* operations a dropped connection held back */
    uint64_t reposted;    /* of them, posted again */
};

/* All of it under the lock. */
struct ferry__xfer {
    struct ferry__reg reg; /* first: the layer below */
    struct ferry__req_part req;
    struct ferry__live_part live;
    struct ferry__notify_part notify;
    struct ferry__stage_part stage;
};

static inline struct ferry__xfer *ferry__xfer_of(ferry_context_t *ctx)
{
    return (struct ferry__xfer *)(void *)ctx;
}

#endif /* FERRY_XFER_PART_H */
