/*
 * Requests and operations: the types the transfer layer shares, and the
 * primitives stage.c, notify.c and xfer.c build on: taking an operation
 * slot and giving it back, posting one RMA, ending a request.
 *
 * All of these run with the lock held.  A request is posted chunk by
 * chunk as operation slots allow, ends once (success, error, deadline or
 * cancel: the first end wins), and is retired when it has ended and
 * every operation it posted has come back: only then are its
 * registrations released, so a cancelled or timed-out request never lets
 * a buffer go while the provider may still touch it.
 */
#ifndef FERRY_XFER_OP_H
#define FERRY_XFER_OP_H

#include <sys/types.h>

#include "reg/peer.h"
#include "reg/rcache.h"
#include "xfer/part.h"

enum ferry__op_kind {
    FERRY__OP_WRITE,
    FERRY__OP_READ,
    FERRY__OP_SEND, /* a notification */
    FERRY__OP_SYNC, /* a mirror sync message (stage.c) */
    FERRY__OP_PING, /* a heartbeat (live.c): no request */
    FERRY__OP_ABORT, /* tells the peer a notification will not come */
    FERRY__OP_CHECK, /* reads the peer's pulse slot of a held op (resume.c) */
};

/* A notification's or sync's wire bytes, at most (notify.c). */
#define FERRY__MSG_SIZE 32

struct ferry__stage_slot;

#define FERRY__NO_ITEM SIZE_MAX

struct ferry__op {
    struct fi_context2 fi_ctx; /* first: libfabric hands it back */
    struct ferry_req *req;     /* NULL for a heartbeat */
    struct ferry_peer *peer;   /* where it goes (flow control, liveness) */
    struct ferry__rail *rail;
    /* The rail's free list; while held (resume.c), its peer's list. */
    struct ferry__op *next_free;
    struct ferry__stage_slot *slot; /* a staged chunk's RMA, else NULL */
    enum ferry__op_kind kind;
    bool notifies; /* a write carrying its request's notification */
    size_t len;
    /* The request's items it covers (several when they were contiguous
     * and merged), named by its error; FERRY__NO_ITEM for the others. */
    size_t first_item, last_item;
    /* A message's wire bytes, or the word a heartbeat or check read. */
    uint8_t msg[FERRY__MSG_SIZE];
    /* An RMA's arguments, kept to post it again (ferry__rma_again) after
     * its connection dropped under it (resume.c). */
    void *local;
    void *desc;
    const struct ferry_rmem *rmem;
    uint64_t roff;
    uint64_t data; /* the notification it carries, if notifies */
    /* A write that did not ask to wait for its delivery: a later write of
     * its request on its rail waits and covers it (covered_writes); its
     * completion says nothing of the peer.  And a covered write posted
     * again, waiting, to cover its rail's (xfer.c, post_covers): counted
     * once already.  Set by ferry__rma_post for what it posts, cleared by
     * give_back; read for writes only. */
    bool covered;
    bool cover;
    bool key_checked; /* its peer's pulse said its region lives */
    bool posted_again;
    /* The answer it took on shm 1.17 and 1.18, for its peer's death
     * (fabric/shm_mend.h); 0: none followed. */
    uint64_t answer;
    /* A check's (FERRY__OP_CHECK) held operation. */
    struct ferry__op *checked;
};

/* The registration ferry found (cached) or made (one-shot) for an iov. */
struct ferry__found {
    struct ferry_mem *mem;
    struct ferry__rc_entry *entry; /* cache reference, or NULL: mem is ours */
};

/* Freed requests a context keeps for the next ones (xfer.c); none under
 * AddressSanitizer, so that a use after ferry_req_close is caught there. */
#ifdef __SANITIZE_ADDRESS__
#define FERRY__SPARE_REQS 0u
#else
#define FERRY__SPARE_REQS 64u
#endif

