/*
 * The requests' histograms for the metrics (lib/metrics.c): how long
 * requests took from ferry_write/read/notify_send to their end, and how
 * many bytes they moved, per kind.  Counted under the context lock as a
 * request ends (op.c); bucket bounds fixed here, so the counting and the
 * exposition read one table.
 */
#ifndef FERRY_XFER_HIST_H
#define FERRY_XFER_HIST_H

#include <stddef.h>
#include <stdint.h>

/* Durations: 10 us to 10 s by steps of about 3 (ns). */
static const uint64_t ferry__duration_bounds_ns[] = {
    10000,     30000,     100000,     300000,     1000000,
    3000000,   10000000,  30000000,   100000000,  300000000,
    1000000000, 3000000000, 10000000000,
};
#define FERRY__DURATION_BUCKETS                                               \
    (sizeof(ferry__duration_bounds_ns) / sizeof(ferry__duration_bounds_ns[0]))

/* Sizes: 4 KiB to 1 GiB by fours (bytes). */
static const uint64_t ferry__size_bounds[] = {
    4096,     16384,    65536,     262144,    1048576,
    4194304,  16777216, 67108864,  268435456, 1073741824,
};
#define FERRY__SIZE_BUCKETS                                                   \
    (sizeof(ferry__size_bounds) / sizeof(ferry__size_bounds[0]))

/* A request kind's histograms; each array's last bucket is +Inf. */
struct ferry__req_hist {
    uint64_t duration[FERRY__DURATION_BUCKETS + 1];
    uint64_t duration_ns; /* their sum */
    uint64_t size[FERRY__SIZE_BUCKETS + 1];
    uint64_t bytes; /* their sum */
};

/* The first bucket whose bound holds v (the last: beyond every bound). */
static inline size_t ferry__bucket_of(const uint64_t *bounds, size_t n,
                                      uint64_t v)
{
    size_t b = 0;

    while (b < n && v > bounds[b])
        b++;
    return b;
}

static inline void ferry__hist_add(struct ferry__req_hist *h,
                                   uint64_t duration_ns, uint64_t bytes)
{
    h->duration[ferry__bucket_of(ferry__duration_bounds_ns,
                                 FERRY__DURATION_BUCKETS, duration_ns)]++;
    h->duration_ns += duration_ns;
    h->size[ferry__bucket_of(ferry__size_bounds, FERRY__SIZE_BUCKETS,
                             bytes)]++;
    h->bytes += bytes;
}

#endif /* FERRY_XFER_HIST_H */
