/*
 * Requested keys for providers that let the application choose them
 * (mr_mode without FI_MR_PROV_KEY).  Keys must be unique within the
 * domain and fit the provider's mr_key_size, which can be as small as one
 * byte.  The counter wraps to that width; a key still in use is refused by
 * the provider with -FI_ENOKEY and the caller asks for the next one.
 */
#include "base/keys.h"

#include "base/ferry-internal.h"

#include <sys/random.h>
#include <time.h>
#include <unistd.h>

void ferry__keyalloc_init(struct ferry__keyalloc *ka, size_t key_bytes,
                          uint64_t first)
{
    ka->mask = key_bytes >= 8 ? UINT64_MAX
                              : (((uint64_t)1 << (8 * key_bytes)) - 1);
    /* Key 0 is left out (ferry__keyalloc_next skips it): it is what an
     * uninitialised key looks like. */
    atomic_init(&ka->next, first);
}

uint64_t ferry__random_u64(void)
{
    struct timespec ts;
    uint64_t v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
           (uint64_t)getpid() << 40;
}

uint64_t ferry__keyalloc_next(struct ferry__keyalloc *ka)
{
    for (;;) {
        /* Relaxed: keys only need to be distinct, not ordered with
         * anything else. */
        uint64_t key = atomic_fetch_add_explicit(&ka->next, 1,
                                                 memory_order_relaxed) &
                       ka->mask;
        if (key != 0)
            return key;
    }
}

uint64_t ferry__keyalloc_space(const struct ferry__keyalloc *ka)
{
    return ka->mask; /* every value but 0 */
}

uint64_t ferry__key_to_u64(const uint8_t *key, size_t len)
{
    uint64_t v = 0;

    for (size_t i = 0; i < len && i < 8; i++)
        v |= (uint64_t)key[i] << (8 * i);
    return v;
}
