/*
 * The guard of dead shm peers' region locks (shm_guard.h).
 *
 * One thread for the whole process sleeps in poll() on a pidfd per
 * watched owner and an eventfd that says the set changed.  Only that
 * thread closes pidfds, so none is closed under its poll: unwatching
 * marks an entry gone, and the thread drops gone entries before it
 * polls again.  A fork leaves the child without the thread and with the
 * parent's entries: the first watch in the child starts afresh.
 */
#include "fabric/shm_guard.h"

#include "base/log.h"
#include "base/thread.h"
#include "fabric/shm_loop.h"
#include "fabric/shm_space.h"
#include "fabric/smr_v4.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* shm maps at most 256 peers per endpoint (SMR_MAX_PEERS). */
#define WATCH_MAX 256
/* How long a dead owner's lock must stay held to be released: a live
 * process posting into the dead region holds it a few microseconds. */
#define HELD_PAUSE_NS (10 * 1000000L)
/* Without pidfds (Linux before 5.3): how often the owners are looked at. */
#define NO_PIDFD_LOOK_MS 100

_Static_assert(sizeof(pthread_spinlock_t) == sizeof(int),
               "a spin lock is an int (glibc)");

struct watched {
    uint64_t token;
    struct ferry__shm_owner owner;
    int pidfd;  /* -1: none (no pidfd_open), or closed after the death */
    bool dead;  /* seen dead and its regions released: not polled */
    bool gone;  /* unwatched: the thread drops it */
};

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watched watched[WATCH_MAX];
static unsigned n_watched;
static uint64_t next_token = 1;
static pid_t guard_of; /* the process whose thread runs; 0: none yet */
static int wake_fd = -1;

