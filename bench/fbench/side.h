/*
 * ferry_bench: one side of a session: its context, its registered buffer,
 * and the mailbox of control notifications exchanged with the peer
 * (side.c).
 */
#ifndef FERRY_BENCH_SIDE_H
#define FERRY_BENCH_SIDE_H

#include "options.h"
#include "pattern.h"

#include <ferry.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Control messages waiting to be taken, and the sums of the data-plane
 * ones.  Everything ferry queues goes through mbox_pump, so ferry's queue
 * never grows (it keeps every notification until it is polled) and no
 * control message is lost while data-plane ones are drained.
 */
#define MBOX_CAP 32
/* How often a wait looks whether the peer is gone. */
#define PROBE_NS UINT64_C(100000000)
struct mbox {
    uint64_t data, ping, pong;
    struct ferry_notification ctl[MBOX_CAP];
    size_t nctl;
};

struct side {
    ferry_context_t *ctx;
    struct ferry_context_info info;
    bool progress_thread;
    /* --mem cuda: buf is device memory of `device`, which the CPU may not
     * touch; patterns go through `shadow` (side_fill, side_view). */
    bool cuda;
    unsigned device;
    uint8_t *buf;
    uint8_t *shadow;
    uint64_t len;
    ferry_mem_t *mem;
    uint64_t reg_ns; /* how long ferry_mem_register took */
    struct mbox mb;
    int timeout_ms;
};

int open_context(const struct options *o, bool progress_thread,
                 struct side *s);
int setup_buffer(struct side *s, uint64_t len, enum pattern p,
                 unsigned access);
/* Pattern p into the whole buffer, wherever it lives. */
int side_fill(struct side *s, enum pattern p);
/* The buffer's bytes for the CPU to check: buf itself, or for device
 * memory a fresh copy in the shadow; NULL (after a message) on failure. */
uint8_t *side_view(struct side *s);
void side_close(struct side *s);
int mbox_pump(struct side *s);
/* Pumps without a pause until the clock (now_ns) reaches until: a
 * thread that polls for progress and has nothing else to do. */
int mbox_poll_until(struct side *s, uint64_t until);
/* The peer that peer_gone asks about: name in meta, which gave peer (NULL
 * meta: none).  name must outlive the probe. */
void set_probe(ferry_meta_t *meta, const char *name, ferry_peer_t *peer);
bool peer_gone(void);
int mbox_wait(struct side *s, const uint64_t *ids, size_t nids,
              uint64_t deadline, const char *what,
              struct ferry_notification *out);
int mbox_wait1(struct side *s, uint64_t id, uint64_t deadline,
               const char *what, uint64_t *value);
/* As mbox_wait1, looking only every PROBE_NS and asleep outside ferry in
 * between, as an application that leaves ferry alone while data lands. */
int mbox_doze1(struct side *s, uint64_t id, uint64_t deadline,
               const char *what, uint64_t *value);
int send_ctl(struct side *s, ferry_peer_t *peer, uint64_t id,
             uint64_t value);

#endif /* FERRY_BENCH_SIDE_H */
