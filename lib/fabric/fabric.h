/*
 * The fabric part of a context: its configuration, the lock, the limits
 * every rail shares, and one rail (fabric, domain, address vector,
 * completion queue, endpoint) per domain used; and what is done per rail
 * alone: opening and closing it, and registering memory on it with
 * ferry's key policy.
 *
 * A context is layered like libfabric's objects: each layer's part
 * embeds the part below as its first member (this fabric part in the
 * reg part, that in the xfer part, that in struct ferry_context,
 * context.h).  So code of a layer reaches its part from any handle's
 * context by a cast (ferry__fabric_of, ferry__reg_of, ferry__xfer_of)
 * and never sees the fields of the layers above it.
 */
#ifndef FERRY_FABRIC_FABRIC_H
#define FERRY_FABRIC_FABRIC_H

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "base/ferry-internal.h"
#include "base/keys.h"
#include "fabric/owned.h"
#include "fabric/provider.h"
#include "fabric/shm_mend.h"

struct ferry__rail {
    unsigned index;
    unsigned transport; /* fab->transports[transport] holds this rail */
    struct fi_info *info; /* owned */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    int wait_fd;      /* the CQ's file descriptor, if has_wait_fd */
    bool has_wait_fd;
    struct fid_ep *ep;
    /* Its region, mended on shm 1.17 and 1.18 (shm_mend.h). */
    struct ferry__shm_mend mend;
    struct ferry__keyalloc keys;
    int64_t weight; /* share of striped bytes: link speed in Mbit/s, or 1 */
};

/* The heartbeat table's registration on one transport (pulse.c). */
struct ferry__pulse_reg {
    struct fid_mr *mr;
    uint8_t key[FERRY__KEY_MAX];
    size_t key_len;    /* 0: none could be made */
    uint64_t raw_base; /* FI_MR_RAW: base for fi_mr_map_raw */
};

/*
 * A transport: the rails of one provider.  Transport 0 is the provider
 * chosen for the context; a second, shared memory, may stand beside it
 * for the peers on this host (local.c), so that one context reaches
 * those over shm and the others over the network.  A peer uses the rails
 * of one transport, chosen when it is added (reg/peer.c).
 */
struct ferry__transport {
    unsigned first, nrails; /* its rails: rails[first .. first + nrails) */
    unsigned endpoints;     /* on each of its domains, each a rail */
    unsigned mr_mode;       /* FERRY_MR_* in effect on its rails */
    bool shm;               /* FI_PROTO_SHM: reaches this host only */
    /* Its provider transmits and processes sends after the writes posted
     * before them (FI_ORDER_SAW in tx_attr and rx_attr) and it has one
     * rail: a request's notification may follow its writes without
     * waiting for their completions (xfer/xfer.c). */
    bool notify_ordered;
    /* Its provider places writes in order (FI_ORDER_WAW) and it has one
     * rail: a request's last write may carry its notification while the
     * writes before it are still in flight. */
    bool writes_ordered;
    /* Writes of at most this many bytes take a peer's first rail instead
     * of the rails in turn; 0: none do (ferry__shm_first_rail_writes). */
    size_t first_rail_writes;
    /* A request's writes of at most this many bytes, but its last, may go
     * without waiting for their delivery: the last one's wait covers them
     * (ferry__shm_covered_writes); 0: none may. */
    size_t covered_writes;
    /*
     * The largest operation of device memory registered with the provider
     * (not staged).  shm moves each such operation with one cudaMemcpy
     * through CUDA IPC, a few microseconds apiece whatever the size, so it
     * takes them as large as the provider and config.max_msg_size allow
     * (docs/gpu.md); other transports keep max_msg.
     */
    size_t device_max_op;
    struct ferry__pulse_reg pulse; /* the heartbeat table on its rail 0 */
};

#define FERRY__MAX_TRANSPORTS 2

