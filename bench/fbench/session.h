/*
 * ferry_bench: the initiator's state, and the exchanges with the target
 * that open and close every run (session.c).  Below both kinds of run
 * (throughput.c, pingpong.c), so that they need not call back into
 * initiator.c, which drives them.
 */
#ifndef FERRY_BENCH_SESSION_H
#define FERRY_BENCH_SESSION_H

#include "options.h"
#include "side.h"
#include "stats.h"

#include <ferry.h>

#include <stdatomic.h>
#include <stdint.h>

struct initiator {
    struct side s;
    const struct options *o;
    ferry_meta_t *meta;
    const char *target; /* its name in meta */
    ferry_peer_t *peer;
    ferry_peer_t **idle_peers; /* --idle-peers, never used */
    size_t nidle;
    ferry_rmem_t *rmem;
    /* --regions N > 1: the target's buffer as N regions, of region_len
     * bytes each. */
    ferry_rmem_t *regions[MAX_REGIONS];
    uint64_t region_len;
    uint64_t t_connect;         /* the target was looked up */
    _Atomic uint64_t t_first;   /* the first transfer completed */
    uint64_t deadline;          /* of the whole session */
};

/* The first transfer of the session completed now (the first call wins). */
void note_first_completion(struct initiator *in);
int start_run(struct initiator *in, unsigned flags, uint64_t block);
/* The RUN_* flags of these options. */
unsigned run_flags(const struct options *o);
int exchange_results(struct initiator *in, uint64_t written,
                     uint64_t block, uint64_t nreq, struct result *res);
/* What both kinds of run report alike: the window, the session's costs. */
void fill_common(struct initiator *in, const struct window *win,
                 struct result *res);

#endif /* FERRY_BENCH_SESSION_H */
