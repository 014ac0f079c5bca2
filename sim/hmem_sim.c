/*
 * The simulated device backend: device memory the CPU cannot touch, for
 * tests.  Not part of libferry: it is its own module, libferry-sim.so,
 * which libferry loads (lib/dev/hmem.c) only when FERRY_SIM_DEVICES=N is
 * set or ferry__hmem_use_sim(n) was called; the white-box tests link it
 * statically instead.  It reaches libferry only through the
 * ferry__sim_host table it is loaded with (libferry's own functions are
 * hidden from other objects), so its sentences still reach
 * ferry_last_error().
 *
 * Devices.  ferry_sim_load(host, n) makes devices 0..n-1 (n from 1 to
 * SIM_MAX_DEVICES).  Device d sits at PCI address "0000:XX:00.0" with bus
 * XX = 0x10 + d in hex ("0000:10:00.0", "0000:11:00.0", ...), or at the
 * d-th address of FERRY_SIM_PCI ("0000:06:00.0,0000:01:03.0"), so topology
 * tests can place the simulated GPUs where a saved topology has GPUs.
 *
 * Memory.  dev_alloc makes a memfd of the size rounded up to whole pages
 * and maps it twice: PROT_NONE (the "device" pointer handed out) and
 * read-write (the copy engine's view, never handed out).  So any CPU access
 * to device memory by ferry or a test dies with SIGSEGV, while the engine
 * moves the bytes through its own view.  Each allocation has a buffer id
 * from a process-wide counter that is never reused, and a size equal to
 * the length asked for (a copy must lie inside it, not in the page
 * padding).  ptr_info answers for any pointer inside an allocation; any
 * other pointer is host memory.
 *
 * Copies.  A stream is a FIFO of copies run in order by its own worker
 * thread; copy_async validates the ranges at once (a range must lie
 * entirely inside one allocation, or touch none) and queues the copy,
 * which names each device side by buffer id and offset.  The worker looks
 * the buffer up again when it runs the copy, so a copy whose buffer was
 * freed before it ran fails instead of touching whatever is mapped there
 * now.  A failed copy poisons its stream, as a fault does a CUDA stream:
 * the stream's later copies are not run and every later event on it
 * reports the first failure.  Destroying a stream lets it finish its
 * queue, then joins its thread.
 *
 * Events.  copy_async records an event after its copy; event_done is 1
 * once the copies before the latest record have run, 0 before, or the
 * error that poisoned the stream.  An event never recorded is done.
 *
 * Locks.  One mutex guards the allocation table (this backend is not on
 * any path that forbids locks); it is never held across a copy.  A copy in
 * progress pins its buffers, and dev_free waits for the pins to go before
 * unmapping.  Each stream has a mutex and condition variable for its
 * queue; event completion is an atomic generation count.
 *
 * dmabuf_fd answers FERRY_ENOTSUP: the simulated device exports no dmabuf
 * (the memfd would do as one, but ferry's dmabuf path must not be taken
 * for memory no NIC can reach).  flush_rdma_writes does nothing.
 */
#include "dev/hmem.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SIM_MAX_DEVICES 16 /* bus numbers 0x10..0x1f */
#define SIM_PCI_BUS_BASE 0x10

/* ---- state --------------------------------------------------------------- */

struct sim_alloc {
    int ordinal;
    uint64_t id;
    uintptr_t base;  /* the PROT_NONE view: the device pointer */
    size_t size;     /* bytes asked for */
    size_t map_len;  /* size rounded up to pages */
    uint8_t *rw;     /* the engine's read-write view */
    int fd;          /* the memfd */
    unsigned pins;   /* copies running on it; under sim_lock */
};

struct sim_host {
    void *ptr;
    size_t len;
};

static pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
/* dev_free waits on it for a buffer's pins to drop; with sim_lock. */
static pthread_cond_t sim_unpinned = PTHREAD_COND_INITIALIZER;
static struct sim_alloc **allocs; /* under sim_lock */
static size_t nallocs, allocs_cap;
static struct sim_host *hosts; /* host_alloc's; under sim_lock */
static size_t nhosts, hosts_cap;

