/*
 * Requested memory keys for providers without FI_MR_PROV_KEY.
 */
#ifndef FERRY_BASE_KEYS_H
#define FERRY_BASE_KEYS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Hands out requested keys for providers without FI_MR_PROV_KEY: a counter
 * wrapped to the usable key width.  A key the provider reports as taken
 * (-FI_ENOKEY) is skipped by the caller.
 */
struct ferry__keyalloc {
    _Atomic uint64_t next;
    uint64_t mask; /* all ones over the key width */
};
void ferry__keyalloc_init(struct ferry__keyalloc *ka, size_t key_bytes);
uint64_t ferry__keyalloc_next(struct ferry__keyalloc *ka);
/* Keys the allocator can hand out before it repeats itself. */
uint64_t ferry__keyalloc_space(const struct ferry__keyalloc *ka);
/* Key bytes -> the u64 key of a non-raw key (little-endian). */
uint64_t ferry__key_to_u64(const uint8_t *key, size_t len);

#endif /* FERRY_BASE_KEYS_H */
