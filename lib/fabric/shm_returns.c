/*
 * A dead peer's commands handed back on libfabric 2.6 (shm_mend.h, "A
 * dead peer's commands").
 *
 * The commands out are the stack's less its free list and less those on
 * the return queue already: one handed back twice would have its pending
 * entry used after the provider freed it.  The header's tx_id says to
 * which of the endpoint's peers each went, and that peer's region, where
 * this process maps it, says whose process it is.  Each is then put on
 * the return queue as a producer does (OFI_DECLARE_ATOMIC_Q's _next and
 * _commit), beside the live peers that hand back theirs at the same
 * time, flagged SMR_OP_ERROR: the provider's progress completes its
 * operation with FI_EIO and frees the command (smr_progress_return).
 *
 * Left alone: commands through bounce buffers (SAR), which may sit on the
 * endpoint's own list of commands to send again, where handing them back
 * would free them twice, and through device handles (IPC); an RMA read
 * or fetching atomic through an inject buffer, which the provider copies
 * into the caller's buffer as it comes back, failed or not (ferry posts
 * none).  And a peer killed between claiming an entry of the return
 * queue and filling it, a few instructions, holds up the queue for good.
 */
#include "fabric/shm_mend.h"

#include "fabric/shm_space.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

_Static_assert(offsetof(struct ferry__smr26_stack, next) == 28,
               "struct smr_freestack of 2.6");
_Static_assert(offsetof(struct ferry__smr26_returns, read_pos) == 64 &&
                   offsetof(struct ferry__smr26_returns, size) == 128 &&
                   offsetof(struct ferry__smr26_returns, entries) == 192,
               "OFI_DECLARE_ATOMIC_Q's queue of 2.6");
_Static_assert(offsetof(struct ferry__smr26_cmd_hdr, tx_id) == 14 &&
                   sizeof(struct ferry__smr26_cmd_hdr) == 64,
               "struct smr_cmd_hdr of 2.6");

/* Commands in a stack at most: its links are 16-bit. */
#define CMDS_MAX 16384u

bool ferry__shm_returns_follow(struct ferry__shm_mend *m, uint8_t *region,
                               size_t len)
{
    const struct ferry__smr_head_v9 *h = (const void *)region;
    struct ferry__smr26_stack *s;
    struct ferry__smr26_returns *q;
    uint64_t off[7], stack_at, returns_at, sar_at, n;

    memcpy(off, region + FERRY__SMR_V10_OFFSETS_AT, sizeof(off));
    stack_at = off[FERRY__SMR26_STACK_INDEX];
    returns_at = off[FERRY__SMR26_RETURNS_INDEX];
    sar_at = off[FERRY__SMR26_SAR_INDEX];
    if (stack_at % 8 != 0 || returns_at % 64 != 0 || stack_at >= returns_at ||
        returns_at >= sar_at || sar_at > len ||
        returns_at - stack_at < sizeof(*s) ||
        sar_at - returns_at < sizeof(*q))
        return false;
    s = (void *)(region + stack_at);
    q = (void *)(region + returns_at);
    n = s->size;
    if (s->object_size != FERRY__SMR26_CMD_SIZE || n == 0 || n > CMDS_MAX ||
        (n & (n - 1)) != 0 ||
        s->entry_base_offset < sizeof(*s) + n * sizeof(s->next[0]) ||
        s->entry_base_offset > returns_at - stack_at ||
        (returns_at - stack_at - s->entry_base_offset) /
                FERRY__SMR26_CMD_SIZE < n ||
        (sar_at - returns_at - sizeof(*q)) / FERRY__SMR26_RETURN_ENTRY < n ||
        q->size != (int32_t)n || q->size_mask != (int32_t)(n - 1) ||
        (q->write_pos_initialized != 0 && q->write_pos_initialized != 1))
        return false;
    m->cmds = s;
    m->returns = q;
    m->cmds_at = (uint8_t *)s + s->entry_base_offset;
    m->cmds_base = h->base_addr + stack_at + s->entry_base_offset;
    m->ncmds = (uint32_t)n;
    m->ptr_at = q->write_pos_initialized ? FERRY__SMR26_RETURN_PTR_DEBUG
                                         : FERRY__SMR26_RETURN_PTR;
    return true;
}

