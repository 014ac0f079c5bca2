/*
 * The words peers read of a context: heartbeats and key checks (pulse.h).
 */
#include "fabric/pulse.h"

#include "fabric/shm_guard.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The table: the header words and the slots, a whole number of pages. */
#define TABLE_LEN ((FERRY__PULSE_HEADER + FERRY__PULSE_SLOTS) * 8u)
#define TABLE_PREFIX "ferry-pulse-"
#define BELL_PREFIX "ferry-bell-"

/* Reads the registration's key into reg. */
static int read_key(const struct ferry__fabric *fab,
                    struct ferry__pulse_reg *reg)
{
    uint64_t key;

    if (fab->mr_mode & FERRY_MR_RAW) {
        size_t len = sizeof(reg->key);
        int ret = fi_mr_raw_attr(reg->mr, &reg->raw_base, reg->key, &len, 0);

        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_raw_attr (raw keys, FI_MR_RAW): %s",
                                fi_strerror(-ret));
        reg->key_len = len;
        return 0;
    }
    key = fi_mr_key(reg->mr);
    for (unsigned i = 0; i < 8; i++)
        reg->key[i] = (uint8_t)(key >> (8 * i));
    reg->key_len = 8;
    return 0;
}

/* The table's name in /dev/shm: peers derive it from the incarnation
 * their blob gives. */
static void table_name(char *buf, size_t len, uint64_t incarnation)
{
    snprintf(buf, len, "/%s%016llx", TABLE_PREFIX,
             (unsigned long long)incarnation);
}

/*
 * Whether the table named `table` in d is gone or its owner is: a table
 * (or a bell) of a process killed before it could close its context.
 * Any user can put a FIFO or a link at a table's name in /dev/shm: the
 * open does not wait for a FIFO's writer (O_NONBLOCK) nor follow a link,
 * and only a regular file is read.
 *
 * The owner word alone cannot say it: a process of another pid namespace
 * that shares /dev/shm (containers of one pod, --ipc=host) has a number
 * that names no process here, and its live table and bell would go.  An
 * owner holds a shared lock on its table while it lives (table_in_shm),
 * which the kernel drops at its death whatever its namespace: a table
 * whose lock is held is not a leftover.  A table of a release before the
 * lock has only its owner word to go by.
 */
