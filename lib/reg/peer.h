/*
 * Peers: address blobs checked and inserted into every rail's address
 * vector.
 */
#ifndef FERRY_REG_PEER_H
#define FERRY_REG_PEER_H

#include "base/host.h"
#include "fabric/pulse.h"
#include "reg/part.h"

struct ferry_req;
struct ferry__op;

/* A list of requests (xfer/op.c keeps them, under the lock). */
struct ferry__req_list {
    struct ferry_req *head;
    struct ferry_req *tail;
    size_t n;
    unsigned *tally; /* counts the members of several lists, or NULL */
};

/*
 * A place in a ring of peers.  The ring's head is a link of its own, so a
 * peer leaves a ring without knowing whose it is (xfer/xfer.c keeps the
 * peers with blocked requests on one; a peer freed on it leaves it here).
 * Both NULL: on no ring.  Under the lock.
 */
struct ferry__peer_ring {
    struct ferry__peer_ring *prev;
    struct ferry__peer_ring *next;
};

static inline void ferry__peer_ring_init(struct ferry__peer_ring *head)
{
    head->prev = head->next = head;
}

static inline bool ferry__peer_ring_on(const struct ferry__peer_ring *link)
{
    return link->next != NULL;
}

/* Puts link last on the ring at head (where it is not yet). */
static inline void ferry__peer_ring_append(struct ferry__peer_ring *head,
                                           struct ferry__peer_ring *link)
{
    link->prev = head->prev;
    link->next = head;
    head->prev->next = link;
    head->prev = link;
}

static inline void ferry__peer_ring_leave(struct ferry__peer_ring *link)
{
    if (!ferry__peer_ring_on(link))
        return;
    link->prev->next = link->next;
    link->next->prev = link->prev;
    link->prev = link->next = NULL;
}

/*
 * What the transfer layer keeps per peer for liveness and flow control
 * (xfer/live.c reads and writes it; peer.c only starts it).  Under the
 * lock.
 */
struct ferry__peer_live {
    enum ferry_peer_state state;
    char why[200];          /* what made it UNREACHABLE or DEAD */
    uint64_t last_heard_ns; /* its last sign of life (0: never) */
    uint64_t wait_since_ns; /* when ferry began waiting on it (0: idle) */
    unsigned running;       /* its requests still in progress */
    unsigned waiters;       /* ferry_counter_wait_peer calls on it */
    bool watched;           /* ferry_peer_watch */
    bool ping_out;          /* a heartbeat is in flight */
    unsigned pings;         /* heartbeats due since it was last heard */
    uint64_t ping_due_ns;   /* when the last one was due */
    /* The provider pushed back (-FI_EAGAIN) posting to it on a rail: it
     * posts there again once that rail's epoch moves (xfer/op.h). */
    uint64_t blocked_epoch[FERRY__MAX_RAILS];
    /* Per rail of the context: its operations the provider still holds
     * there (ferry__peer_ops_out sums them), and its window, the most
     * the provider took at once before it pushed back (0: no limit), with
     * the operations that came back since the window last moved
     * (xfer/op.h). */
    unsigned rail_ops[FERRY__MAX_RAILS];
    unsigned window[FERRY__MAX_RAILS];
    unsigned window_age[FERRY__MAX_RAILS];
    /* Its requests whose next operation waits for a slot on each rail
     * (every slot out, or the provider pushed back), in order: posted
     * from the first when the rail's epoch moves (xfer/xfer.c). */
    struct ferry__req_list blocked[FERRY__MAX_RAILS];
    /* On the context's ring of peers with blocked requests while it has
     * any (and until the next progress pass after its last one left). */
    struct ferry__peer_ring in_line;
    /* Its connection dropped under an operation (xfer/live.c): it must
     * answer over a new one soon, or it is declared.  dropped_why: the
     * provider's words. */
    bool dropped;
    uint64_t dropped_ns;
    char dropped_why[128];
    /* The operations that came back so, held until it answers again or
     * is declared (xfer/resume.c), linked by next_free. */
    struct ferry__op *held;
};

struct ferry_peer {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_peer *next;
    /* The transport it is reached over (fabric.h), and its rails there:
     * rails[rail0 .. rail0 + nrails) of the context, and the peer's own
     * rails[remote_rail0 ...] as its blobs number them (its remote-key
     * blobs list remote_rails keys).  why: the sentence saying why. */
    unsigned transport, rail0, nrails;
    unsigned remote_rail0, remote_rails;
    char remote_provider[FERRY__NAME_MAX]; /* its transport 0's */
    char transport_why[256];
    fi_addr_t fi_addr[FERRY__MAX_RAILS]; /* by the context's rail index */
    _Atomic unsigned rmem_count; /* imported regions still held */
    struct ferry__pulse_remote pulse; /* its heartbeat word */
    struct ferry__peer_live live;
    /* A context of this process over an shm that cannot connect two of
     * its endpoints both ways: it can never add this context as a peer
     * (fabric/shm_loop.h). */
    bool shm_one_way;
    /* ferry_peer_close'd while the provider still held operations to it
     * (of requests that ended, heartbeats): the handle is invalid, and
     * the memory goes when the last one comes back (xfer/op.c). */
    bool removed;
    /* The address blob it was added from (a fan-out's plan hands it on). */
    uint8_t *blob;
    size_t blob_len;
    /* How log lines name it: its host, and its rail 0 address as the
     * provider writes it (fi_av_straddr): "rig-h2 at
     * fi_sockaddr_in://10.0.0.2:40123". */
    char label[FERRY__ADDR_MAX + FERRY__HOST_NAME_MAX + 4];
    struct ferry__traffic traffic; /* what moved (traffic.h) */
};

/* The peer whose in_line link is on a ring of peers waiting in line. */
static inline struct ferry_peer *
ferry__peer_in_line(struct ferry__peer_ring *link)
{
    return ferry__container_of(link, struct ferry_peer, live.in_line);
}

/* The peer's k-th rail (modulo its rail count). */
static inline struct ferry__rail *ferry__peer_rail(struct ferry_peer *peer,
                                                   unsigned k)
{
    struct ferry__fabric *fab = ferry__fabric_of(peer->ctx);

    return &fab->rails[peer->rail0 + k % peer->nrails];
}

/* Its operations the provider still holds, on every rail. */
static inline unsigned ferry__peer_ops_out(const struct ferry_peer *peer)
{
    const struct ferry__fabric *fab = ferry__fabric_of(peer->ctx);
    unsigned n = 0;

    for (unsigned r = 0; r < fab->nrails; r++)
        n += peer->live.rail_ops[r];
    return n;
}

/* The transport the peer is reached over. */
static inline struct ferry__transport *
ferry__peer_transport(struct ferry_peer *peer)
{
    return &ferry__fabric_of(peer->ctx)->transports[peer->transport];
}

/* Takes the peer's addresses out of every rail's address vector (a peer
 * declared dead, once the provider holds nothing of it); under the lock,
 * or while the context is destroyed.  Requests to it must fail before
 * they post. */
void ferry__peer_drop_addresses(struct ferry__reg *reg,
                                struct ferry_peer *peer);

/* Unlinks and frees peer; under the lock. */
void ferry__peer_free(struct ferry__reg *reg, struct ferry_peer *peer);

/* Removes every peer (context destruction). */
void ferry__peers_destroy(struct ferry__reg *reg);

#endif /* FERRY_REG_PEER_H */
