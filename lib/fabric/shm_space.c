/*
 * Room in /dev/shm for libfabric's shm provider (shm_space.h).
 */
#include "fabric/shm_space.h"

#include "base/text.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

bool ferry__shm_space_ok(uint64_t free_bytes, uint64_t total_bytes,
                         char *why, size_t len)
{
    char f[32], t[32], need[32];

    if (free_bytes == UINT64_MAX) {
        snprintf(why, len, "%s cannot be examined", FERRY__SHM_DIR);
        return true; /* libfabric will say what is wrong with it */
    }
    ferry__bytes_words(free_bytes, f, sizeof(f));
    ferry__bytes_words(total_bytes, t, sizeof(t));
    if (free_bytes >= FERRY__SHM_NEED) {
        snprintf(why, len, "%s has %s free of %s", FERRY__SHM_DIR, f, t);
        return true;
    }
    snprintf(why, len,
             "%s has only %s free of %s; libfabric's shm provider maps about "
             "16 MiB per process there and dies of SIGBUS when it cannot: "
             "free at least %s (remove stale files, or grow it: mount -o "
             "remount,size=... %s)",
             FERRY__SHM_DIR, f, t,
             ferry__bytes_words(FERRY__SHM_NEED, need, sizeof(need)),
             FERRY__SHM_DIR);
    return false;
}

bool ferry__shm_space_check(char *why, size_t len)
{
    struct statvfs st;

    if (statvfs(FERRY__SHM_DIR, &st) != 0) {
        FERRY_LOG_DEBUG("statvfs(%s): %s", FERRY__SHM_DIR, strerror(errno));
        return ferry__shm_space_ok(UINT64_MAX, 0, why, len);
    }
    return ferry__shm_space_ok((uint64_t)st.f_bavail * st.f_frsize,
                               (uint64_t)st.f_blocks * st.f_frsize, why, len);
}
