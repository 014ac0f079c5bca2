/*
 * hmem module, CUDA backend (lib/hmem_cuda.c): device memory through
 * libcuda.so.1, loaded with dlopen.
 *
 * Without a GPU (or in a build without CUDA) the suite checks only that
 * ferry says why there is no backend, and that the toolkit's stub
 * libcuda is refused with a sentence naming it; then it exits 77 (SKIP)
 * with that reason, since the GPU tests did not run.  With a GPU it runs
 * them all on device 0, the registration cache with an address freed and
 * allocated again among them (scripts/gpu-check.sh runs them there).
 *
 * CUDA does not survive fork, and Check runs each test in a forked child:
 * so main() never initialises CUDA itself (it asks a child which backend
 * there is), and every test starts CUDA afresh in its own process.
 */
#include "testutil.h"

#include "dev/hmem.h"
#include "reg/mem.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long a copy of a few MiB may take before the test gives up. */
#define COPY_PATIENCE_NS (20ull * 1000 * 1000 * 1000)
/* The CUDA toolkit's stub libcuda (FERRY_TEST_CUDA_STUB overrides). */
#define DEFAULT_CUDA_STUB "/usr/local/cuda/lib64/stubs/libcuda.so"

static char self_exe[PATH_MAX];

static const struct ferry__hmem_ops *cuda_ops(void)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ck_assert_msg(ops != NULL, "no backend: %s", ferry__hmem_status());
    ck_assert_str_eq(ops->name, "cuda");
    return ops;
}

/* Waits for event; asserts it ends well and in time. */
static void wait_event(const struct ferry__hmem_ops *ops,
                       struct ferry__hmem_event *event)
{
    uint64_t start = tu_now_ns();
    int done;

    while ((done = ops->event_done(event)) == 0) {
        ck_assert_msg(tu_now_ns() - start < COPY_PATIENCE_NS,
                      "a copy did not finish in %llu s",
                      (unsigned long long)(COPY_PATIENCE_NS / 1000000000ull));
        sched_yield();
    }
    ck_assert_msg(done == 1, "event_done: %d: %s", done, ferry_last_error());
}

/*
 * The CUDA context current on this thread, through the driver ferry
 * loaded (RTLD_NOLOAD: the test never loads one of its own).  The caller
 * of ferry must find the same context before and after any ferry call.
 */
static void *current_ctx(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    int (*get)(void **ctx); /* cuCtxGetCurrent; CUresult is an int enum */
    void *ctx = (void *)1;
    void *p;

    ck_assert_msg(lib != NULL, "libcuda.so.1 is not loaded: %s", dlerror());
    p = dlsym(lib, "cuCtxGetCurrent");
    ck_assert_ptr_nonnull(p);
    memcpy(&get, &p, sizeof(p));
    ck_assert_int_eq(get(&ctx), 0);
    dlclose(lib);
    return ctx;
}

/* ---- no backend (any machine) -------------------------------------------- */

START_TEST(test_no_backend_says_why)
{
    const char *why = ferry_device_status();
    int count = -1;
    void *p = (void *)1;

    ck_assert_ptr_null(ferry_device_backend());
    ck_assert_ptr_nonnull(why);
    ck_assert_msg(strlen(why) > 20, "status too short to say why: '%s'", why);
    /* The library it looked for, or the build flag that left it out. */
    ck_assert_msg(strstr(why, "libcuda.so.1") != NULL ||
                      strstr(why, "--with-cuda") != NULL ||
                      strstr(why, "cuInit") != NULL,
                  "status names neither libcuda.so.1 nor --with-cuda: '%s'",
                  why);
    printf("no device backend: %s\n", why);

    ck_assert_int_eq(ferry_device_count(&count), FERRY_ENOTSUP);
    ck_assert_int_eq(count, 0);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), why));
    ck_assert_int_eq(ferry_device_alloc(0, 4096, &p), FERRY_ENOTSUP);
    ck_assert_ptr_nonnull(
        strstr(ferry_last_error(), "no device memory backend"));
    ck_assert_int_eq(ferry_device_free(NULL), 0);
}
END_TEST

/* Runs this program with --print-status, and LD_LIBRARY_PATH=dir first;
 * returns its output (backend line, status line) in out. */
