/*
 * Memory registration on every rail, and the remote-key blobs that let a
 * peer reach a region.
 */
#ifndef FERRY_REG_MEM_H
#define FERRY_REG_MEM_H

#include "fabric/pulse.h"
#include "reg/part.h"

struct ferry_mem {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_mem *prev, *next; /* reg->mem.list, under the lock */
    uint8_t *addr;
    size_t len;
    enum ferry_mem_kind kind;
    int device;
    unsigned access;
    bool oneshot; /* made by a transfer for an iov without lmem */
    /*
     * Device memory the domain cannot register: transfers stage it
     * through host buffers (xfer/stage.c), and with remote access the
     * registrations below are of `mirror`, a pinned host copy peers
     * reach instead, identified to them by mirror_id.
     */
    bool staged;
    uint8_t *mirror;
    uint64_t mirror_id;
    uint64_t buffer_id; /* device allocation's id (cache validation) */
    enum ferry__dev_path path; /* FERRY__DEV_NONE for host memory */
    /*
     * FI_HMEM_DEVICE_ONLY for device memory that is not managed, else 0:
     * passed with its registrations.  shm moves device memory through
     * CUDA IPC (the copy engines) only when the registration says so, and
     * otherwise through its host bounce buffers, at a fraction of the rate.
     */
    uint64_t hmem_flags;
    /* What still uses it; deregistration waits for both.  users: the
     * descriptor lists, fan-outs and staging copies (lock.h);
     * requests: the requests, counted under the lock (xfer.c). */
    _Atomic unsigned users;
    unsigned requests;
    struct fid_mr *mr[FERRY__MAX_RAILS];
    void *desc[FERRY__MAX_RAILS];
    uint8_t key[FERRY__MAX_RAILS][FERRY__KEY_MAX];
    size_t key_len[FERRY__MAX_RAILS];
    uint64_t raw_base[FERRY__MAX_RAILS]; /* FI_MR_RAW: base for map_raw */
    /* FERRY_ACCESS_FANOUT: the registration of the fan-out plan's inbox
     * (FERRY__INBOX_SIZE bytes of its own), named by inbox_id. */
    struct ferry_mem *inbox;
    uint64_t inbox_id;
    /* Its slot in the context's pulse and the generation there while it
     * lives (fabric/pulse.h): peers check its key against them.  A region
     * with remote access has one unless none was left. */
    uint32_t slot;
    uint64_t generation;
};

/* The plan inbox of a region that may receive a fan-out. */
#define FERRY__INBOX_SIZE (64u * 1024u)

struct ferry_rmem {
    uint32_t magic;
    struct ferry_peer *peer;
    struct ferry_rmem *prev, *next; /* reg->mem.rlist, under the lock */
    unsigned nrails; /* rails the exporter registered on that we share */
    uint64_t base;   /* exporter's address (VIRT_ADDR) or 0 */
    uint64_t len;
    unsigned access; /* FERRY_ACCESS_* the exporter granted */
    bool virt_addr;  /* remote addresses are base + offset */
    /* A host mirror of device memory (staged on the exporter's side):
     * written data reaches the device when ferry says so (xfer/stage.c). */
    bool mirror;
    uint64_t mirror_id;
    _Atomic unsigned users; /* as ferry_mem's */
    unsigned requests;
    uint64_t key[FERRY__MAX_RAILS];
    bool key_mapped[FERRY__MAX_RAILS]; /* raw key mapped with fi_mr_map_raw */
    char provider[FERRY__NAME_MAX];    /* exporter's, for error sentences */
    /* A fan-out receiver's region: its plan inbox (not on rlist; freed
     * with this one), and the blob it came from, which the fan-out's
     * plan hands on to whoever forwards to it. */
    struct ferry_rmem *inbox;
    uint64_t inbox_id;
    uint8_t *blob;
    size_t blob_len;
    /* The exporter's pulse slot and generation for the region
     * (FERRY__PULSE_NO_SLOT: it gave none); an inbox has its region's. */
    uint32_t slot;
    uint64_t generation;
};

/*
 * What the exporter's pulse says of rmem's region, as far as this host
 * can see it (its table is mapped here when it is on this host:
 * fabric/pulse.h).  Without the lock: one load or two.
 */
enum ferry__pulse_verdict ferry__rmem_verdict(const struct ferry_rmem *rmem);
/* The sentence FERRY_ESTALE ends with for a region that is gone (its
 * slot no longer holds its generation): what happened and what to do. */
const char *ferry__rmem_gone_why(void);

/*
 * Registers without the public checks; used for one-shot registrations of
 * iovs that came without lmem.  Caller holds no lock.
 */
int ferry__mem_register(struct ferry_context *ctx, void *addr, size_t len,
                        unsigned access, bool oneshot, struct ferry_mem **out);
/*
 * The same for memory of any kind: asks the device backend what addr is
 * (device memory takes the context's device path), unless kind is
 * FERRY_MEM_HOST.  `call` names the caller in error sentences.
 */
int ferry__mem_register_any(struct ferry_context *ctx, void *addr, size_t len,
                            enum ferry_mem_kind kind, int device,
                            unsigned access, bool oneshot, const char *call,
                            struct ferry_mem **out);
/* Closes the registration; caller guarantees nobody uses it. */
void ferry__mem_close(struct ferry_mem *mem);
/* The same with the context lock already held by the caller. */
void ferry__mem_close_locked(struct ferry_mem *mem);
/* Address a remote operation targets for offset `off` in rmem. */
static inline uint64_t ferry__rma_addr(const struct ferry_rmem *rmem,
                                       uint64_t off)
{
    return rmem->virt_addr ? rmem->base + off : off;
}
/* Closes every registration and remote region (context destruction). */
void ferry__mems_destroy(struct ferry__reg *reg);

#endif /* FERRY_REG_MEM_H */
