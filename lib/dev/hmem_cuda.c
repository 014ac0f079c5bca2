/*
 * The CUDA backend (hmem.h): CUDA's driver API from libcuda.so.1, which
 * is loaded with dlopen at run time.  libferry never links libcuda or
 * libcudart, so one build runs on machines with and without the NVIDIA
 * driver; without it, ferry__hmem_cuda_load() says why in a sentence.
 *
 * Symbols.  The driver exports several versions of many calls
 * (cuMemAlloc and cuMemAlloc_v2 ...), and cuda.h renames each call by
 * macro to the version its prototype describes.  Every pointer here gets
 * its type from that prototype (__typeof__), and is resolved either with
 * cuGetProcAddress for the CUDA_VERSION ferry is compiled against (when
 * the driver is at least that new: an older one refuses the version), or
 * with dlsym of the name cuda.h maps the call to, so a pointer always
 * matches the prototype its type comes from.
 *
 * Contexts.  Allocations, streams, events and copies need a current
 * context.  ferry uses each device's primary context (the one the CUDA
 * runtime uses too), retained on first use and kept until the process
 * ends, and pushes it before each such call and pops it after, so the
 * caller's current context is never changed.
 *
 * Threads.  The loader runs once (pthread_once) and what it sets is only
 * read afterwards; the primary contexts are the one thing set later,
 * under ctx_lock.  The driver API itself is thread-safe.
 *
 * Fork: like CUDA itself, the backend does not work in a child forked
 * after it loaded.
 */
#include "dev/hmem.h"

#include <stdio.h>

#if HAVE_CUDA
#include <cuda.h>
#endif

#if HAVE_CUDA && CUDA_VERSION >= 11030

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CUDA_LIB "libcuda.so.1"
/* Oldest driver ferry accepts: CUDA 11.0, for the pointer attributes
 * RANGE_START_ADDR and RANGE_SIZE that ptr_info relies on. */
#define MIN_DRIVER_VERSION 11000
/* The driver that knows CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE. */
#define PCIE_MAPPING_DRIVER_VERSION 12080

/* ---- the driver API ------------------------------------------------------ */

/*
 * The calls ferry makes, by the name cuda.h gives them.  Passed through
 * an X-macro, `#fn` is the base name (cuMemAlloc, what cuGetProcAddress
 * wants) while `fn` expands to the versioned name cuda.h's prototype
 * belongs to (cuMemAlloc_v2, what dlsym wants).
 */
#define CU_REQUIRED(X)                                                        \
    X(cuDriverGetVersion)                                                     \
    X(cuDeviceGetCount)                                                       \
    X(cuDeviceGet)                                                            \
    X(cuDeviceGetAttribute)                                                   \
    X(cuDeviceGetPCIBusId)                                                    \
    X(cuDevicePrimaryCtxRetain)                                               \
    X(cuCtxPushCurrent)                                                       \
    X(cuCtxPopCurrent)                                                        \
    X(cuPointerGetAttributes)                                                 \
    X(cuMemAlloc)                                                             \
    X(cuMemFree)                                                              \
    X(cuMemHostAlloc)                                                         \
    X(cuMemFreeHost)                                                          \
    X(cuMemcpy)                                                               \
    X(cuMemcpyAsync)                                                          \
    X(cuStreamCreate)                                                         \
    X(cuStreamDestroy)                                                        \
    X(cuStreamSynchronize)                                                    \
    X(cuEventCreate)                                                          \
    X(cuEventDestroy)                                                         \
    X(cuEventRecord)                                                          \
    X(cuEventQuery)

/* Calls older drivers lack; ferry does without them. */
#if HAVE_DECL_CUMEMGETHANDLEFORADDRESSRANGE
#define CU_OPTIONAL_DMABUF(X) X(cuMemGetHandleForAddressRange)
#else
#define CU_OPTIONAL_DMABUF(X)
#endif
#define CU_OPTIONAL(X) X(cuFlushGPUDirectRDMAWrites) CU_OPTIONAL_DMABUF(X)

#define CU_STR(x) #x
#define CU_XSTR(x) CU_STR(x)
#define CU_FIELD(fn) __typeof__(&fn) fn;

struct cu_api {
    /* Looked up with dlsym before cuInit: names without versions. */
    __typeof__(&cuInit) cuInit;
    __typeof__(&cuGetErrorName) cuGetErrorName;
    __typeof__(&cuGetErrorString) cuGetErrorString;
#if CUDA_VERSION >= 12000
    __typeof__(&cuGetProcAddress) cuGetProcAddress; /* optional */
#endif
    CU_REQUIRED(CU_FIELD)
    CU_OPTIONAL(CU_FIELD)
};

struct cu_sym {
    const char *base;     /* cuMemAlloc: for cuGetProcAddress */
    const char *exported; /* cuMemAlloc_v2: for dlsym */
    size_t offset;        /* of the pointer in struct cu_api */
    bool required;
};