static void run_status_child(const char *dir, char *out, size_t len)
{
    int fds[2];
    pid_t pid;
    size_t got = 0;
    ssize_t n;
    int st;

    ck_assert_int_eq(pipe(fds), 0);
    pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        const char *old = getenv("LD_LIBRARY_PATH");
        char path[PATH_MAX * 2];

        snprintf(path, sizeof(path), "%s%s%s", dir, old ? ":" : "",
                 old ? old : "");
        setenv("LD_LIBRARY_PATH", path, 1);
        unsetenv("FERRY_SIM_DEVICES");
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        execl(self_exe, self_exe, "--print-status", (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    while (got + 1 < len && (n = read(fds[0], out + got, len - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(fds[0]);
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "%s --print-status failed (status 0x%x)", self_exe, st);
}

/*
 * The toolkit's stub libcuda.so answers every call with
 * CUDA_ERROR_STUB_LIBRARY.  Found first on LD_LIBRARY_PATH (a common
 * mistake), ferry must refuse it and say so, not crash or claim a GPU.
 * This loads the stub, on purpose, in a child process only.
 */
START_TEST(test_stub_libcuda_is_refused)
{
    const char *stub = getenv("FERRY_TEST_CUDA_STUB");
    char dir[] = "/tmp/ferry-cuda-stub-XXXXXX";
    char lnk[PATH_MAX];
    char out[1024];

    if (stub == NULL)
        stub = DEFAULT_CUDA_STUB;
    if (access(stub, R_OK) != 0) {
        printf("note: no CUDA stub library at %s (FERRY_TEST_CUDA_STUB): "
               "stub refusal not tested\n", stub);
        return;
    }
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(lnk, sizeof(lnk), "%s/libcuda.so.1", dir);
    ck_assert_int_eq(symlink(stub, lnk), 0);
    run_status_child(dir, out, sizeof(out));
    unlink(lnk);
    rmdir(dir);
    printf("with the stub first on LD_LIBRARY_PATH: %s", out);
#if HAVE_CUDA
    ck_assert_msg(strncmp(out, "none\n", 5) == 0,
                  "the stub library was taken for a driver: %s", out);
    ck_assert_msg(strstr(out, "CUDA_ERROR_STUB_LIBRARY") != NULL &&
                      strstr(out, "stub") != NULL &&
                      strstr(out, "LD_LIBRARY_PATH") != NULL,
                  "the sentence does not say the stub was loaded: %s", out);
#else
    ck_assert_msg(strstr(out, "ferry was built without CUDA support "
                              "(configure --with-cuda)") != NULL,
                  "unexpected status: %s", out);
#endif
}
END_TEST

/* ---- with a GPU ---------------------------------------------------------- */

START_TEST(test_alloc_and_ptr_info)
{
    const struct ferry__hmem_ops *ops = cuda_ops();
    const size_t len = (1u << 20) + 123;
    struct ferry__hmem_ptr info, info2;
    void *dev = NULL, *dev2 = NULL, *pinned = NULL;
    char *heap = malloc(64);
    int stack = 0;
    int count = 0;

    ck_assert_ptr_null(current_ctx());
    ck_assert_int_eq(ferry_device_count(&count), 0);
    ck_assert_int_ge(count, 1);
    ck_assert_int_eq(ferry_device_alloc(0, len, &dev), 0);
    ck_assert_ptr_nonnull(dev);
    ck_assert_int_eq(ferry_device_alloc(0, 4096, &dev2), 0);

    ck_assert_int_eq(ops->ptr_info((char *)dev + 100, &info), 0);
    ck_assert(info.device);
    ck_assert(!info.managed);
    ck_assert_int_eq(info.ordinal, 0);
    ck_assert_uint_eq(info.base, (uintptr_t)dev);
    ck_assert_uint_ge(info.size, len);
    ck_assert_uint_ne(info.buffer_id, 0);
    ck_assert_int_eq(ops->ptr_info(dev2, &info2), 0);
    ck_assert(info2.device);
    ck_assert_uint_ne(info2.buffer_id, info.buffer_id);

    /* Host memory of every kind is host memory, not an error. */
    ck_assert_ptr_nonnull(heap);
    ck_assert_int_eq(ops->ptr_info(heap, &info), 0);
    ck_assert(!info.device);
    ck_assert_int_eq(ops->ptr_info(&stack, &info), 0);
    ck_assert(!info.device);
    ck_assert_int_eq(ops->ptr_info(NULL, &info), 0);
    ck_assert(!info.device);
    ck_assert_int_eq(ops->host_alloc(8192, &pinned), 0);
    ck_assert_int_eq(ops->ptr_info(pinned, &info), 0);
    ck_assert(!info.device);
    ops->host_free(pinned);

    /* Freeing from the middle, or host memory, is refused with a reason. */
    ck_assert_int_eq(ferry_device_free((char *)dev + 256), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "bytes into"));
    ck_assert_int_eq(ferry_device_free(heap), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "not CUDA device memory"));

    ck_assert_int_eq(ferry_device_free(dev), 0);
    ck_assert_int_eq(ferry_device_free(dev2), 0);
    /* ferry pushed and popped its contexts: the caller's is untouched. */
    ck_assert_ptr_null(current_ctx());
    free(heap);
}
END_TEST

START_TEST(test_alloc_errors_say_why)
{
    const struct ferry__hmem_ops *ops = cuda_ops();
    void *dev = (void *)1;
    int count = 0;

    ck_assert_int_eq(ops->device_count(&count), 0);
    ck_assert_int_eq(ferry_device_alloc(count, 4096, &dev), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "does not exist"));
    /* A petabyte: the driver's own error, named. */
    ck_assert_int_eq(ops->dev_alloc(0, (size_t)1 << 50, &dev), FERRY_ENOMEM);
    ck_assert_ptr_null(dev);
    ck_assert_ptr_nonnull(
        strstr(ferry_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "cuMemAlloc"));
}
END_TEST

/* A child forked after cuInit cannot use CUDA, and the error says that,
 * not that the driver is shutting down (gpu_write did this on an H200). */
START_TEST(test_fork_after_init_says_so)
{
    void *dev = NULL;
    int status = 0;
    pid_t child;

    ck_assert_int_eq(ferry_device_alloc(0, 4096, &dev), 0);
    child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        void *lost = NULL;
        int ret = ferry_device_alloc(0, 4096, &lost);
        _exit(ret != 0 && strstr(ferry_last_error(),
                                 "before it forked this one") != NULL
                  ? 0
                  : 1);
    }
    ck_assert_int_eq(waitpid(child, &status, 0), child);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the forked child's allocation did not fail with the "
                  "fork advice (status %d)",
                  status);
    ferry_device_free(dev);
}
END_TEST

