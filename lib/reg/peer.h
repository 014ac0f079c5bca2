/*
 * Peers: address blobs checked and inserted into every rail's address
 * vector.
 */
#ifndef FERRY_REG_PEER_H
#define FERRY_REG_PEER_H

#include "reg/part.h"

struct ferry_peer {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_peer *next;
    fi_addr_t fi_addr[FERRY__MAX_RAILS];
    _Atomic unsigned rmem_count; /* imported regions still held */
};

/* Removes every peer (context destruction). */
void ferry__peers_destroy(struct ferry__reg *reg);

#endif /* FERRY_REG_PEER_H */
