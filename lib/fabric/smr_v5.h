/*
 * What ferry reads of libfabric's shm regions of SMR_VERSION 5 to 7
 * (releases 1.19 to 1.22): where the head keeps the region's size and
 * offsets, and the peer table (prov/shm/src/smr_util.h; 1.19's
 * include/ofi_shm.h).  These are the provider's own structures, not an
 * interface: the reader checks the version, the offsets, the size and
 * the endpoint's name before it believes them, and touches nothing
 * otherwise.
 */
#ifndef FERRY_FABRIC_SMR_V5_H
#define FERRY_FABRIC_SMR_V5_H

#include "fabric/smr_v4.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__SMR_V5 5 /* 1.19 */
#define FERRY__SMR_V6 6 /* 1.20 */
#define FERRY__SMR_V7 7 /* 1.21 and 1.22 */

/* Where the head keeps total_size, the seven offsets right after it (the
 * command queue, the answers, the inject pool, the SAR pool, the peer
 * table, the name, the socket's name).  1.19's head has no xpmem fields;
 * 1.20's keeps max_sar_buf_per_peer before xpmem_cap_self, which moves
 * what follows by 8; 1.21's is 2.0's (smr_v8.h). */
#define FERRY__SMR_V5_SIZE_AT 40
#define FERRY__SMR_V6_SIZE_AT 80
#define FERRY__SMR_V7_SIZE_AT 72
/* Where the command queue begins: the head's size, aligned to 16 on
 * 1.19 and to 64 from 1.20. */
#define FERRY__SMR_V5_CMD_QUEUE 112
#define FERRY__SMR_V6_CMD_QUEUE 192

/* An entry of the peer table from 1.20 (1.19's is 1.17's, struct
 * ferry__smr_peer): the name a removal clears, and the peer's id for the
 * owner once they have met. */
struct ferry__smr_peer_v6 {
    char name[256];
    int64_t id; /* -1: not met */
    uint32_t sar_status;
    uint32_t name_sent;
    uint8_t xpmem[24]; /* struct xpmem_client */
};

/* The seven offsets of region (len bytes) of the layouts of 1.19 to 2.4
 * (versions 5 to 8; 2.0's head, smr_v8.h, is 1.21's), into off, where
 * the version is one of those, its size is len, the command queue lies
 * right after the head and the socket's name right after the name; else
 * false (shm_forget.c). */
bool ferry__smr_v5_offsets(const void *region, size_t len, uint64_t off[7]);

/* The peer table of region (len bytes) of a layout of 1.19 to 2.4, of
 * version and of entries of entry bytes (struct ferry__smr_peer on 1.19,
 * ferry__smr_peer_v6 on 1.20 to 1.22, ferry__smr_peer_v8 on 2.0 to 2.4),
 * the region of endpoint name; NULL where its version, offsets, size or
 * name do not check out (shm_forget.c). */
void *ferry__smr_peer_table(void *region, size_t len, uint8_t version,
                            size_t entry, const char *name);

#endif /* FERRY_FABRIC_SMR_V5_H */
