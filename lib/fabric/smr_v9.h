/*
 * What ferry reads of libfabric's shm regions of SMR_VERSION 9 and 10
 * (releases 2.5.0, and 2.5.1 and 2.6): where struct smr_region keeps
 * its offsets, and its peer table (prov/shm/src/smr_util.h).  These are
 * the provider's own structures, not an interface: the reader checks the
 * version, the owner, the offsets and the endpoint's name before it
 * believes them, and touches nothing otherwise.
 */
#ifndef FERRY_FABRIC_SMR_V9_H
#define FERRY_FABRIC_SMR_V9_H

#include <stddef.h>
#include <stdint.h>

#define FERRY__SMR_V9 9   /* 2.5 */
#define FERRY__SMR_V10 10 /* 2.5.1 and 2.6 */

/* The head, as far as both versions share it. */
struct ferry__smr_head_v9 {
    uint8_t version;
    uint8_t resv;
    uint16_t flags;
    uint8_t self_vma_caps, peer_vma_caps;
    uint16_t max_sar_buf_per_peer;
    uint8_t xpmem[32]; /* two struct ofi_xpmem_pinfo */
    int32_t pid;       /* the owner */
    int32_t resv2;
    uint64_t base_addr;
    uint64_t total_size;
};

/* Where the offsets begin (7 of them, from the region's start), and the
 * index of the peer table's and the name's among them: 2.5.1 moved them
 * after a head padded to 128 bytes, and 2.6 swapped two others
 * (smr_v10.h). */
#define FERRY__SMR_V9_OFFSETS_AT 64
#define FERRY__SMR_V10_OFFSETS_AT 128
#define FERRY__SMR_V9_PEERS_INDEX 5
#define FERRY__SMR_V9_NAME_INDEX 6
/* Where the command queue begins: the head's size, aligned to 64. */
#define FERRY__SMR_V9_CMD_QUEUE 128
#define FERRY__SMR_V10_CMD_QUEUE 192

/* An entry of the peer table, one per id the owner gave a peer: the
 * peer's id for the owner once they have met, and where the owner maps
 * the peer's region. */
struct ferry__smr_peer_v9 {
    int64_t id; /* -1: not met */
    uint32_t sar_status;
    uint16_t name_sent;
    uint16_t ipc_valid;
    uint64_t local_region;
    uint8_t xpmem[24]; /* struct ofi_xpmem_client */
    uint8_t pad[16];   /* __attribute__((aligned(64))) */
};

/* The peer table of region (len bytes) of this layout (either version),
 * the region of endpoint name, or NULL where its head, offsets, size or
 * name do not check out (shm_forget.c). */
struct ferry__smr_peer_v9 *ferry__smr_v9_peers(void *region, size_t len,
                                                const char *name);

#endif /* FERRY_FABRIC_SMR_V9_H */
