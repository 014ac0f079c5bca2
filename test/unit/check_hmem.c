/*
 * hmem module, simulated device backend (lib/hmem_sim.c): devices and
 * their PCI addresses, allocations, pointer queries and buffer ids, memory
 * the CPU cannot touch (a forked child reading it must die of SIGSEGV),
 * asynchronous copies in order on the engine's threads (held in the queue
 * with userfaultfd where the kernel allows it, to prove they are
 * asynchronous), blocking copies, the errors, and the public
 * ferry_device_* helpers over the simulated backend.  (How the backend is
 * chosen, through the API alone: test/api/check_hmem.c.)
 */
#include "testutil.h"

#include "dev/hmem.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NDEV 2 /* what every test but test_load leaves loaded */

/* ---- helpers ------------------------------------------------------------ */

/* What libferry hands the module (lib/dev/hmem.c does the same). */
static const struct ferry__sim_host libferry = {
    .error = ferry__error,
    .log = ferry__log,
};

static const struct ferry__hmem_ops *sim_load(int n, char *why, size_t len)
{
    return ferry_sim_load(&libferry, n, why, len);
}

static const struct ferry__hmem_ops *sim(void)
{
    char why[256];
    const struct ferry__hmem_ops *ops;

    ops = sim_load(NDEV, why, sizeof(why));
    ck_assert_msg(ops != NULL, "loading the simulated device: %s", why);
    return ops;
}

static void assert_error(int ret, int want, const char *words)
{
    ck_assert_msg(ret == want, "returned %d (%s), expected %d (%s); %s", ret,
                  ferry_strerror(ret), want, ferry_strerror(want),
                  ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), words) != NULL,
                  "the error \"%s\" does not say \"%s\"", ferry_last_error(),
                  words);
}

static void *dev_alloc(const struct ferry__hmem_ops *ops, int ordinal,
                       size_t len)
{
    void *p = NULL;
    int ret = ops->dev_alloc(ordinal, len, &p);

    ck_assert_msg(ret == 0, "dev_alloc(%d, %zu): %s", ordinal, len,
                  ferry_last_error());
    ck_assert_ptr_nonnull(p);
    return p;
}

static void dev_free(const struct ferry__hmem_ops *ops, void *p)
{
    int ret = ops->dev_free(p);

    ck_assert_msg(ret == 0, "dev_free(%p): %s", p, ferry_last_error());
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void pause_us(long us)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = us * 1000};

    nanosleep(&ts, NULL);
}

/* Polls until the event is done (1), or its error; fails after 60 s. */
static int wait_event(const struct ferry__hmem_ops *ops,
                      struct ferry__hmem_event *ev)
{
    double end = now_s() + 60;
    int ret;

    while ((ret = ops->event_done(ev)) == 0) {
        ck_assert_msg(now_s() < end, "an event was not done after 60 s");
        pause_us(100);
    }
    return ret;
}

static void wait_event_ok(const struct ferry__hmem_ops *ops,
                          struct ferry__hmem_event *ev)
{
    int ret = wait_event(ops, ev);

    ck_assert_msg(ret == 1, "event_done: %d (%s)", ret, ferry_last_error());
}

/*
 * A host buffer whose first read stalls in a page fault until the test
 * releases it (userfaultfd, missing mode), so a copy from it holds the
 * engine's queue as long as the test wants.  stall_open returns false
 * where the kernel or the privileges do not allow it; the checks that
 * cannot do without it are then left out (hmem_suite).
 */
struct stall {
    int uffd;
    uint8_t *buf;
    size_t len;
    uint64_t seed; /* what the buffer holds once released */
};

/* A userfaultfd, or -1 with errno set. */
static int uffd_open(void)
{
    int fd = -1;

#ifdef UFFD_USER_MODE_ONLY
    fd = (int)syscall(SYS_userfaultfd,
                      O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY);
    if (fd < 0)
#endif
        fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    return fd;
}

/* Whether the checks that must hold the engine can (see hmem_suite). */
static bool stall_possible(void)
{
    int fd = uffd_open();

    if (fd < 0) {
        fprintf(stderr, "check_hmem: no userfaultfd (%s): the checks that "
                        "hold a copy in the engine's queue are left out\n",
                strerror(errno));
        return false;
    }
    close(fd);
    return true;
}

static bool stall_open(struct stall *st, size_t len, uint64_t seed)
{
    struct uffdio_api api = {.api = UFFD_API};
    struct uffdio_register reg;

    memset(st, 0, sizeof(*st));
    st->len = len;
    st->seed = seed;
    if ((st->uffd = uffd_open()) < 0)
        return false;
    ck_assert_msg(ioctl(st->uffd, UFFDIO_API, &api) == 0, "UFFDIO_API: %s",
                  strerror(errno));
    st->buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(st->buf != MAP_FAILED);
    reg.range.start = (uintptr_t)st->buf;
    reg.range.len = len;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    ck_assert_msg(ioctl(st->uffd, UFFDIO_REGISTER, &reg) == 0,
                  "UFFDIO_REGISTER: %s", strerror(errno));
    return true;
}

