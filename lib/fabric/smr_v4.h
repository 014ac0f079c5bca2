/*
 * What ferry reads of libfabric's shm regions of SMR_VERSION 4 (releases
 * 1.17 and 1.18): the start of struct smr_region, the answer queue and
 * the peer table of their include/ofi_shm.h.  These are the provider's
 * own structures, not an interface: each reader checks the version, the
 * owner and the sizes before it believes them, and touches nothing
 * otherwise.
 */
#ifndef FERRY_FABRIC_SMR_V4_H
#define FERRY_FABRIC_SMR_V4_H

#include <pthread.h>
#include <stdint.h>

#define FERRY__SMR_V4 4

/* The start of a region, as far as its signal. */
struct ferry__smr_head {
    uint8_t version;
    uint8_t resv;
    uint16_t flags; /* FERRY__SMR_FLAG_DEBUG: libfabric built for debugging */
    int32_t pid;    /* the owner */
    uint8_t cma_cap_peer, cma_cap_self;
    uint32_t max_sar_buf_per_peer;
    void *base_addr;
    pthread_spinlock_t lock;
    /* Set to 1 by whoever leaves the owner work (smr_signal): the
     * owner's progress looks at its answers only then. */
    int32_t signal;
};

#define FERRY__SMR_FLAG_DEBUG (1u << 1)

/* One answer to an operation the region's owner posted: the provider's
 * entry of it, and its state. */
struct ferry__smr_answer {
    uint64_t msg_id;
    uint64_t status;
};

/* The answer queue (OFI_DECLARE_CIRQUE): entries rcnt to wcnt - 1 are
 * waiting, the provider taking them back in that order. */
struct ferry__smr_answers {
    uint64_t size, size_mask, rcnt, wcnt;
    struct ferry__smr_answer buf[];
};

/* An answer's status: 0 or a negative error once answered, these while
 * not (enum smr_status). */
#define FERRY__SMR_BUSY 16u /* FI_EBUSY: waiting for the peer */
#define FERRY__SMR_SAR_FREE 1025u  /* bounce buffers empty */
#define FERRY__SMR_SAR_READY 1026u /* bounce buffers full */

/* The peer table: an entry per peer the region's owner knows (by shm's
 * id for it), with the peer's id for the owner once they have met. */
#define FERRY__SMR_PEERS 256 /* SMR_MAX_PEERS */
struct ferry__smr_peer {
    char name[256]; /* SMR_NAME_MAX; empty: no peer */
    int64_t id;     /* the peer's id for the owner; -1: not met */
    uint32_t sar_status;
    uint32_t name_sent;
};

#endif /* FERRY_FABRIC_SMR_V4_H */