START_TEST(test_pci_bus_id)
{
    const struct ferry__hmem_ops *ops = cuda_ops();
    char buf[64], again[64], small[8];
    unsigned domain, bus, dev, fn;
    int count = 0;

    ck_assert_int_eq(ops->pci_bus_id(0, buf, sizeof(buf)), 0);
    printf("CUDA device 0 is at %s\n", buf);
    ck_assert_uint_eq(strlen(buf), 12);
    ck_assert_int_eq(sscanf(buf, "%x:%x:%x.%x", &domain, &bus, &dev, &fn), 4);
    snprintf(again, sizeof(again), "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    ck_assert_str_eq(buf, again); /* lower case, fixed widths */
    ck_assert_int_eq(ops->pci_bus_id(0, small, sizeof(small)), FERRY_ENOSPC);
    ck_assert_int_eq(ops->device_count(&count), 0);
    ck_assert_int_eq(ops->pci_bus_id(count, buf, sizeof(buf)), FERRY_EINVAL);
    ck_assert_int_eq(ops->pci_bus_id(-1, buf, sizeof(buf)), FERRY_EINVAL);
}
END_TEST

/* Host -> device -> host through pinned memory on ferry's own stream,
 * unaligned, byte for byte. */
START_TEST(test_async_round_trip)
{
    const struct ferry__hmem_ops *ops = cuda_ops();
    const size_t len = 4u << 20;
    struct ferry__hmem_stream *stream = NULL;
    struct ferry__hmem_event *event = NULL;
    void *src = NULL, *dst = NULL, *dev = NULL;

    ck_assert_int_eq(ops->host_alloc(len, &src), 0);
    ck_assert_int_eq(ops->host_alloc(len, &dst), 0);
    ck_assert_int_eq(ops->dev_alloc(0, len, &dev), 0);
    ck_assert_int_eq(ops->stream_create(0, &stream), 0);
    ck_assert_int_eq(ops->event_create(0, &event), 0);
    tu_fill(src, len, 42);
    memset(dst, 0, len);

    ck_assert_int_eq(ops->copy_async(stream, dev, src, len, event), 0);
    wait_event(ops, event);
    /* Odd offset and length: back to the host, then compare. */
    ck_assert_int_eq(ops->copy_async(stream, (char *)dst + 1,
                                     (char *)dev + 1, len - 3, event), 0);
    wait_event(ops, event);
    ck_assert_uint_eq(((unsigned char *)dst)[0], 0);
    ck_assert_int_eq(memcmp((char *)dst + 1, (char *)src + 1, len - 3), 0);
    ck_assert_uint_eq(((unsigned char *)dst)[len - 2], 0);

    /* Two copies queued back to back, one event after the second. */
    memset(dst, 0, len);
    ck_assert_int_eq(ops->copy_async(stream, dev, src, len / 2, NULL), 0);
    ck_assert_int_eq(ops->copy_async(stream, dst, dev, len / 2, event), 0);
    wait_event(ops, event);
    ck_assert_uint_eq(tu_check(dst, len / 2, 42), SIZE_MAX);

    ops->event_destroy(event);
    ops->stream_destroy(stream);
    ck_assert_int_eq(ops->dev_free(dev), 0);
    ops->host_free(src);
    ops->host_free(dst);
    ck_assert_ptr_null(current_ctx());
}
END_TEST

/* The blocking copy, from pageable memory, device to device, and back. */
START_TEST(test_blocking_copy)
{
    const size_t len = (3u << 20) + 5;
    unsigned char *src = malloc(len), *dst = malloc(len);
    void *a = NULL, *b = NULL;

    ck_assert_ptr_nonnull(src);
    ck_assert_ptr_nonnull(dst);
    (void)cuda_ops();
    tu_fill(src, len, 7);
    memset(dst, 0xee, len);
    ck_assert_int_eq(ferry_device_alloc(0, len, &a), 0);
    ck_assert_int_eq(ferry_device_alloc(0, len, &b), 0);
    ck_assert_int_eq(ferry_device_copy(a, src, len), 0);
    ck_assert_int_eq(ferry_device_copy(b, a, len), 0);
    ck_assert_int_eq(ferry_device_copy(dst, b, len), 0);
    ck_assert_uint_eq(tu_check(dst, len, 7), SIZE_MAX);
    /* Host to host goes through too. */
    memset(dst, 0, len);
    ck_assert_int_eq(ferry_device_copy(dst, src, len), 0);
    ck_assert_uint_eq(tu_check(dst, len, 7), SIZE_MAX);
    ck_assert_int_eq(ferry_device_free(a), 0);
    ck_assert_int_eq(ferry_device_free(b), 0);
    ck_assert_ptr_null(current_ctx());
    free(src);
    free(dst);
}
END_TEST

/* A dma-buf for part of an allocation covers whole pages around it; or
 * ENOTSUP with a sentence where the driver or device cannot export. */
START_TEST(test_dmabuf)
{
    const struct ferry__hmem_ops *ops = cuda_ops();
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t len = 4u << 20;
    char *dev = NULL;
    char host[64];
    uint64_t offset = 99;
    struct stat st;
    int fd = 99;
    int ret;

    ck_assert_ptr_nonnull(ops->dmabuf_fd);
    ck_assert_int_eq(ops->dev_alloc(0, len, (void **)&dev), 0);
    ret = ops->dmabuf_fd(dev + page + 10, 65536, &fd, &offset);
    if (ret == 0) {
        ck_assert_int_ge(fd, 0);
        ck_assert_uint_eq(((uintptr_t)dev + page + 10 - offset) % page, 0);
        ck_assert_uint_lt(offset, page);
        ck_assert_int_eq(fstat(fd, &st), 0);
        printf("dma-buf export: fd %d, offset %llu\n", fd,
               (unsigned long long)offset);
        close(fd);
    } else {
        ck_assert_int_eq(ret, FERRY_ENOTSUP);
        ck_assert_int_eq(fd, -1);
        ck_assert_msg(strlen(ferry_last_error()) > 20, "no sentence: '%s'",
                      ferry_last_error());
        printf("dma-buf export not supported here: %s\n", ferry_last_error());
    }
    /* Host memory and ranges past the allocation are refused. */
    ck_assert_int_eq(ops->dmabuf_fd(host, sizeof(host), &fd, &offset),
                     FERRY_EINVAL);
    ck_assert_int_eq(ops->dmabuf_fd(dev + 16, 4 * len, &fd, &offset),
                     FERRY_ERANGE);
    ck_assert_int_eq(ops->dev_free(dev), 0);
}
END_TEST

START_TEST(test_flush_rdma_writes)
{
    const struct ferry__hmem_ops *ops = cuda_ops();

    /* Optional: NULL where the driver lacks cuFlushGPUDirectRDMAWrites. */
    if (ops->flush_rdma_writes == NULL) {
        printf("note: this driver has no cuFlushGPUDirectRDMAWrites\n");
        return;
    }
    ops->flush_rdma_writes(0);
    ops->flush_rdma_writes(0);
    ck_assert_ptr_null(current_ctx());
}
END_TEST

/* Threads racing to the first use of device 0's primary context, then
 * copying through it at once. */
#define NTHREADS 8

static void *thread_round_trip(void *arg)
{
    const size_t len = 256u << 10;
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    unsigned char *src = malloc(len), *dst = malloc(len);
    void *dev = NULL;
    uintptr_t bad = 0;

    if (src == NULL || dst == NULL)
        return (void *)1;
    tu_fill(src, len, seed);
    if (ferry_device_alloc(0, len, &dev) != 0 ||
        ferry_device_copy(dev, src, len) != 0 ||
        ferry_device_copy(dst, dev, len) != 0 ||
        tu_check(dst, len, seed) != SIZE_MAX ||
        ferry_device_free(dev) != 0)
        bad = 1;
    free(src);
    free(dst);
    return (void *)bad;
}

START_TEST(test_threads)
{
    pthread_t t[NTHREADS];
    void *bad;

    (void)cuda_ops(); /* loaded; no context retained yet */
    for (uintptr_t i = 0; i < NTHREADS; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, thread_round_trip,
                                        (void *)(i + 1)), 0);
    for (int i = 0; i < NTHREADS; i++) {
        ck_assert_int_eq(pthread_join(t[i], &bad), 0);
        ck_assert_msg(bad == NULL, "thread %d failed", i);
    }
}
END_TEST