struct ferry__fabric {
    uint32_t magic; /* FERRY__MAGIC_CTX: first, as in every handle */
    /*
     * Serialises posting, completion handling, registration and request
     * state of every layer (lock.h).
     */
    struct ferry__lock lock;
    /* Lists, prepared transfers and metadata handles made from this
     * context, for ferry_context_close (owned.h). */
    struct ferry__owned_list owned;
    struct ferry_config cfg; /* strings point into the copies below */
    char cfg_provider[FERRY__NAME_MAX];
    char cfg_domain[FERRY__NAME_MAX];
    char cfg_peer_host[FERRY__NAME_MAX];
    unsigned mr_mode;   /* FERRY_MR_* in effect on transport 0 */
    size_t key_size;    /* bytes of key ferry uses */
    size_t max_msg;     /* largest single operation */
    size_t tx_depth;    /* operations of the data's out per rail, at most */
    bool register_local; /* message buffers need registering (LOCAL, NIC) */
    char why[2048];
    char local_why[512]; /* why peers on this host use shm, or do not */
    /* The words peers read of this context (pulse.c), registered on each
     * transport's first rail: its incarnation (their heartbeat) and a
     * generation per exported region (their check of its key). */
    struct {
        _Atomic uint64_t *words; /* FERRY__PULSE_* words, then the slots */
        bool mapped;           /* in /dev/shm (shm_name), not on the heap */
        char shm_name[48];
        int table_fd;          /* while mapped: its file, locked (pulse.c) */
        bool slots;            /* registered on transport 0: slots given */
        /* The bell peers of this host ring (pulse.h), or -1. */
        int bell_fd;
        char bell_path[64]; /* "": none */
        /* Peers whose bells this context may ring (ferry__pulse_ring), and
         * the coarse time it last rang those still busy (progress.c). */
        unsigned peer_bells;
        uint64_t rung_ns;
        uint32_t *free_slots; /* a stack of nfree; under the lock */
        size_t nfree;
        uint64_t generation;  /* the last one given; under the lock */
    } pulse;
    unsigned nrails;
    struct ferry__rail rails[FERRY__MAX_RAILS];
    /* Within a transport, rails[first + d + k * domains] is endpoint k on
     * domain d. */
    unsigned ntransports;
    struct ferry__transport transports[FERRY__MAX_TRANSPORTS];
};

/*
 * On a transport of shm endpoints (info's), `endpoints` on its domain:
 * the largest write that keeps to a peer's first endpoint, 0 for none.
 * The second endpoint is there for libfabric 1.17-2.4's shm, which sends
 * a small write asking for FI_DELIVERY_COMPLETE through its SAR protocol,
 * one at a time per endpoint and peer.  From 2.5 (fi_runtime, in
 * FI_VERSION form) shm copies such a write, up to its inject size, into
 * an inject buffer instead: nothing holds the next one back, and a stream
 * of them moves faster through one endpoint, while larger transfers still
 * gain from two (docs/performance.md).
 */
size_t ferry__shm_first_rail_writes(const struct fi_info *info,
                                    unsigned endpoints, uint32_t fi_runtime);

/*
 * On a transport of shm endpoints (info's): the largest write of a
 * request that need not wait for its own delivery, 0 for none.  libfabric
 * 1.17-2.4's shm sends a small write that waits by its SAR protocol, one
 * at a time per endpoint and peer, and one that does not through an
 * inject buffer, as many as its queue holds.  Where the provider promises
 * to place a peer's writes in order (FI_ORDER_WAW, which ferry asks shm
 * for before 2.5: provider.c), a request's small writes on a rail are
 * delivered once the last one on that rail is, and only that one waits
 * (xfer.c).  From 2.5 shm injects a waiting write too: none is needed.
 */
size_t ferry__shm_covered_writes(const struct fi_info *info,
                                 uint32_t fi_runtime);

/*
 * Operations a rail may have out: tx_depth of the data's (writes, reads,
 * notifications), and FERRY__CONTROL_OPS more for ferry's own that bring
 * a dropped connection back, the heartbeat and the key checks (xfer/op.h).
 * Operations held after a drop keep their slots; had the heartbeat no
 * slot of its own, tx_depth of them would keep it from ever going, and a
 * live peer would be declared dead.  Each rail's CQ has room for all.
 */
#define FERRY__CONTROL_OPS 1u

static inline size_t ferry__rail_ops_max(const struct ferry__fabric *fab)
{
    return fab->tx_depth + FERRY__CONTROL_OPS;
}

/* The transport that holds rail. */
static inline struct ferry__transport *
ferry__transport_of(struct ferry__fabric *fab, const struct ferry__rail *rail)
{
    return &fab->transports[rail->transport];
}

/* The fabric part of a context (the first member of its first member's
 * first member: see above). */
static inline struct ferry__fabric *ferry__fabric_of(ferry_context_t *ctx)
{
    return (struct ferry__fabric *)(void *)ctx;
}

/*
 * Takes the rails from sel (the best candidate, then other domains of the
 * same provider), says why in fab->why, derives the shared limits and
 * opens every rail with its endpoint enabled.  fab->cfg is set; on an
 * error, ferry__fabric_close undoes what was done.
 */
int ferry__fabric_open(struct ferry__fabric *fab,
                       struct ferry__selection *sel, const char *rails_why);
/* Closes the endpoints: every operation still in flight ends with them.
 * An shm endpoint that open contexts of this process have as a peer stays
 * open, forgotten, until they close (shm_loop.h). */
void ferry__fabric_close_endpoints(struct ferry__fabric *fab);
/* Closes the rest of every rail (after ferry__fabric_close_endpoints and
 * after everything registered on the domains is closed). */
void ferry__fabric_close(struct ferry__fabric *fab);
/*
 * fi_mr_regattr on one rail with ferry's key policy (requested keys that
 * fit mr_key_size, retried while taken) and FI_MR_ENDPOINT binding.
 * Caller holds the lock (the domain is FI_THREAD_DOMAIN).
 */
int ferry__mr_open(struct ferry__fabric *fab, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr);

#endif /* FERRY_FABRIC_FABRIC_H */