/* Waits (10 s at most) for the engine to fault on the buffer. */
static void stall_wait_fault(struct stall *st)
{
    struct pollfd pfd = {.fd = st->uffd, .events = POLLIN};
    struct uffd_msg msg;

    ck_assert_msg(poll(&pfd, 1, 10000) == 1,
                  "the copy engine never read the source buffer");
    ck_assert_int_eq(read(st->uffd, &msg, sizeof(msg)), (ssize_t)sizeof(msg));
    ck_assert_int_eq(msg.event, UFFD_EVENT_PAGEFAULT);
    ck_assert_msg(msg.arg.pagefault.address >= (uintptr_t)st->buf &&
                      msg.arg.pagefault.address < (uintptr_t)st->buf + st->len,
                  "a fault outside the stalled buffer");
}

/* Fills the whole buffer with its pattern and wakes the engine. */
static void stall_release(struct stall *st)
{
    uint8_t *src = tu_alloc_buf(st->len);
    struct uffdio_copy copy = {.dst = (uintptr_t)st->buf,
                               .src = (uintptr_t)src,
                               .len = st->len};

    tu_fill(src, st->len, st->seed);
    ck_assert_msg(ioctl(st->uffd, UFFDIO_COPY, &copy) == 0, "UFFDIO_COPY: %s",
                  strerror(errno));
    tu_free_buf(src, st->len);
}

static void stall_close(struct stall *st)
{
    if (st->buf != NULL)
        munmap(st->buf, st->len);
    if (st->uffd >= 0)
        close(st->uffd);
}

/* ---- devices ------------------------------------------------------------ */

START_TEST(test_load)
{
    static const int counts[] = {1, 3, 8, 16};
    const struct ferry__hmem_ops *ops;
    char why[256], pci[16][32], buf[8];
    int count;

    for (size_t c = 0; c < TU_ARRAY_LEN(counts); c++) {
        int n = counts[c];

        ops = sim_load(n, why, sizeof(why));
        ck_assert_msg(ops != NULL, "%d devices: %s", n, why);
        ck_assert_str_eq(ops->name, "simulated");
        ck_assert_msg(strstr(why, "simulated device") != NULL &&
                          strstr(why, "not CPU-accessible") != NULL,
                      "why: %s", why);
        count = -1;
        ck_assert_int_eq(ops->device_count(&count), 0);
        ck_assert_int_eq(count, n);
        for (int d = 0; d < n; d++) {
            unsigned dom, bus, dev, fn;
            char end;

            ck_assert_int_eq(ops->pci_bus_id(d, pci[d], sizeof(pci[d])), 0);
            ck_assert_msg(sscanf(pci[d], "%4x:%2x:%2x.%1x%c", &dom, &bus,
                                 &dev, &fn, &end) == 4 &&
                              strlen(pci[d]) == 12,
                          "\"%s\" is not a PCI address", pci[d]);
            for (int e = 0; e < d; e++)
                ck_assert_msg(strcmp(pci[d], pci[e]) != 0,
                              "devices %d and %d share %s", e, d, pci[d]);
        }
        assert_error(ops->pci_bus_id(n, pci[0], sizeof(pci[0])),
                     FERRY_EINVAL, "does not exist");
        assert_error(ops->pci_bus_id(-1, pci[0], sizeof(pci[0])),
                     FERRY_EINVAL, "does not exist");
    }
    /* Deterministic: device 0 is on bus 0x10. */
    ck_assert_int_eq(ops->pci_bus_id(0, pci[0], sizeof(pci[0])), 0);
    ck_assert_str_eq(pci[0], "0000:10:00.0");
    assert_error(ops->pci_bus_id(0, buf, sizeof(buf)), FERRY_ENOSPC, "bytes");

    ck_assert_ptr_null(sim_load(0, why, sizeof(why)));
    ck_assert_msg(strstr(why, "0 devices") != NULL, "why: %s", why);
    ck_assert_ptr_null(sim_load(17, why, sizeof(why)));
    ck_assert_msg(strstr(why, "17 devices") != NULL, "why: %s", why);
    ops = sim(); /* back to NDEV for the other tests */
    ck_assert_int_eq(ops->device_count(&count), 0);
    ck_assert_int_eq(count, NDEV);
}
END_TEST

START_TEST(test_dmabuf_and_flush)
{
    const struct ferry__hmem_ops *ops = sim();
    void *p = dev_alloc(ops, 0, 4096);
    uint64_t off = 7;
    int fd = 7;

    ck_assert_ptr_nonnull(ops->dmabuf_fd);
    assert_error(ops->dmabuf_fd(p, 4096, &fd, &off), FERRY_ENOTSUP,
                 "exports no dmabuf");
    ck_assert_int_eq(fd, -1);
    if (ops->flush_rdma_writes != NULL)
        ops->flush_rdma_writes(0);
    dev_free(ops, p);
}
END_TEST

/* ---- allocations -------------------------------------------------------- */