/*
 * The registration cache with CUDA memory.  A device range is cached by
 * the buffer id of its allocation; memory freed and allocated again at
 * the same address (the driver hands a freed range back to the next
 * allocation of its size) is a new allocation, and its old entry must
 * not serve it: a stale FI_HMEM registration would name the freed pages.
 * The write after the reallocation must carry the new allocation's bytes,
 * and the cache must have registered it anew.  Loop index: provider.
 */
#define REALLOC_TRIES 8

/* A device buffer of len bytes at addr, or NULL if the driver puts none
 * there in REALLOC_TRIES allocations (the others are freed again). */
static void *dev_alloc_at(void *addr, size_t len)
{
    void *got[REALLOC_TRIES], *found = NULL;
    int n = 0;

    while (n < REALLOC_TRIES && found == NULL) {
        ck_assert_int_eq(ferry_device_alloc(0, len, &got[n]), 0);
        if (got[n] == addr)
            found = got[n];
        else
            n++;
    }
    while (n-- > 0)
        ck_assert_int_eq(ferry_device_free(got[n]), 0);
    return found;
}

/* Writes the device buffer's len bytes, as seed's pattern, to the target's
 * host region through the cache (no lmem), and waits. */
static void write_through_cache(struct tu_pair *p, void *dev, size_t len,
                                uint64_t seed, ferry_rmem_t *rmem)
{
    struct ferry_iov iov = {.local = dev, .rmem = rmem, .len = len};
    ferry_req_t *req = NULL;
    void *host = malloc(len);

    ck_assert_ptr_nonnull(host);
    tu_fill(host, len, seed);
    ck_assert_int_eq(ferry_device_copy(dev, host, len), 0);
    free(host);
    ck_assert_msg(ferry_write(p->peer, &iov, 1, NULL, &req) == 0, "write: %s",
                  ferry_last_error());
    ck_assert_msg(ferry_req_wait(req, 20000) == 0, "wait: %s",
                  ferry_last_error());
    ferry_req_close(req);
}

