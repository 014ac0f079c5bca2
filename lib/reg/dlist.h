/*
 * Descriptor lists (a paged KV cache described once) and prepared
 * transfers between two of them.
 */
#ifndef FERRY_REG_DLIST_H
#define FERRY_REG_DLIST_H

#include "reg/mem.h"

/* count blocks of block_size bytes, stride apart, from offset. */
struct ferry__dseg {
    struct ferry_mem *mem;   /* local lists */
    struct ferry_rmem *rmem; /* remote lists */
    uint64_t offset;
    size_t block_size;
    size_t count;
    size_t stride;
    size_t first; /* list index of the first block */
};

struct ferry_dlist {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry__owned owned; /* on the context's list (owned.h) */
    enum ferry_dlist_kind kind;
    char name[64];
    struct ferry__dseg *segs;
    size_t nseg, cap;
    size_t count;          /* blocks */
    size_t uniform_block;  /* every segment's block size, or 0 if mixed */
    atomic_bool frozen;    /* prepared once: no more segments */
    _Atomic unsigned prepared; /* prepared transfers using it */
};

struct ferry_prep {
    uint32_t magic;
    struct ferry__owned owned; /* on the context's list (owned.h) */
    struct ferry_peer *peer;
    enum ferry_op op; /* FERRY_OP_WRITE or FERRY_OP_READ */
    struct ferry_dlist *local;
    struct ferry_dlist *remote;
    bool same_blocks;       /* no per-block length check needed */
    unsigned requests;      /* in flight; under the lock (xfer.c) */
};

/* One block resolved to its region. */
struct ferry__block {
    struct ferry_mem *mem;
    struct ferry_rmem *rmem;
    uint64_t offset;
    size_t len;
};

const struct ferry__dseg *ferry__dlist_find(const struct ferry_dlist *dl,
                                            size_t idx);
void ferry__dlist_block(const struct ferry_dlist *dl, size_t idx,
                        struct ferry__block *b);
/* Bytes moved by posting these n local blocks. */
uint64_t ferry__prep_bytes(const struct ferry_prep *prep, const uint32_t *lidx,
                           size_t n);
int ferry__prep_check_indices(const struct ferry_prep *prep,
                              const uint32_t *lidx, const uint32_t *ridx,
                              size_t n);

#endif /* FERRY_REG_DLIST_H */