/* libferry's error and log calls, from ferry_sim_load. */
static struct ferry__sim_host libferry;

/* Set by ferry_sim_load, which hmem.c calls under pthread_once
 * before handing out the table: relaxed accesses suffice. */
static _Atomic int sim_ndevices;
static _Atomic uint64_t next_buffer_id = 1; /* 0 means host memory */
static _Atomic uint64_t copies_done;        /* a statistic: relaxed */

/* One side of a queued copy: host memory, or an offset in a buffer. */
struct sim_side {
    uint64_t id; /* 0: host memory at ptr */
    size_t off;
    void *ptr;   /* host pointer, or the device pointer (for sentences) */
};

struct sim_op {
    struct sim_op *next;
    struct sim_side dst, src;
    size_t len;
    struct ferry__hmem_event *event; /* holds a reference, or NULL */
    uint64_t gen;                    /* the event's record it completes */
};

struct ferry__hmem_stream {
    int ordinal;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t work; /* signalled when an op is queued or on stop */
    struct sim_op *head, *tail; /* under lock */
    bool stopping;              /* under lock */
    /* Worker only: the first failure, after which nothing more runs. */
    int err;
    char msg[256];
};

struct ferry__hmem_event {
    int ordinal;
    /* Records made by copy_async, and the latest one the engine has
     * completed (monotonic: a late completion of an older record never
     * lowers it). */
    _Atomic uint64_t recorded;
    _Atomic uint64_t done;
    /* Owner's reference plus one per queued op that records it. */
    _Atomic unsigned refs;
    pthread_mutex_t lock; /* guards the three below */
    uint64_t err_gen;     /* the record err describes */
    int err;
    char msg[256];
};

/* ---- helpers ------------------------------------------------------------- */

static size_t page_size(void)
{
    long p = sysconf(_SC_PAGESIZE);

    return p > 0 ? (size_t)p : 4096;
}

/* len rounded up to whole pages; 0 on overflow. */
static size_t page_round(size_t len)
{
    size_t p = page_size();

    if (len > SIZE_MAX - (p - 1))
        return 0;
    return (len + p - 1) & ~(p - 1);
}

static int check_ordinal(const char *call, int ordinal)
{
    /* Relaxed: see sim_ndevices. */
    int n = atomic_load_explicit(&sim_ndevices, memory_order_relaxed);

    if (ordinal < 0 || ordinal >= n)
        return libferry.error(FERRY_EINVAL,
                              "%s: simulated device %d does not exist; there "
                              "are devices 0 to %d",
                              call, ordinal, n - 1);
    return 0;
}

/* The allocation holding p, or NULL; caller holds sim_lock. */
static struct sim_alloc *find_containing(uintptr_t p)
{
    for (size_t i = 0; i < nallocs; i++)
        if (p >= allocs[i]->base && p - allocs[i]->base < allocs[i]->size)
            return allocs[i];
    return NULL;
}

/* The first allocation overlapping [p, p + len), or NULL; with sim_lock. */
static struct sim_alloc *find_overlapping(uintptr_t p, size_t len)
{
    for (size_t i = 0; i < nallocs; i++)
        if (p < allocs[i]->base + allocs[i]->size &&
            allocs[i]->base < p + len)
            return allocs[i];
    return NULL;
}

static struct sim_alloc *find_id(uint64_t id)
{
    for (size_t i = 0; i < nallocs; i++)
        if (allocs[i]->id == id)
            return allocs[i];
    return NULL;
}

/*
 * Resolves one side of a copy of [p, p + len) (what: "dst" or "src"):
 * into a buffer id and offset, or host memory touching no allocation.
 * Caller holds sim_lock.
 */
