/*
 * shm endpoints of one process as peers of each other: two cases are
 * refused before libfabric sees them, and a closed endpoint that others
 * have as a peer is kept open until they close.
 *
 * A closed endpoint of this process.  libfabric 1.17's shm provider keeps every endpoint of
 * the process in a list of its own (ep_name_list, left until exit) and
 * takes a peer named there from it, region and all: a peer that is a
 * closed endpoint of this process gets the region unmapped at close, and
 * the first write to it dies of SIGSEGV (seen in a fan-out whose
 * receiver's context closed before the plan reached the others).  ferry
 * keeps the names of its open shm endpoints, and refuses a peer of this
 * process that is not among them, on every release: it is dead anyway.
 *
 * A closed endpoint that open ones of this process are connected to.
 * The same list gives such a peer the endpoint's own region, not a
 * mapping of its own (a peer the endpoint reached too: its first message
 * names it): when the endpoint closed, shm unmapped the region under
 * them, and their next look at it died of SIGSEGV (1.17: a progress
 * thread taking back the answer to a write through bounce buffers,
 * smr_progress_resp_entry, in a fan-out whose receivers were contexts of
 * one process closed in turn: 4 runs in 80, two at a time).  Contexts in
 * separate processes map each other's regions themselves and are not
 * reached.  ferry keeps such an endpoint open, and its rail with it,
 * until no open endpoint of this process that it reached or that added
 * it as a peer is left; nothing progresses it meanwhile, and its region
 * stays in /dev/shm until then.
 *
 * Two endpoints of this process connected both ways.  From libfabric 2.5 (the rewritten shm provider) to at least its main
 * branch of August 2026, the endpoint that connects first to another
 * endpoint of the same process never learns where that endpoint's region
 * lies in its address space (smr_map_to_region returns early for a name
 * of this process and skips smr_map_to_endpoint, and the other side never
 * sends the connection request that would fill it in).  The first command
 * the other side then sends it with SMR_RETURN_CMD -- any send asking for
 * FI_DELIVERY_COMPLETE, any write above 4 KiB -- carries an offset where
 * an address belongs, and the receiver dies of SIGSEGV in
 * smr_progress_cmd.  One direction works; the second is refused here,
 * before it can crash.
 */
#ifndef FERRY_FABRIC_SHM_LOOP_H
#define FERRY_FABRIC_SHM_LOOP_H

#include "base/ferry-internal.h"

#include <sys/types.h>

/*
 * A name for an shm endpoint of this process: "ferry_<pid>_<time>_<n>".
 * shm names an endpoint after the process id unless given a name, and a
 * file a dead process left in /dev/shm under a reused id makes fi_enable
 * fail (EBUSY): this name no other process has had.  The pid in it is
 * how ferry__shm_loop_admit knows an endpoint of this process.
 */
void ferry__shm_endpoint_name(char *buf, size_t len);
/* What every such name of process pid starts with: "ferry_<pid>_". */
void ferry__shm_endpoint_prefix(pid_t pid, char *buf, size_t len);

/*
 * Whether the running libfabric has that fault: its shm provider from
 * 2.5 on.  FERRY_SHM_LOOP_FAULT=0 or 1 overrides (to test either side).
 */
bool ferry__shm_loop_faulty(const struct fi_info *info);

/*
 * Remembers that info's endpoint, if it is an shm endpoint named by
 * ferry__shm_endpoint_name, is open in this process, until
 * ferry__shm_loop_forget.  0 or FERRY_ENOMEM.
 */
int ferry__shm_loop_open(const struct fi_info *info);

/*
 * Called before the endpoint opened from info inserts the address peer
 * (len bytes, as the peer's fi_getname gave it).  When info's endpoint is
 * an shm one and the peer names an endpoint of this process that is not
 * open, refuses with FERRY_EPEERDEAD.  When both are shm endpoints of
 * this process, shm has the fault and the peer already reaches this
 * endpoint, refuses with FERRY_ENOTSUP.  Each with a sentence that says
 * why and what to do; otherwise remembers that this endpoint reaches
 * peer and returns 0, with *one_way true when that peer can therefore
 * never reach this endpoint back.
 */
int ferry__shm_loop_admit(const struct fi_info *info, const void *peer,
                          size_t len, bool *one_way);

/*
 * Forgets info's endpoint, before it closes: a peer naming it is refused
 * from now on.  Returns whether an endpoint of this process still open
 * is connected to it, either way: then it must stay open
 * (ferry__shm_loop_release).
 */
bool ferry__shm_loop_forget(const struct fi_info *info);

/*
 * info's rail is done with (its context closed every peer), and the
 * endpoints kept for no one open any more are closed.  With close
 * non-NULL (its endpoint is open), it is kept open itself while an open
 * endpoint of this process is connected to it: close(arg) is called once
 * none is, and it returns true.  False, with nothing kept, when none is
 * now (or memory ran out): the caller closes it.
 */
bool ferry__shm_loop_release(const struct fi_info *info,
                             void (*close)(void *), void *arg);

#endif /* FERRY_FABRIC_SHM_LOOP_H */
