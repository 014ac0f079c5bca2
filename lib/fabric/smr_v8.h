/*
 * What ferry reads of libfabric's shm regions of SMR_VERSION 8 (releases
 * 2.0 to 2.4): the start of struct smr_region, as far as its offsets,
 * and its peer table (prov/shm/src/smr_util.h).  These are the
 * provider's own structures, not an interface: the reader checks the
 * version, the offsets, the size and the endpoint's name before it
 * believes them, and touches nothing otherwise.
 */
#ifndef FERRY_FABRIC_SMR_V8_H
#define FERRY_FABRIC_SMR_V8_H

#include <stddef.h>
#include <stdint.h>

#define FERRY__SMR_V8 8

/* The head, as far as its offsets. */
struct ferry__smr_head_v8 {
    uint8_t version;
    uint8_t resv;
    uint16_t flags;
    int32_t pid; /* the owner */
    uint8_t cma_cap_peer, cma_cap_self, xpmem_cap_self, resv2;
    uint32_t max_sar_buf_per_peer;
    uint8_t xpmem[32]; /* two struct ofi_xpmem_pinfo */
    uint64_t base_addr;
    int32_t lock; /* pthread_spinlock_t */
    uint64_t map; /* struct smr_map *, of the owner's memory */
    uint64_t total_size;
    /* From the region's start: the command queue, the answers, the
     * inject pool, the SAR pool, the peer table, the name, the socket's
     * name. */
    uint64_t offsets[7];
};

#define FERRY__SMR_V8_PEERS_INDEX 4
#define FERRY__SMR_V8_NAME_INDEX 5
/* Where the command queue begins: the head's size, aligned to 64. */
#define FERRY__SMR_V8_CMD_QUEUE 192

/* An entry of the peer table, one per id the owner gave a peer: the
 * peer's id for the owner once they have met.  The name is not used. */
struct ferry__smr_peer_v8 {
    char name[256];
    int64_t id; /* -1: not met */
    uint32_t sar_status;
    uint16_t name_sent;
    uint16_t ipc_valid;
    uint8_t xpmem[24]; /* struct ofi_xpmem_client */
};

/* Its peer table: ferry__smr_peer_table (smr_v5.h), with FERRY__SMR_V8. */

#endif /* FERRY_FABRIC_SMR_V8_H */