static int locate(const char *call, const char *what, const void *p,
                  size_t len, struct sim_side *side)
{
    uintptr_t a = (uintptr_t)p;
    struct sim_alloc *al;

    side->id = 0;
    side->off = 0;
    side->ptr = (void *)p;
    if (p == NULL)
        return libferry.error(FERRY_EINVAL, "%s: %s is NULL", call, what);
    if (len > UINTPTR_MAX - a)
        return libferry.error(FERRY_EINVAL,
                              "%s: %s range [%p, +%zu) wraps around the "
                              "address space",
                              call, what, p, len);
    al = find_containing(a);
    if (al != NULL) {
        if (len > al->size - (a - al->base))
            return libferry.error(
                FERRY_EINVAL,
                "%s: %s range [%p, +%zu) runs %zu bytes past the end of "
                "simulated device buffer %" PRIu64 " [%p, +%zu) on device "
                "%d; a copy range must lie inside one allocation",
                call, what, p, len, len - (al->size - (a - al->base)),
                al->id, (void *)al->base, al->size, al->ordinal);
        side->id = al->id;
        side->off = a - al->base;
        return 0;
    }
    al = find_overlapping(a, len);
    if (al != NULL)
        return libferry.error(
            FERRY_EINVAL,
            "%s: %s range [%p, +%zu) starts in host memory and runs into "
            "simulated device buffer %" PRIu64 " [%p, +%zu) on device %d; a "
            "copy range must lie inside one allocation or touch none",
            call, what, p, len, al->id, (void *)al->base, al->size,
            al->ordinal);
    return 0;
}

/*
 * The CPU address the engine uses for side, pinning its buffer; *pinned
 * gets the buffer to unpin (or NULL for host memory).  Fails when the
 * buffer was freed since the copy was queued.  Caller holds sim_lock.
 */
static int engine_address(const struct sim_side *side, const char *what,
                          uint8_t **addr, struct sim_alloc **pinned,
                          char *msg, size_t msg_len)
{
    struct sim_alloc *al;

    *pinned = NULL;
    if (side->id == 0) {
        *addr = side->ptr;
        return 0;
    }
    al = find_id(side->id);
    if (al == NULL) {
        snprintf(msg, msg_len,
                 "simulated copy engine: the %s of a copy, %p in "
                 "device buffer %" PRIu64 ", was freed before the copy ran; "
                 "free device memory only after the copies using it are done",
                 what, side->ptr, side->id);
        return FERRY_EINVAL;
    }
    al->pins++;
    *pinned = al;
    *addr = al->rw + side->off;
    return 0;
}

/* Caller holds sim_lock. */
static void unpin(struct sim_alloc *al)
{
    if (al != NULL && --al->pins == 0)
        pthread_cond_broadcast(&sim_unpinned);
}

/*
 * Runs one copy through the read-write views; 0, or an error code with its
 * sentence in msg.
 */
static int engine_copy(const struct sim_side *dst, const struct sim_side *src,
                       size_t len, char *msg, size_t msg_len)
{
    struct sim_alloc *pd = NULL, *ps = NULL;
    uint8_t *d = NULL, *s = NULL;
    int ret;

    if (len == 0)
        return 0;
    pthread_mutex_lock(&sim_lock);
    ret = engine_address(dst, "destination", &d, &pd, msg, msg_len);
    if (ret == 0) {
        ret = engine_address(src, "source", &s, &ps, msg, msg_len);
        if (ret != 0) {
            unpin(pd);
            pd = NULL;
        }
    }
    pthread_mutex_unlock(&sim_lock);
    if (ret != 0)
        return ret;

    memmove(d, s, len); /* the two may be views of one buffer */

    pthread_mutex_lock(&sim_lock);
    unpin(pd);
    unpin(ps);
    pthread_mutex_unlock(&sim_lock);
    /* Relaxed: a statistic; completion is published by the events. */
    atomic_fetch_add_explicit(&copies_done, 1, memory_order_relaxed);
    return 0;
}

static int table_add(struct sim_alloc *al)
{
    if (nallocs == allocs_cap) {
        size_t cap = allocs_cap ? allocs_cap * 2 : 64;
        struct sim_alloc **n = realloc(allocs, cap * sizeof(*n));

        if (n == NULL)
            return FERRY_ENOMEM;
        allocs = n;
        allocs_cap = cap;
    }
    allocs[nallocs++] = al;
    return 0;
}

