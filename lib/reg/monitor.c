/*
 * Invalidation sources: the userfaultfd monitor thread, and fork.
 *
 * The monitor registers each cached range with one process-wide
 * userfaultfd (with unmap, remove and remap events).  The kernel holds a
 * thread in munmap(), madvise(MADV_DONTNEED), mremap() or a shrinking
 * brk() until the monitor has read its event; the monitor then calls its
 * sink (the cache's ferry_mem_invalidate), which is lock-free, so nothing
 * the unmapping thread holds can stall it (I2).
 *
 * Ranges are registered in write-protect mode where the kernel has it
 * (Linux 5.7 on for private memory): nothing is ever write-protected, so
 * no page fault ever waits for the monitor, and the events come all the
 * same.  Otherwise (older kernels; shared memory before 6.1) they are
 * registered in missing-page mode, and missing-page faults in watched
 * ranges (after MADV_DONTNEED, say) are answered with the zero page,
 * which is what the kernel would have mapped: then a thread that touches
 * such a page waits for the monitor, and hangs if the monitor cannot run
 * (stopped by LeakSanitizer at exit, or by a debugger).
 *
 * The monitor never allocates, never takes a lock, and never touches
 * memory a watched range could cover: it waits only in poll().
 */
#include "reg/monitor.h"

#include "base/thread.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_once_t start_once = PTHREAD_ONCE_INIT;
static int uffd = -1;
/* Fix: was always UFFDIO_REGISTER_MODE_MISSING, which put the monitor in
 * the page-fault path of every watched page (see above); set in start(). */
static uint64_t watch_mode = UFFDIO_REGISTER_MODE_MISSING;
static bool running;
static char status[160] = "not started";
/* Odd while events are being handled, and for ever in a forked child;
 * read by ferry__monitor_seq (rcache.h). */
_Atomic uint64_t ferry__monitor_seq_;
static atomic_bool forked_child;  /* set in a child by pthread_atfork */
/* Where events go.  Relaxed: stored before the thread is created, which
 * orders it before every load the thread makes. */
static _Atomic(ferry__invalidate_fn) sink;

bool ferry__in_forked_child(void)
{
    return atomic_load_explicit(&forked_child, memory_order_relaxed);
}

const char *ferry__monitor_status(void)
{
    return status;
}

static void zero_page(uintptr_t addr)
{
    long page = sysconf(_SC_PAGESIZE);
    struct uffdio_zeropage zp = {
        .range = {.start = addr & ~((uintptr_t)page - 1),
                  .len = (uintptr_t)page},
    };

    /* EEXIST: another fault mapped it first.  Nothing else to do: the
     * faulting thread retries once woken. */
    if (ioctl(uffd, UFFDIO_ZEROPAGE, &zp) != 0 && errno != EEXIST) {
        struct uffdio_range wake = zp.range;
        ioctl(uffd, UFFDIO_WAKE, &wake);
    }
}

/* Write-protect mode protects nothing, but should a fault come, it goes. */
static void unprotect(uintptr_t addr)
{
    long page = sysconf(_SC_PAGESIZE);
    struct uffdio_writeprotect wp = {
        .range = {.start = addr & ~((uintptr_t)page - 1),
                  .len = (uintptr_t)page},
        .mode = 0,
    };

    ioctl(uffd, UFFDIO_WRITEPROTECT, &wp);
}

static void invalidate(uintptr_t start, uintptr_t len)
{
    ferry__invalidate_fn fn = atomic_load_explicit(&sink, memory_order_relaxed);

    fn((const void *)start, (size_t)len);
}

static void handle(const struct uffd_msg *m)
{
    switch (m->event) {
    case UFFD_EVENT_PAGEFAULT:
        if (m->arg.pagefault.flags & UFFD_PAGEFAULT_FLAG_WP)
            unprotect((uintptr_t)m->arg.pagefault.address);
        else
            zero_page((uintptr_t)m->arg.pagefault.address);
        break;
    case UFFD_EVENT_UNMAP:
        invalidate(m->arg.remove.start,
                   m->arg.remove.end - m->arg.remove.start);
        break;
    case UFFD_EVENT_REMOVE:
        invalidate(m->arg.remove.start,
                   m->arg.remove.end - m->arg.remove.start);
        break;
    case UFFD_EVENT_REMAP:
        invalidate(m->arg.remap.from, m->arg.remap.len);
        break;
    default:
        break;
    }
}