#define CU_SYM_REQUIRED(fn)                                                   \
    {#fn, CU_XSTR(fn), offsetof(struct cu_api, fn), true},
#define CU_SYM_OPTIONAL(fn)                                                   \
    {#fn, CU_XSTR(fn), offsetof(struct cu_api, fn), false},

static const struct cu_sym cu_syms[] = {
    CU_REQUIRED(CU_SYM_REQUIRED)
    CU_OPTIONAL(CU_SYM_OPTIONAL)
};

/* dlsym's void * is stored into function pointers by their bytes. */
_Static_assert(sizeof(void *) == sizeof(void (*)(void)),
               "function and object pointers differ in size");

/* ---- what the loader sets (once) ----------------------------------------- */

struct cu_device {
    CUdevice dev;
    bool dmabuf; /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
    /* The primary context: ctx is written once, under ctx_lock, before
     * ctx_ready is set (release); a reader that sees ctx_ready (acquire)
     * sees ctx. */
    CUcontext ctx;
    atomic_bool ctx_ready;
    atomic_bool flush_warned; /* flush_rdma_writes logged its failure */
};

static struct cu_api cu;
static void *cu_lib;
static char cu_path[256]; /* the libcuda.so.1 that dlopen found */
static int cu_driver;     /* cuDriverGetVersion: 12040 for 12.4 */
static pid_t init_pid;    /* the process that called cuInit, if one did */
static struct cu_device *devices;
static int ndevices;
static size_t page_size;
static pthread_mutex_t ctx_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static const struct ferry__hmem_ops *load_ops;
static char load_why[512];

/* ---- errors -------------------------------------------------------------- */

/* Names of the errors ferry may meet, for when cuGetErrorName cannot help
 * (the toolkit's stub library answers every call with error 34). */
static const struct {
    int code;
    const char *name;
    const char *text;
} cu_known[] = {
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {4, "CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
    {34, "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"},
    {35, "CUDA_ERROR_INSUFFICIENT_DRIVER",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {46, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "CUDA-capable device(s) is/are busy or unavailable"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {304, "CUDA_ERROR_OPERATING_SYSTEM",
     "OS call failed or operation not supported on this OS"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "an illegal memory access was encountered"},
    {709, "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"},
    {800, "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
     "system has unsupported display driver / cuda driver combination"},
    {804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE",
     "forward compatibility was attempted on non supported HW"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

/* "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; a struct so that it can be
 * an argument of printf (it lives to the end of the full expression). */
struct cu_text {
    char s[160];
};

static struct cu_text cu_text(CUresult r)
{
    struct cu_text t;
    const char *name = NULL;
    const char *text = NULL;

    if (cu.cuGetErrorName != NULL &&
        cu.cuGetErrorName(r, &name) != CUDA_SUCCESS)
        name = NULL;
    if (cu.cuGetErrorString != NULL &&
        cu.cuGetErrorString(r, &text) != CUDA_SUCCESS)
        text = NULL;
    for (size_t i = 0; i < FERRY__ARRAY_LEN(cu_known); i++) {
        if (cu_known[i].code == (int)r) {
            if (name == NULL)
                name = cu_known[i].name;
            if (text == NULL)
                text = cu_known[i].text;
        }
    }
    if (name == NULL)
        snprintf(t.s, sizeof(t.s), "CUresult %d", (int)r);
    else if (text == NULL)
        snprintf(t.s, sizeof(t.s), "%s", name);
    else
        snprintf(t.s, sizeof(t.s), "%s (%s)", name, text);
    return t;
}

/* What the user can do about r, after a call failed with it. */
static const char *cu_advice(CUresult r)
{
    switch ((int)r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return "free memory or ask for less";
    case CUDA_ERROR_INVALID_VALUE:
        return "check that the pointers are memory of this process and "
               "the lengths stay inside their allocations";
    case CUDA_ERROR_NOT_INITIALIZED:
    case CUDA_ERROR_DEINITIALIZED:
        /* CUDA's state does not survive fork(): a child forked after
         * cuInit gets NOT_INITIALIZED from every call. */
        if (init_pid != 0 && init_pid != getpid())
            return "CUDA was initialised in this process's parent before "
                   "it forked this one, and CUDA does not work in a child "
                   "forked after that: start the child with exec (or "
                   "posix_spawn), or use the GPU only after the fork";
        return "the CUDA driver is shutting down: was ferry called "
               "during process exit?";
    case CUDA_ERROR_INVALID_CONTEXT:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
        return "the device's primary context was reset "
               "(cudaDeviceReset?) while ferry used it";
    case 46: /* CUDA_ERROR_DEVICE_UNAVAILABLE (CUDA 11.4+ headers) */
        return "the GPU is in exclusive-process mode and another process "
               "holds it (see nvidia-smi's Compute Mode)";
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
        return "an earlier fault (a kernel's bad memory access?) broke "
               "this device's context for the whole process: restart it";
    case CUDA_ERROR_NOT_SUPPORTED:
        return "this device or driver cannot do it";
    default:
        return "see nvidia-smi and the kernel log (dmesg) for GPU errors";
    }
}

static int cu_code(CUresult r)
{
    switch ((int)r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
        return FERRY_ENOMEM;
    case CUDA_ERROR_INVALID_VALUE:
        return FERRY_EINVAL;
    case CUDA_ERROR_NOT_SUPPORTED:
        return FERRY_ENOTSUP;
    default:
        return FERRY_EIO;
    }
}

/* Records "<what>: <error name (text)>: <advice>" and returns its code. */
__attribute__((format(printf, 2, 3)))
static int cu_fail(CUresult r, const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ferry__error(cu_code(r), "%s: %s: %s", what, cu_text(r).s,
                        cu_advice(r));
}

static int check_ordinal(int ordinal, const char *what)
{
    if (ordinal >= 0 && ordinal < ndevices)
        return 0;
    return ferry__error(FERRY_EINVAL,
                        "%s: CUDA device %d does not exist; this process "
                        "sees devices 0 to %d", what, ordinal, ndevices - 1);
}

/* ---- primary contexts ---------------------------------------------------- */

/* The device's primary context, retained on first use (never released:
 * it lives as long as the process, as the CUDA runtime's does). */
static CUresult primary_ctx(int ordinal, CUcontext *ctx)
{
    struct cu_device *d = &devices[ordinal];
    CUresult r = CUDA_SUCCESS;

    /* Acquire: pairs with the release store below, so d->ctx is the value
     * written before ctx_ready was set. */
    if (atomic_load_explicit(&d->ctx_ready, memory_order_acquire)) {
        *ctx = d->ctx;
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&ctx_lock);
    if (!atomic_load_explicit(&d->ctx_ready, memory_order_relaxed)) {
        CUcontext c = NULL;

        r = cu.cuDevicePrimaryCtxRetain(&c, d->dev);
        if (r == CUDA_SUCCESS) {
            d->ctx = c;
            /* Release: publishes d->ctx to the lock-free readers above. */
            atomic_store_explicit(&d->ctx_ready, true, memory_order_release);
        }
    }
    pthread_mutex_unlock(&ctx_lock);
    if (r == CUDA_SUCCESS)
        *ctx = d->ctx;
    return r;
}

/* Makes the device's primary context current on top of the caller's
 * (undone by ctx_pop); *what names the call that failed. */
static CUresult ctx_push_raw(int ordinal, const char **what)
{
    CUcontext ctx;
    CUresult r = primary_ctx(ordinal, &ctx);

    if (r != CUDA_SUCCESS) {
        *what = "cuDevicePrimaryCtxRetain";
        return r;
    }
    r = cu.cuCtxPushCurrent(ctx);
    if (r != CUDA_SUCCESS)
        *what = "cuCtxPushCurrent";
    return r;
}

/* ctx_push_raw with the sentence recorded; for calls that return a code. */
static int ctx_push(int ordinal, const char *call)
{
    const char *what = NULL;
    CUresult r = ctx_push_raw(ordinal, &what);

    if (r == CUDA_SUCCESS)
        return 0;
    return cu_fail(r, "%s: %s for CUDA device %d", call, what, ordinal);
}

/* Puts the caller's context back. */
static void ctx_pop(void)
{
    CUcontext popped;
    CUresult r = cu.cuCtxPopCurrent(&popped);

    if (r != CUDA_SUCCESS)
        FERRY_LOG_WARN("cuCtxPopCurrent failed: %s: the calling thread's "
                       "CUDA context may have changed", cu_text(r).s);
}

/* The device whose context host allocations are made and freed in,
 * chosen at the first and kept (-1 until then). */
static atomic_int host_device = -1;

/* With CU_MEMHOSTALLOC_PORTABLE any context will do: one already
 * retained if there is one, rather than creating device 0's just for
 * this; then always the same, so frees run where the allocations did. */
static int host_ordinal(void)
{
    int chosen = atomic_load_explicit(&host_device, memory_order_relaxed);
    int expected = -1;

    if (chosen >= 0)
        return chosen;
    chosen = 0;
    for (int i = 0; i < ndevices; i++) {
        if (atomic_load_explicit(&devices[i].ctx_ready, memory_order_acquire)) {
            chosen = i;
            break;
        }
    }
    /* Relaxed: only the integer is shared; the first choice wins. */
    if (!atomic_compare_exchange_strong_explicit(&host_device, &expected,
                                                 chosen, memory_order_relaxed,
                                                 memory_order_relaxed))
        chosen = expected;
    return chosen;
}

/* ---- the ops ------------------------------------------------------------- */

struct ferry__hmem_stream {
    CUstream stream;
    int ordinal;
};

struct ferry__hmem_event {
    CUevent event;
    int ordinal;
};

static int cuda_device_count(int *count)
{
    *count = ndevices;
    return 0;
}

static int cuda_ptr_info(const void *ptr, struct ferry__hmem_ptr *info)
{
    CUpointer_attribute attrs[] = {
        CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
        CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
        CU_POINTER_ATTRIBUTE_BUFFER_ID,
        CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
        CU_POINTER_ATTRIBUTE_RANGE_SIZE,
        CU_POINTER_ATTRIBUTE_IS_MANAGED,
    };
    CUmemorytype type = (CUmemorytype)0;
    int ordinal = -1;
    unsigned long long buffer_id = 0;
    CUdeviceptr start = 0;
    size_t size = 0;
    unsigned int managed = 0; /* a bool, as the driver writes it */
    void *data[] = {&type, &ordinal, &buffer_id, &start, &size, &managed};
    CUresult r;

    memset(info, 0, sizeof(*info));
    info->ordinal = -1;
    if (ptr == NULL)
        return 0;
    /* No context needed: with unified addressing the driver knows every
     * pointer.  Memory it does not know gets type 0 and CUDA_SUCCESS
     * (or CUDA_ERROR_INVALID_VALUE from some drivers): host memory. */
    r = cu.cuPointerGetAttributes((unsigned)FERRY__ARRAY_LEN(attrs), attrs,
                                  data, (CUdeviceptr)(uintptr_t)ptr);
    if (r == CUDA_ERROR_INVALID_VALUE)
        return 0;
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuPointerGetAttributes(%p)", ptr);
    /* Host (pinned or registered) memory is host memory to ferry. */
    if (type != CU_MEMORYTYPE_DEVICE)
        return 0;
    if (ordinal < 0 || ordinal >= ndevices)
        return ferry__error(FERRY_EIO,
                            "cuPointerGetAttributes(%p): device memory of "
                            "CUDA device %d, which this process does not "
                            "see (devices 0 to %d)", ptr, ordinal,
                            ndevices - 1);
    info->device = true;
    info->managed = managed != 0;
    info->ordinal = ordinal;
    info->buffer_id = buffer_id;
    info->base = (uintptr_t)start;
    info->size = size;
    return 0;
}

static int cuda_pci_bus_id(int ordinal, char *buf, size_t len)
{
    char raw[64];
    unsigned domain, bus, dev, fn;
    int n;
    CUresult r;
    int ret;

    if ((ret = check_ordinal(ordinal, "pci_bus_id")) != 0)
        return ret;
    r = cu.cuDeviceGetPCIBusId(raw, (int)sizeof(raw), devices[ordinal].dev);
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuDeviceGetPCIBusId(device %d)", ordinal);
    raw[sizeof(raw) - 1] = '\0';
    /* "0000:3B:00.0" (some drivers give an 8-digit domain): rewritten
     * lower case, with a 4-digit domain, as hwloc and sysfs write it. */
    if (sscanf(raw, "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4)
        return ferry__error(FERRY_EIO,
                            "cuDeviceGetPCIBusId(device %d) gave '%s', not "
                            "domain:bus:device.function", ordinal, raw);
    n = snprintf(buf, len, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
    if (n < 0 || (size_t)n >= len)
        return ferry__error(FERRY_ENOSPC,
                            "pci_bus_id(device %d): %d bytes needed, the "
                            "buffer has %zu", ordinal, n + 1, len);
    return 0;
}

static int cuda_dmabuf_fd(const void *ptr, size_t len, int *fd,
                          uint64_t *offset)
{
#if HAVE_DECL_CUMEMGETHANDLEFORADDRESSRANGE
    struct ferry__hmem_ptr info;
    uintptr_t p = (uintptr_t)ptr;
    uintptr_t start, end;
    int dmabuf = -1;
    CUresult r, first = CUDA_SUCCESS;
    int ret;

    *fd = -1;
    *offset = 0;
    if ((ret = cuda_ptr_info(ptr, &info)) != 0)
        return ret;
    if (!info.device)
        return ferry__error(FERRY_EINVAL,
                            "dma-buf export of %p: not CUDA device memory",
                            ptr);
    if (len == 0 || p - info.base > info.size ||
        len > info.size - (p - info.base))
        return ferry__error(FERRY_ERANGE,
                            "dma-buf export of [%p, +%zu): outside its "
                            "allocation [0x%" PRIxPTR ", +%zu)",
                            ptr, len, info.base, info.size);
    if (cu.cuMemGetHandleForAddressRange == NULL)
        return ferry__error(FERRY_ENOTSUP,
                            "dma-buf export: the CUDA %d.%d driver lacks "
                            "cuMemGetHandleForAddressRange (11.7 or newer "
                            "has it): update the NVIDIA driver",
                            cu_driver / 1000, cu_driver % 1000 / 10);
    if (!devices[info.ordinal].dmabuf)
        return ferry__error(FERRY_ENOTSUP,
                            "dma-buf export: CUDA device %d cannot export "
                            "dma-buf (CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED "
                            "is 0): it needs the open NVIDIA kernel module "
                            "and Linux 5.12 or newer", info.ordinal);
    /* The driver exports whole host pages only: the fd covers the pages
     * around [ptr, ptr + len), and ptr lies offset bytes into it. */
    start = p & ~(uintptr_t)(page_size - 1);
    end = (p + len + page_size - 1) & ~(uintptr_t)(page_size - 1);
    if ((ret = ctx_push(info.ordinal, "dma-buf export")) != 0)
        return ret;
    r = CUDA_ERROR_NOT_SUPPORTED;
#if CUDA_VERSION >= PCIE_MAPPING_DRIVER_VERSION
    /* A mapping through the PCIe BAR, which a NIC can reach, rather than
     * a chip-to-chip one (Grace Hopper); older drivers refuse the flag. */
    if (cu_driver >= PCIE_MAPPING_DRIVER_VERSION) {
        r = cu.cuMemGetHandleForAddressRange(
            &dmabuf, (CUdeviceptr)start, end - start,
            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            CU_MEM_RANGE_FLAG_DMA_BUF_MAPPING_TYPE_PCIE);
        first = r;
    }
#endif
    if (r != CUDA_SUCCESS)
        r = cu.cuMemGetHandleForAddressRange(
            &dmabuf, (CUdeviceptr)start, end - start,
            CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    ctx_pop();
    if (r != CUDA_SUCCESS) {
        int code = r == CUDA_ERROR_NOT_SUPPORTED ||
                           r == CUDA_ERROR_INVALID_VALUE
                       ? FERRY_ENOTSUP
                       : cu_code(r);

        return ferry__error(code,
                            "dma-buf export of [0x%" PRIxPTR ", +%zu) on "
                            "CUDA device %d: cuMemGetHandleForAddressRange "
                            "failed: %s%s%s: %s", start,
                            (size_t)(end - start), info.ordinal,
                            cu_text(r).s,
                            first != CUDA_SUCCESS ? "; with the PCIe "
                                                    "mapping flag: " : "",
                            first != CUDA_SUCCESS ? cu_text(first).s : "",
                            cu_advice(r));
    }
    *fd = dmabuf;
    *offset = p - start;
    return 0;
#else
    (void)ptr;
    (void)len;
    *fd = -1;
    *offset = 0;
    return ferry__error(FERRY_ENOTSUP,
                        "dma-buf export: ferry was built against CUDA %d.%d "
                        "headers, which lack cuMemGetHandleForAddressRange "
                        "(11.7 or newer): rebuild ferry against a newer "
                        "CUDA toolkit", CUDA_VERSION / 1000,
                        CUDA_VERSION % 1000 / 10);
#endif
}

static int cuda_host_alloc(size_t len, void **ptr)
{
    int ordinal = host_ordinal();
    CUresult r;
    int ret;

    *ptr = NULL;
    if (len == 0)
        return ferry__error(FERRY_EINVAL, "host_alloc: len is 0");
    if ((ret = ctx_push(ordinal, "host_alloc")) != 0)
        return ret;
    r = cu.cuMemHostAlloc(ptr, len, CU_MEMHOSTALLOC_PORTABLE);
    ctx_pop();
    if (r != CUDA_SUCCESS) {
        *ptr = NULL;
        return cu_fail(r, "cuMemHostAlloc(%zu bytes, portable)", len);
    }
    return 0;
}

static void cuda_host_free(void *ptr)
{
    const char *what = NULL;
    CUresult r;

    if (ptr == NULL)
        return;
    r = ctx_push_raw(host_ordinal(), &what);
    if (r != CUDA_SUCCESS) {
        FERRY_LOG_WARN("host_free(%p): %s failed: %s: the pinned memory "
                       "stays allocated", ptr, what, cu_text(r).s);
        return;
    }
    r = cu.cuMemFreeHost(ptr);
    ctx_pop();
    if (r != CUDA_SUCCESS)
        FERRY_LOG_WARN("cuMemFreeHost(%p) failed: %s", ptr, cu_text(r).s);
}

static int cuda_dev_alloc(int ordinal, size_t len, void **ptr)
{
    CUdeviceptr dptr = 0;
    CUresult r;
    int ret;

    *ptr = NULL;
    if ((ret = check_ordinal(ordinal, "dev_alloc")) != 0)
        return ret;
    if (len == 0)
        return ferry__error(FERRY_EINVAL, "dev_alloc: len is 0");
    if ((ret = ctx_push(ordinal, "dev_alloc")) != 0)
        return ret;
    r = cu.cuMemAlloc(&dptr, len);
    ctx_pop();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuMemAlloc(%zu bytes) on CUDA device %d", len,
                       ordinal);
    *ptr = (void *)(uintptr_t)dptr;
    return 0;
}

static int cuda_dev_free(void *ptr)
{
    struct ferry__hmem_ptr info;
    CUresult r;
    int ret;

    if (ptr == NULL)
        return 0;
    if ((ret = cuda_ptr_info(ptr, &info)) != 0)
        return ret;
    if (!info.device)
        return ferry__error(FERRY_EINVAL,
                            "dev_free(%p): not CUDA device memory", ptr);
    if (info.base != (uintptr_t)ptr)
        return ferry__error(FERRY_EINVAL,
                            "dev_free(%p): %zu bytes into the allocation at "
                            "0x%" PRIxPTR "; free the pointer dev_alloc "
                            "returned", ptr,
                            (size_t)((uintptr_t)ptr - info.base), info.base);
    if ((ret = ctx_push(info.ordinal, "dev_free")) != 0)
        return ret;
    r = cu.cuMemFree((CUdeviceptr)(uintptr_t)ptr);
    ctx_pop();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuMemFree(%p) on CUDA device %d", ptr,
                       info.ordinal);
    return 0;
}

static int cuda_stream_create(int ordinal, struct ferry__hmem_stream **stream)
{
    struct ferry__hmem_stream *s;
    CUresult r;
    int ret;

    *stream = NULL;
    if ((ret = check_ordinal(ordinal, "stream_create")) != 0)
        return ret;
    if ((s = calloc(1, sizeof(*s))) == NULL)
        return ferry__error(FERRY_ENOMEM, "stream_create: out of memory");
    s->ordinal = ordinal;
    if ((ret = ctx_push(ordinal, "stream_create")) != 0) {
        free(s);
        return ret;
    }
    /* Non-blocking: ferry's copies neither wait for nor hold up the
     * application's work on the legacy default stream. */
    r = cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
    ctx_pop();
    if (r != CUDA_SUCCESS) {
        free(s);
        return cu_fail(r, "cuStreamCreate on CUDA device %d", ordinal);
    }
    *stream = s;
    return 0;
}

/* The destructors push the owning device's context, though the driver
 * finds it from the handle, and go on when that fails (process exit). */
static void cuda_stream_destroy(struct ferry__hmem_stream *stream)
{
    const char *what = NULL;
    bool pushed;
    CUresult r;

    if (stream == NULL)
        return;
    pushed = ctx_push_raw(stream->ordinal, &what) == CUDA_SUCCESS;
    /* Returns at once; the driver frees the stream when its copies end. */
    r = cu.cuStreamDestroy(stream->stream);
    if (pushed)
        ctx_pop();
    if (r != CUDA_SUCCESS)
        FERRY_LOG_DEBUG("cuStreamDestroy on CUDA device %d failed: %s",
                        stream->ordinal, cu_text(r).s);
    free(stream);
}

static int cuda_event_create(int ordinal, struct ferry__hmem_event **event)
{
    struct ferry__hmem_event *e;
    CUresult r;
    int ret;

    *event = NULL;
    if ((ret = check_ordinal(ordinal, "event_create")) != 0)
        return ret;
    if ((e = calloc(1, sizeof(*e))) == NULL)
        return ferry__error(FERRY_ENOMEM, "event_create: out of memory");
    e->ordinal = ordinal;
    if ((ret = ctx_push(ordinal, "event_create")) != 0) {
        free(e);
        return ret;
    }
    r = cu.cuEventCreate(&e->event, CU_EVENT_DISABLE_TIMING);
    ctx_pop();
    if (r != CUDA_SUCCESS) {
        free(e);
        return cu_fail(r, "cuEventCreate on CUDA device %d", ordinal);
    }
    *event = e;
    return 0;
}

static void cuda_event_destroy(struct ferry__hmem_event *event)
{
    const char *what = NULL;
    bool pushed;
    CUresult r;

    if (event == NULL)
        return;
    pushed = ctx_push_raw(event->ordinal, &what) == CUDA_SUCCESS;
    r = cu.cuEventDestroy(event->event);
    if (pushed)
        ctx_pop();
    if (r != CUDA_SUCCESS)
        FERRY_LOG_DEBUG("cuEventDestroy on CUDA device %d failed: %s",
                        event->ordinal, cu_text(r).s);
    free(event);
}

static int cuda_copy_async(struct ferry__hmem_stream *stream, void *dst,
                           const void *src, size_t len,
                           struct ferry__hmem_event *event)
{
    CUresult r = CUDA_SUCCESS;
    int ret;

    if (event != NULL && event->ordinal != stream->ordinal)
        return ferry__error(FERRY_EINVAL,
                            "copy_async: an event of CUDA device %d cannot "
                            "be recorded on a stream of device %d",
                            event->ordinal, stream->ordinal);
    if ((ret = ctx_push(stream->ordinal, "copy_async")) != 0)
        return ret;
    /* Unified addressing: the driver tells host from device memory by the
     * pointers.  From pageable host memory the copy is staged by the
     * driver and returns only once the source has been read. */
    if (len > 0)
        r = cu.cuMemcpyAsync((CUdeviceptr)(uintptr_t)dst,
                             (CUdeviceptr)(uintptr_t)src, len,
                             stream->stream);
    if (r != CUDA_SUCCESS) {
        ctx_pop();
        return cu_fail(r, "cuMemcpyAsync(%p <- %p, %zu bytes) on CUDA "
                       "device %d", dst, src, len, stream->ordinal);
    }
    if (event != NULL)
        r = cu.cuEventRecord(event->event, stream->stream);
    ctx_pop();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuEventRecord on CUDA device %d after a copy of "
                       "%zu bytes", stream->ordinal, len);
    return 0;
}

static int cuda_event_done(struct ferry__hmem_event *event)
{
    CUresult r;
    int ret;

    if ((ret = ctx_push(event->ordinal, "event_done")) != 0)
        return ret;
    r = cu.cuEventQuery(event->event);
    ctx_pop();
    if (r == CUDA_SUCCESS)
        return 1;
    if (r == CUDA_ERROR_NOT_READY)
        return 0;
    return cu_fail(r, "a copy on CUDA device %d failed (cuEventQuery)",
                   event->ordinal);
}

static int cuda_copy(void *dst, const void *src, size_t len)
{
    struct ferry__hmem_ptr d, s;
    int ordinal;
    CUresult r;
    int ret;

    if (len == 0)
        return 0;
    if ((ret = cuda_ptr_info(dst, &d)) != 0 ||
        (ret = cuda_ptr_info(src, &s)) != 0)
        return ret;
    if (!d.device && !s.device) {
        memmove(dst, src, len);
        return 0;
    }
    ordinal = s.device ? s.ordinal : d.ordinal;
    if ((ret = ctx_push(ordinal, "copy")) != 0)
        return ret;
    r = cu.cuMemcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src,
                    len);
    /* cuMemcpy may return before the data has landed (device to device,
     * or from pageable host memory once it is staged): wait for the
     * legacy default stream it ran on. */
    if (r == CUDA_SUCCESS)
        r = cu.cuStreamSynchronize(CU_STREAM_LEGACY);
    ctx_pop();
    if (r != CUDA_SUCCESS)
        return cu_fail(r, "cuMemcpy(%p <- %p, %zu bytes) on CUDA device %d",
                       dst, src, len, ordinal);
    return 0;
}

static void cuda_flush_rdma_writes(int ordinal)
{
    const char *what = "cuFlushGPUDirectRDMAWrites";
    CUresult r;

    if (ordinal < 0 || ordinal >= ndevices) {
        FERRY_LOG_WARN("flush_rdma_writes: CUDA device %d does not exist",
                       ordinal);
        return;
    }
    r = ctx_push_raw(ordinal, &what);
    if (r == CUDA_SUCCESS) {
        what = "cuFlushGPUDirectRDMAWrites";
        r = cu.cuFlushGPUDirectRDMAWrites(
            CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX,
            CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER);
        ctx_pop();
    }
    /* Once per device: this runs on every completed RDMA write. */
    if (r != CUDA_SUCCESS &&
        !atomic_exchange(&devices[ordinal].flush_warned, true))
        FERRY_LOG_WARN("%s on CUDA device %d failed: %s: RDMA writes into "
                       "its memory may not be visible to its kernels at "
                       "once (logged once)", what, ordinal, cu_text(r).s);
}

static struct ferry__hmem_ops cuda_ops = {
    .name = "cuda",
    .device_count = cuda_device_count,
    .ptr_info = cuda_ptr_info,
    .pci_bus_id = cuda_pci_bus_id,
    .dmabuf_fd = cuda_dmabuf_fd,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .dev_alloc = cuda_dev_alloc,
    .dev_free = cuda_dev_free,
    .stream_create = cuda_stream_create,
    .stream_destroy = cuda_stream_destroy,
    .event_create = cuda_event_create,
    .event_destroy = cuda_event_destroy,
    .copy_async = cuda_copy_async,
    .event_done = cuda_event_done,
    .copy = cuda_copy,
    .flush_rdma_writes = cuda_flush_rdma_writes,
};

/* ---- loading ------------------------------------------------------------- */

/* snprintf through a va_list: the loader's sentences are cut to their
 * buffers on purpose, and -Wformat-truncation need not say so. */
__attribute__((format(printf, 3, 4)))
static void say(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
}

/* After cuInit failed with r: what the user can do, into buf. */
static const char *init_advice(CUresult r, char *buf, size_t len)
{
    const char *visible = getenv("CUDA_VISIBLE_DEVICES");

    switch ((int)r) {
    case CUDA_ERROR_NO_DEVICE:
        if (visible != NULL)
            say(buf, len, "no GPU is visible to this process "
                "(CUDA_VISIBLE_DEVICES=\"%s\")", visible);
        else
            say(buf, len, "the driver finds no GPU; see nvidia-smi");
        break;
    case 34: /* CUDA_ERROR_STUB_LIBRARY */
        say(buf, len, "%s is the CUDA toolkit's stub, not the driver: "
            "take lib64/stubs out of LD_LIBRARY_PATH", cu_path);
        break;
    case 35: /* CUDA_ERROR_INSUFFICIENT_DRIVER */
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE:
        say(buf, len, "libcuda.so.1 does not match the kernel module: "
            "reboot or reinstall the NVIDIA driver");
        break;
    case CUDA_ERROR_NOT_PERMITTED:
    case CUDA_ERROR_OPERATING_SYSTEM:
        say(buf, len, "this process may not open /dev/nvidia* "
            "(a container without GPUs?)");
        break;
    case 46: /* CUDA_ERROR_DEVICE_UNAVAILABLE */
    case CUDA_ERROR_SYSTEM_NOT_READY:
        say(buf, len, "the GPUs are not ready (nvidia-fabricmanager "
            "not running?); see nvidia-smi");
        break;
    default:
        say(buf, len, "see nvidia-smi and dmesg");
        break;
    }
    return buf;
}

static void *lookup(const struct cu_sym *s, bool use_proc_address)
{
#if CUDA_VERSION >= 12000
    if (use_proc_address) {
        CUdriverProcAddressQueryResult status =
            CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        void *p = NULL;

        if (cu.cuGetProcAddress(s->base, &p, CUDA_VERSION,
                                CU_GET_PROC_ADDRESS_DEFAULT,
                                &status) == CUDA_SUCCESS &&
            status == CU_GET_PROC_ADDRESS_SUCCESS && p != NULL)
            return p;
    }
#else
    (void)use_proc_address;
#endif
    return dlsym(cu_lib, s->exported);
}

/* dlsym of the name cuda.h gives fn (cuGetProcAddress_v2), into cu. */
#define LOAD_BASIC(fn)                                                        \
    do {                                                                      \
        void *p_ = dlsym(cu_lib, CU_XSTR(fn));                                \
        memcpy(&cu.fn, &p_, sizeof(p_));                                      \
    } while (0)

static const struct ferry__hmem_ops *cuda_load(char *why, size_t len)
{
    char advice[256];
    bool use_proc_address = false;
    bool initialised = false;
    int count = 0;
    Dl_info dl;
    CUresult r;
    long page;

    cu_lib = dlopen(CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (cu_lib == NULL) {
        const char *err = dlerror();

        if (err == NULL)
            err = "no reason given";
        if (strstr(err, "cannot open shared object file") != NULL)
            say(why, len, "%s not found (dlopen: %s): no NVIDIA driver "
                "on this machine", CUDA_LIB, err);
        else
            say(why, len, "%s could not be loaded (dlopen: %s): "
                "reinstall the NVIDIA driver", CUDA_LIB, err);
        return NULL;
    }
    LOAD_BASIC(cuInit);
    LOAD_BASIC(cuGetErrorName);
    LOAD_BASIC(cuGetErrorString);
    say(cu_path, sizeof(cu_path), "%s", CUDA_LIB);
    if (cu.cuInit != NULL && dladdr((void *)cu.cuInit, &dl) != 0 &&
        dl.dli_fname != NULL)
        say(cu_path, sizeof(cu_path), "%s", dl.dli_fname);
    if (cu.cuInit == NULL || cu.cuGetErrorName == NULL ||
        cu.cuGetErrorString == NULL) {
        say(why, len, "driver too old: %s missing from %s: update the "
            "NVIDIA driver",
            cu.cuInit == NULL ? "cuInit"
            : cu.cuGetErrorName == NULL ? "cuGetErrorName"
            : "cuGetErrorString",
            cu_path);
        goto fail;
    }
    r = cu.cuInit(0);
    /* The driver may have started threads: from here on the library
     * stays loaded, whatever happens. */
    initialised = r == CUDA_SUCCESS;
    init_pid = getpid();
    if (r != CUDA_SUCCESS) {
        say(why, len, "cuInit failed: %s: %s", cu_text(r).s,
            init_advice(r, advice, sizeof(advice)));
        goto fail;
    }
    LOAD_BASIC(cuDriverGetVersion);
    if (cu.cuDriverGetVersion == NULL) {
        say(why, len, "driver too old: cuDriverGetVersion missing from "
            "%s: update the NVIDIA driver", cu_path);
        goto fail;
    }
    r = cu.cuDriverGetVersion(&cu_driver);
    if (r != CUDA_SUCCESS) {
        say(why, len, "cuDriverGetVersion failed: %s: %s", cu_text(r).s,
            cu_advice(r));
        goto fail;
    }
    if (cu_driver < MIN_DRIVER_VERSION) {
        say(why, len, "driver too old: %s is CUDA %d.%d, ferry needs "
            "%d.%d or newer: update the NVIDIA driver", cu_path,
            cu_driver / 1000, cu_driver % 1000 / 10,
            MIN_DRIVER_VERSION / 1000, MIN_DRIVER_VERSION % 1000 / 10);
        goto fail;
    }
#if CUDA_VERSION >= 12000
    /* A driver older than our headers refuses our CUDA_VERSION: dlsym. */
    LOAD_BASIC(cuGetProcAddress);
    use_proc_address = cu.cuGetProcAddress != NULL && cu_driver >= CUDA_VERSION;
#endif
    for (size_t i = 0; i < FERRY__ARRAY_LEN(cu_syms); i++) {
        void *p = lookup(&cu_syms[i], use_proc_address);

        if (p == NULL && cu_syms[i].required) {
            say(why, len, "driver too old: %s missing from %s (CUDA "
                "%d.%d): update the NVIDIA driver", cu_syms[i].exported,
                cu_path, cu_driver / 1000, cu_driver % 1000 / 10);
            goto fail;
        }
        memcpy((char *)&cu + cu_syms[i].offset, &p, sizeof(p));
    }
    if (cu.cuFlushGPUDirectRDMAWrites == NULL)
        cuda_ops.flush_rdma_writes = NULL;

    r = cu.cuDeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count <= 0) {
        if (r != CUDA_SUCCESS)
            say(why, len, "cuDeviceGetCount failed: %s: %s",
                cu_text(r).s, cu_advice(r));
        else
            say(why, len, "cuDeviceGetCount found no CUDA device: %s",
                init_advice(CUDA_ERROR_NO_DEVICE, advice, sizeof(advice)));
        goto fail;
    }
    if ((devices = calloc((size_t)count, sizeof(*devices))) == NULL) {
        say(why, len, "out of memory for %d CUDA devices", count);
        goto fail;
    }
    for (int i = 0; i < count; i++) {
        int attr = 0;

        r = cu.cuDeviceGet(&devices[i].dev, i);
        if (r != CUDA_SUCCESS) {
            say(why, len, "cuDeviceGet(%d) failed: %s: %s", i,
                cu_text(r).s, cu_advice(r));
            goto fail;
        }
        atomic_init(&devices[i].ctx_ready, false);
        atomic_init(&devices[i].flush_warned, false);
#if HAVE_DECL_CUMEMGETHANDLEFORADDRESSRANGE
        /* An older driver does not know the attribute: no dma-buf. */
        if (cu.cuDeviceGetAttribute(&attr,
                                    CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED,
                                    devices[i].dev) != CUDA_SUCCESS)
            attr = 0;
#endif
        devices[i].dmabuf = attr != 0;
    }
    ndevices = count;
    page = sysconf(_SC_PAGESIZE);
    page_size = page > 0 ? (size_t)page : 4096;

    say(why, len, "CUDA driver %d.%d, %d device%s (%s)",
        cu_driver / 1000, cu_driver % 1000 / 10, count,
        count == 1 ? "" : "s", cu_path);
    return &cuda_ops;

fail:
    free(devices);
    devices = NULL;
    memset(&cu, 0, sizeof(cu));
    if (!initialised) {
        dlclose(cu_lib);
        cu_lib = NULL;
    }
    return NULL;
}

static void cuda_load_once(void)
{
    load_ops = cuda_load(load_why, sizeof(load_why));
}

const struct ferry__hmem_ops *ferry__hmem_cuda_load(char *why, size_t len)
{
    pthread_once(&load_once, cuda_load_once);
    snprintf(why, len, "%s", load_why);
    return load_ops;
}

#else /* no CUDA, or headers older than 11.3 */

const struct ferry__hmem_ops *ferry__hmem_cuda_load(char *why, size_t len)
{
#if HAVE_CUDA
    snprintf(why, len, "ferry was built against CUDA %d.%d headers, and its "
             "CUDA backend needs 11.3 or newer (configure "
             "--with-cuda=DIR)", CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
#else
    snprintf(why, len,
             "ferry was built without CUDA support (configure --with-cuda)");
#endif
    return NULL;
}

#endif