/* ---- devices ------------------------------------------------------------- */

static int sim_device_count(int *count)
{
    /* Relaxed: see sim_ndevices. */
    *count = atomic_load_explicit(&sim_ndevices, memory_order_relaxed);
    return 0;
}

/* The ordinal-th address of FERRY_SIM_PCI into buf; false if none. */
static bool pci_from_env(int ordinal, char *buf, size_t len)
{
    const char *p = getenv("FERRY_SIM_PCI");

    for (int i = 0; p != NULL && *p != '\0'; i++) {
        size_t n = strcspn(p, ",");

        if (i == ordinal) {
            if (n == 0 || n >= len)
                return false;
            memcpy(buf, p, n);
            buf[n] = '\0';
            return true;
        }
        p += n + (p[n] == ',');
    }
    return false;
}

static int sim_pci_bus_id(int ordinal, char *buf, size_t len)
{
    int ret = check_ordinal("simulated pci_bus_id", ordinal);

    if (ret != 0)
        return ret;
    if (buf == NULL || len < sizeof("0000:00:00.0"))
        return libferry.error(FERRY_ENOSPC,
                              "simulated pci_bus_id: a PCI address needs %zu "
                              "bytes, the buffer has %zu",
                              sizeof("0000:00:00.0"), buf == NULL ? 0 : len);
    if (!pci_from_env(ordinal, buf, len))
        snprintf(buf, len, "0000:%02x:00.0", SIM_PCI_BUS_BASE + ordinal);
    return 0;
}

static int sim_ptr_info(const void *ptr, struct ferry__hmem_ptr *info)
{
    struct sim_alloc *al;

    memset(info, 0, sizeof(*info));
    info->ordinal = -1;
    pthread_mutex_lock(&sim_lock);
    al = find_containing((uintptr_t)ptr);
    if (al != NULL) {
        info->device = true;
        info->ordinal = al->ordinal;
        info->buffer_id = al->id;
        info->base = al->base;
        info->size = al->size;
    }
    pthread_mutex_unlock(&sim_lock);
    return 0;
}

static int sim_dmabuf_fd(const void *ptr, size_t len, int *fd,
                         uint64_t *offset)
{
    (void)len;
    *fd = -1;
    *offset = 0;
    return libferry.error(FERRY_ENOTSUP,
                          "the simulated device exports no dmabuf (for %p)",
                          ptr);
}

static void sim_flush_rdma_writes(int ordinal)
{
    (void)ordinal; /* the engine's writes are plain stores: nothing to do */
}

/* ---- memory -------------------------------------------------------------- */

