/*
 * The pulse: one word per context that peers read as a heartbeat.
 *
 * A context registers a 64-bit word on rail 0 with remote read access
 * and fills it with a random incarnation number; its address blob
 * carries the word's address, key and value.  A peer's heartbeat is an
 * 8-byte fi_read of that word (xfer/live.c): it completes only if the
 * context's provider side answers, and it proves that the process that
 * answers is the one whose blob was added, not a successor that took the
 * same address (the value would differ).  Reads work on every provider
 * with RMA, need nothing from the peer's application, and work for peers
 * added from bare address blobs.
 */
#ifndef FERRY_FABRIC_PULSE_H
#define FERRY_FABRIC_PULSE_H

#include "base/blob.h"
#include "fabric/fabric.h"

/* What a peer's blob said of its pulse. */
struct ferry__pulse_remote {
    bool present;        /* false: the peer could not make one */
    uint64_t incarnation;
    uint64_t addr;       /* the address to read (an offset without VIRT_ADDR) */
    uint64_t key;
    bool key_mapped;     /* mapped with fi_mr_map_raw: unmap on release */
};

/* Registers the word on rail 0; under the lock.  A provider that cannot
 * give its key (a forced FERRY_MR_RAW without fi_mr_raw_attr) leaves the
 * context without one: peers then see no answer to their heartbeats. */
void ferry__pulse_open(struct ferry__fabric *fab);
/* Closes the registration (after the endpoints). */
void ferry__pulse_close(struct ferry__fabric *fab);

/* Appends the pulse fields to an address blob:
 *   u64 incarnation | u64 addr | u64 raw base | u16 key len | key
 * (key len 0: no pulse). */
void ferry__pulse_put(struct ferry__blob_writer *w,
                      const struct ferry__fabric *fab);
/* Reads them into *out, mapping a raw key on rail 0; under the lock. */
int ferry__pulse_get(struct ferry__fabric *fab, struct ferry__blob_reader *r,
                     struct ferry__pulse_remote *out);
/* Unmaps what ferry__pulse_get mapped. */
void ferry__pulse_release(struct ferry__fabric *fab,
                          struct ferry__pulse_remote *p);

#endif /* FERRY_FABRIC_PULSE_H */