/* Iovs a request keeps inside itself: most requests move one block, or a
 * key and a value block, and copying theirs then allocates nothing. */
#define FERRY__REQ_INLINE_IOVS 2

enum ferry__notify_state {
    FERRY__NOTIFY_NONE,    /* the request carries none */
    FERRY__NOTIFY_PENDING, /* to be sent once the data has landed */
    FERRY__NOTIFY_SENT,    /* in flight */
    FERRY__NOTIFY_ABORT_SENT, /* the request failed: its abort in flight */
    FERRY__NOTIFY_DONE,
};

struct ferry_req {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_peer *peer;
    struct ferry_req *prev, *next; /* on one of the request lists */
    struct ferry__req_list *list;  /* which (part.h) */
    enum ferry__op_kind kind;
    size_t niov;                 /* iovs, or prepared block pairs */
    struct ferry_iov *iov;       /* copy of the caller's array, or NULL */
    struct ferry_prep *prep;     /* a prepared request: */
    uint32_t *lidx, *ridx;       /* its block pairs (one allocation) */
    struct ferry__found *found;  /* per iov without lmem, or NULL */
    /* Next byte to post: iov index and offset within it. */
    size_t cur_iov;
    size_t cur_off;
    uint64_t bytes;  /* in all */
    bool striped;    /* chunks spread over the rails (xfer.c) */
    size_t chunk;    /* largest operation it posts */
    unsigned rail;   /* the rail of an unstriped request */
    int rail_pending; /* rail chosen for the next chunk, or -1 */
    size_t ops_in_flight;
    uint64_t bytes_done;
    uint64_t deadline_ns; /* 0: none */
    enum ferry__notify_state notify;
    uint64_t notify_id;
    uint64_t notify_value;
    /* Writes into remote mirrors (rmem->mirror) are followed by one sync
     * message per item, sync_next the next item to send one for; the
     * notification, if any, goes once they are all delivered. */
    bool sync_mirrors;
    size_t sync_next;
    /* Its small writes may go without waiting for their delivery
     * (ferry__transport.covered_writes, xfer.c's write_covered). */
    bool covers;
    bool staged; /* some of its local memory goes through staging */
    int status;           /* FERRY_EINPROGRESS, 0 or the error */
    /* ferry_req_result's: when it was taken and ended (ferry__now_ns),
     * the first item an operation failed for (FERRY__NO_ITEM: none), and
     * the caller's opts->user_data. */
    uint64_t posted_ns, ended_ns;
    size_t failed_item;
    void *user_data;
    bool user_freed;      /* free once the provider is done with it */
    /* FERRY_EINPROGRESS until the request retires, then its status:
     * ferry_req_test and ferry_req_close read a retired request without
     * the lock (xfer.c says how). */
    _Atomic int outcome;
    /* ferry_req_close was called on it: claimed first, with no lock, so
     * that a second call stops; user_freed says so under the lock. */
    atomic_bool freed_once;
    /* On part.h's given_back stack, then, freed, on its spare stack. */
    struct ferry_req *stack_next;
    /*
     * The fields from here on are not cleared with those above (req_new,
     * xfer.c), each being written before it is read:
     * iov_inline: iov, if it fits; the request copies n of them in.
     */
    struct ferry_iov iov_inline[FERRY__REQ_INLINE_IOVS];
    /* A striped request's weighted round robin of chunks, cleared where
     * it stripes. */
    int64_t credit[FERRY__MAX_RAILS];
    /* With covers: per peer rail, the last write posted there without
     * waiting since one into its region (rmem) that waited (len 0: none),
     * posted again, waiting, once all else is: its delivery then covers
     * theirs.  Cleared where the request covers. */
    struct ferry__cover {
        const struct ferry_rmem *rmem;
        size_t first_item, last_item, off, len;
    } cover[FERRY__MAX_RAILS];
    /* Last: of this one a new request clears only the first byte. */
    char errmsg[256];
};

