/*
 * Helpers of the dlist suites (test/api/check_dlist.c and
 * test/unit/check_dlist.c), on the public API only: registered regions
 * with a shadow of what they should hold, lists described by the test
 * itself (so that it finds every block without asking the library), and
 * preparations posted and waited for.
 */
#ifndef FERRY_DLISTUTIL_H
#define FERRY_DLISTUTIL_H

#include "testutil.h"

#define PATIENCE_MS 30000

/*
 * A registered buffer and a shadow of what it should hold.  A remote one
 * is registered in the target context and imported through the peer.
 */
struct region {
    uint8_t *buf;
    uint8_t *want;
    size_t len;
    ferry_mem_t *mem;
    ferry_rmem_t *rmem; /* remote regions only */
};

void region_local(struct region *r, ferry_context_t *ctx, size_t len);
void region_remote(struct region *r, struct tu_pair *p, size_t len,
                   unsigned access);
/* Local regions too: ferry_rmem_close(NULL) is a no-op. */
void region_free(struct region *r);
/* Fills buffer and shadow with the same background. */
void region_fill(struct region *r, uint64_t seed);
void region_assert(const struct region *r, const char *what);

/*
 * A list and the test's own description of it, from which the test finds
 * every block without asking the library.
 */
#define TL_MAXSEG 16

struct tseg {
    struct region *r;
    uint64_t off;
    size_t bs, count, stride, first;
};

struct tlist {
    ferry_dlist_t *dl;
    const char *name;
    struct tseg seg[TL_MAXSEG];
    size_t nseg, count;
};

void tl_create(struct tlist *l, ferry_context_t *ctx,
               enum ferry_dlist_kind kind, const char *name);
/* Adds a segment (count 1: an explicit entry); asserts its first index. */
void tl_add(struct tlist *l, struct region *r, uint64_t off, size_t bs,
            size_t count, size_t stride);
/* Block idx: its bytes in the buffer, in the shadow, and its length. */
uint8_t *tl_block(const struct tlist *l, size_t idx, uint8_t **want,
                  size_t *len);
/* Gives every block its own pattern, seed + index, buffer and shadow. */
void tl_fill_blocks(const struct tlist *l, uint64_t seed);
void tl_destroy(struct tlist *l);

/*
 * Records in the shadows what moving the pairs must do: src block to dst
 * block, for each pair in order.
 */
void shadow_move(const struct tlist *src, const uint32_t *sidx,
                 const struct tlist *dst, const uint32_t *didx, size_t n);
/* Every moved block holds its source's pattern (seed + source index). */
void assert_moved(const struct tlist *dst, const uint32_t *didx,
                  const uint32_t *sidx, size_t n, uint64_t seed,
                  const char *what);

/* ferry_xfer_prepare, ferry_xfer_post, waiting for the request and
 * ferry_xfer_close, each asserting success. */
ferry_prep_t *prepare(ferry_peer_t *peer, enum ferry_op op,
                      struct tlist *local, struct tlist *remote);
ferry_req_t *post(ferry_prep_t *prep, const uint32_t *lidx,
                  const uint32_t *ridx, size_t n,
                  const struct ferry_xfer_opts *opts, const char *what);
void req_ok(ferry_req_t *req, const char *what);
void post_ok(ferry_prep_t *prep, const uint32_t *lidx, const uint32_t *ridx,
             size_t n, const char *what);
void release(ferry_prep_t *prep);

#endif /* FERRY_DLISTUTIL_H */
