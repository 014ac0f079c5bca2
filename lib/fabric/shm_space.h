/*
 * Room in /dev/shm for libfabric's shm provider.  It maps a region of
 * about 16 MiB per process there (measured: 16 MiB apparent on 1.17) and
 * the first write into a region tmpfs cannot back kills the process
 * with SIGBUS, so shm is refused up front when /dev/shm is nearly full.
 */
#ifndef FERRY_FABRIC_SHM_SPACE_H
#define FERRY_FABRIC_SHM_SPACE_H

#include "base/ferry-internal.h"

#define FERRY__SHM_DIR "/dev/shm"
/* Refused below this many free bytes: the region, its growth and a peer's. */
#define FERRY__SHM_NEED (64ull << 20)

/*
 * Whether /dev/shm has room for shm, given its free and total bytes
 * (statvfs; free_bytes UINT64_MAX when it could not be read), with the
 * sentence that says so into why: "/dev/shm has 11.7 GiB free of 12 GiB".
 */
bool ferry__shm_space_ok(uint64_t free_bytes, uint64_t total_bytes,
                         char *why, size_t len);

/* The same for the live /dev/shm. */
bool ferry__shm_space_check(char *why, size_t len);

#endif /* FERRY_FABRIC_SHM_SPACE_H */
