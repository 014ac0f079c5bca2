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
 * wrapped to the usable key width, from first (0 is never handed out).  A
 * key the provider reports as taken (-FI_ENOKEY) is skipped by the caller.
 * A context starts it at a random value (ferry__random_u64): a process
 * that restarts at its predecessor's address then does not hand out the
 * keys the predecessor's blobs carry, so a write a peer still posts
 * through such a blob meets an unknown key instead of landing in the
 * successor's memory.
 */
struct ferry__keyalloc {
    _Atomic uint64_t next;
    uint64_t mask; /* all ones over the key width */
};
void ferry__keyalloc_init(struct ferry__keyalloc *ka, size_t key_bytes,
                          uint64_t first);
uint64_t ferry__keyalloc_next(struct ferry__keyalloc *ka);
/* Keys the allocator can hand out before it repeats itself. */
uint64_t ferry__keyalloc_space(const struct ferry__keyalloc *ka);
/* A random word: getrandom, or without it the clock and the process id. */
uint64_t ferry__random_u64(void);
/* Key bytes -> the u64 key of a non-raw key (little-endian). */
uint64_t ferry__key_to_u64(const uint8_t *key, size_t len);

#endif /* FERRY_BASE_KEYS_H */