START_TEST(test_rcache_reused_address)
{
    const size_t len = 4u << 20;
    struct ferry__hmem_ptr before, after;
    struct ferry_stats st;
    struct tu_pair p;
    uint8_t *host = tu_alloc_buf(len);
    ferry_mem_t *hmem;
    ferry_rmem_t *rmem;
    void *dev = NULL;

    (void)cuda_ops();
    tu_pair_open(&p, tu_providers[_i], NULL);
    hmem = tu_register(p.target, host, len, FERRY_ACCESS_REMOTE_WRITE);
    rmem = tu_share(hmem, p.peer);
    ck_assert_int_eq(ferry_device_alloc(0, len, &dev), 0);
    ck_assert_int_eq(ferry__hmem()->ptr_info(dev, &before), 0);
    write_through_cache(&p, dev, len, 7, rmem);
    write_through_cache(&p, dev, len, 7, rmem);
    ck_assert_uint_eq(tu_check(host, len, 7), SIZE_MAX);
    st = tu_stats(p.init);
    ck_assert_uint_eq(st.rcache_misses, 1);
    ck_assert_uint_eq(st.rcache_hits, 1);

    ck_assert_int_eq(ferry_device_free(dev), 0);
    ck_assert_msg(dev_alloc_at(dev, len) == dev,
                  "the driver did not hand %p back in %d allocations of %zu "
                  "bytes: the case of a freed address reused cannot be made",
                  dev, REALLOC_TRIES, len);
    ck_assert_int_eq(ferry__hmem()->ptr_info(dev, &after), 0);
    ck_assert_uint_ne(before.buffer_id, after.buffer_id);
    write_through_cache(&p, dev, len, 8, rmem);
    ck_assert_msg(tu_check(host, len, 8) == SIZE_MAX,
                  "the write after the reallocation did not carry the new "
                  "allocation's bytes");
    st = tu_stats(p.init);
    ck_assert_msg(st.rcache_misses == 2 && st.rcache_invalidations >= 1,
                  "a stale registration of the freed allocation was used: "
                  "%llu misses, %llu invalidations",
                  (unsigned long long)st.rcache_misses,
                  (unsigned long long)st.rcache_invalidations);

    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(hmem), 0);
    tu_pair_close(&p);
    ck_assert_int_eq(ferry_device_free(dev), 0);
    tu_free_buf(host, len);
}
END_TEST