/* Maps a device buffer; at exactly `at` (MAP_FIXED_NOREPLACE) unless NULL. */
static int sim_map(const char *call, int ordinal, void *at, size_t len,
                   void **ptr)
{
    struct sim_alloc *al;
    size_t map_len;
    char name[32];
    void *dev, *rw;
    int fd, err, ret;

    if ((ret = check_ordinal(call, ordinal)) != 0)
        return ret;
    if (len == 0)
        return libferry.error(FERRY_EINVAL, "%s: length is 0", call);
    if ((map_len = page_round(len)) == 0)
        return libferry.error(FERRY_ENOMEM, "%s: %zu bytes is too large", call,
                              len);
    if (at != NULL && ((uintptr_t)at & (page_size() - 1)) != 0)
        return libferry.error(FERRY_EINVAL,
                              "%s: address %p is not page-aligned", call, at);

    snprintf(name, sizeof(name), "ferry-sim-dev%d", ordinal);
    fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0)
        return libferry.error(errno == EMFILE || errno == ENFILE
                                  ? FERRY_ENOMEM
                                  : FERRY_EINVAL,
                              "%s: memfd_create failed: %s", call,
                              strerror(errno));
    if (ftruncate(fd, (off_t)map_len) != 0) {
        err = errno;
        close(fd);
        return libferry.error(FERRY_ENOMEM,
                              "%s: sizing the memfd to %zu bytes failed: %s",
                              call, map_len, strerror(err));
    }
    dev = mmap(at, map_len, PROT_NONE,
               MAP_SHARED | (at != NULL ? MAP_FIXED_NOREPLACE : 0), fd, 0);
    if (dev == MAP_FAILED) {
        err = errno;
        close(fd);
        if (at != NULL && err == EEXIST)
            return libferry.error(FERRY_EBUSY,
                                  "%s: [%p, +%zu) is already mapped; free "
                                  "what is there first",
                                  call, at, map_len);
        return libferry.error(FERRY_ENOMEM,
                              "%s: mapping %zu bytes of device memory failed: "
                              "%s",
                              call, map_len, strerror(err));
    }
    if (at != NULL && dev != at) { /* a kernel older than 4.17: a hint */
        munmap(dev, map_len);
        close(fd);
        return libferry.error(FERRY_EBUSY,
                              "%s: [%p, +%zu) could not be mapped there (the "
                              "kernel placed it at %p)",
                              call, at, map_len, dev);
    }
    rw = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (rw == MAP_FAILED) {
        err = errno;
        munmap(dev, map_len);
        close(fd);
        return libferry.error(FERRY_ENOMEM,
                              "%s: mapping the engine's view of %zu bytes "
                              "failed: %s",
                              call, map_len, strerror(err));
    }
    al = calloc(1, sizeof(*al));
    if (al == NULL)
        goto nomem;
    al->ordinal = ordinal;
    /* Relaxed: ids need only be unique, not ordered with anything. */
    al->id = atomic_fetch_add_explicit(&next_buffer_id, 1,
                                       memory_order_relaxed);
    al->base = (uintptr_t)dev;
    al->size = len;
    al->map_len = map_len;
    al->rw = rw;
    al->fd = fd;
    pthread_mutex_lock(&sim_lock);
    ret = table_add(al);
    pthread_mutex_unlock(&sim_lock);
    if (ret != 0) {
        free(al);
        goto nomem;
    }
    *ptr = dev;
    return 0;

nomem:
    munmap(rw, map_len);
    munmap(dev, map_len);
    close(fd);
    return libferry.error(FERRY_ENOMEM,
                          "%s: no memory to record a device buffer", call);
}

static int sim_dev_alloc(int ordinal, size_t len, void **ptr)
{
    *ptr = NULL;
    return sim_map("simulated dev_alloc", ordinal, NULL, len, ptr);
}

int ferry__hmem_sim_alloc_at(int ordinal, void *addr, size_t len)
{
    void *ptr;

    if (addr == NULL)
        return libferry.error(FERRY_EINVAL,
                              "ferry__hmem_sim_alloc_at: addr is NULL");
    return sim_map("ferry__hmem_sim_alloc_at", ordinal, addr, len, &ptr);
}

static int sim_dev_free(void *ptr)
{
    struct sim_alloc *al = NULL;
    size_t i;

    pthread_mutex_lock(&sim_lock);
    for (i = 0; i < nallocs; i++)
        if (allocs[i]->base == (uintptr_t)ptr)
            break;
    if (i == nallocs) {
        uintptr_t base = 0;
        uint64_t id = 0;

        al = find_containing((uintptr_t)ptr);
        if (al != NULL) { /* copied: it may go once the lock is dropped */
            base = al->base;
            id = al->id;
        }
        pthread_mutex_unlock(&sim_lock);
        if (id != 0)
            return libferry.error(FERRY_EINVAL,
                                  "simulated dev_free: %p is %zu bytes inside "
                                  "device buffer %" PRIu64 " at %p; free its "
                                  "start",
                                  ptr, (size_t)((uintptr_t)ptr - base), id,
                                  (void *)base);
        return libferry.error(FERRY_EINVAL,
                              "simulated dev_free: %p is not a simulated "
                              "device allocation (freed already, or never "
                              "allocated by dev_alloc)",
                              ptr);
    }
    al = allocs[i];
    allocs[i] = allocs[--nallocs];
    /* Out of the table, no new copy can pin it; wait for those running. */
    while (al->pins > 0)
        pthread_cond_wait(&sim_unpinned, &sim_lock);
    pthread_mutex_unlock(&sim_lock);

    munmap((void *)al->base, al->map_len);
    munmap(al->rw, al->map_len);
    close(al->fd);
    free(al);
    return 0;
}

