/*
 * What ferry mends in its own shm regions on libfabric 1.17 to 2.6.
 *
 * **A dead peer's answers.** shm keeps, in each endpoint's region, a
 * queue of the answers its operations wait for: an entry per write or
 * read that waits for its delivery, which the peer fills in, and which
 * the endpoint's progress takes back strictly in the order they were
 * posted, stopping at the first one not answered (smr_progress_resp, up
 * to 2.4).  A peer killed with operations in flight never answers: every
 * later operation of the endpoint, to any peer of the host, then waits
 * behind its entries, and liveness declares those live peers unreachable
 * too.  ferry notes which entry each operation took (the queue's write
 * count moves by one in its post) and, once the shm guard has seen the
 * peer's process die (shm_guard.h), moves that peer's entries on as the
 * peer would have: an entry waiting for its answer is given an error,
 * one whose bounce buffers (SAR) the peer would have emptied or filled
 * is marked so.  The provider then hands those operations back (a write
 * through bounce buffers as done: its request has ended already, with
 * the peer's death), and the entries behind them go on.
 *
 * **A removed peer's entry.** fi_av_remove clears the name of the
 * peer's entry in the region's peer table but leaves the peer's id for
 * this endpoint there (smr_av_remove deletes the map entry first, and
 * smr_unmap_from_endpoint then returns early), up to 1.22.  shm gives a
 * peer added later the same entry (the next one added, when the entry
 * freed was the last one given), and posts to it as to one met already,
 * under the old peer's id, without sending this endpoint's name: on 1.17
 * the new peer dies of SIGSEGV in its progress, on 1.22 a write to it
 * never ends and liveness declares it unreachable.  After each removal
 * ferry forgets the id of an entry whose name the removal cleared, so
 * that the next peer there is sent this endpoint's name first
 * (smr_verify_peer).
 *
 * **The same from 2.0 to 2.6**, where it crashes the posting process.
 * The removal still leaves the peer's id in this endpoint's entry, and
 * only a peer that removes this endpoint first clears it: one removed
 * here first, or killed, never does.  From 2.0 shm hands its 256
 * entries out in turn, so the 256th peer added after that one takes its
 * entry, and the provider posts to it without mapping its region
 * (SIGSEGV in smr_generic_rma).  The entries have no name there.  On 2.5
 * and 2.6 the removed peer's is the one whose region the removal
 * unmapped (the entry keeps where shm mapped it).  On 2.0 to 2.4 it is
 * the one the peer's own entry for this endpoint, in the peer's region,
 * names back, which the removal clears there (smr_unmap_from_endpoint).
 * ferry forgets the id there.
 *
 * **A dead peer's commands, on 2.6.**  From 2.5 an operation that waits
 * for its peer takes a command from a stack in the endpoint's region and
 * the peer hands it back through a queue there, the return queue, in any
 * order.  A peer killed with commands out never hands them back: each
 * holds its operation (its slot, its request and that request's
 * registrations) until the context closes.  Once the peer's process has
 * died ferry hands them back in its place, each flagged as failed, and
 * the provider completes their operations with an error and frees what
 * they held (shm_returns.c).
 *
 * Followed from 1.17 to 2.4 (the answers and the entries), on 2.5 (the
 * entries) and on 2.6 (the entries and the commands), 64-bit, where the
 * region's head checks out (smr_v4.h, smr_v5.h, smr_v8.h, smr_v9.h,
 * smr_v10.h).  Only 1.17's and 1.18's heads have a signal; later
 * progress looks at the answers each time.
 */
#ifndef FERRY_FABRIC_SHM_MEND_H
#define FERRY_FABRIC_SHM_MEND_H

#include "base/ferry-internal.h"
#include "fabric/smr_v4.h"
#include "fabric/smr_v5.h"
#include "fabric/smr_v8.h"
#include "fabric/smr_v9.h"
#include "fabric/smr_v10.h"

#include <stdbool.h>
#include <sys/types.h>

#include <rdma/fi_endpoint.h>

struct ferry__shm_mend {
    struct ferry__smr_head *head; /* 1.17 and 1.18 only: the signal */
    struct ferry__smr_answers *q;
    struct ferry__smr_peer *peers; /* FERRY__SMR_PEERS of them, to 1.19 */
    struct ferry__smr_peer_v6 *peers_v6; /* in their place on 1.20-1.22 */
    struct ferry__smr_peer_v8 *peers_v8; /* on 2.0-2.4 */
    struct ferry__smr_peer_v9 *peers_v9; /* in their place from 2.5 */
    void *map;                     /* the region, mapped here */
    size_t len;
    uint64_t seen; /* the queue's write count after the last post */
    uint64_t mask; /* q's size_mask, as checked when attached: the
                      queue's own copy is any peer's to overwrite */
    /* 2.6: the command stack and the return queue (smr_v10.h), where the
     * commands begin here and in the provider's mapping, how many there
     * are and where a return entry keeps its pointer, as checked when
     * attached. */
    struct ferry__smr26_stack *cmds;
    struct ferry__smr26_returns *returns;
    uint8_t *cmds_at;
    uint64_t cmds_base;
    uint32_t ncmds;
    uint32_t ptr_at;
};

