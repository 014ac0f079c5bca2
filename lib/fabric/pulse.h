/*
 * The pulse: the words peers read of a context, as a heartbeat and to
 * check that a region is still there.
 *
 * A context registers one table of 64-bit words on the first rail of
 * each transport with remote read access; its address blob carries the
 * table's address, key and incarnation for each.
 *
 * - Word FERRY__PULSE_INCARNATION holds a random incarnation number.  A
 *   peer's heartbeat is an 8-byte fi_read of it (xfer/live.c): it
 *   completes only if the context's provider side answers, and it proves
 *   that the process that answers is the one whose blob was added, not a
 *   successor that took the same address (the value would differ).
 *   Reads work on every provider with RMA, need nothing from the peer's
 *   application, and work for peers added from bare address blobs.
 * - Each region registered for remote access has a slot, a word holding
 *   a generation number while the region lives and 0 once it is gone;
 *   its key blob carries both (reg/mem.c).  A key is stale when its
 *   slot's word no longer holds its generation.  ferry must know before
 *   posting: tcp;ofi_rxm (libfabric 1.17) answers an operation with an
 *   unknown key by dropping the connection under every operation to that
 *   peer, and shm drops the command without answering at all, so the
 *   operation never completes and the responses queued behind it are
 *   never read.
 *
 * The table lives in a file in /dev/shm named after the incarnation,
 * which peers on the same host map read-only when they add the context:
 * they check a key with one load before every operation.  Peers on
 * other hosts read the slot's word (ferry__pulse_slot_addr) when the
 * provider reports a failure.  Without /dev/shm the table is on the heap
 * and only remote reads see it.
 *
 * The bell.  A context whose progress thread cannot sleep on its rails'
 * descriptors (shm's completion queue has none: libfabric 1.17 refuses
 * FI_WAIT_FD there) would have to poll for ever, since a target must
 * progress for shm's writes into it to land.  Instead it makes a FIFO in
 * /dev/shm beside its table, and before sleeping on it (and on whatever
 * descriptors the other rails have) raises the table's SLEEPING word and
 * polls once more.  A peer of this host opens the FIFO when it adds the
 * context; after posting to it, it looks at SLEEPING and, when it is
 * raised, writes a byte into the FIFO.  Either the sleeper's last poll
 * sees the operation or the poster sees the word (fences on both sides:
 * ferry__pulse_sleep, ferry__pulse_ring).
 */
#ifndef FERRY_FABRIC_PULSE_H
#define FERRY_FABRIC_PULSE_H

#include "base/blob.h"
#include "fabric/fabric.h"
#include "fabric/shm_guard.h"

/* The words before the slots. */
enum {
    FERRY__PULSE_INCARNATION, /* what a heartbeat reads */
    FERRY__PULSE_OWNER,       /* the owning process's id (leftover files) */
    FERRY__PULSE_SLEEPING,    /* 1: the owner sleeps on its bell */
    FERRY__PULSE_HEADER,      /* words before slot 0 */
};

/* Slots per table: 64 KiB in all.  Peers of this version agree on it,
 * so an imported slot beyond it is a bad blob. */
#define FERRY__PULSE_SLOTS (65536u / 8u - FERRY__PULSE_HEADER)
/* A region without a slot (none was left): peers cannot check its key. */
#define FERRY__PULSE_NO_SLOT UINT32_MAX

/* What a peer's blob said of its pulse, and its table if mapped here. */
struct ferry__pulse_remote {
    bool present;        /* false: the peer could not make one */
    uint64_t incarnation;
    uint64_t addr;       /* the address to read (an offset without VIRT_ADDR) */
    uint64_t key;
    bool key_mapped;     /* mapped with fi_mr_map_raw: unmap on release */
    /* The peer's table, when it is on this host (read-only), or NULL. */
    const _Atomic uint64_t *local;
    /* Its bell, opened for writing, when it has one (has_bell). */
    bool has_bell;
    int bell_fd;
    /* Its owner's watch by the guard (fabric/shm_guard.h), or 0. */
    uint64_t guard;
};

/* What the pulse says of a remote region. */
enum ferry__pulse_verdict {
    FERRY__PULSE_UNKNOWN,      /* no table here, or a region without slot */
    FERRY__PULSE_LIVE,
    FERRY__PULSE_REGION_GONE,  /* deregistered */
    FERRY__PULSE_CONTEXT_GONE, /* the whole context closed */
};

