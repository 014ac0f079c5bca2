/*
 * The registration cache's search index (sindex.h): its layout and
 * building.  The search is inline in the header.
 */
#include "reg/sindex.h"

/* Keys of a layer of n keys, padded to whole blocks (one at least). */
static size_t padded(size_t n)
{
    size_t blocks = (n + FERRY__SINDEX_B - 1) / FERRY__SINDEX_B;

    return (blocks > 0 ? blocks : 1) * FERRY__SINDEX_B;
}

/* Keys of the layer above one of n keys. */
static size_t above(size_t n)
{
    return (n + FERRY__SINDEX_B - 1) / FERRY__SINDEX_B;
}

size_t ferry__sindex_bytes(size_t n)
{
    size_t keys = padded(n);

    for (; n > FERRY__SINDEX_B; n = above(n))
        keys += padded(above(n));
    /* A block is 8 keys of 8 bytes: the sum is whole 64-byte lines. */
    return keys * sizeof(uintptr_t);
}

void ferry__sindex_init(struct ferry__sindex *x, void *storage, size_t n)
{
    uintptr_t *next = storage;

    x->n = n;
    x->nlayers = 0;
    for (size_t len = n;; len = above(len)) {
        x->layer[x->nlayers++] = next;
        next += padded(len);
        if (len <= FERRY__SINDEX_B)
            break;
    }
}

void ferry__sindex_build(struct ferry__sindex *x)
{
    size_t len = x->n;

    for (unsigned l = 0; l < x->nlayers; l++, len = above(len)) {
        uintptr_t *keys = x->layer[l];

        if (l > 0)
            for (size_t j = 0; j < len; j++)
                keys[j] = x->layer[l - 1][j * FERRY__SINDEX_B];
        for (size_t j = len; j < padded(len); j++)
            keys[j] = UINTPTR_MAX;
    }
}