/* Whether the mend has shm of libfabric version (FI_VERSION) give a dead
 * peer's operations back: its answers (1.17 to 2.4) or its commands
 * (2.6); not 2.5's, nor those of releases after 2.6. */
bool ferry__shm_mend_gives_back(uint32_t version);

/* Follows the region of ep, an enabled shm endpoint opened from info,
 * where it can be followed (above); m->head stays NULL otherwise. */
void ferry__shm_mend_open(struct ferry__shm_mend *m,
                          const struct fi_info *info, struct fid_ep *ep);

/* The same for region (len bytes, mapped by the caller, which keeps it)
 * of libfabric version (FI_VERSION), owned by process owner, the region
 * of endpoint name (checked from 2.5): whether it is followed.  For the
 * tests. */
bool ferry__shm_mend_attach(struct ferry__shm_mend *m, void *region,
                            size_t len, uint32_t version, pid_t owner,
                            const char *name);

void ferry__shm_mend_close(struct ferry__shm_mend *m);

/* Right after a post the provider took, under the lock that serializes
 * the endpoint's posts: the number of the answer the post took (its
 * index in the queue plus one), or 0 when it took none or that cannot be
 * told (the write count moved by other than one). */
static inline uint64_t ferry__shm_mend_took(struct ferry__shm_mend *m)
{
    uint64_t wcnt, seen;

    if (m->q == NULL)
        return 0;
    /* Written by the provider in this thread's post. */
    wcnt = *(volatile uint64_t *)&m->q->wcnt;
    seen = m->seen;
    m->seen = wcnt;
    return wcnt == seen + 1 ? wcnt : 0;
}

/*
 * Moves on answer number taken of an operation whose peer process died,
 * as that peer would have: to_peer for data going to the peer (a write,
 * a message), else from it (a read).  Does nothing to an answer taken
 * back already or answered.  Returns whether it changed one.  Under the
 * lock that serializes the endpoint's posts and progress.
 */
bool ferry__shm_mend_answer(struct ferry__shm_mend *m, uint64_t taken,
                            bool to_peer);

/*
 * 2.6: hands back each command out to the peer at fi_addr of av, whose
 * process died, as failed, as the peer would have handed it back.  Only
 * those it can hand back whole: through the peer's inject buffer or
 * copied by the peer (process_vm_readv), not through bounce buffers
 * (SAR) or device handles (IPC).  Returns how many.  Under the lock that
 * serializes the endpoint's posts and progress.
 */
unsigned ferry__shm_mend_returns(struct ferry__shm_mend *m, struct fid_av *av,
                                 fi_addr_t fi_addr, pid_t died);
/* Its second half, for the tests: the peer's endpoint named name. */
unsigned ferry__shm_mend_return_to(struct ferry__shm_mend *m,
                                   const char *name, pid_t died);
/* Follows the command stack and the return queue of region (len bytes),
 * a region of 2.6 whose peer table m follows already: whether they
 * check out. */
bool ferry__shm_returns_follow(struct ferry__shm_mend *m, uint8_t *region,
                               size_t len);

/* Which entries of the peer table are of the peer about to be removed,
 * or may be: taken before a removal (ferry__shm_mend_names), and on 2.0
 * to 2.4 that peer's region, mapped here until ferry__shm_mend_removed. */
struct ferry__shm_names {
    uint64_t bits[FERRY__SMR_PEERS / 64];
    const struct ferry__smr_peer_v8 *theirs; /* its peer table */
    void *their_map;
    size_t their_len;
};
/* Just before fi_av_remove of the peer at fi_addr of av: 1.17's to
 * 1.22's entries with a name, 2.5's of a peer met and mapped, 2.0's
 * whose peer's own entry for this endpoint, in the region of the peer at
 * fi_addr, names them.  Each call is followed by
 * ferry__shm_mend_removed. */
void ferry__shm_mend_names(const struct ferry__shm_mend *m, struct fid_av *av,
                           fi_addr_t fi_addr, struct ferry__shm_names *out);
/* Its second half, for the tests: the entries, out->theirs given. */
void ferry__shm_mend_mark(const struct ferry__shm_mend *m,
                          struct ferry__shm_names *out);

/* After fi_av_remove: forgets the peer's id in each entry of before that
 * the removal took the peer of away (1.17 to 1.22: its name cleared; 2.5:
 * its region unmapped; 2.0: the peer's entry for this endpoint cleared),
 * and lets before's mapping go.  Returns how many.  Under the lock that
 * serializes the endpoint's calls. */
unsigned ferry__shm_mend_removed(struct ferry__shm_mend *m,
                                 struct ferry__shm_names *before);

#endif /* FERRY_FABRIC_SHM_MEND_H */