/* Makes the table and registers it on rail 0; under the lock.  A
 * provider that cannot give its key (a forced FERRY_MR_RAW without
 * fi_mr_raw_attr) leaves the context without one: peers then see no
 * answer to their heartbeats and cannot check keys. */
void ferry__pulse_open(struct ferry__fabric *fab);
/* Tells the peers of this host that every region is gone, then closes
 * the registration (after the endpoints) and the table. */
void ferry__pulse_close(struct ferry__fabric *fab);

/* A slot for a region that peers may reach, and its generation in *gen;
 * FERRY__PULSE_NO_SLOT when none is left.  Under the lock. */
uint32_t ferry__pulse_slot_take(struct ferry__fabric *fab, uint64_t *gen);
/* The slot's region is going: its key is stale for every peer from now
 * on, and the slot may be given again.  Under the lock, before the
 * region's registrations close. */
void ferry__pulse_slot_retire(struct ferry__fabric *fab, uint32_t slot);

/* Appends the pulse fields of transport t to an address blob:
 *   u64 incarnation | u64 addr | u64 raw base | u16 key len | key
 * (key len 0: no pulse on t). */
void ferry__pulse_put(struct ferry__blob_writer *w,
                      const struct ferry__fabric *fab,
                      const struct ferry__transport *t);
/* Reads them into *out, mapping a raw key on rail 0, and maps the peer's
 * table when it is on this host; under the lock. */
int ferry__pulse_get(struct ferry__fabric *fab, struct ferry__blob_reader *r,
                     struct ferry__pulse_remote *out);
/* Has the guard watch the owner of the peer p describes, when its table
 * is on this host: for a peer reached over shm (fabric/shm_guard.h),
 * whose endpoints owner lists; owner's pid is set here, the table's. */
void ferry__pulse_guard(struct ferry__pulse_remote *p,
                        struct ferry__shm_owner *owner);

/* The process id of the peer p describes when the guard has seen that
 * process die, else 0. */
pid_t ferry__pulse_owner_died(const struct ferry__pulse_remote *p);
/* Writes the byte (a full FIFO means a byte is waiting already). */
void ferry__pulse_ring_now(const struct ferry__pulse_remote *p);

/* Rings p's bell if its owner sleeps: after posting to it.  The fence
 * before the look pairs with ferry__pulse_sleep's. */
static inline void ferry__pulse_ring(const struct ferry__pulse_remote *p)
{
    if (!p->has_bell)
        return;
    /* Orders the post before the look at SLEEPING (Dekker with the
     * sleeper's fence): it sees the word raised, or the sleeper's last
     * poll sees the post. */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&p->local[FERRY__PULSE_SLEEPING],
                             memory_order_relaxed) != 0)
        ferry__pulse_ring_now(p);
}

/* The context's bell to poll, or -1 when it has none (every rail has a
 * descriptor, or there is no progress thread, or /dev/shm is not there:
 * then its thread must not sleep where a rail has no descriptor). */
int ferry__pulse_bell_fd(const struct ferry__fabric *fab);
/* Raises (true) or lowers the SLEEPING word; raising it is followed by a
 * fence, after which the caller polls once more before sleeping.
 * Lowering it drains the bell. */
void ferry__pulse_sleep(struct ferry__fabric *fab, bool on);

/* Steps over them, checking their lengths (another transport's). */
int ferry__pulse_skip(struct ferry__blob_reader *r);
/* Unmaps what ferry__pulse_get mapped. */
void ferry__pulse_release(struct ferry__fabric *fab,
                          struct ferry__pulse_remote *p);

/* What the peer's table says of the region in slot with generation gen,
 * where it is mapped here; without the lock. */
enum ferry__pulse_verdict
ferry__pulse_region(const struct ferry__pulse_remote *p, uint32_t slot,
                    uint64_t gen);
/* Whether the peer's table, mapped here, says its context closed. */
bool ferry__pulse_closed(const struct ferry__pulse_remote *p);
/* Where a peer reads slot's word (an 8-byte fi_read with p->key). */
uint64_t ferry__pulse_slot_addr(const struct ferry__pulse_remote *p,
                                uint32_t slot);

#endif /* FERRY_FABRIC_PULSE_H */