/* ---- device-only registrations -------------------------------------------- */

/*
 * Managed memory of device 0, through the driver ferry loaded
 * (RTLD_NOLOAD), in the device's primary context, pushed and popped so
 * the caller's context stays as it was.
 */
/* *fnp = the driver's call name, through the library ferry loaded. */
static void cu_load(void *fnp, const char *name)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *p;

    ck_assert_msg(lib != NULL, "libcuda.so.1 is not loaded: %s", dlerror());
    p = dlsym(lib, name);
    ck_assert_msg(p != NULL, "%s: %s", name, dlerror());
    memcpy(fnp, &p, sizeof(p));
    dlclose(lib); /* ferry's handle keeps it loaded */
}

/* len > 0: allocates *ptr; len 0: frees it.  The prototypes are cuda.h's:
 * CUresult is an int enum, CUdevice an int, CUdeviceptr an unsigned long
 * long. */
static void managed_call(void **ptr, size_t len)
{
    int (*device_get)(int *, int);
    int (*retain)(void **, int);
    int (*push)(void *);
    int (*alloc_managed)(unsigned long long *, size_t, unsigned);
    int (*mem_free)(unsigned long long);
    int (*pop)(void **);
    int (*release)(int);
    int dev = 0;
    void *ctx = NULL, *popped = NULL;
    unsigned long long dptr = (uintptr_t)*ptr;

    cu_load(&device_get, "cuDeviceGet");
    cu_load(&retain, "cuDevicePrimaryCtxRetain");
    cu_load(&push, "cuCtxPushCurrent_v2");
    cu_load(&alloc_managed, "cuMemAllocManaged");
    cu_load(&mem_free, "cuMemFree_v2");
    cu_load(&pop, "cuCtxPopCurrent_v2");
    cu_load(&release, "cuDevicePrimaryCtxRelease_v2");
    ck_assert_int_eq(device_get(&dev, 0), 0);
    ck_assert_int_eq(retain(&ctx, dev), 0);
    ck_assert_int_eq(push(ctx), 0);
    if (len > 0) /* 1: CU_MEM_ATTACH_GLOBAL */
        ck_assert_int_eq(alloc_managed(&dptr, len, 1u), 0);
    else
        ck_assert_int_eq(mem_free(dptr), 0);
    ck_assert_int_eq(pop(&popped), 0);
    ck_assert_int_eq(release(dev), 0);
    *ptr = (void *)(uintptr_t)dptr;
}

/*
 * Device memory is registered device-only (FI_HMEM_DEVICE_ONLY, which
 * shm needs to move it with CUDA IPC), managed memory is not (its pages
 * may be on the host), and a write from either carries its bytes.
 */