static void *monitor_main(void *arg)
{
    struct uffd_msg msgs[16];
    struct pollfd pfd = {.fd = uffd, .events = POLLIN};

    (void)arg;
    for (;;) {
        ssize_t n;

        if (poll(&pfd, 1, -1) < 0) {
            if (errno == EINTR)
                continue;
            break;
        }
        /* Odd before the read that releases the unmapping thread, even
         * after every entry is marked: see ferry__monitor_seq.  seq_cst
         * orders the increment before the read. */
        atomic_fetch_add(&ferry__monitor_seq_, 1);
        n = read(uffd, msgs, sizeof(msgs));
        for (ssize_t i = 0; n > 0 && i < n / (ssize_t)sizeof(msgs[0]); i++)
            handle(&msgs[i]);
        atomic_fetch_add_explicit(&ferry__monitor_seq_, 1,
                                  memory_order_release);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            break;
    }
    snprintf(status, sizeof(status), "the userfaultfd monitor stopped: %s",
             strerror(errno));
    return NULL;
}

static void in_child(void)
{
    /* The child has no monitor thread and its copies of the parent's
     * registrations are not its own: caches stay off (rcache.c). */
    atomic_store(&forked_child, true);
    /* Odd: lookups go the slow way, which sees forked_child (perf: the
     * hit path then reads one variable instead of two). */
    atomic_fetch_or(&ferry__monitor_seq_, 1);
}

static void start(void)
{
    struct uffdio_api api = {
        .api = UFFD_API,
        .features = UFFD_FEATURE_EVENT_UNMAP | UFFD_FEATURE_EVENT_REMOVE |
                    UFFD_FEATURE_EVENT_REMAP,
    };

    pthread_atfork(NULL, NULL, in_child);
    if (getenv("FERRY_NO_USERFAULTFD") != NULL) {
        snprintf(status, sizeof(status),
                 "userfaultfd disabled by FERRY_NO_USERFAULTFD");
    } else if ((uffd = (int)syscall(SYS_userfaultfd,
                                    O_CLOEXEC | O_NONBLOCK)) < 0) {
        snprintf(status, sizeof(status),
                 "userfaultfd unavailable (%s; /proc/sys/vm/"
                 "unprivileged_userfaultfd or a seccomp filter may forbid "
                 "it)",
                 strerror(errno));
    } else if (ioctl(uffd, UFFDIO_API, &api) != 0) {
        snprintf(status, sizeof(status),
                 "userfaultfd lacks unmap/remove/remap events (%s)",
                 strerror(errno));
    } else {
        /* UFFDIO_API reports every feature the kernel has. */
        if (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP)
            watch_mode = UFFDIO_REGISTER_MODE_WP;
        running = ferry__thread_start(monitor_main, NULL);
        snprintf(status, sizeof(status), "%s",
                 running ? "" : "cannot start the userfaultfd thread");
    }
    if (!running) {
        if (uffd >= 0)
            close(uffd);
        uffd = -1;
        FERRY_LOG_WARN("registration cache: %s; cached registrations are "
                       "invalidated only by ferry_mem_invalidate() calls",
                       status);
    }
}

bool ferry__monitor_start(ferry__invalidate_fn to)
{
    ferry__invalidate_fn none = NULL;

    /* The first caller's sink; a thread that starts it waits in
     * pthread_once for the store that made it. */
    atomic_compare_exchange_strong_explicit(&sink, &none, to,
                                            memory_order_relaxed,
                                            memory_order_relaxed);
    pthread_once(&start_once, start);
    return running;
}

bool ferry__monitor_running(void)
{
    /* Only a started monitor has a sink; asking does not start one. */
    if (atomic_load_explicit(&sink, memory_order_relaxed) == NULL)
        return false;
    pthread_once(&start_once, start);
    return running;
}

bool ferry__monitor_watch(uintptr_t begin, uintptr_t end)
{
    struct uffdio_register reg = {
        .range = {.start = begin, .len = end - begin},
        .mode = watch_mode,
    };

    if (!ferry__monitor_running())
        return true; /* explicit invalidation only, as logged once */
    /* EBUSY: another userfaultfd watches it; EINVAL: not anonymous or
     * shared memory.  Either way no events would come: do not cache. */
    if (ioctl(uffd, UFFDIO_REGISTER, &reg) == 0)
        return true;
    if (watch_mode != UFFDIO_REGISTER_MODE_WP || errno != EINVAL)
        return false;
    /* Shared memory on kernels without write-protect for it. */
    reg = (struct uffdio_register){
        .range = {.start = begin, .len = end - begin},
        .mode = UFFDIO_REGISTER_MODE_MISSING,
    };
    return ioctl(uffd, UFFDIO_REGISTER, &reg) == 0;
}