/* The rail's operation slots (ferry__rail_ops_max of them: fabric.h),
 * after the rail opened. */
int ferry__txq_open(struct ferry__xfer *x, struct ferry__rail *rail);
/* Frees them, once no operation can come back (endpoint closed). */
void ferry__txq_close(struct ferry__xfer *x, struct ferry__rail *rail);
/* The slots of op's rail. */
static inline struct ferry__txq *ferry__txq_of(struct ferry__xfer *x,
                                               const struct ferry__rail *rail)
{
    return &x->req.tx[rail->index];
}
/*
 * ferry__op_slot_control: a free slot of the rail for ferry's own
 * operation to peer, the heartbeat or a key check that brings a dropped
 * connection back (live.c, resume.c), or NULL when every slot is taken,
 * or when the provider pushed back (-FI_EAGAIN) posting to peer on this
 * rail -- a full queue, or rxm still making the peer's connection -- and
 * the rail's epoch has not moved since (completions came back, or a few
 * progress calls passed).  A peer pushed back never stops posting to the
 * others.
 *
 * It takes no heed of the data's limits below: operations held after a
 * drop keep their slots, and count in both, while none of them is in the
 * provider.  Held to the peer's window, the heartbeat found no slot while
 * the held ones filled it, and a live peer was declared dead (libfabric
 * 1.22's tcp pushed back at 9 writes of 1 MiB in flight, and a stale key
 * then dropped the connection).  Held operations that take all tx_depth
 * slots kept it out the same way: hence the rail's FERRY__CONTROL_OPS
 * slots beyond them (fabric.h).
 */
static inline struct ferry__op *
ferry__op_slot_control(struct ferry__xfer *x, const struct ferry_peer *peer,
                       const struct ferry__rail *rail)
{
    struct ferry__txq *tx = ferry__txq_of(x, rail);

    if (peer->live.blocked_epoch[rail->index] == tx->epoch)
        return NULL;
    return tx->free_ops;
}

/*
 * ferry__op_slot: the same for a data operation (a write, a read, a
 * notification or a sync), which also waits while the rail has tx_depth
 * operations out, or the peer its window's worth on the rail (below).
 */
static inline struct ferry__op *ferry__op_slot(struct ferry__xfer *x,
                                               const struct ferry_peer *peer,
                                               const struct ferry__rail *rail)
{
    unsigned r = rail->index;

    if (ferry__txq_of(x, rail)->ops_in_flight >= x->reg.fab.tx_depth)
        return NULL;
    if (peer->live.window[r] != 0 &&
        peer->live.rail_ops[r] >= peer->live.window[r])
        return NULL;
    return ferry__op_slot_control(x, peer, rail);
}

/*
 * A peer's window on a rail doubles for every FERRY__WINDOW_GROWS_AFTER
 * operations that come back, and is gone past FERRY__WINDOW_FORGOTTEN:
 * a provider that pushed back because its queue was full for a moment
 * (shm's first 1 MiB writes to a peer met one) gets its depth back
 * within a few hundred operations, and one whose limit stays is asked
 * for more that often, not on every post.
 */
#define FERRY__WINDOW_GROWS_AFTER 32u
#define FERRY__WINDOW_FORGOTTEN 65536u

/*
 * The provider answered -FI_EAGAIN posting to peer on rail.  With some
 * of the peer's operations out there, their count becomes its window: it
 * posts no more than that on the rail until the window grows (op.c).
 * libfabric 1.17's shm takes one write of up to 4 KiB that waits for its
 * delivery at a time per endpoint and peer (its SAR protocol) and pushes
 * back the next: retried after every completion, as the epoch had them,
 * every write drew one push-back, each a call into the provider and a
 * pass over the request (docs/performance.md).  A push-back with nothing
 * out (rxm making a connection) sets no window.
 */