static int sim_host_alloc(size_t len, void **ptr)
{
    size_t map_len = page_round(len);
    void *p;

    *ptr = NULL;
    if (len == 0 || map_len == 0)
        return libferry.error(len == 0 ? FERRY_EINVAL : FERRY_ENOMEM,
                              "simulated host_alloc: %zu bytes: %s", len,
                              len == 0 ? "length is 0" : "too large");
    p = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return libferry.error(FERRY_ENOMEM,
                              "simulated host_alloc: mapping %zu bytes failed: "
                              "%s",
                              map_len, strerror(errno));
    /* Pinned if RLIMIT_MEMLOCK allows; the simulation works without. */
    (void)mlock(p, map_len);
    pthread_mutex_lock(&sim_lock);
    if (nhosts == hosts_cap) {
        size_t cap = hosts_cap ? hosts_cap * 2 : 32;
        struct sim_host *n = realloc(hosts, cap * sizeof(*n));

        if (n == NULL) {
            pthread_mutex_unlock(&sim_lock);
            munmap(p, map_len);
            return libferry.error(FERRY_ENOMEM,
                                  "simulated host_alloc: no memory to record "
                                  "a host buffer");
        }
        hosts = n;
        hosts_cap = cap;
    }
    hosts[nhosts].ptr = p;
    hosts[nhosts].len = map_len;
    nhosts++;
    pthread_mutex_unlock(&sim_lock);
    *ptr = p;
    return 0;
}

static void sim_host_free(void *ptr)
{
    size_t len = 0;

    if (ptr == NULL)
        return;
    pthread_mutex_lock(&sim_lock);
    for (size_t i = 0; i < nhosts; i++) {
        if (hosts[i].ptr == ptr) {
            len = hosts[i].len;
            hosts[i] = hosts[--nhosts];
            break;
        }
    }
    pthread_mutex_unlock(&sim_lock);
    if (len == 0) {
        libferry.log(FERRY__LOG_WARN, "simulated host_free: %p is not a "
                     "host_alloc buffer; left alone",
                     ptr);
        return;
    }
    munmap(ptr, len); /* also unlocks it */
}

/* ---- events -------------------------------------------------------------- */

static void event_unref(struct ferry__hmem_event *ev)
{
    /* Acq_rel: whoever drops the last reference sees every write the
     * other holders made before dropping theirs, and frees after them. */
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) == 1) {
        pthread_mutex_destroy(&ev->lock);
        free(ev);
    }
}

static int sim_event_create(int ordinal, struct ferry__hmem_event **event)
{
    struct ferry__hmem_event *ev;
    int ret;

    *event = NULL;
    if ((ret = check_ordinal("simulated event_create", ordinal)) != 0)
        return ret;
    ev = calloc(1, sizeof(*ev));
    if (ev == NULL)
        return libferry.error(FERRY_ENOMEM,
                              "simulated event_create: out of memory");
    ev->ordinal = ordinal;
    atomic_init(&ev->recorded, 0);
    atomic_init(&ev->done, 0);
    atomic_init(&ev->refs, 1);
    pthread_mutex_init(&ev->lock, NULL);
    *event = ev;
    return 0;
}

static void sim_event_destroy(struct ferry__hmem_event *event)
{
    if (event != NULL)
        event_unref(event); /* queued records keep it until they complete */
}