static int pidfd_of(pid_t pid)
{
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* Whether pid has ended (a zombie not yet reaped has). */
static bool has_died(pid_t pid)
{
    int fd = pidfd_of(pid);
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    bool died;

    if (fd < 0)
        return errno == ESRCH || (kill(pid, 0) != 0 && errno == ESRCH);
    died = poll(&pfd, 1, 0) > 0;
    close(fd);
    return died;
}

int ferry__spin_free_value(void)
{
    pthread_spinlock_t probe;
    int value;

    pthread_spin_init(&probe, PTHREAD_PROCESS_SHARED);
    value = *(volatile int *)&probe;
    pthread_spin_destroy(&probe);
    return value;
}

static void pause_held(void)
{
    const struct timespec ts = {0, HELD_PAUSE_NS};

    nanosleep(&ts, NULL);
}

/* A region of dead's whose lock is held: its head mapped. */
struct held_region {
    struct ferry__smr_head *head;
    const char *name;
};

/* Maps the head of region file name (in dir) when dead owns it and its
 * lock is held; NULL otherwise. */
static struct ferry__smr_head *held_head(int dir, const char *name,
                                         pid_t dead)
{
    struct ferry__smr_head *h;
    struct stat st;
    char prefix[32];
    int fd;

    /* Its name says whose it is (shm_loop.h), and a peer's address may
     * name anything. */
    ferry__shm_endpoint_prefix(dead, prefix, sizeof(prefix));
    if (strncmp(name, prefix, strlen(prefix)) != 0)
        return NULL;
    fd = openat(dir, name, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    h = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                st.st_size >= (off_t)sizeof(*h)
            ? mmap(NULL, sizeof(*h), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
            : MAP_FAILED;
    close(fd);
    if (h == MAP_FAILED)
        return NULL;
    if (h->version == FERRY__SMR_V4 && h->pid == dead &&
        atomic_load((_Atomic int *)(void *)&h->lock) !=
            ferry__spin_free_value())
        return h;
    munmap(h, sizeof(*h));
    return NULL;
}

/* Releases the lock of each held region that stays held; says how many. */
static unsigned release_held(const struct held_region *held, unsigned n,
                             pid_t dead)
{
    int free_value = ferry__spin_free_value();
    unsigned released = 0;

    for (unsigned i = 0; i < n; i++) {
        _Atomic int *lock = (_Atomic int *)(void *)&held[i].head->lock;

        if (atomic_load(lock) == free_value)
            continue;
        /* Release: what the dead owner wrote before it died is seen by
         * whoever takes the lock next, as its own unlock would have
         * ordered it. */
        atomic_store_explicit(lock, free_value, memory_order_release);
        released++;
        FERRY_LOG_WARN("shm: peer process %d died holding the lock of its "
                       "region %s (libfabric's shm before 1.19): released "
                       "it, so that posts to it end instead of spinning "
                       "for ever",
                       (int)dead, held[i].name);
    }
    return released;
}

/* Releases the held locks of dead's regions in dir, dead being dead.  One
 * pause for all of them: each lock that stays held through it is
 * released, all within microseconds of each other, so that nobody sees
 * one region free and the next still held for another pause. */
static unsigned release_regions(const char *dir,
                                const struct ferry__shm_owner *dead)
{
    struct held_region held[FERRY__GUARD_REGIONS];
    unsigned n = 0, released = 0;
    DIR *d = opendir(dir);

    if (d == NULL)
        return 0;
    for (unsigned i = 0; i < dead->nregions; i++) {
        struct ferry__smr_head *h =
            held_head(dirfd(d), dead->regions[i], dead->pid);

        if (h != NULL)
            held[n++] = (struct held_region){h, dead->regions[i]};
    }
    closedir(d);
    if (n > 0) {
        pause_held();
        released = release_held(held, n, dead->pid);
    }
    for (unsigned i = 0; i < n; i++)
        munmap(held[i].head, sizeof(*held[i].head));
    return released;
}

unsigned ferry__shm_guard_release(const char *dir,
                                  const struct ferry__shm_owner *dead)
{
    return has_died(dead->pid) ? release_regions(dir, dead) : 0;
}

void ferry__shm_owner_add(struct ferry__shm_owner *out, const void *addr,
                          size_t len)
{
    char path[FERRY__ADDR_MAX + 16];
    const char *name = path + strlen(FERRY__SHM_DIR "/");

    if (out->nregions == FERRY__GUARD_REGIONS ||
        !ferry__shm_region_path(addr, len, path, sizeof(path)) ||
        strlen(name) >= FERRY__GUARD_NAME_MAX)
        return;
    for (unsigned i = 0; i < out->nregions; i++)
        if (strcmp(out->regions[i], name) == 0)
            return;
    strcpy(out->regions[out->nregions++], name);
}

bool ferry__shm_guard_owns(const char *maps, const char *table)
{
    char line[PATH_MAX + 128], table_path[96];
    bool owns_table = false;
    FILE *f = fopen(maps, "re");

    if (f == NULL)
        return false;
    /* shm_open's names are files of /dev/shm ("/name": "/dev/shm/name"). */
    snprintf(table_path, sizeof(table_path), "%s%s", FERRY__SHM_DIR, table);
    /* "start-end perms offset dev inode   path": shared and writable is
     * "rw-s". */
    while (!owns_table && fgets(line, sizeof(line), f) != NULL) {
        char perms[8], *path = strchr(line, '/');

        if (path == NULL || sscanf(line, "%*s %7s", perms) != 1 ||
            strcmp(perms, "rw-s") != 0)
            continue;
        path[strcspn(path, "\n")] = '\0';
        owns_table = strcmp(path, table_path) == 0;
    }
    fclose(f);
    return owns_table;
}

/* ---- the thread ---------------------------------------------------------- */

/* Drops the gone entries, closing their pidfds; under guard_lock. */
static void drop_gone(void)
{
    unsigned kept = 0;

    for (unsigned i = 0; i < n_watched; i++) {
        if (!watched[i].gone) {
            watched[kept++] = watched[i];
            continue;
        }
        if (watched[i].pidfd >= 0)
            close(watched[i].pidfd);
    }
    n_watched = kept;
}

/* The pollfds of the live entries after the eventfd, with their tokens
 * and owners; under guard_lock.  Returns how many entries it took, and
 * whether one has no pidfd in *blind. */
static unsigned take_poll_set(struct pollfd *pfd, uint64_t *token,
                              struct ferry__shm_owner *owner, bool *blind)
{
    unsigned n = 0;

    *blind = false;
    pfd[0] = (struct pollfd){.fd = wake_fd, .events = POLLIN};
    for (unsigned i = 0; i < n_watched; i++) {
        if (watched[i].dead)
            continue;
        /* A negative fd is not polled: the look is kill()'s (has_died). */
        pfd[1 + n] = (struct pollfd){.fd = watched[i].pidfd, .events = POLLIN};
        token[n] = watched[i].token;
        owner[n++] = watched[i].owner;
        *blind |= watched[i].pidfd < 0;
    }
    return n;
}

/* The entry of token has died: it is polled no more. */
static void mark_dead(uint64_t token)
{
    pthread_mutex_lock(&guard_lock);
    for (unsigned i = 0; i < n_watched; i++) {
        if (watched[i].token != token)
            continue;
        if (watched[i].pidfd >= 0)
            close(watched[i].pidfd);
        watched[i].pidfd = -1;
        watched[i].dead = true;
    }
    pthread_mutex_unlock(&guard_lock);
}

static void *guard_main(void *arg)
{
    struct pollfd pfd[WATCH_MAX + 1];
    uint64_t token[WATCH_MAX];
    /* Static: too big for a thread's stack, and there is one thread. */
    static struct ferry__shm_owner owner[WATCH_MAX];

    (void)arg;
    for (;;) {
        eventfd_t drained;
        unsigned n;
        bool blind;

        pthread_mutex_lock(&guard_lock);
        drop_gone();
        n = take_poll_set(pfd, token, owner, &blind);
        pthread_mutex_unlock(&guard_lock);
        if (poll(pfd, n + 1, blind ? NO_PIDFD_LOOK_MS : -1) < 0 &&
            errno != EINTR)
            continue;
        if (pfd[0].revents & POLLIN)
            (void)eventfd_read(wake_fd, &drained);
        for (unsigned i = 0; i < n; i++) {
            bool died = pfd[1 + i].fd >= 0 ? (pfd[1 + i].revents & POLLIN) != 0
                                           : has_died(owner[i].pid);

            if (!died)
                continue;
            release_regions(FERRY__SHM_DIR, &owner[i]);
            mark_dead(token[i]);
        }
    }
    return NULL;
}

/* Starts the thread of this process; under guard_lock.  After a fork the
 * parent's entries and descriptors are dropped first. */
static bool guard_start(void)
{
    for (unsigned i = 0; i < n_watched; i++)
        if (watched[i].pidfd >= 0)
            close(watched[i].pidfd);
    n_watched = 0;
    if (wake_fd >= 0)
        close(wake_fd);
    if ((wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        return false;
    if (!ferry__thread_start(guard_main, NULL)) {
        FERRY_LOG_WARN("shm: no guard of dead peers' region locks: "
                       "pthread_create failed (error %d)", errno);
        return false;
    }
    guard_of = getpid();
    return true;
}

uint64_t ferry__shm_guard_watch(const struct ferry__shm_owner *owner,
                                const char *table)
{
    struct watched w = {.owner = *owner, .pidfd = -1};
    pid_t pid = owner->pid;
    char maps[32];
    uint64_t token = 0;
    bool running;

    if (pid <= 0)
        return 0;
    snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)pid);
    if (!ferry__shm_guard_owns(maps, table)) {
        FERRY_LOG_DEBUG("shm: process %d is not the owner of pulse table %s "
                        "here (another pid namespace, or gone): its death "
                        "is not watched",
                        (int)pid, table);
        return 0;
    }
    w.pidfd = pidfd_of(pid);
    pthread_mutex_lock(&guard_lock);
    /* A thread that would not start is tried again at the next watch. */
    running = guard_of == getpid() || guard_start();
    if (running && n_watched == WATCH_MAX) {
        FERRY_LOG_WARN("shm: %d peers' processes watched already: the "
                       "death of process %d is not watched (a lock it "
                       "holds is not released, its operations' answers "
                       "not moved on)", WATCH_MAX, (int)pid);
    } else if (running) {
        w.token = token = next_token++;
        watched[n_watched++] = w;
        w.pidfd = -1;
        (void)eventfd_write(wake_fd, 1);
    }
    pthread_mutex_unlock(&guard_lock);
    if (w.pidfd >= 0)
        close(w.pidfd);
    return token;
}

void ferry__shm_guard_unwatch(uint64_t token)
{
    if (token == 0)
        return;
    pthread_mutex_lock(&guard_lock);
    for (unsigned i = 0; i < n_watched; i++)
        if (watched[i].token == token)
            watched[i].gone = true;
    (void)eventfd_write(wake_fd, 1);
    pthread_mutex_unlock(&guard_lock);
}

bool ferry__shm_guard_dead(uint64_t token)
{
    bool dead = false;

    if (token == 0)
        return false;
    pthread_mutex_lock(&guard_lock);
    for (unsigned i = 0; i < n_watched; i++)
        if (watched[i].token == token)
            dead = watched[i].dead;
    pthread_mutex_unlock(&guard_lock);
    return dead;
}
