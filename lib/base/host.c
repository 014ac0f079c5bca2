/*
 * This process's host (host.h).
 */
#include "base/host.h"

#include "base/blob.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct ferry__host self;
static pthread_once_t self_once = PTHREAD_ONCE_INIT;

/* Mixes what identifies one kernel object (a file's device and inode)
 * into a running FNV-1a hash; a file that cannot be read mixes zeros, so
 * two processes that both lack it still agree. */
static uint32_t mix_file(uint32_t h, const char *path)
{
    struct stat st;
    uint64_t id[2] = {0, 0};

    if (stat(path, &st) == 0) {
        id[0] = (uint64_t)st.st_dev;
        id[1] = (uint64_t)st.st_ino;
    }
    return ferry__fnv1a_more(h, id, sizeof(id));
}

/* The kernel's boot id: one value per boot of one machine. */
static uint32_t mix_boot_id(uint32_t h)
{
    char id[64] = "";
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);

    if (fd >= 0) {
        ssize_t n = read(fd, id, sizeof(id) - 1);
        id[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    return ferry__fnv1a_more(h, id, strlen(id));
}

/* Two 32-bit hashes of the same facts with different seeds make a key
 * whose chance collisions do not matter. */
static uint64_t key_of(const char *const *files, unsigned n)
{
    uint32_t lo = ferry__fnv1a(NULL, 0), hi = ferry__fnv1a("ferry", 5);

    lo = mix_boot_id(lo);
    hi = mix_boot_id(hi);
    for (unsigned i = 0; i < n; i++) {
        lo = mix_file(lo, files[i]);
        hi = mix_file(hi, files[i]);
    }
    return (uint64_t)hi << 32 | lo;
}

static void read_self(void)
{
    static const char *const shm[] = {"/dev/shm", "/proc/self/ns/pid"};
    static const char *const net[] = {"/proc/self/ns/net"};

    if (gethostname(self.name, sizeof(self.name)) != 0)
        snprintf(self.name, sizeof(self.name), "unknown");
    self.name[sizeof(self.name) - 1] = '\0';
    self.shm_key = key_of(shm, 2);
    self.net_key = key_of(net, 1);
}

const struct ferry__host *ferry__host_self(void)
{
    pthread_once(&self_once, read_self);
    return &self;
}
