/*
 * The reg part of a context: what the registration layer keeps per
 * context, above the fabric part it embeds first (fabric.h says why
 * parts nest).  Each module of the layer owns one member, and no module
 * touches another's; they are declared here together, with the layer,
 * so that a module's own header can include this one without a circle.
 */
#ifndef FERRY_REG_PART_H
#define FERRY_REG_PART_H

#include "fabric/devpath.h"
#include "fabric/fabric.h"
#include "reg/traffic.h"

struct ferry__rcache;

/* mem.c: registrations, imported remote regions, the device path. */
struct ferry__mem_part {
    struct ferry_mem *list;   /* doubly linked, under the lock */
    struct ferry_rmem *rlist; /* doubly linked, under the lock */
    /* Registrations peers may write or read: while there are any, data
     * can arrive at any moment, and software providers (tcp, shm) move it
     * only when this side progresses, so a progress thread without CQ
     * descriptors keeps polling instead of napping. */
    _Atomic unsigned exposed_regions;
    /* Devices whose memory peers may write through FI_HMEM: their
     * GPUDirect writes are flushed before a notification is delivered. */
    _Atomic unsigned hmem_exposed_devices;
    /* How device memory is registered here (devpath.h), and why. */
    enum ferry__dev_path dev_path;
    char dev_why[600];
    uint64_t next_mirror_id; /* under the lock */
    unsigned mirror_rmems;   /* imported remote mirrors; under the lock */
    /*
     * Set by the context: makes the staging buffers and streams for a
     * device exist (the transfer layer owns them), before a staged region
     * is used.  Called with no lock held.
     */
    int (*prepare_staging)(ferry_context_t *ctx, int ordinal);
};

struct ferry__reg {
    struct ferry__fabric fab; /* first: the layer below */
    struct ferry__mem_part mem;
    struct ferry_peer *peers;     /* peer.c: singly linked, under the lock */
    struct ferry__rcache *rcache; /* rcache.c: NULL when disabled */
    /* peer.c: the traffic of the peers closed so far (traffic.h). */
    struct ferry__traffic closed_peers;
};

static inline struct ferry__reg *ferry__reg_of(ferry_context_t *ctx)
{
    return (struct ferry__reg *)(void *)ctx;
}

#endif /* FERRY_REG_PART_H */