START_TEST(test_alloc_free_info)
{
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_ptr info;
    size_t len = 10000;
    uint8_t *p = dev_alloc(ops, 1, len);
    int on_stack = 0;
    void *heap = malloc(64);

    ck_assert_uint_eq((uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
    ck_assert_int_eq(ops->ptr_info(p, &info), 0);
    ck_assert(info.device);
    ck_assert_int_eq(info.ordinal, 1);
    ck_assert_uint_ne(info.buffer_id, 0);
    ck_assert_uint_eq(info.base, (uintptr_t)p);
    ck_assert_uint_eq(info.size, len);
    for (size_t off = 1; off < len; off += 4999) {
        struct ferry__hmem_ptr inner;

        ck_assert_int_eq(ops->ptr_info(p + off, &inner), 0);
        ck_assert(inner.device);
        ck_assert_int_eq(inner.ordinal, 1);
        ck_assert_uint_eq(inner.buffer_id, info.buffer_id);
        ck_assert_uint_eq(inner.base, (uintptr_t)p);
        ck_assert_uint_eq(inner.size, len);
    }
    /* One past the end (in the page padding) is not the allocation. */
    ck_assert_int_eq(ops->ptr_info(p + len, &info), 0);
    ck_assert(!info.device);

    /* Host memory is no error. */
    ck_assert_int_eq(ops->ptr_info(&on_stack, &info), 0);
    ck_assert(!info.device);
    ck_assert_int_eq(ops->ptr_info(heap, &info), 0);
    ck_assert(!info.device);
    ck_assert_int_eq(ops->ptr_info(NULL, &info), 0);
    ck_assert(!info.device);

    assert_error(ops->dev_free(p + 1), FERRY_EINVAL, "inside device buffer");
    dev_free(ops, p);
    ck_assert_int_eq(ops->ptr_info(p, &info), 0);
    ck_assert(!info.device);
    assert_error(ops->dev_free(p), FERRY_EINVAL,
                 "is not a simulated device allocation");
    assert_error(ops->dev_free(heap), FERRY_EINVAL,
                 "is not a simulated device allocation");

    assert_error(ops->dev_alloc(NDEV, 4096, (void **)&p), FERRY_EINVAL,
                 "does not exist");
    assert_error(ops->dev_alloc(-1, 4096, (void **)&p), FERRY_EINVAL,
                 "does not exist");
    assert_error(ops->dev_alloc(0, 0, (void **)&p), FERRY_EINVAL,
                 "length is 0");
    free(heap);
}
END_TEST

START_TEST(test_buffer_ids)
{
    const struct ferry__hmem_ops *ops = sim();
    enum { N = 64 };
    void *p[N];
    uint64_t ids[N];
    struct ferry__hmem_ptr info;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    for (int i = 0; i < N; i++) {
        p[i] = dev_alloc(ops, i % NDEV, 1 + (size_t)i * 1000);
        ck_assert_int_eq(ops->ptr_info(p[i], &info), 0);
        ids[i] = info.buffer_id;
        for (int j = 0; j < i; j++)
            ck_assert_msg(ids[i] != ids[j], "buffers %d and %d share id %llu",
                          j, i, (unsigned long long)ids[i]);
    }

    /* Freed, then reallocated at the very same address: a new id. */
    for (int round = 0; round < 3; round++) {
        void *addr = p[5];

        dev_free(ops, addr); /* 5001 bytes: as many pages again fit */
        ck_assert_int_eq(ferry__hmem_sim_alloc_at(1, addr, 5001), 0);
        ck_assert_int_eq(ops->ptr_info(addr, &info), 0);
        ck_assert(info.device);
        ck_assert_uint_eq(info.base, (uintptr_t)addr);
        ck_assert_uint_eq(info.size, 5001);
        ck_assert_int_eq(info.ordinal, 1);
        for (int j = 0; j < N; j++)
            ck_assert_msg(info.buffer_id != ids[j],
                          "the buffer reallocated at %p reuses id %llu",
                          addr, (unsigned long long)ids[j]);
        ids[5] = info.buffer_id;
    }
    /* Taken, by a device buffer or by anything else. */
    assert_error(ferry__hmem_sim_alloc_at(0, p[5], page), FERRY_EBUSY,
                 "already mapped");
    {
        void *host = tu_alloc_buf(page);

        assert_error(ferry__hmem_sim_alloc_at(0, host, page), FERRY_EBUSY,
                     "already mapped");
        tu_free_buf(host, page);
    }
    assert_error(ferry__hmem_sim_alloc_at(0, (uint8_t *)p[5] + 1, page),
                 FERRY_EINVAL, "not page-aligned");
    assert_error(ferry__hmem_sim_alloc_at(NDEV, p[5], page), FERRY_EINVAL,
                 "does not exist");
    for (int i = 0; i < N; i++)
        dev_free(ops, p[i]);
}
END_TEST

/* Reads (_i == 0) or writes (_i == 1) device memory in a child, which must
 * die of SIGSEGV; the engine reaches the same bytes. */
START_TEST(test_cpu_access_crashes)
{
    const struct ferry__hmem_ops *ops = sim();
    uint8_t *p = dev_alloc(ops, 0, 4096);
    uint8_t byte = 0x5a, back = 0;
    int status;
    pid_t pid;

    ck_assert_int_eq(ops->copy(p + 100, &byte, 1), 0);
    ck_assert_int_eq(ops->copy(&back, p + 100, 1), 0);
    ck_assert_int_eq(back, 0x5a);

    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        struct sigaction sa;

        /* The default action, not a sanitizer's report and exit. */
        memset(&sa, 0, sizeof(sa));
        sa.sa_handler = SIG_DFL;
        sigaction(SIGSEGV, &sa, NULL);
        sigaction(SIGBUS, &sa, NULL);
        if (_i == 0)
            back = *(volatile uint8_t *)(p + 100);
        else
            *(volatile uint8_t *)(p + 100) = 1;
        _exit(back == 0x5a ? 3 : 4); /* it must not get here */
    }
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV,
                  "a CPU %s of device memory did not crash (status %#x)",
                  _i == 0 ? "read" : "write", status);
    dev_free(ops, p);
}
END_TEST

