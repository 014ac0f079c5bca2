/*
 * The lock of a dead shm peer's region, released.
 *
 * libfabric 1.17's shm provider guards each endpoint's region with a spin
 * lock that lives in the region itself: the owner takes it to progress
 * the commands there, and a peer takes it to post one (smr_generic_rma).
 * An owner killed while it holds the lock leaves it held for ever, and
 * every later write or read to that peer spins inside fi_write or fi_read
 * with ferry's lock held: the context hangs, deadlines and liveness
 * included, since nothing else can take the lock to see them.  Under
 * load a target killed in the middle of a stream dies holding it about
 * one time in ten (check_progress's peer killed mid-transfer, shm).
 *
 * The guard is a thread of this process, started with the first peer of
 * this host whose owner it must watch.  It waits on a pidfd per owner;
 * when one dies it looks at the regions this process posts into, the
 * endpoints the peer's shm addresses name (ferry names them
 * ferry_<pid>_..., shm_loop.h), and a lock still held 10 ms after the
 * owner's death is released.  Whoever spun posts into a region that
 * nobody reads any more.  The names come from the addresses, the very
 * regions a post here can spin on, not from the owner's /proc/<pid>/maps
 * read once when the watch began (not atomic while the owner changes its
 * mappings): with that list, a CI run saw the guard release one of the
 * owner's two endpoints only, and a post spin on the other for ever.
 * The death is also told to liveness (ferry__shm_guard_dead), which
 * declares the peer at its next check and has its operations' answers
 * moved on (up to 2.4) or its commands handed back (2.6, shm_mend.h),
 * which is why peers are watched on every release.  Only
 * regions of the layout of SMR_VERSION 4 (libfabric 1.17 and 1.18) are
 * touched; from 1.19 posting takes no lock of the peer's.
 *
 * What the guard cannot undo: a peer killed while it posts into one of
 * this process's regions holds this process's lock, which a live thread
 * here may hold too; that one is left alone.
 */
#ifndef FERRY_FABRIC_SHM_GUARD_H
#define FERRY_FABRIC_SHM_GUARD_H

#include "base/ferry-internal.h"

#include <sys/types.h>

/* A peer's process as the guard knows it: its id here, and the regions
 * this process posts into, its endpoints over shm. */
#define FERRY__GUARD_REGIONS FERRY__MAX_RAILS
#define FERRY__GUARD_NAME_MAX 48 /* "ferry_<pid>_<time>_<n>" */
struct ferry__shm_owner {
    pid_t pid;
    unsigned nregions;
    char regions[FERRY__GUARD_REGIONS][FERRY__GUARD_NAME_MAX];
};

/* Adds to out's regions the endpoint name inside the shm address addr
 * of len bytes ("fi_shm://ferry_<pid>_..." or the bare name): an
 * address of another form, a name too long, or one listed already adds
 * nothing.  Whose region it is, ferry__shm_guard_watch checks. */
void ferry__shm_owner_add(struct ferry__shm_owner *out, const void *addr,
                          size_t len);

/*
 * Whether a process maps table (its pulse table, "/ferry-pulse-...") for
 * writing, as only that table's owner does, reading maps (its
 * /proc/<pid>/maps; another file in the tests).  Only then is pid the
 * peer: a process of another pid namespace that shares /dev/shm has
 * another number here, perhaps one of a process of ours.
 */
bool ferry__shm_guard_owns(const char *maps, const char *table);

/* Watches owner, the process of a peer on this host whose pulse table is
 * table, when owner->pid is that table's owner here; where its
 * regions have the lock (1.17 and 1.18), those named ferry_<pid>_ after
 * it are released at its death.  Returns what to pass to
 * ferry__shm_guard_unwatch (0: not watched). */
uint64_t ferry__shm_guard_watch(const struct ferry__shm_owner *owner,
                                const char *table);
/* Stops watching; 0 is ignored. */
void ferry__shm_guard_unwatch(uint64_t token);

/* Whether the owner watched under token has died, and its held locks
 * are released (false for 0). */
bool ferry__shm_guard_dead(uint64_t token);

/* Releases the held locks of dead's regions in dir (the guard's work,
 * for the tests: "/dev/shm" there).  A region is left alone unless its name
 * and its head name dead->pid, it has the lock's layout, and its lock is
 * still held after a pause; a process still alive is left alone.  Returns how
 * many locks were released. */
unsigned ferry__shm_guard_release(const char *dir,
                                  const struct ferry__shm_owner *dead);

/* The value glibc stores in a free spin lock (1 on x86_64, 0 elsewhere):
 * the guard stores and compares it directly, since the lock of a region
 * mapped here is none this process took. */
int ferry__spin_free_value(void);

#endif /* FERRY_FABRIC_SHM_GUARD_H */