START_TEST(test_device_only_registration)
{
    const size_t len = 1u << 20;
    struct ferry__hmem_ptr info;
    struct tu_pair p;
    uint8_t *host = tu_alloc_buf(len);
    ferry_mem_t *hmem, *mem;
    ferry_rmem_t *rmem;
    void *bufs[2] = {NULL, NULL};
    void *fill = malloc(len);

    (void)cuda_ops();
    ck_assert_int_eq(ferry_device_alloc(0, len, &bufs[0]), 0);
    managed_call(&bufs[1], len);
    ck_assert_int_eq(ferry__hmem()->ptr_info(bufs[1], &info), 0);
    ck_assert_msg(info.device && info.managed,
                  "cuMemAllocManaged's memory is %s%s to ferry",
                  info.device ? "device memory" : "host memory",
                  info.managed ? ", managed" : ", not managed");
    tu_pair_open(&p, tu_providers[_i], NULL);
    hmem = tu_register(p.target, host, len, FERRY_ACCESS_REMOTE_WRITE);
    rmem = tu_share(hmem, p.peer);
    for (int b = 0; b < 2; b++) {
        struct ferry_iov iov = {.rmem = rmem, .len = len};
        ferry_req_t *req = NULL;

        ck_assert_int_eq(ferry_mem_register(p.init, bufs[b], len,
                                            FERRY_MEM_AUTO, -1, 0, &mem), 0);
        ck_assert_msg(mem->hmem_flags == (b == 0 ? FI_HMEM_DEVICE_ONLY : 0),
                      "%s memory registered (%s) with flags %#llx",
                      b == 0 ? "cuMemAlloc" : "managed", ferry_mem_path(mem),
                      (unsigned long long)mem->hmem_flags);
        tu_fill(fill, len, 20 + (uint64_t)b);
        ck_assert_int_eq(ferry_device_copy(bufs[b], fill, len), 0);
        iov.local = bufs[b];
        iov.lmem = mem;
        ck_assert_msg(ferry_write(p.peer, &iov, 1, NULL, &req) == 0,
                      "write from %s memory (%s): %s",
                      b == 0 ? "cuMemAlloc" : "managed", ferry_mem_path(mem),
                      ferry_last_error());
        ck_assert_msg(ferry_req_wait(req, 20000) == 0,
                      "write from %s memory (%s): %s",
                      b == 0 ? "cuMemAlloc" : "managed", ferry_mem_path(mem),
                      ferry_last_error());
        ferry_req_close(req);
        ck_assert_uint_eq(tu_check(host, len, 20 + (uint64_t)b), SIZE_MAX);
        ck_assert_int_eq(ferry_mem_close(mem), 0);
    }
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(hmem), 0);
    tu_pair_close(&p);
    ck_assert_int_eq(ferry_device_free(bufs[0]), 0);
    managed_call(&bufs[1], 0);
    free(fill);
    tu_free_buf(host, len);
}
END_TEST

/* Operations the context has handed to the provider, all rails. */
static uint64_t ops_posted(ferry_context_t *ctx)
{
    struct ferry_stats st = tu_stats(ctx);
    uint64_t n = 0;

    for (size_t r = 0; r < TU_ARRAY_LEN(st.rma_ops_posted); r++)
        n += st.rma_ops_posted[r];
    return n;
}

/*
 * A 16 MiB write from device memory that shm registered goes as one
 * operation (shm copies it with one cudaMemcpy through CUDA IPC, at a
 * few microseconds an operation), not as sixteen of the context's 1 MiB;
 * on every path its bytes arrive.
 */
START_TEST(test_device_writes_whole)
{
    const size_t len = 16u << 20;
    struct tu_pair p;
    uint8_t *host = tu_alloc_buf(len);
    ferry_mem_t *hmem, *mem = NULL;
    ferry_rmem_t *rmem;
    ferry_req_t *req = NULL;
    void *dev = NULL, *fill = malloc(len);
    struct ferry_iov iov = {.len = len};
    uint64_t before;
    bool whole;

    (void)cuda_ops();
    ck_assert_int_eq(ferry_device_alloc(0, len, &dev), 0);
    tu_fill(fill, len, 31);
    ck_assert_int_eq(ferry_device_copy(dev, fill, len), 0);
    tu_pair_open(&p, tu_providers[_i], NULL);
    hmem = tu_register(p.target, host, len, FERRY_ACCESS_REMOTE_WRITE);
    rmem = tu_share(hmem, p.peer);
    ck_assert_int_eq(ferry_mem_register(p.init, dev, len, FERRY_MEM_AUTO, -1,
                                        0, &mem), 0);
    whole = strcmp(tu_providers[_i], "shm") == 0 && !mem->staged;
    iov.local = dev;
    iov.lmem = mem;
    iov.rmem = rmem;
    before = ops_posted(p.init);
    ck_assert_msg(ferry_write(p.peer, &iov, 1, NULL, &req) == 0, "write: %s",
                  ferry_last_error());
    ck_assert_msg(ferry_req_wait(req, 20000) == 0, "wait (%s): %s",
                  ferry_mem_path(mem), ferry_last_error());
    ferry_req_close(req);
    ck_assert_uint_eq(tu_check(host, len, 31), SIZE_MAX);
    if (whole)
        ck_assert_msg(ops_posted(p.init) - before == 1,
                      "16 MiB of device memory (%s) over shm went as %llu "
                      "operations, not one", ferry_mem_path(mem),
                      (unsigned long long)(ops_posted(p.init) - before));
    ck_assert_int_eq(ferry_mem_close(mem), 0);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(hmem), 0);
    tu_pair_close(&p);
    ck_assert_int_eq(ferry_device_free(dev), 0);
    free(fill);
    tu_free_buf(host, len);
}
END_TEST

