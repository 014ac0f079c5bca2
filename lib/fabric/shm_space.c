/*
 * Room in /dev/shm for libfabric's shm provider (shm_space.h).
 */
#include "fabric/shm_space.h"

#include "base/text.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <rdma/fi_cm.h>

/* The sentence for a /dev/shm where no file can be made, or false.  Each
 * is one format string, as docs/troubleshooting.md quotes it. */
static bool no_files(const struct ferry__shm_state *s, char *why, size_t len)
{
    if (s->write_errno == EROFS)
        snprintf(why, len,
                 "%s is mounted read-only; libfabric's shm provider makes a "
                 "region file there for each endpoint: mount it read-write "
                 "(mount -o remount,rw %s) or choose another provider "
                 "(FERRY_PROVIDER=tcp)",
                 FERRY__SHM_DIR, FERRY__SHM_DIR);
    else if (s->write_errno != 0)
        snprintf(why, len,
                 "%s is not writable by this process (%s); libfabric's shm "
                 "provider makes a region file there for each endpoint: give "
                 "it the mode Linux mounts it with (chmod 1777 %s) or choose "
                 "another provider (FERRY_PROVIDER=tcp)",
                 FERRY__SHM_DIR, strerror(s->write_errno), FERRY__SHM_DIR);
    else if (s->total_files != 0 && s->free_files < FERRY__SHM_NEED_FILES)
        snprintf(why, len,
                 "%s can hold only %llu more files (inodes) of %llu; "
                 "libfabric's shm provider makes a region file there for "
                 "each endpoint, and ferry its pulse table and bell: free at "
                 "least %u (remove stale files, or mount -o "
                 "remount,nr_inodes=... %s)",
                 FERRY__SHM_DIR, (unsigned long long)s->free_files,
                 (unsigned long long)s->total_files, FERRY__SHM_NEED_FILES,
                 FERRY__SHM_DIR);
    else
        return false;
    return true;
}

bool ferry__shm_space_ok(const struct ferry__shm_state *s, char *why,
                         size_t len)
{
    char f[32], t[32], need[32];

    if (s->free_bytes == UINT64_MAX) {
        snprintf(why, len, "%s cannot be examined", FERRY__SHM_DIR);
        return true; /* libfabric will say what is wrong with it */
    }
    if (no_files(s, why, len))
        return false;
    ferry__bytes_words(s->free_bytes, f, sizeof(f));
    ferry__bytes_words(s->total_bytes, t, sizeof(t));
    if (s->free_bytes >= FERRY__SHM_NEED) {
        snprintf(why, len, "%s has %s free of %s", FERRY__SHM_DIR, f, t);
        return true;
    }
    snprintf(why, len,
             "%s has only %s free of %s; libfabric's shm provider keeps a "
             "region of about 16 MiB per endpoint there (two per context), "
             "which ferry commits before use because a write into a page "
             "tmpfs cannot back dies of SIGBUS: free at least %s (remove "
             "stale files, or grow it: mount -o remount,size=... %s)",
             FERRY__SHM_DIR, f, t,
             ferry__bytes_words(FERRY__SHM_NEED, need, sizeof(need)),
             FERRY__SHM_DIR);
    return false;
}

bool ferry__shm_space_check(char *why, size_t len)
{
    struct ferry__shm_state s = {.free_bytes = UINT64_MAX};
    struct statvfs st;

    if (statvfs(FERRY__SHM_DIR, &st) != 0) {
        FERRY_LOG_DEBUG("statvfs(%s): %s", FERRY__SHM_DIR, strerror(errno));
        return ferry__shm_space_ok(&s, why, len);
    }
    s.free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
    s.total_bytes = (uint64_t)st.f_blocks * st.f_frsize;
    s.free_files = st.f_favail;
    s.total_files = st.f_files;
    /* The effective ids, as the provider's shm_open will use them. */
    if (faccessat(AT_FDCWD, FERRY__SHM_DIR, W_OK | X_OK, AT_EACCESS) != 0)
        s.write_errno = errno;
    return ferry__shm_space_ok(&s, why, len);
}

