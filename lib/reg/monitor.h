/*
 * Invalidation sources of the registration cache: the userfaultfd monitor
 * thread, and fork.  The monitor knows nothing of the cache: it hands
 * what it learns to the sink it was started with.
 */
#ifndef FERRY_REG_MONITOR_H
#define FERRY_REG_MONITOR_H

#include "base/ferry-internal.h"

/*
 * Where the monitor sends what it learns: [addr, +len) is no longer what
 * was registered.  Called from the monitor thread, so it must keep the
 * rules of ferry_mem_invalidate (I1), which is what the cache gives.
 */
typedef void (*ferry__invalidate_fn)(const void *addr, size_t len);

/*
 * Starts the userfaultfd monitor once per process, sending its events to
 * sink (the first caller's).  Returns true if it runs; if userfaultfd is
 * unavailable it logs once why, and the caches rely on explicit
 * ferry_mem_invalidate calls.
 */
bool ferry__monitor_start(ferry__invalidate_fn sink);
/* Whether it runs (started, and userfaultfd worked). */
bool ferry__monitor_running(void);
/* Why the monitor does not run ("" when it does). */
const char *ferry__monitor_status(void);
/*
 * Asks for unmap/remove/remap events of the page-aligned range.  False
 * when userfaultfd refuses it (file-backed memory, another monitor): such
 * ranges are not cached.
 */
bool ferry__monitor_watch(uintptr_t start, uintptr_t end);
/*
 * Odd while the monitor is handling events.  munmap() returns only after
 * the monitor has read its event, and the monitor makes this odd before
 * that read and even after marking the entries dead, so a lookup that
 * sees an even value before it starts cannot return a registration of
 * memory unmapped before it started.  Odd for ever in a forked child.
 */
extern _Atomic uint64_t ferry__monitor_seq_; /* monitor.c; read this: */
static inline uint64_t ferry__monitor_seq(void)
{
    /* Acquire: pairs with the monitor's release after marking entries. */
    return atomic_load_explicit(&ferry__monitor_seq_, memory_order_acquire);
}
/* True in a child after fork(): caches stay off there. */
bool ferry__in_forked_child(void);

#endif /* FERRY_REG_MONITOR_H */