static inline void ferry__op_pushed_back(struct ferry__xfer *x,
                                         struct ferry_peer *peer,
                                         const struct ferry__rail *rail)
{
    unsigned r = rail->index;

    peer->live.blocked_epoch[r] = ferry__txq_of(x, rail)->epoch;
    if (peer->live.rail_ops[r] > 0) {
        peer->live.window[r] = peer->live.rail_ops[r];
        peer->live.window_age[r] = 0;
    }
}

/* Takes op, the rail's first free slot, for req (NULL: a heartbeat to
 * peer; otherwise req's peer). */
void ferry__op_take(struct ferry__txq *tx, struct ferry__op *op,
                    struct ferry_req *req, struct ferry_peer *peer,
                    enum ferry__op_kind kind, size_t len);
/* An RMA of req's handed to the provider on rail: its peer's traffic
 * (reg/traffic.h).  Under the lock. */
static inline void ferry__traffic_posted(struct ferry_req *req,
                                         const struct ferry__rail *rail,
                                         size_t len)
{
    enum ferry__dir d = req->kind == FERRY__OP_WRITE ? FERRY__DIR_WRITE
                                                     : FERRY__DIR_READ;

    req->peer->traffic.bytes[rail->index][d] += len;
    req->peer->traffic.ops[rail->index][d]++;
}

/* Gives op's slot back to its rail: its operation came back.  The last
 * operation of a peer removed meanwhile frees it (reg/peer.h). */
void ferry__op_give_back(struct ferry__txq *tx, struct ferry__op *op);
/* How a write waits for its delivery (FI_DELIVERY_COMPLETE). */
enum ferry__rma_wait {
    FERRY__RMA_WAITS,   /* as every operation does by default */
    FERRY__RMA_COVERED, /* it does not: a later write covers it (xfer.c) */
    FERRY__RMA_COVER,   /* it waits, sent again to cover those before it */
};
/* fi_write or fi_read (req->kind) of [local, +len) at roff of rmem, on
 * op's rail; a write that notifies carries the request's notification as
 * its remote CQ data (fi_writedata, data packed by the caller).  The
 * arguments stay in op. */
ssize_t ferry__rma_post(struct ferry_req *req, struct ferry__op *op,
                        void *local, void *desc,
                        const struct ferry_rmem *rmem, uint64_t roff,
                        size_t len, bool notifies, enum ferry__rma_wait wait,
                        uint64_t data);
/* The same RMA again, on op's rail (taken, its connection dropped). */
ssize_t ferry__rma_again(struct ferry__op *op);
/* Names items first..last of req, one operation's, for its error: the
 * iovs ("iov[3..7], merged"), or the pairs of a prepared post with their
 * blocks. */
void ferry__req_items_name(const struct ferry_req *req, size_t first,
                           size_t last, char *buf, size_t size);
/* What op was, for its request's error: "write of 4096 bytes (iov[2]) on
 * domain lo" (a notification, a sync, a write or a read). */
void ferry__op_describe(const struct ferry__op *op, char *buf, size_t size);
/* The request lists (part.h): r joins l, leaves its list (if any), or
 * moves to l from the one it is on. */
void ferry__req_list_append(struct ferry__req_list *l, struct ferry_req *r);
void ferry__req_list_remove(struct ferry_req *r);
void ferry__req_list_move(struct ferry__req_list *l, struct ferry_req *r);
/* Ends the request with status unless it has ended already. */
void ferry__req_end(struct ferry_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* As ferry__req_end, for a failure of the request's item `item` (its
 * result's failed_iov; FERRY__NO_ITEM when the failure is no item's). */
void ferry__req_end_at(struct ferry_req *req, size_t item, int status,
                       const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Ends every request to peer with status and why (the peer is gone); the
 * next progress pass settles them. */
void ferry__reqs_end_to(struct ferry__xfer *x, struct ferry_peer *peer,
                        int status, const char *why);

#endif /* FERRY_XFER_OP_H */