/* What the scan found of each command. */
enum { CMD_OUT, CMD_FREE, CMD_BACK };

static struct ferry__smr26_cmd_hdr *cmd_at(const struct ferry__shm_mend *m,
                                           uint32_t c)
{
    return (void *)(m->cmds_at + (size_t)c * FERRY__SMR26_CMD_SIZE);
}

static uint8_t *return_entry(const struct ferry__shm_mend *m, int64_t pos)
{
    return m->returns->entries +
           (size_t)((uint64_t)pos & (m->ncmds - 1)) *
               FERRY__SMR26_RETURN_ENTRY;
}

static _Atomic int64_t *seq_of(uint8_t *entry)
{
    return (_Atomic int64_t *)(void *)entry;
}

/* Marks the free list's commands free; false where it does not check
 * out (an index out of range, a loop), and nothing is to be trusted. */
static bool mark_free(const struct ferry__shm_mend *m, uint8_t *state)
{
    int16_t c = m->cmds->top;

    while (c != -1) {
        if (c < 0 || (uint32_t)c >= m->ncmds || state[c] != CMD_OUT)
            return false;
        state[c] = CMD_FREE;
        c = m->cmds->next[c];
    }
    return true;
}

/* Marks the commands on the return queue, filled in and not yet taken
 * back.  An entry claimed and not yet filled is a live peer's, handing
 * back a command of its own. */
static void mark_returned(const struct ferry__shm_mend *m, uint8_t *state)
{
    /* read_pos: written by this process's progress, which runs under the
     * lock this runs under. */
    int64_t pos = m->returns->read_pos;
    int64_t end = atomic_load_explicit(
        (_Atomic int64_t *)&m->returns->write_pos, memory_order_relaxed);
    uint64_t ptr, at;

    if (end - pos > (int64_t)m->ncmds)
        end = pos + m->ncmds;
    for (; pos < end; pos++) {
        uint8_t *e = return_entry(m, pos);

        /* Acquire: pairs with the producer's release of the sequence
         * (its _commit), so the pointer it wrote before is seen. */
        if (atomic_load_explicit(seq_of(e), memory_order_acquire) != pos + 1)
            continue;
        memcpy(&ptr, e + m->ptr_at, sizeof(ptr));
        at = ptr - m->cmds_base;
        if (ptr >= m->cmds_base && at % FERRY__SMR26_CMD_SIZE == 0 &&
            at / FERRY__SMR26_CMD_SIZE < m->ncmds)
            state[at / FERRY__SMR26_CMD_SIZE] = CMD_BACK;
    }
}

/* Reads len bytes at addr of this process without faulting on a bad
 * address: the address is read from the region, which peers write. */
static bool read_here(void *out, uint64_t addr, size_t len)
{
    struct iovec local = {.iov_base = out, .iov_len = len};
    struct iovec remote = {.iov_base = (void *)(uintptr_t)addr,
                           .iov_len = len};

    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) ==
           (ssize_t)len;
}

/* Whether peer i of the endpoint is the endpoint named name of the
 * process died: the region this process maps for it (where the entry
 * says) is of 2.6's version, owned by died and named name. */
static bool is_peer(const struct ferry__shm_mend *m, int16_t i,
                    const char *name, pid_t died)
{
    const struct ferry__smr_peer_v9 *p = &m->peers_v9[i];
    struct ferry__smr_head_v9 head;
    uint64_t off[7];
    char theirs[256];

    if (p->id < 0 || p->local_region == 0 ||
        !read_here(&head, p->local_region, sizeof(head)) ||
        head.version != FERRY__SMR_V10 || head.pid != died ||
        !read_here(off, p->local_region + FERRY__SMR_V10_OFFSETS_AT,
                   sizeof(off)) ||
        off[FERRY__SMR_V9_NAME_INDEX] > head.total_size ||
        head.total_size - off[FERRY__SMR_V9_NAME_INDEX] < sizeof(theirs) ||
        !read_here(theirs, p->local_region + off[FERRY__SMR_V9_NAME_INDEX],
                   sizeof(theirs)))
        return false;
    return strncmp(theirs, name, sizeof(theirs)) == 0;
}