bool ferry__shm_region_path(const void *addr, size_t len, char *path,
                            size_t cap)
{
    char name[FERRY__ADDR_MAX + 1];
    const char *base;

    if (addr == NULL || len == 0 || len >= sizeof(name))
        return false;
    memcpy(name, addr, len);
    name[len] = '\0';
    base = strstr(name, "://");
    base = base != NULL ? base + 3 : name;
    return *base != '\0' && strchr(base, '/') == NULL &&
           snprintf(path, cap, "%s/%s", FERRY__SHM_DIR, base) < (int)cap;
}

bool ferry__shm_av_region_path(struct fid_av *av, fi_addr_t fi_addr,
                               char *path, size_t cap)
{
    char addr[FERRY__ADDR_MAX + 1];
    size_t len = sizeof(addr) - 1;

    return av != NULL && fi_av_lookup(av, fi_addr, addr, &len) == 0 &&
           len < sizeof(addr) &&
           ferry__shm_region_path(addr, strnlen(addr, len), path, cap);
}

/* /dev/shm has no room for the region at path (size bytes): the error. */
static int no_room(const char *whose, const char *path, uint64_t size)
{
    struct statvfs st;
    char need[32], f[32], t[32];

    ferry__bytes_words(size, need, sizeof(need));
    if (statvfs(FERRY__SHM_DIR, &st) != 0)
        st.f_bavail = st.f_blocks = st.f_frsize = 0;
    ferry__bytes_words((uint64_t)st.f_bavail * st.f_frsize, f, sizeof(f));
    ferry__bytes_words((uint64_t)st.f_blocks * st.f_frsize, t, sizeof(t));
    return ferry__error(
        FERRY_ENOSPC,
        "%s has no room for %s shm region %s (%s; %s free of %s): "
        "libfabric's shm provider would die of SIGBUS at the first write "
        "into it, so ferry commits every region before use; free space "
        "there (remove stale files) or grow it (mount -o remount,size=... "
        "%s), or choose another provider (FERRY_PROVIDER=tcp)",
        FERRY__SHM_DIR, whose, path, need, f, t, FERRY__SHM_DIR);
}

/*
 * Commits the pages of the region file named by addr.  fallocate, not
 * posix_fallocate: where a file system cannot allocate, glibc's fallback
 * writes a zero byte into each block, over what a peer may be writing
 * there.  Only ENOSPC is an error: any other failure leaves the region
 * as the provider made it, as it was before ferry reserved regions.
 */
static int reserve(const char *whose, const void *addr, size_t len)
{
    char path[FERRY__ADDR_MAX + sizeof(FERRY__SHM_DIR) + 1];
    struct stat st;
    int fd, err = 0;

    if (!ferry__shm_region_path(addr, len, path, sizeof(path)))
        return 0;
    fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
        FERRY_LOG_DEBUG("%s shm region %s not reserved: %s", whose, path,
                        strerror(errno));
        return 0;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        close(fd);
        return 0;
    }
    if (fallocate(fd, 0, 0, st.st_size) != 0)
        err = errno;
    close(fd);
    if (err == ENOSPC)
        return no_room(whose, path, (uint64_t)st.st_size);
    if (err != 0)
        FERRY_LOG_INFO("%s shm region %s not reserved: fallocate: %s", whose,
                       path, strerror(err));
    else
        FERRY_LOG_DEBUG("%s shm region %s: %lld bytes committed", whose, path,
                        (long long)st.st_size);
    return 0;
}

int ferry__shm_region_reserve_own(const struct fi_info *info,
                                  struct fid_ep *ep)
{
    uint8_t addr[FERRY__ADDR_MAX];
    size_t len = sizeof(addr);

    if (info->ep_attr->protocol != FI_PROTO_SHM ||
        fi_getname(&ep->fid, addr, &len) != 0)
        return 0;
    return reserve("this context's", addr, len);
}

int ferry__shm_region_reserve_peer(const struct fi_info *info,
                                   const void *addr, size_t len)
{
    if (info->ep_attr->protocol != FI_PROTO_SHM)
        return 0;
    return reserve("the peer's", addr, len);
}
