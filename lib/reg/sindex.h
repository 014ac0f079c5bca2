/*
 * A sorted array of addresses laid out for searching: the registration
 * cache's index of its entries' starts.  Private to libferry.
 *
 * Layer 0 holds the keys, sorted.  Each layer above holds the first key of
 * every block of FERRY__SINDEX_B keys of the layer below it, up to a top
 * layer of one block.  Every layer is padded to whole blocks with
 * UINTPTR_MAX, and every block is one cache line.  A search reads one
 * block per layer, top down, and counts the keys in it below the key: its
 * dependent loads are log8(n) cache lines, where a binary search's are
 * log2(n) (perf: at 100 K entries, thirteen dependent loads were most of
 * a cache hit whose data the CPU's caches held).
 */
#ifndef FERRY_REG_SINDEX_H
#define FERRY_REG_SINDEX_H

#include <stddef.h>
#include <stdint.h>

/* Keys per block: one 64-byte cache line. */
#define FERRY__SINDEX_B 8
/* Enough layers for any size_t count of keys: 8^22 > 2^64. */
#define FERRY__SINDEX_MAX_LAYERS 22

struct ferry__sindex {
    size_t n;         /* keys */
    unsigned nlayers; /* at least 1 */
    uintptr_t *layer[FERRY__SINDEX_MAX_LAYERS]; /* layer[0]: the keys */
};

/* Bytes of storage an index of n keys needs (a multiple of 64). */
size_t ferry__sindex_bytes(size_t n);

/*
 * Lays an index of n keys out in `storage` (64-byte aligned, of
 * ferry__sindex_bytes(n)).  The caller then writes the keys, sorted, to
 * x->layer[0][0 .. n) and calls ferry__sindex_build.
 */
void ferry__sindex_init(struct ferry__sindex *x, void *storage, size_t n);

/* Pads layer 0 and fills the layers above it from its keys. */
void ferry__sindex_build(struct ferry__sindex *x);

/* How many keys are below `key`: the index of the first key >= key. */
static inline size_t ferry__sindex_lower_bound(const struct ferry__sindex *x,
                                               uintptr_t key)
{
    size_t block = 0, below = 0;

    for (unsigned l = x->nlayers; l-- > 0;) {
        const uintptr_t *b = x->layer[l] + block;
        unsigned in_block = 0;

        /* Counted without branches: the eight loads are one line and do
         * not wait on each other. */
        for (unsigned i = 0; i < FERRY__SINDEX_B; i++)
            in_block += b[i] < key;
        below = block + in_block;
        /* Keys of this layer below `key` are the first keys of the blocks
         * before the one the answer lies in, one layer down: every block
         * before that block lies wholly below the key, every one after it
         * starts at or above it. */
        block = below > 0 ? (below - 1) * FERRY__SINDEX_B : 0;
    }
    return below;
}

#endif /* FERRY_REG_SINDEX_H */