/* Whether command h can come back failed with nothing else to undo. */
static bool hands_back_whole(const struct ferry__smr26_cmd_hdr *h)
{
    if (h->proto == FERRY__SMR26_PROTO_IOV)
        return true;
    return h->proto == FERRY__SMR26_PROTO_INJECT &&
           h->op != FERRY__OFI_OP_READ_REQ &&
           h->op != FERRY__OFI_OP_ATOMIC_FETCH &&
           h->op != FERRY__OFI_OP_ATOMIC_COMPARE;
}

/* Puts command c on the return queue, failed: false when the queue has
 * no free entry (it has one per command: not while c is out). */
static bool hand_back(const struct ferry__shm_mend *m, uint32_t c)
{
    _Atomic int64_t *write_pos =
        (_Atomic int64_t *)&m->returns->write_pos;
    int64_t pos = atomic_load_explicit(write_pos, memory_order_relaxed);
    uint64_t ptr = m->cmds_base + (uint64_t)c * FERRY__SMR26_CMD_SIZE;
    uint8_t *e;

    for (;;) {
        int64_t seq;

        e = return_entry(m, pos);
        /* Acquire: pairs with the release by which progress gave the
         * entry back (_release), so its reads of the entry are done. */
        seq = atomic_load_explicit(seq_of(e), memory_order_acquire);
        if (seq == pos) {
            /* Sequentially consistent, as the provider's own claim. */
            if (atomic_compare_exchange_weak(write_pos, &pos, pos + 1))
                break;
        } else if (seq < pos) {
            return false;
        } else {
            pos = atomic_load_explicit(write_pos, memory_order_relaxed);
        }
    }
    cmd_at(m, c)->smr_flags |= FERRY__SMR26_OP_ERROR;
    memcpy(e + m->ptr_at, &ptr, sizeof(ptr));
    /* Release: progress, acquiring the sequence, sees the flag and the
     * pointer written above. */
    atomic_store_explicit(seq_of(e), pos + 1, memory_order_release);
    return true;
}

unsigned ferry__shm_mend_return_to(struct ferry__shm_mend *m,
                                   const char *name, pid_t died)
{
    /* Per peer id: 0 not looked at yet, 1 the dead peer, -1 another. */
    int8_t whose[FERRY__SMR_PEERS] = {0};
    unsigned handed = 0;
    uint8_t *state;

    if (m->returns == NULL || name == NULL || died <= 0 ||
        (state = calloc(m->ncmds, 1)) == NULL)
        return 0;
    if (mark_free(m, state)) {
        mark_returned(m, state);
        for (uint32_t c = 0; c < m->ncmds; c++) {
            const struct ferry__smr26_cmd_hdr *h = cmd_at(m, c);
            int16_t i = h->tx_id;

            if (state[c] != CMD_OUT || !hands_back_whole(h) || i < 0 ||
                i >= FERRY__SMR_PEERS)
                continue;
            if (whose[i] == 0)
                whose[i] = is_peer(m, i, name, died) ? 1 : -1;
            if (whose[i] > 0 && hand_back(m, c))
                handed++;
        }
    }
    free(state);
    return handed;
}

unsigned ferry__shm_mend_returns(struct ferry__shm_mend *m, struct fid_av *av,
                                 fi_addr_t fi_addr, pid_t died)
{
    char path[FERRY__ADDR_MAX + 16];

    if (m->returns == NULL ||
        !ferry__shm_av_region_path(av, fi_addr, path, sizeof(path)))
        return 0;
    return ferry__shm_mend_return_to(m, path + strlen(FERRY__SHM_DIR "/"),
                                     died);
}