START_TEST(test_host_alloc)
{
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_ptr info;
    uint8_t *h = NULL;

    ck_assert_int_eq(ops->host_alloc(10000, (void **)&h), 0);
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq((uintptr_t)h % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
    tu_fill(h, 10000, 9); /* the CPU may touch it */
    ck_assert_uint_eq(tu_check(h, 10000, 9), SIZE_MAX);
    ck_assert_int_eq(ops->ptr_info(h, &info), 0);
    ck_assert(!info.device);
    ops->host_free(h);
    ops->host_free(NULL);
    assert_error(ops->host_alloc(0, (void **)&h), FERRY_EINVAL, "length is 0");
}
END_TEST

/* ---- copies ------------------------------------------------------------- */

static const size_t copy_sizes[] = {1,         2,        3,       7,
                                    4095,      4096,     4097,    65537,
                                    MiB + 3,   7 * MiB + 11,      64 * MiB};

/* Host -> device -> host at odd offsets, byte-exact, neighbours untouched. */
START_TEST(test_async_roundtrip)
{
    const struct ferry__hmem_ops *ops = sim();
    size_t len = copy_sizes[_i];
    size_t doff = 3, hoff = 5, total = len + 16;
    uint8_t *dev = dev_alloc(ops, _i % NDEV, total);
    uint8_t *src = tu_alloc_buf(total), *dst = tu_alloc_buf(total);
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *up, *down;
    uint64_t before = ferry__hmem_sim_copies();

    tu_fill(src + hoff, len, 100 + _i);
    memset(dst, 0xee, total);
    ck_assert_int_eq(ops->stream_create(_i % NDEV, &st), 0);
    ck_assert_int_eq(ops->event_create(_i % NDEV, &up), 0);
    ck_assert_int_eq(ops->event_create(_i % NDEV, &down), 0);
    ck_assert_int_eq(ops->event_done(up), 1); /* never recorded */

    ck_assert_int_eq(ops->copy_async(st, dev + doff, src + hoff, len, up), 0);
    ck_assert_int_eq(ops->copy_async(st, dst + hoff, dev + doff, len, down),
                     0);
    wait_event_ok(ops, down);
    ck_assert_int_eq(ops->event_done(up), 1); /* in order */
    ck_assert_uint_ge(ferry__hmem_sim_copies(), before + 2);
    {
        size_t bad = tu_check(dst + hoff, len, 100 + _i);

        ck_assert_msg(bad == SIZE_MAX, "%zu bytes: byte %zu differs", len,
                      bad);
    }
    for (size_t i = 0; i < hoff; i++)
        ck_assert_uint_eq(dst[i], 0xee);
    for (size_t i = hoff + len; i < total; i++)
        ck_assert_uint_eq(dst[i], 0xee);

    /* The device bytes around the copy are still zero. */
    ck_assert_int_eq(ops->copy_async(st, dst, dev, total, down), 0);
    wait_event_ok(ops, down);
    for (size_t i = 0; i < doff; i++)
        ck_assert_uint_eq(dst[i], 0);
    for (size_t i = doff + len; i < total; i++)
        ck_assert_uint_eq(dst[i], 0);

    ops->event_destroy(up);
    ops->event_destroy(down);
    ops->stream_destroy(st);
    dev_free(ops, dev);
    tu_free_buf(src, total);
    tu_free_buf(dst, total);
}
END_TEST

/* Many copies in flight on two streams: events complete in queue order
 * per stream, and the engine's count grows by one per copy. */
START_TEST(test_events_in_order)
{
    enum { N = 24, CHUNK = 2 * MiB };
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_stream *st[2];
    struct ferry__hmem_event *ev[2][N];
    uint8_t *dev[2], *host = tu_alloc_buf((size_t)N * CHUNK);
    uint8_t *back = tu_alloc_buf((size_t)N * CHUNK);
    uint64_t before = ferry__hmem_sim_copies();
    double end = now_s() + 60;
    bool all = false;

    tu_fill(host, (size_t)N * CHUNK, 77);
    for (int s = 0; s < 2; s++) {
        dev[s] = dev_alloc(ops, s, (size_t)N * CHUNK);
        ck_assert_int_eq(ops->stream_create(s, &st[s]), 0);
        for (int i = 0; i < N; i++)
            ck_assert_int_eq(ops->event_create(s, &ev[s][i]), 0);
    }
    for (int i = 0; i < N; i++)
        for (int s = 0; s < 2; s++)
            ck_assert_int_eq(ops->copy_async(st[s], dev[s] + (size_t)i * CHUNK,
                                             host + (size_t)i * CHUNK, CHUNK,
                                             ev[s][i]),
                             0);
    while (!all) {
        all = true;
        for (int s = 0; s < 2; s++) {
            bool later_done = false;

            /* Looking from the last: once one is done, the earlier are. */
            for (int i = N - 1; i >= 0; i--) {
                int done = ops->event_done(ev[s][i]);

                ck_assert_msg(done == 0 || done == 1, "event_done: %d (%s)",
                              done, ferry_last_error());
                ck_assert_msg(done || !later_done,
                              "stream %d: copy %d done before copy %d", s,
                              i + 1, i);
                later_done |= done;
                all &= done;
            }
        }
        ck_assert_msg(now_s() < end, "copies not done after 60 s");
        if (!all)
            pause_us(200);
    }
    ck_assert_uint_ge(ferry__hmem_sim_copies(), before + 2 * N);

    /* Back from device 1 in one copy, and the bytes are the pattern. */
    ck_assert_int_eq(ops->copy_async(st[1], back, dev[1], (size_t)N * CHUNK,
                                     ev[1][0]),
                     0);
    wait_event_ok(ops, ev[1][0]);
    ck_assert_uint_eq(tu_check(back, (size_t)N * CHUNK, 77), SIZE_MAX);

    for (int s = 0; s < 2; s++) {
        for (int i = 0; i < N; i++)
            ops->event_destroy(ev[s][i]);
        ops->stream_destroy(st[s]);
        dev_free(ops, dev[s]);
    }
    tu_free_buf(host, (size_t)N * CHUNK);
    tu_free_buf(back, (size_t)N * CHUNK);
}
END_TEST

/*
 * copy_async returns at once: with the engine held in the first copy (its
 * source stalls in a page fault), more copies queue behind it and none is
 * done; released, they all finish in order and the count grows by each.
 */
START_TEST(test_copies_queue_behind)
{
    enum { N = 6, LEN = 256 * 1024 };
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *ev[N];
    struct stall stall;
    uint8_t *dev = dev_alloc(ops, 0, (size_t)N * LEN);
    uint8_t *back = tu_alloc_buf((size_t)N * LEN);
    uint64_t before;

    ck_assert_msg(stall_open(&stall, LEN, 31), "userfaultfd: %s",
                  strerror(errno));
    ck_assert_int_eq(ops->stream_create(0, &st), 0);
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(ops->event_create(0, &ev[i]), 0);
    before = ferry__hmem_sim_copies();

    ck_assert_int_eq(ops->copy_async(st, dev, stall.buf, LEN, ev[0]), 0);
    stall_wait_fault(&stall);
    for (int i = 1; i < N; i++)
        ck_assert_int_eq(ops->copy_async(st, dev + (size_t)i * LEN, dev,
                                         LEN, ev[i]),
                         0);
    pause_us(20000);
    for (int i = 0; i < N; i++)
        ck_assert_msg(ops->event_done(ev[i]) == 0,
                      "copy %d done while the first is held", i);
    ck_assert_uint_eq(ferry__hmem_sim_copies(), before);

    stall_release(&stall);
    for (int i = N - 1; i >= 0; i--)
        wait_event_ok(ops, ev[i]);
    ck_assert_uint_ge(ferry__hmem_sim_copies(), before + N);
    ck_assert_int_eq(ops->copy(back, dev, (size_t)N * LEN), 0);
    for (int i = 0; i < N; i++)
        ck_assert_uint_eq(tu_check(back + (size_t)i * LEN, LEN, 31),
                          SIZE_MAX);

    for (int i = 0; i < N; i++)
        ops->event_destroy(ev[i]);
    ops->stream_destroy(st);
    stall_close(&stall);
    dev_free(ops, dev);
    tu_free_buf(back, (size_t)N * LEN);
}
END_TEST

/* An event destroyed, and a stream destroyed, with copies still queued:
 * the copies still run, and nothing leaks (ASan) or crashes. */
START_TEST(test_destroy_with_copies_queued)
{
    const struct ferry__hmem_ops *ops = sim();
    size_t len = 8 * MiB;
    uint8_t *dev = dev_alloc(ops, 1, len), *host = tu_alloc_buf(len);
    uint8_t *back = tu_alloc_buf(len);
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *ev;
    uint64_t before = ferry__hmem_sim_copies();

    tu_fill(host, len, 5);
    ck_assert_int_eq(ops->stream_create(1, &st), 0);
    ck_assert_int_eq(ops->event_create(1, &ev), 0);
    for (int i = 0; i < 8; i++)
        ck_assert_int_eq(ops->copy_async(st, dev, host, len, ev), 0);
    ops->event_destroy(ev);
    ops->stream_destroy(st); /* waits for the queue */
    ck_assert_uint_ge(ferry__hmem_sim_copies(), before + 8);
    ck_assert_int_eq(ops->copy(back, dev, len), 0);
    ck_assert_uint_eq(tu_check(back, len, 5), SIZE_MAX);
    ops->stream_destroy(NULL);
    ops->event_destroy(NULL);
    dev_free(ops, dev);
    tu_free_buf(host, len);
    tu_free_buf(back, len);
}
END_TEST

START_TEST(test_blocking_copy)
{
    const struct ferry__hmem_ops *ops = sim();
    size_t len = 3 * MiB + 17;
    uint8_t *d0 = dev_alloc(ops, 0, len + 8), *d1 = dev_alloc(ops, 1, len + 8);
    uint8_t *src = tu_alloc_buf(len), *dst = tu_alloc_buf(len);
    uint64_t before = ferry__hmem_sim_copies();

    tu_fill(src, len, 1234);
    ck_assert_int_eq(ops->copy(d0 + 1, src, len), 0);   /* host -> device */
    ck_assert_int_eq(ops->copy(d1 + 7, d0 + 1, len), 0); /* device -> device */
    ck_assert_int_eq(ops->copy(d0, d0 + 1, len), 0);     /* overlapping */
    ck_assert_int_eq(ops->copy(dst, d1 + 7, len), 0);    /* device -> host */
    ck_assert_uint_eq(tu_check(dst, len, 1234), SIZE_MAX);
    memset(dst, 0, len);
    ck_assert_int_eq(ops->copy(dst, d0, len), 0);
    ck_assert_uint_eq(tu_check(dst, len, 1234), SIZE_MAX);
    ck_assert_int_eq(ops->copy(dst, src, 0), 0);
    ck_assert_uint_ge(ferry__hmem_sim_copies(), before + 5);
    dev_free(ops, d0);
    dev_free(ops, d1);
    tu_free_buf(src, len);
    tu_free_buf(dst, len);
}
END_TEST

/* ---- errors ------------------------------------------------------------- */

START_TEST(test_copy_range_errors)
{
    const struct ferry__hmem_ops *ops = sim();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    uint8_t *dev = dev_alloc(ops, 0, 1000);
    uint8_t *host = tu_alloc_buf(4 * page);
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *ev;
    uint64_t before = ferry__hmem_sim_copies();

    ck_assert_int_eq(ops->stream_create(0, &st), 0);
    ck_assert_int_eq(ops->event_create(0, &ev), 0);

    /* Past the end of the allocation (though inside its page). */
    assert_error(ops->copy(dev + 900, host, 101), FERRY_EINVAL,
                 "past the end of simulated device buffer");
    assert_error(ops->copy(host, dev, 1001), FERRY_EINVAL, "src range");
    assert_error(ops->copy_async(st, dev + 999, host, 2, ev), FERRY_EINVAL,
                 "past the end");
    assert_error(ops->copy_async(st, host, dev + 1, 1000, ev), FERRY_EINVAL,
                 "src range");
    /* A failed call records nothing: the event was never recorded. */
    ck_assert_int_eq(ops->event_done(ev), 1);

    /* Host memory running into a device buffer. */
    {
        void *at = host + 2 * page;

        munmap(at, page);
        ck_assert_int_eq(ferry__hmem_sim_alloc_at(0, at, page), 0);
        assert_error(ops->copy(host + page, host, 2 * page), FERRY_EINVAL,
                     "runs into simulated device buffer");
        dev_free(ops, at);
        ck_assert(mmap(at, page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
                       0) == at);
    }
    assert_error(ops->copy(NULL, host, 1), FERRY_EINVAL, "dst is NULL");
    assert_error(ops->copy_async(NULL, host, dev, 1, NULL), FERRY_EINVAL,
                 "stream is NULL");
    {
        struct ferry__hmem_stream *no_st = (void *)1;
        struct ferry__hmem_event *no_ev = (void *)1;

        assert_error(ops->stream_create(NDEV, &no_st), FERRY_EINVAL,
                     "does not exist");
        ck_assert_ptr_null(no_st);
        assert_error(ops->event_create(-1, &no_ev), FERRY_EINVAL,
                     "does not exist");
        ck_assert_ptr_null(no_ev);
    }
    ck_assert_uint_eq(ferry__hmem_sim_copies(), before);
    ops->event_destroy(ev);
    ops->stream_destroy(st);

    dev_free(ops, dev);
    tu_free_buf(host, 4 * page);
}
END_TEST

/*
 * A copy whose device buffer is freed before the engine reaches it fails,
 * and its event (and every later one on the stream) says why; another
 * stream is unaffected.
 */
START_TEST(test_copy_after_free_fails)
{
    enum { LEN = 64 * 1024 };
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_stream *st, *st2;
    struct ferry__hmem_event *ev, *ev2, *ev_ok;
    struct stall stall;
    uint8_t *hold = dev_alloc(ops, 0, LEN), *victim = dev_alloc(ops, 1, LEN);
    uint8_t *host = tu_alloc_buf(LEN);
    bool stalled = stall_open(&stall, LEN, 1);
    uint8_t *big = NULL;
    int ret;

    ck_assert_int_eq(ops->stream_create(0, &st), 0);
    ck_assert_int_eq(ops->stream_create(0, &st2), 0);
    ck_assert_int_eq(ops->event_create(0, &ev), 0);
    ck_assert_int_eq(ops->event_create(0, &ev2), 0);
    ck_assert_int_eq(ops->event_create(0, &ev_ok), 0);
    if (stalled) {
        ck_assert_int_eq(ops->copy_async(st, hold, stall.buf, LEN, NULL), 0);
        stall_wait_fault(&stall);
    } else { /* hold the engine with 512 MiB of copies instead */
        big = dev_alloc(ops, 0, 64 * MiB);
        for (int i = 0; i < 8; i++)
            ck_assert_int_eq(ops->copy_async(st, big, big, 64 * MiB, NULL),
                             0);
    }
    ck_assert_int_eq(ops->copy_async(st, victim, host, LEN, ev), 0);
    dev_free(ops, victim);
    if (stalled)
        stall_release(&stall);
    ret = wait_event(ops, ev);
    assert_error(ret, FERRY_EINVAL, "was freed before the copy ran");

    /* The stream stays failed: a later copy does not run. */
    ck_assert_int_eq(ops->copy_async(st, host, hold, LEN, ev2), 0);
    assert_error(wait_event(ops, ev2), FERRY_EINVAL, "was freed before");
    /* Another stream works. */
    tu_fill(host, LEN, 2);
    ck_assert_int_eq(ops->copy_async(st2, hold, host, LEN, ev_ok), 0);
    wait_event_ok(ops, ev_ok);

    ops->event_destroy(ev);
    ops->event_destroy(ev2);
    ops->event_destroy(ev_ok);
    ops->stream_destroy(st);
    ops->stream_destroy(st2);
    if (stalled)
        stall_close(&stall);
    if (big != NULL)
        dev_free(ops, big);
    dev_free(ops, hold);
    tu_free_buf(host, LEN);
}
END_TEST

struct free_arg {
    const struct ferry__hmem_ops *ops;
    void *ptr;
    int ret;
    atomic_bool done;
};

static void *free_thread(void *arg)
{
    struct free_arg *fa = arg;

    fa->ret = fa->ops->dev_free(fa->ptr);
    atomic_store(&fa->done, true);
    return NULL;
}

/* dev_free of a buffer a copy is writing waits for that copy to end. */
START_TEST(test_free_waits_for_running_copy)
{
    enum { LEN = 64 * 1024 };
    const struct ferry__hmem_ops *ops = sim();
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *ev;
    struct stall stall;
    struct free_arg fa = {.ops = ops};
    pthread_t t;

    ck_assert_msg(stall_open(&stall, LEN, 3), "userfaultfd: %s",
                  strerror(errno));
    fa.ptr = dev_alloc(ops, 0, LEN);
    atomic_init(&fa.done, false);
    ck_assert_int_eq(ops->stream_create(0, &st), 0);
    ck_assert_int_eq(ops->event_create(0, &ev), 0);
    ck_assert_int_eq(ops->copy_async(st, fa.ptr, stall.buf, LEN, ev), 0);
    stall_wait_fault(&stall); /* the copy is running, into fa.ptr */
    ck_assert_int_eq(pthread_create(&t, NULL, free_thread, &fa), 0);
    pause_us(50000);
    ck_assert_msg(!atomic_load(&fa.done),
                  "dev_free returned while a copy was writing the buffer");
    stall_release(&stall);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_msg(fa.ret == 0, "dev_free: %d", fa.ret);
    wait_event_ok(ops, ev);
    ops->event_destroy(ev);
    ops->stream_destroy(st);
    stall_close(&stall);
}
END_TEST

/* ---- threads ------------------------------------------------------------ */

struct worker_arg {
    const struct ferry__hmem_ops *ops;
    int index;
};

static void *copy_worker(void *arg)
{
    const struct worker_arg *wa = arg;
    const struct ferry__hmem_ops *ops = wa->ops;
    size_t len = 64 * 1024 + (size_t)wa->index;
    struct ferry__hmem_stream *st;
    struct ferry__hmem_event *ev;
    uint8_t *host = tu_alloc_buf(len), *back = tu_alloc_buf(len);

    ck_assert_int_eq(ops->stream_create(wa->index % NDEV, &st), 0);
    ck_assert_int_eq(ops->event_create(wa->index % NDEV, &ev), 0);
    for (int round = 0; round < 40; round++) {
        uint64_t seed = (uint64_t)wa->index * 1000 + (uint64_t)round;
        uint8_t *dev = dev_alloc(ops, round % NDEV, len);
        struct ferry__hmem_ptr info;

        tu_fill(host, len, seed);
        ck_assert_int_eq(ops->copy_async(st, dev, host, len, NULL), 0);
        ck_assert_int_eq(ops->copy_async(st, back, dev, len, ev), 0);
        ck_assert_int_eq(ops->ptr_info(dev + len - 1, &info), 0);
        ck_assert(info.device && info.base == (uintptr_t)dev);
        wait_event_ok(ops, ev);
        ck_assert_uint_eq(tu_check(back, len, seed), SIZE_MAX);
        dev_free(ops, dev);
    }
    ops->event_destroy(ev);
    ops->stream_destroy(st);
    tu_free_buf(host, len);
    tu_free_buf(back, len);
    return NULL;
}

START_TEST(test_threads)
{
    enum { T = 4 };
    struct worker_arg wa[T];
    pthread_t t[T];

    for (int i = 0; i < T; i++) {
        wa[i].ops = sim();
        wa[i].index = i;
        ck_assert_int_eq(pthread_create(&t[i], NULL, copy_worker, &wa[i]), 0);
    }
    for (int i = 0; i < T; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
}
END_TEST

/* ---- the public helpers ------------------------------------------------- */

START_TEST(test_public_api)
{
    size_t len = 5 * MiB + 3;
    uint8_t *src = tu_alloc_buf(len), *dst = tu_alloc_buf(len);
    void *dev = NULL, *dev2 = NULL;
    int count = 0;

    ferry__hmem_use_sim(NDEV); /* before anything asks for the backend */
    ck_assert_ptr_nonnull(ferry_device_backend());
    ck_assert_str_eq(ferry_device_backend(), "simulated");
    ck_assert_msg(strstr(ferry_device_status(), "simulated device: 2 "
                                                "devices") != NULL,
                  "status: %s", ferry_device_status());
    ck_assert_int_eq(ferry_device_count(&count), 0);
    ck_assert_int_eq(count, NDEV);

    assert_error(ferry_device_alloc(NDEV, 4096, &dev), FERRY_EINVAL,
                 "device 2 does not exist");
    assert_error(ferry_device_alloc(-1, 4096, &dev), FERRY_EINVAL,
                 "does not exist");
    ck_assert_int_eq(ferry_device_alloc(0, len, &dev), 0);
    ck_assert_int_eq(ferry_device_alloc(1, len, &dev2), 0);
    tu_fill(src, len, 8);
    ck_assert_int_eq(ferry_device_copy(dev, src, len), 0);
    ck_assert_int_eq(ferry_device_copy(dev2, dev, len), 0);
    ck_assert_int_eq(ferry_device_copy(dst, dev2, len), 0);
    ck_assert_uint_eq(tu_check(dst, len, 8), SIZE_MAX);
    assert_error(ferry_device_copy(dst, (uint8_t *)dev + 1, len),
                 FERRY_EINVAL, "past the end");
    {
        struct ferry__hmem_ptr info;

        ck_assert_int_eq(ferry__hmem()->ptr_info(dev2, &info), 0);
        ck_assert(info.device);
        ck_assert_int_eq(info.ordinal, 1);
    }
    ck_assert_int_eq(ferry_device_free(dev), 0);
    ck_assert_int_eq(ferry_device_free(dev2), 0);
    assert_error(ferry_device_free(dev), FERRY_EINVAL,
                 "not a simulated device allocation");
    ck_assert_int_eq(ferry_device_free(NULL), 0);
    tu_free_buf(src, len);
    tu_free_buf(dst, len);
}
END_TEST

/* Never on by default. */
static Suite *hmem_suite(void)
{
    Suite *s = suite_create("hmem");
    bool can_stall = stall_possible();
    TCase *tc;

    tc = tu_tcase(s, "devices", 30);
    tcase_add_test(tc, test_load);
    tcase_add_test(tc, test_dmabuf_and_flush);

    tc = tu_tcase(s, "memory", 30);
    tcase_add_test(tc, test_alloc_free_info);
    tcase_add_test(tc, test_buffer_ids);
    tcase_add_loop_test(tc, test_cpu_access_crashes, 0, 2);
    tcase_add_test(tc, test_host_alloc);

    tc = tu_tcase(s, "copies", 120);
    tcase_add_loop_test(tc, test_async_roundtrip, 0,
                        (int)TU_ARRAY_LEN(copy_sizes));
    tcase_add_test(tc, test_events_in_order);
    if (can_stall)
        tcase_add_test(tc, test_copies_queue_behind);
    tcase_add_test(tc, test_destroy_with_copies_queued);
    tcase_add_test(tc, test_blocking_copy);
    tcase_add_test(tc, test_threads);

    tc = tu_tcase(s, "errors", 60);
    tcase_add_test(tc, test_copy_range_errors);
    tcase_add_test(tc, test_copy_after_free_fails);
    if (can_stall)
        tcase_add_test(tc, test_free_waits_for_running_copy);

    tc = tu_tcase(s, "public", 30);
    tcase_add_test(tc, test_public_api);
    return s;
}

int main(void)
{
    /* The tests choose; the caller's must not leak in. */
    unsetenv("FERRY_SIM_DEVICES");
    return tu_run(hmem_suite());
}