/* ---- running ------------------------------------------------------------- */

/* Prints the backend and status lines (for the stub test's child). */
static int print_status(void)
{
    const char *backend = ferry_device_backend();

    printf("%s\n%s\n", backend != NULL ? backend : "none",
           ferry_device_status());
    return 0;
}

/* Which backend loads, asked in a child so that this process never
 * initialises CUDA (Check's forked tests could not use it). */
static bool have_cuda(char *why, size_t len)
{
    char out[1024];
    char *nl;
    int fds[2];
    size_t got = 0;
    ssize_t n;
    pid_t pid;
    int st;

    snprintf(why, len, "could not ask a child process");
    if (pipe(fds) != 0)
        return false;
    if ((pid = fork()) < 0)
        return false;
    if (pid == 0) {
        dup2(fds[1], STDOUT_FILENO);
        close(fds[0]);
        close(fds[1]);
        print_status();
        fflush(stdout);
        _exit(0);
    }
    close(fds[1]);
    while (got + 1 < sizeof(out) &&
           (n = read(fds[0], out + got, sizeof(out) - 1 - got)) > 0)
        got += (size_t)n;
    out[got] = '\0';
    close(fds[0]);
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
        WEXITSTATUS(st) != 0)
        return false;
    if ((nl = strchr(out, '\n')) == NULL)
        return false;
    *nl = '\0';
    snprintf(why, len, "%s", nl + 1);
    if ((nl = strchr(why, '\n')) != NULL)
        *nl = '\0';
    return strcmp(out, "cuda") == 0;
}

static Suite *hmem_cuda_suite(bool gpu)
{
    Suite *s = suite_create("hmem_cuda");
    TCase *tc = tu_tcase(s, "loader", 30);

    if (!gpu)
        tcase_add_test(tc, test_no_backend_says_why);
    tcase_add_test(tc, test_stub_libcuda_is_refused);
    if (gpu) {
        tc = tu_tcase(s, "gpu", 120);
        tcase_add_test(tc, test_alloc_and_ptr_info);
        tcase_add_test(tc, test_alloc_errors_say_why);
        tcase_add_test(tc, test_fork_after_init_says_so);
        tcase_add_test(tc, test_pci_bus_id);
        tcase_add_test(tc, test_async_round_trip);
        tcase_add_test(tc, test_blocking_copy);
        tcase_add_test(tc, test_dmabuf);
        tcase_add_test(tc, test_flush_rdma_writes);
        tcase_add_test(tc, test_threads);
        tc = tu_tcase(s, "rcache", 120);
        tcase_add_loop_test(tc, test_rcache_reused_address, 0,
                            (int)tu_nproviders);
        tcase_add_loop_test(tc, test_device_only_registration, 0,
                            (int)tu_nproviders);
        tcase_add_loop_test(tc, test_device_writes_whole, 0,
                            (int)tu_nproviders);
    }
    return s;
}

int main(int argc, char **argv)
{
    char why[512];
    ssize_t n;
    bool gpu;
    int ret;

    if (argc == 2 && strcmp(argv[1], "--print-status") == 0)
        return print_status();
    /* The real backend, never the simulated device. */
    unsetenv("FERRY_SIM_DEVICES");
    n = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    self_exe[n > 0 ? n : 0] = '\0';

    gpu = have_cuda(why, sizeof(why));
    ret = tu_run(hmem_cuda_suite(gpu));
    if (ret != 0 || gpu)
        return ret;
    printf("SKIP: the GPU tests need the CUDA backend: %s\n", why);
    return 77;
}