static bool owner_gone(DIR *d, const char *table)
{
    uint64_t owner = 0;
    struct stat st;
    bool gone;
    int fd = openat(dirfd(d), table,
                    O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return errno == ENOENT;
    gone = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
           flock(fd, LOCK_EX | LOCK_NB) == 0 &&
           pread(fd, &owner, sizeof(owner),
                 FERRY__PULSE_OWNER * sizeof(owner)) == sizeof(owner) &&
           owner > 0 && owner <= INT_MAX && kill((pid_t)owner, 0) != 0 &&
           errno == ESRCH;
    close(fd);
    return gone;
}

/*
 * Removes the tables and bells that processes killed before they could
 * close their contexts left in /dev/shm (their owner word names a
 * process that no longer exists; a bell goes with its table): a test
 * suite that kills its targets would otherwise fill it.  A table a peer
 * still maps stays readable there.
 */
static void sweep_leftovers(void)
{
    DIR *d = opendir("/dev/shm");
    struct dirent *e;

    if (d == NULL)
        return;
    while ((e = readdir(d)) != NULL) {
        char table[NAME_MAX + 1];

        if (strncmp(e->d_name, TABLE_PREFIX, strlen(TABLE_PREFIX)) == 0)
            snprintf(table, sizeof(table), "%s", e->d_name);
        else if (strncmp(e->d_name, BELL_PREFIX, strlen(BELL_PREFIX)) == 0)
            snprintf(table, sizeof(table), "%s%.40s", TABLE_PREFIX,
                     e->d_name + strlen(BELL_PREFIX));
        else
            continue;
        if (owner_gone(d, table))
            (void)unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

/* The table in /dev/shm, where peers of this host can map it, its file
 * kept open in table_fd with a shared lock that says its owner lives
 * (owner_gone); NULL when it cannot be made there. */
static _Atomic uint64_t *table_in_shm(struct ferry__fabric *fab,
                                      uint64_t incarnation)
{
    void *p = MAP_FAILED;
    int fd;

    table_name(fab->pulse.shm_name, sizeof(fab->pulse.shm_name),
               incarnation);
    fd = shm_open(fab->pulse.shm_name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC,
                  S_IRUSR | S_IWUSR);
    if (fd < 0)
        return NULL;
    /* Before the owner word is written: a sweep that takes the lock
     * first reads 0 there, which is no leftover.  It waits at most for a
     * sweep's look; without a lock the owner word still speaks. */
    if (flock(fd, LOCK_SH) != 0)
        FERRY_LOG_INFO("pulse table %s: no lock (%s): a process of another "
                       "pid namespace sharing /dev/shm may take it for a "
                       "leftover",
                       fab->pulse.shm_name, strerror(errno));
    if (ftruncate(fd, TABLE_LEN) == 0)
        p = mmap(NULL, TABLE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        shm_unlink(fab->pulse.shm_name);
        return NULL;
    }
    fab->pulse.table_fd = fd;
    return p;
}

/* The table, in /dev/shm if it can be, with its header written and every
 * slot free; false when there is no memory for it. */
static bool table_open(struct ferry__fabric *fab)
{
    /* A value no earlier process at this address is likely to have had. */
    uint64_t incarnation = ferry__random_u64();

    sweep_leftovers();
    fab->pulse.words = table_in_shm(fab, incarnation);
    fab->pulse.mapped = fab->pulse.words != NULL;
    if (!fab->pulse.mapped) {
        /* Said, not fatal: peers on other hosts never map it anyway. */
        FERRY_LOG_INFO("the pulse table cannot be made in /dev/shm (%s): "
                       "peers on this host will check keys only when an "
                       "operation fails",
                       strerror(errno));
        fab->pulse.words = aligned_alloc(64, TABLE_LEN);
        if (fab->pulse.words == NULL)
            return false;
        memset((void *)fab->pulse.words, 0, TABLE_LEN);
    }
    fab->pulse.free_slots =
        malloc(FERRY__PULSE_SLOTS * sizeof(*fab->pulse.free_slots));
    if (fab->pulse.free_slots == NULL)
        return false;
    /* Slot 0 on top: a context's first regions take the first pages. */
    for (uint32_t i = 0; i < FERRY__PULSE_SLOTS; i++)
        fab->pulse.free_slots[i] = FERRY__PULSE_SLOTS - 1 - i;
    fab->pulse.nfree = FERRY__PULSE_SLOTS;
    /* Generations go on from a random value, not from 1: a process that
     * restarts at its predecessor's address (same keys, same slots) then
     * never holds a generation the predecessor's blobs carry, and a peer
     * that checks a slot after its connection dropped finds the region
     * gone instead of writing into the successor's (xfer/resume.c). */
    fab->pulse.generation = ferry__random_u64();
    atomic_store(&fab->pulse.words[FERRY__PULSE_OWNER], (uint64_t)getpid());
    atomic_store(&fab->pulse.words[FERRY__PULSE_INCARNATION], incarnation);
    return true;
}

/* Registers the table on the transport's first rail; false (said) when
 * it cannot. */
static bool register_on(struct ferry__fabric *fab, struct ferry__transport *t)
{
    struct ferry__rail *rail = &fab->rails[t->first];
    struct ferry__pulse_reg *reg = &t->pulse;
    struct iovec iov = {(void *)fab->pulse.words, TABLE_LEN};
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = FI_REMOTE_READ,
                              .iface = FI_HMEM_SYSTEM};
    int ret = ferry__mr_open(fab, rail, &attr, 0, &reg->mr);

    if (ret == 0 && (ret = read_key(fab, reg)) != 0) {
        fi_close(&reg->mr->fid);
        reg->mr = NULL;
    }
    if (ret == 0)
        return true;
    /* Said, not fatal: liveness still learns from the operations. */
    FERRY_LOG_WARN("no pulse on domain %s (%s): peers waiting on this "
                   "context will see no answer to their heartbeats, and "
                   "cannot check its keys",
                   rail->info->domain_attr->name, ferry_last_error());
    ferry__error_clear();
    reg->key_len = 0;
    return false;
}

/* The path of the bell of the context with this incarnation: beside its
 * table, so that peers derive it from their blob as they do the table. */
static void bell_path(char *buf, size_t len, uint64_t incarnation)
{
    snprintf(buf, len, "/dev/shm/" BELL_PREFIX "%016llx",
             (unsigned long long)incarnation);
}

/* The bell, where the progress thread would otherwise poll for ever: a
 * rail without a descriptor to sleep on (pulse.h).  Without one (no
 * /dev/shm table, or the FIFO cannot be made) the thread keeps polling. */
static void bell_open(struct ferry__fabric *fab, uint64_t incarnation)
{
    char *path = fab->pulse.bell_path;
    bool needed = false;

    for (unsigned i = 0; i < fab->nrails; i++)
        needed |= !fab->rails[i].has_wait_fd;
    if (!needed || !fab->pulse.mapped || !fab->cfg.progress_thread)
        return;
    bell_path(path, sizeof(fab->pulse.bell_path), incarnation);
    if (mkfifo(path, S_IRUSR | S_IWUSR) == 0) {
        /* Read and write: the FIFO never reads as closed. */
        fab->pulse.bell_fd = open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (fab->pulse.bell_fd >= 0)
            return;
        unlink(path);
    }
    FERRY_LOG_INFO("no bell in /dev/shm (%s): the progress thread keeps "
                   "polling while regions are exposed",
                   strerror(errno));
    path[0] = '\0';
}

static void bell_close(struct ferry__fabric *fab)
{
    if (fab->pulse.bell_path[0] == '\0')
        return;
    close(fab->pulse.bell_fd);
    unlink(fab->pulse.bell_path);
}

void ferry__pulse_open(struct ferry__fabric *fab)
{
    FERRY__ASSERT_LOCKED(&fab->lock);
    if (!table_open(fab)) {
        ferry__pulse_close(fab);
        return;
    }
    for (unsigned t = 0; t < fab->ntransports; t++)
        if (register_on(fab, &fab->transports[t]) && t == 0)
            fab->pulse.slots = true;
    bell_open(fab, atomic_load(&fab->pulse.words[FERRY__PULSE_INCARNATION]));
}

int ferry__pulse_bell_fd(const struct ferry__fabric *fab)
{
    return fab->pulse.bell_path[0] != '\0' ? fab->pulse.bell_fd : -1;
}

void ferry__pulse_sleep(struct ferry__fabric *fab, bool on)
{
    uint8_t drain[64];

    atomic_store_explicit(&fab->pulse.words[FERRY__PULSE_SLEEPING], on,
                          memory_order_relaxed);
    if (on) {
        /* Orders the raised word before the last poll (Dekker with the
         * poster's fence in ferry__pulse_ring): the poll sees the post,
         * or the poster sees the word and rings. */
        atomic_thread_fence(memory_order_seq_cst);
        return;
    }
    while (read(fab->pulse.bell_fd, drain, sizeof(drain)) > 0)
        continue;
}

void ferry__pulse_ring_now(const struct ferry__pulse_remote *p)
{
    const uint8_t byte = 1;

    /* EAGAIN: the FIFO is full, so the sleeper has bytes to wake on. */
    if (write(p->bell_fd, &byte, 1) < 0)
        return;
}

void ferry__pulse_close(struct ferry__fabric *fab)
{
    bell_close(fab);
    /* Peers of this host see every region gone from here on. */
    if (fab->pulse.words != NULL)
        atomic_store(&fab->pulse.words[FERRY__PULSE_INCARNATION], 0);
    for (unsigned t = 0; t < fab->ntransports; t++) {
        struct ferry__pulse_reg *reg = &fab->transports[t].pulse;

        if (reg->mr != NULL)
            fi_close(&reg->mr->fid);
        memset(reg, 0, sizeof(*reg));
    }
    if (fab->pulse.mapped) {
        munmap((void *)fab->pulse.words, TABLE_LEN);
        shm_unlink(fab->pulse.shm_name);
        close(fab->pulse.table_fd);
    } else {
        free((void *)fab->pulse.words);
    }
    free(fab->pulse.free_slots);
    memset(&fab->pulse, 0, sizeof(fab->pulse));
}

uint32_t ferry__pulse_slot_take(struct ferry__fabric *fab, uint64_t *gen)
{
    uint32_t slot;

    FERRY__ASSERT_LOCKED(&fab->lock);
    if (!fab->pulse.slots || fab->pulse.nfree == 0)
        return FERRY__PULSE_NO_SLOT;
    slot = fab->pulse.free_slots[--fab->pulse.nfree];
    /* 0 is a gone region's word: never a generation. */
    if (++fab->pulse.generation == 0)
        ++fab->pulse.generation;
    *gen = fab->pulse.generation;
    atomic_store_explicit(&fab->pulse.words[FERRY__PULSE_HEADER + slot], *gen,
                          memory_order_relaxed);
    return slot;
}

void ferry__pulse_slot_retire(struct ferry__fabric *fab, uint32_t slot)
{
    FERRY__ASSERT_LOCKED(&fab->lock);
    if (slot == FERRY__PULSE_NO_SLOT)
        return;
    /* Before the registration closes: a peer that still sees the
     * generation may post, and the key still answers. */
    atomic_store_explicit(&fab->pulse.words[FERRY__PULSE_HEADER + slot], 0,
                          memory_order_release);
    fab->pulse.free_slots[fab->pulse.nfree++] = slot;
}

void ferry__pulse_put(struct ferry__blob_writer *w,
                      const struct ferry__fabric *fab,
                      const struct ferry__transport *t)
{
    bool virt = t->mr_mode & FERRY_MR_VIRT_ADDR;
    size_t len = t->pulse.key_len; /* 0: none was made */

    ferry__blob_put_u64(
        w, len != 0 ? atomic_load(&fab->pulse.words[FERRY__PULSE_INCARNATION])
                    : 0);
    ferry__blob_put_u64(w, virt ? (uint64_t)(uintptr_t)fab->pulse.words : 0);
    ferry__blob_put_u64(w, t->pulse.raw_base);
    ferry__blob_put_u16(w, (uint16_t)len);
    ferry__blob_put_bytes(w, t->pulse.key, len);
}

/* Maps the table of the peer p describes, when it is on this host (its
 * file is in our /dev/shm and holds its incarnation). */
static void map_peer_table(struct ferry__pulse_remote *p)
{
    char name[48];
    struct stat st;
    void *t = MAP_FAILED;
    int fd;

    table_name(name, sizeof(name), p->incarnation);
    /* As in owner_gone: a FIFO at the name must not hold the open, and
     * only a regular file is mapped (shm_open adds O_NOFOLLOW itself). */
    if ((fd = shm_open(name, O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0)) < 0)
        return; /* on another host (or one without /dev/shm) */
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
        st.st_size >= (off_t)TABLE_LEN)
        t = mmap(NULL, TABLE_LEN, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (t == MAP_FAILED)
        return;
    p->local = t;
    if (atomic_load(&p->local[FERRY__PULSE_INCARNATION]) != p->incarnation) {
        munmap(t, TABLE_LEN); /* closed since the blob was made */
        p->local = NULL;
    }
}

/* Reads the pulse fields of an address blob; key holds FERRY__KEY_MAX. */
static int read_fields(struct ferry__blob_reader *r,
                       struct ferry__pulse_remote *out, uint64_t *raw_base,
                       uint8_t *key, size_t *len)
{
    memset(out, 0, sizeof(*out));
    out->incarnation = ferry__blob_get_u64(r);
    out->addr = ferry__blob_get_u64(r);
    *raw_base = ferry__blob_get_u64(r);
    *len = ferry__blob_get_u16(r);
    if (!r->bad && *len <= FERRY__KEY_MAX)
        ferry__blob_get_bytes(r, key, *len);
    if (r->bad || *len > FERRY__KEY_MAX)
        return ferry__error(FERRY_EBLOB,
                            "address blob: the heartbeat word's key of %zu "
                            "bytes is cut short or longer than %d",
                            *len, FERRY__KEY_MAX);
    return 0;
}

/* Opens the bell of the peer whose table is mapped, if it has one: a
 * FIFO, and only a FIFO -- a ring writes into it, and a file or a link
 * another user put at its name must not be written. */
static bool peer_bell_open(struct ferry__pulse_remote *p)
{
    char path[64];
    struct stat st;

    bell_path(path, sizeof(path), p->incarnation);
    /* Read and write, as its owner: with a reader always there, a ring
     * after the owner died is no SIGPIPE (the bytes fill the FIFO, then
     * writes answer EAGAIN). */
    p->bell_fd = open(path, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (p->bell_fd >= 0 &&
        (fstat(p->bell_fd, &st) != 0 || !S_ISFIFO(st.st_mode))) {
        close(p->bell_fd);
        p->bell_fd = -1;
    }
    p->has_bell = p->bell_fd >= 0;
    return p->has_bell;
}

int ferry__pulse_skip(struct ferry__blob_reader *r)
{
    struct ferry__pulse_remote unused;
    uint8_t key[FERRY__KEY_MAX];
    uint64_t raw_base;
    size_t len;

    return read_fields(r, &unused, &raw_base, key, &len);
}

int ferry__pulse_get(struct ferry__fabric *fab, struct ferry__blob_reader *r,
                     struct ferry__pulse_remote *out)
{
    /* Raw keys keep a context to transport 0 (local.c). */
    const struct ferry__rail *rail = &fab->rails[0];
    uint8_t key[FERRY__KEY_MAX];
    uint64_t raw_base;
    size_t len;
    int ret;

    if ((ret = read_fields(r, out, &raw_base, key, &len)) != 0)
        return ret;
    if (len == 0)
        return 0; /* the peer has none: its heartbeats go unanswered */
    if (!(fab->mr_mode & FERRY_MR_RAW)) {
        if (len > 8)
            return ferry__error(FERRY_EBLOB,
                                "address blob: the heartbeat word has a "
                                "%zu-byte key but this context does not use "
                                "raw keys (FI_MR_RAW): both sides must use "
                                "the same provider and mr_mode",
                                len);
        out->key = ferry__key_to_u64(key, len);
    } else {
        ret = fi_mr_map_raw(rail->domain, raw_base, key, len, &out->key, 0);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_map_raw of the peer's heartbeat key "
                                "on domain %s failed (raw keys, FI_MR_RAW): "
                                "%s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
        out->key_mapped = true;
    }
    out->present = true;
    map_peer_table(out);
    if (out->local != NULL && peer_bell_open(out))
        fab->pulse.peer_bells++;
    return 0;
}

void ferry__pulse_guard(struct ferry__pulse_remote *p,
                        struct ferry__shm_owner *owner)
{
    char table[48];

    if (p->local == NULL || p->guard != 0)
        return;
    table_name(table, sizeof(table), p->incarnation);
    owner->pid = (pid_t)atomic_load(&p->local[FERRY__PULSE_OWNER]);
    p->guard = ferry__shm_guard_watch(owner, table);
}

pid_t ferry__pulse_owner_died(const struct ferry__pulse_remote *p)
{
    if (p->local == NULL || !ferry__shm_guard_dead(p->guard))
        return 0;
    return (pid_t)atomic_load_explicit(&p->local[FERRY__PULSE_OWNER],
                                       memory_order_relaxed);
}

void ferry__pulse_release(struct ferry__fabric *fab,
                          struct ferry__pulse_remote *p)
{
    ferry__shm_guard_unwatch(p->guard);
    p->guard = 0;
    if (p->key_mapped)
        fi_mr_unmap_key(fab->rails[0].domain, p->key);
    if (p->local != NULL)
        munmap((void *)p->local, TABLE_LEN);
    if (p->has_bell) {
        close(p->bell_fd);
        fab->pulse.peer_bells--;
    }
    p->local = NULL;
    p->has_bell = false;
    p->key_mapped = false;
    p->present = false;
}

/* Relaxed loads: the answers order nothing.  A region deregistered
 * right after a look is the race of the application's own making that
 * docs/semantics.md describes. */
bool ferry__pulse_closed(const struct ferry__pulse_remote *p)
{
    return p->local != NULL &&
           atomic_load_explicit(&p->local[FERRY__PULSE_INCARNATION],
                                memory_order_relaxed) != p->incarnation;
}

enum ferry__pulse_verdict
ferry__pulse_region(const struct ferry__pulse_remote *p, uint32_t slot,
                    uint64_t gen)
{
    if (ferry__pulse_closed(p))
        return FERRY__PULSE_CONTEXT_GONE;
    if (p->local == NULL || slot == FERRY__PULSE_NO_SLOT)
        return FERRY__PULSE_UNKNOWN;
    if (atomic_load_explicit(&p->local[FERRY__PULSE_HEADER + slot],
                             memory_order_relaxed) != gen)
        return FERRY__PULSE_REGION_GONE;
    return FERRY__PULSE_LIVE;
}

uint64_t ferry__pulse_slot_addr(const struct ferry__pulse_remote *p,
                                uint32_t slot)
{
    return p->addr + (FERRY__PULSE_HEADER + (uint64_t)slot) * 8u;
}