/* The worker completes record gen of ev, with the stream's error or 0. */
static void event_complete(struct ferry__hmem_event *ev, uint64_t gen,
                           int err, const char *msg)
{
    uint64_t cur;

    pthread_mutex_lock(&ev->lock);
    if (gen >= ev->err_gen) {
        ev->err_gen = gen;
        ev->err = err;
        if (err != 0)
            snprintf(ev->msg, sizeof(ev->msg), "%s", msg);
    }
    pthread_mutex_unlock(&ev->lock);

    /* Raise done to gen, never lower it (a record on another stream may
     * have completed a later generation).  Release: a reader that sees
     * done >= gen sees the bytes this copy and the earlier ones wrote (and
     * the error, though that is under ev->lock anyway).  Relaxed on
     * failure: the reloaded value is only compared. */
    cur = atomic_load_explicit(&ev->done, memory_order_relaxed);
    while (cur < gen &&
           !atomic_compare_exchange_weak_explicit(&ev->done, &cur, gen,
                                                  memory_order_release,
                                                  memory_order_relaxed))
        ;
}

static int sim_event_done(struct ferry__hmem_event *event)
{
    uint64_t recorded, done;
    int err;
    char msg[256];

    if (event == NULL)
        return libferry.error(FERRY_EINVAL, "simulated event_done: event is "
                                            "NULL");
    /* Acquire: pairs with copy_async's release, for a caller that queries
     * an event another thread recorded. */
    recorded = atomic_load_explicit(&event->recorded, memory_order_acquire);
    /* Acquire: pairs with event_complete's release, so the copied bytes
     * are visible to the caller once it sees the record done. */
    done = atomic_load_explicit(&event->done, memory_order_acquire);
    if (done < recorded)
        return 0;
    pthread_mutex_lock(&event->lock);
    err = event->err;
    if (err != 0)
        snprintf(msg, sizeof(msg), "%s", event->msg);
    pthread_mutex_unlock(&event->lock);
    if (err != 0)
        return libferry.error(err, "%s", msg);
    return 1;
}

/* ---- streams ------------------------------------------------------------- */

static void *stream_worker(void *arg)
{
    struct ferry__hmem_stream *st = arg;
    struct sim_op *op;

    for (;;) {
        pthread_mutex_lock(&st->lock);
        while (st->head == NULL && !st->stopping)
            pthread_cond_wait(&st->work, &st->lock);
        op = st->head;
        if (op == NULL) { /* stopping, and the queue is drained */
            pthread_mutex_unlock(&st->lock);
            return NULL;
        }
        st->head = op->next;
        if (st->head == NULL)
            st->tail = NULL;
        pthread_mutex_unlock(&st->lock);

        if (st->err == 0)
            st->err = engine_copy(&op->dst, &op->src, op->len, st->msg,
                                  sizeof(st->msg));
        if (op->event != NULL) {
            event_complete(op->event, op->gen, st->err, st->msg);
            event_unref(op->event);
        }
        free(op);
    }
}

static int sim_stream_create(int ordinal, struct ferry__hmem_stream **stream)
{
    struct ferry__hmem_stream *st;
    int ret;

    *stream = NULL;
    if ((ret = check_ordinal("simulated stream_create", ordinal)) != 0)
        return ret;
    st = calloc(1, sizeof(*st));
    if (st == NULL)
        return libferry.error(FERRY_ENOMEM,
                              "simulated stream_create: out of memory");
    st->ordinal = ordinal;
    pthread_mutex_init(&st->lock, NULL);
    pthread_cond_init(&st->work, NULL);
    ret = pthread_create(&st->thread, NULL, stream_worker, st);
    if (ret != 0) {
        pthread_cond_destroy(&st->work);
        pthread_mutex_destroy(&st->lock);
        free(st);
        return libferry.error(FERRY_ENOMEM,
                              "simulated stream_create: starting the copy "
                              "engine thread failed: %s",
                              strerror(ret));
    }
    *stream = st;
    return 0;
}

static void sim_stream_destroy(struct ferry__hmem_stream *stream)
{
    if (stream == NULL)
        return;
    pthread_mutex_lock(&stream->lock);
    stream->stopping = true;
    pthread_cond_signal(&stream->work);
    pthread_mutex_unlock(&stream->lock);
    pthread_join(stream->thread, NULL); /* it finishes its queue first */
    pthread_cond_destroy(&stream->work);
    pthread_mutex_destroy(&stream->lock);
    free(stream);
}

