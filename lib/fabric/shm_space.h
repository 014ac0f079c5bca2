/*
 * Room in /dev/shm for libfabric's shm provider.  It keeps each
 * endpoint's region there, a file of 16 MiB on 1.17 (command and
 * response queues, inject and SAR bounce buffers) that it creates sparse
 * with ftruncate and maps, and the first write into a page tmpfs cannot
 * back kills the process with SIGBUS -- the initiator's too, whose
 * commands and bounce copies land in the target's region.  So shm is
 * refused up front when /dev/shm is nearly full or cannot hold its files
 * (ferry__shm_space_ok), and every region is committed whole as soon as
 * it exists: a /dev/shm that fills up later can no longer reach a page
 * of it.
 */
#ifndef FERRY_FABRIC_SHM_SPACE_H
#define FERRY_FABRIC_SHM_SPACE_H

#include "base/ferry-internal.h"

#include <rdma/fi_domain.h>

#define FERRY__SHM_DIR "/dev/shm"
/* Refused below this many free bytes: the region, its growth and a peer's. */
#define FERRY__SHM_NEED (64ull << 20)
/* Refused below this many free inodes: a context makes a region file per
 * shm endpoint, its pulse table and its bell (4 files with two
 * endpoints), and a few contexts may start on one host. */
#define FERRY__SHM_NEED_FILES 16u

/* What statvfs and access say of /dev/shm. */
struct ferry__shm_state {
    uint64_t free_bytes, total_bytes; /* free_bytes UINT64_MAX: unread */
    uint64_t free_files, total_files; /* total_files 0: no inode limit */
    int write_errno; /* 0, or why this process cannot make files there */
};

/*
 * Whether /dev/shm can hold shm's regions, with the sentence that says so
 * into why: "/dev/shm has 11.7 GiB free of 12 GiB".  Refused where the
 * provider could not make its files (read-only, not writable, no inode
 * left): libfabric 1.17-2.1 then fails fi_enable, but 2.2 to at least
 * 2.6 go on with no region and die of SIGSEGV in it (smr_ep_ctrl), so
 * ferry says so before any endpoint is opened.
 */
bool ferry__shm_space_ok(const struct ferry__shm_state *s, char *why,
                         size_t len);

/* The same for the live /dev/shm. */
bool ferry__shm_space_check(char *why, size_t len);

/* The region file of the shm endpoint whose address is addr (len bytes:
 * "fi_shm://NAME" or NAME, not always NUL-terminated) into path (cap
 * bytes): /dev/shm/NAME, where the provider's shm_open puts it; false
 * when addr names none. */
bool ferry__shm_region_path(const void *addr, size_t len, char *path,
                            size_t cap);

/* The same for the peer at fi_addr of av, an shm address vector. */
bool ferry__shm_av_region_path(struct fid_av *av, fi_addr_t fi_addr,
                               char *path, size_t cap);

/*
 * Commits every page of the region of the shm endpoint ep (opened from
 * info and enabled, so its region exists), so that tmpfs holds them all
 * before anything writes there.  Returns 0 (at once for an endpoint of
 * another provider, or a region not found as /dev/shm/NAME: a provider
 * that keeps it elsewhere), or FERRY_ENOSPC with a sentence naming
 * /dev/shm and its free bytes when it cannot hold the region.
 */
int ferry__shm_region_reserve_own(const struct fi_info *info,
                                  struct fid_ep *ep);

/*
 * The same for the region of a peer, whose address (len bytes, as its
 * fi_getname gave it) the endpoint opened from info is about to insert.
 * tmpfs charges a page to the file, whoever touches it first, and this
 * side touches the peer's file: its peer reserved it already if it runs
 * this ferry (then this costs a walk over pages that are there), and
 * this makes it so for a peer that did not.
 */
int ferry__shm_region_reserve_peer(const struct fi_info *info,
                                   const void *addr, size_t len);

#endif /* FERRY_FABRIC_SHM_SPACE_H */