static int sim_copy_async(struct ferry__hmem_stream *stream, void *dst,
                          const void *src, size_t len,
                          struct ferry__hmem_event *event)
{
    static const char call[] = "simulated copy_async";
    struct sim_op *op;
    int ret = 0;

    if (stream == NULL)
        return libferry.error(FERRY_EINVAL, "%s: stream is NULL", call);
    op = calloc(1, sizeof(*op));
    if (op == NULL)
        return libferry.error(FERRY_ENOMEM, "%s: out of memory", call);
    op->len = len;
    if (len > 0) {
        pthread_mutex_lock(&sim_lock);
        ret = locate(call, "dst", dst, len, &op->dst);
        if (ret == 0)
            ret = locate(call, "src", src, len, &op->src);
        pthread_mutex_unlock(&sim_lock);
        if (ret != 0) {
            free(op);
            return ret;
        }
    }
    if (event != NULL) {
        /* Relaxed: the caller holds a reference already. */
        atomic_fetch_add_explicit(&event->refs, 1, memory_order_relaxed);
        op->event = event;
        /* Release: pairs with event_done's acquire (see there). */
        op->gen = atomic_fetch_add_explicit(&event->recorded, 1,
                                            memory_order_release) + 1;
    }
    pthread_mutex_lock(&stream->lock);
    if (stream->tail != NULL)
        stream->tail->next = op;
    else
        stream->head = op;
    stream->tail = op;
    pthread_cond_signal(&stream->work);
    pthread_mutex_unlock(&stream->lock);
    return 0;
}

static int sim_copy(void *dst, const void *src, size_t len)
{
    static const char call[] = "simulated copy";
    struct sim_side d, s;
    char msg[256];
    int ret;

    if (len == 0)
        return 0;
    pthread_mutex_lock(&sim_lock);
    ret = locate(call, "dst", dst, len, &d);
    if (ret == 0)
        ret = locate(call, "src", src, len, &s);
    pthread_mutex_unlock(&sim_lock);
    if (ret != 0)
        return ret;
    ret = engine_copy(&d, &s, len, msg, sizeof(msg));
    if (ret != 0) /* freed by another thread meanwhile */
        return libferry.error(ret, "%s", msg);
    return 0;
}

/* ---- the table ----------------------------------------------------------- */

static const struct ferry__hmem_ops sim_ops = {
    .name = "simulated",
    .simulated = true,
    .device_count = sim_device_count,
    .ptr_info = sim_ptr_info,
    .pci_bus_id = sim_pci_bus_id,
    .dmabuf_fd = sim_dmabuf_fd,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .dev_alloc = sim_dev_alloc,
    .dev_free = sim_dev_free,
    .stream_create = sim_stream_create,
    .stream_destroy = sim_stream_destroy,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .copy_async = sim_copy_async,
    .event_done = sim_event_done,
    .copy = sim_copy,
    .flush_rdma_writes = sim_flush_rdma_writes,
};

/* Loading again (tests) changes the number of devices; buffers stay. */
FERRY__SIM_EXPORT const struct ferry__hmem_ops *
ferry_sim_load(const struct ferry__sim_host *host, int ndevices, char *why,
               size_t len)
{
    libferry = *host;
    if (ndevices < 1 || ndevices > SIM_MAX_DEVICES) {
        snprintf(why, len,
                 "simulated device: %d devices asked for; it simulates 1 to "
                 "%d",
                 ndevices, SIM_MAX_DEVICES);
        return NULL;
    }
    /* Relaxed: hmem.c publishes the table through pthread_once. */
    atomic_store_explicit(&sim_ndevices, ndevices, memory_order_relaxed);
    snprintf(why, len,
             "simulated device: %d device%s (FERRY_SIM_DEVICES), for tests; "
             "their memory is not CPU-accessible",
             ndevices, ndevices == 1 ? "" : "s");
    return &sim_ops;
}

uint64_t ferry__hmem_sim_copies(void)
{
    /* Relaxed: a statistic (see engine_copy). */
    return atomic_load_explicit(&copies_done, memory_order_relaxed);
}
