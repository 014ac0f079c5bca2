/*
 * Memory registration on every rail, and the remote-key blobs that let a
 * peer reach a region.
 *
 * How each mr_mode bit is honoured:
 *   LOCAL      every operation passes the local registration's desc; iovs
 *              without lmem get a registration made for the request
 *   VIRT_ADDR  remote addresses are base + offset, else plain offsets; the
 *              blob carries the exporter's choice, the importer follows it
 *   ALLOCATED  the range must be mapped; checked with msync() first so the
 *              error names the range instead of a provider code
 *   PROV_KEY   the key is read back with fi_mr_key(); without it ferry
 *              requests unique keys that fit mr_key_size (keys.c)
 *   ENDPOINT   the registration is bound to the rail's endpoint and enabled
 *   RAW        keys longer than 8 bytes travel raw and are mapped on import
 *              with fi_mr_map_raw()
 *
 * Device memory takes the context's device path (hmem.c): a dmabuf fd,
 * FI_HMEM by virtual address, or staging (stage.c) when the domain cannot
 * register it.  A domain without FI_HMEM never sees a device pointer:
 * libfabric would register it as system memory.
 *
 * Remote-key blob fields (after the common header, see blob.c):
 *   str provider | u32 flags | u32 access | u64 base | u64 len |
 *   [u64 mirror id, with RKEY_MIRROR] |
 *   u16 rails | rails x (u64 raw_base | u16 key_len | key bytes)
 */
#include "ferry-internal.h"
#include "hmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RKEY_VIRT_ADDR 0x1u
#define RKEY_RAW 0x2u
#define RKEY_MIRROR 0x4u /* a host mirror of the exporter's device memory */
/*
 * Bound on retries when the provider says a requested key is taken: the
 * whole key space of small keys (up to 2 bytes), else this many, which a
 * counter over 4+ byte keys never needs unless nearly all are taken.
 */
#define KEY_RETRIES 65536u

uint64_t ferry__key_to_u64(const uint8_t *key, size_t len)
{
    uint64_t v = 0;

    for (size_t i = 0; i < len && i < 8; i++)
        v |= (uint64_t)key[i] << (8 * i);
    return v;
}

static void key_from_u64(uint8_t *key, uint64_t v, size_t len)
{
    for (size_t i = 0; i < len; i++)
        key[i] = i < 8 ? (uint8_t)(v >> (8 * i)) : 0;
}

static uint64_t fi_access(unsigned access)
{
    /* Locally a region is both the source of writes and the sink of reads. */
    uint64_t a = FI_READ | FI_WRITE;

    if (access & FERRY_ACCESS_REMOTE_READ)
        a |= FI_REMOTE_READ;
    if (access & FERRY_ACCESS_REMOTE_WRITE)
        a |= FI_REMOTE_WRITE;
    return a;
}

/* FI_MR_ALLOCATED: is every page of the range mapped? */
static int check_allocated(const void *addr, size_t len)
{
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~((uintptr_t)page - 1);
    size_t span = (size_t)((uintptr_t)addr + len - start);

    if (msync((void *)start, span, MS_ASYNC) != 0)
        return ferry__error(FERRY_EINVAL,
                            "[%p, +%zu) is not entirely mapped memory, and "
                            "the provider registers only allocated memory "
                            "(FI_MR_ALLOCATED): allocate the buffer first",
                            addr, len);
    return 0;
}

static int regattr(struct ferry_context *ctx, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr)
{
    /*
     * Whether the provider itself picks keys.  This is the provider's own
     * mr_mode, not ctx->mr_mode: FERRY_MR_PROV_KEY forced on a provider
     * that honours requested_key (tcp, shm) used to leave every
     * requested_key at 0, so the second registration failed with
     * -FI_ENOKEY (reported as FERRY_EPROTO).  Forced, ferry still reads
     * the key back with fi_mr_key() and treats it as opaque.
     */
    bool prov_key = rail->info->domain_attr->mr_mode & FI_MR_PROV_KEY;
    uint64_t tries = ferry__keyalloc_space(&rail->keys);
    int ret;

    if (tries > KEY_RETRIES)
        tries = KEY_RETRIES;
    for (uint64_t i = 0;; i++) {
        if (!prov_key)
            attr->requested_key = ferry__keyalloc_next(&rail->keys);
        ret = fi_mr_regattr(rail->domain, attr, flags, mr);
        if (ret != -FI_ENOKEY || prov_key)
            break;
        if (i + 1 >= tries)
            return ferry__error(
                FERRY_ENOSPC,
                "no free memory key on domain %s: tried %llu of the %zu-byte "
                "key space and all are in use; deregister regions or use a "
                "provider with larger keys",
                rail->info->domain_attr->name, (unsigned long long)tries,
                ctx->key_size);
    }
    if (ret != 0)
        return ferry__error(ferry__error_from_fi(ret),
                            "fi_mr_regattr of %s memory on domain %s failed: "
                            "%s",
                            attr->iface == FI_HMEM_SYSTEM ? "host" : "CUDA",
                            rail->info->domain_attr->name, fi_strerror(-ret));
    return 0;
}

/* FI_MR_ENDPOINT: a registration is usable only once bound and enabled. */
static int bind_to_endpoint(struct ferry__rail *rail, struct fid_mr *mr)
{
    int ret = fi_mr_bind(mr, &rail->ep->fid, 0);

    if (ret == 0)
        ret = fi_mr_enable(mr);
    /* Not implemented (tcp and shm on 1.17 answer -FI_ENOSYS): only a
     * forced FERRY_MR_ENDPOINT gets here, so say what to change. */
    if (ret == -FI_ENOSYS || ret == -FI_EOPNOTSUPP)
        return ferry__error(FERRY_ENOTSUP,
                            "provider %s on domain %s does not implement "
                            "fi_mr_bind/fi_mr_enable, so it cannot bind "
                            "registrations to endpoints (FI_MR_ENDPOINT); "
                            "do not force FERRY_MR_ENDPOINT for it",
                            rail->info->fabric_attr->prov_name,
                            rail->info->domain_attr->name);
    if (ret != 0)
        return ferry__error(ferry__error_from_fi(ret),
                            "binding a registration to the endpoint of "
                            "domain %s (FI_MR_ENDPOINT) failed: %s",
                            rail->info->domain_attr->name, fi_strerror(-ret));
    return 0;
}

int ferry__mr_open(struct ferry_context *ctx, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr)
{
    int ret = regattr(ctx, rail, attr, flags, mr);

    if (ret == 0 && (ctx->mr_mode & FERRY_MR_ENDPOINT) &&
        (ret = bind_to_endpoint(rail, *mr)) != 0) {
        fi_close(&(*mr)->fid);
        *mr = NULL;
    }
    return ret;
}

static int read_key(struct ferry_context *ctx, struct ferry_mem *mem,
                    unsigned i)
{
    struct ferry__rail *rail = &ctx->rails[i];

    if (ctx->mr_mode & FERRY_MR_RAW) {
        uint64_t base;
        size_t len = FERRY__KEY_MAX;
        int ret = fi_mr_raw_attr(mem->mr[i], &base, mem->key[i], &len, 0);
        /* Name the mode too: only FI_MR_RAW brings ferry here. */
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_raw_attr on domain %s failed (raw "
                                "keys, FI_MR_RAW): %s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
        mem->key_len[i] = len;
        mem->raw_base[i] = base;
        return 0;
    }
    key_from_u64(mem->key[i], fi_mr_key(mem->mr[i]), 8);
    mem->key_len[i] = 8;
    return 0;
}

/* Registers attr on every rail into mem's per-rail slots. */
static int register_rails(struct ferry_context *ctx, struct ferry_mem *mem,
                          struct fi_mr_attr *attr, uint64_t flags)
{
    int ret = 0;

    for (unsigned i = 0; i < ctx->nrails && ret == 0; i++) {
        /* The domain is FI_THREAD_DOMAIN: registration is serialised with
         * posting and polling by the context lock. */
        pthread_mutex_lock(&ctx->lock);
        ret = ferry__mr_open(ctx, &ctx->rails[i], attr, flags, &mem->mr[i]);
        if (ret == 0)
            ret = read_key(ctx, mem, i);
        pthread_mutex_unlock(&ctx->lock);
        if (ret == 0)
            mem->desc[i] = fi_mr_desc(mem->mr[i]);
    }
    return ret;
}

/*
 * [addr, +len) by virtual address on every rail: host memory, or device
 * memory of mem->device whose pages the provider resolves (FI_HMEM).
 */
static int register_va(struct ferry_context *ctx, struct ferry_mem *mem,
                       void *addr, size_t len, enum fi_hmem_iface iface)
{
    struct iovec iov = {.iov_base = addr, .iov_len = len};
    struct fi_mr_attr attr = {
        .mr_iov = &iov,
        .iov_count = 1,
        .access = fi_access(mem->access),
        .iface = iface,
    };

    if (iface == FI_HMEM_CUDA)
        attr.device.cuda = mem->device;
    return register_rails(ctx, mem, &attr, 0);
}

/* Host memory [addr, +len) on every rail. */
static int register_host(struct ferry_context *ctx, struct ferry_mem *mem,
                         void *addr, size_t len)
{
    int ret;

    if ((ctx->mr_mode & FERRY_MR_ALLOCATED) &&
        (ret = check_allocated(addr, len)))
        return ret;
    return register_va(ctx, mem, addr, len, FI_HMEM_SYSTEM);
}

static void close_rails(struct ferry_mem *mem)
{
    for (unsigned i = 0; i < mem->ctx->nrails; i++) {
        if (mem->mr[i] != NULL)
            fi_close(&mem->mr[i]->fid);
        mem->mr[i] = NULL;
        mem->desc[i] = NULL;
    }
}

static bool exposed(const struct ferry_mem *mem)
{
    return mem->access &
           (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE);
}

/*
 * FI_HMEM through a dmabuf fd of the pages (libfabric >= 1.20 headers at
 * build time; hmem.c checks the run-time version).  FERRY_ENOTSUP when
 * the driver cannot export this range: the caller falls back to the
 * virtual-address path.
 */
static int register_device_dmabuf(struct ferry_context *ctx,
                                  struct ferry_mem *mem)
{
#ifdef FI_MR_DMABUF
    const struct ferry__hmem_ops *ops = ferry__hmem();
    struct fi_mr_dmabuf dmabuf;
    struct fi_mr_attr attr = {
        .dmabuf = &dmabuf,
        .iov_count = 1,
        .access = fi_access(mem->access),
        .iface = FI_HMEM_CUDA,
        .device.cuda = mem->device,
    };
    uint64_t offset = 0;
    int fd = -1;
    int ret;

    if (ops->dmabuf_fd == NULL)
        return ferry__error(FERRY_ENOTSUP, "the %s backend exports no dmabuf",
                            ops->name);
    if ((ret = ops->dmabuf_fd(mem->addr, mem->len, &fd, &offset)) != 0)
        return ret;
    /* libfabric registers [base_addr + offset, +len) of the fd. */
    dmabuf = (struct fi_mr_dmabuf){.fd = fd,
                                   .offset = offset,
                                   .len = mem->len,
                                   .base_addr = mem->addr - offset};
    ret = register_rails(ctx, mem, &attr, FI_MR_DMABUF);
    /* The registrations hold their own reference to the buffer. */
    close(fd);
    return ret;
#else
    (void)ctx;
    (void)mem;
    return ferry__error(FERRY_ENOTSUP, "ferry was built against libfabric "
                        "headers without FI_MR_DMABUF (before 1.20)");
#endif
}

/*
 * Staged device memory (the domain cannot register it): nothing to
 * register for local use, since transfers copy through staging buffers;
 * with remote access, a pinned host mirror filled from the device is
 * registered instead and peers reach that.
 */
static int register_device_staged(struct ferry_context *ctx,
                                  struct ferry_mem *mem)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    void *mirror = NULL;
    int ret;

    mem->staged = true;
    if ((ret = ferry__stage_ensure(ctx, mem->device)) != 0 || !exposed(mem))
        return ret;
    if ((ret = ops->host_alloc(mem->len, &mirror)) != 0)
        return ret;
    mem->mirror = mirror;
    if ((ret = ops->copy(mirror, mem->addr, mem->len)) != 0)
        return ret;
    pthread_mutex_lock(&ctx->lock);
    mem->mirror_id = ++ctx->next_mirror_id;
    pthread_mutex_unlock(&ctx->lock);
    return register_host(ctx, mem, mirror, mem->len);
}

/*
 * The context's device path, stepping down when a step fails: dmabuf to
 * virtual address when the driver exports no dmabuf for the range, and
 * FI_HMEM to staging when the provider advertises FI_HMEM but refuses
 * the registration (Debian's shm claims FI_HMEM, yet its libfabric has no
 * CUDA support).  The step down is logged once per context.
 */
static int register_device(struct ferry_context *ctx, struct ferry_mem *mem)
{
    enum ferry__dev_path path = ctx->dev_path;
    int ret = 0;

    if (path == FERRY__DEV_DMABUF) {
        ret = register_device_dmabuf(ctx, mem);
        if (ret == FERRY_ENOTSUP) {
            FERRY_LOG_INFO("dmabuf registration of [%p, +%zu) is not "
                           "possible (%s): registering it by virtual address",
                           (void *)mem->addr, mem->len, ferry_last_error());
            path = FERRY__DEV_VA;
        }
    }
    if (path == FERRY__DEV_VA)
        ret = register_va(ctx, mem, mem->addr, mem->len, FI_HMEM_CUDA);
    if (ret != 0 && path != FERRY__DEV_STAGED) {
        close_rails(mem);
        pthread_mutex_lock(&ctx->lock);
        if (ctx->dev_path != FERRY__DEV_STAGED) {
            FERRY_LOG_WARN("provider %s advertises FI_HMEM but cannot "
                           "register CUDA memory (%s): device memory is "
                           "staged through host buffers from now on",
                           ctx->rails[0].info->fabric_attr->prov_name,
                           ferry_last_error());
            snprintf(ctx->dev_why, sizeof(ctx->dev_why),
                     "staged through pinned host buffers: provider %s "
                     "advertises FI_HMEM but refused a CUDA registration",
                     ctx->rails[0].info->fabric_attr->prov_name);
            ctx->dev_path = FERRY__DEV_STAGED;
        }
        pthread_mutex_unlock(&ctx->lock);
        path = FERRY__DEV_STAGED;
    }
    if (path == FERRY__DEV_STAGED)
        ret = register_device_staged(ctx, mem);
    else if (ret == 0 && exposed(mem) && mem->device < 32)
        atomic_fetch_or(&ctx->hmem_exposed_devices, 1u << mem->device);
    mem->path = path;
    return ret;
}

static struct ferry_mem *mem_new(struct ferry_context *ctx, void *addr,
                                 size_t len, unsigned access, bool oneshot)
{
    struct ferry_mem *mem = calloc(1, sizeof(*mem));

    if (mem == NULL)
        return NULL;
    mem->ctx = ctx;
    mem->addr = addr;
    mem->len = len;
    mem->kind = FERRY_MEM_HOST;
    mem->device = -1;
    mem->access = access;
    mem->oneshot = oneshot;
    return mem;
}

/* Publishes a registration, or frees it after a failure. */
static int mem_finish(struct ferry_mem *mem, int ret, struct ferry_mem **out)
{
    if (ret != 0) {
        ferry__mem_close(mem);
        return ret;
    }
    mem->magic = FERRY__MAGIC_MEM;
    if (exposed(mem))
        atomic_fetch_add(&mem->ctx->exposed_regions, 1);
    *out = mem;
    return 0;
}

int ferry__mem_register(struct ferry_context *ctx, void *addr, size_t len,
                        unsigned access, bool oneshot, struct ferry_mem **out)
{
    struct ferry_mem *mem = mem_new(ctx, addr, len, access, oneshot);

    if (mem == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a registration");
    return mem_finish(mem, register_host(ctx, mem, addr, len), out);
}

/*
 * What kind of memory addr is, checked against what the caller said:
 * host memory as CUDA, device memory as host, the wrong ordinal and a
 * range past the allocation are refused with the facts.  *pi is zeroed
 * (host) when there is no device backend and the kind is not CUDA.
 */
static int classify_memory(struct ferry_context *ctx, void *addr, size_t len,
                           enum ferry_mem_kind kind, int device,
                           const char *call, struct ferry__hmem_ptr *pi)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    int ret;

    memset(pi, 0, sizeof(*pi));
    if (ops == NULL) {
        if (kind != FERRY_MEM_CUDA)
            return 0; /* without a backend every pointer is host memory */
        return ferry__error(FERRY_ENOTSUP,
                            "%s: [%p, +%zu) on CUDA device %d: device memory "
                            "is not available: %s; register host memory "
                            "(FERRY_MEM_HOST) instead",
                            call, addr, len, device, ctx->dev_why);
    }
    if ((ret = ops->ptr_info(addr, pi)) != 0)
        return ret;
    if (kind == FERRY_MEM_CUDA && !pi->device)
        return ferry__error(FERRY_EINVAL,
                            "%s: %p is host memory, not memory of a %s "
                            "device; register it as FERRY_MEM_HOST (or "
                            "FERRY_MEM_AUTO)",
                            call, addr, ops->name);
    if (kind == FERRY_MEM_HOST && pi->device)
        return ferry__error(FERRY_EINVAL,
                            "%s: %p is memory of %s device %d, not host "
                            "memory; register it as FERRY_MEM_CUDA (or "
                            "FERRY_MEM_AUTO)",
                            call, addr, ops->name, pi->ordinal);
    if (!pi->device)
        return 0;
    if (kind == FERRY_MEM_CUDA && device != -1 && device != pi->ordinal)
        return ferry__error(FERRY_EINVAL,
                            "%s: %p belongs to device %d, not device %d; "
                            "pass %d (or -1: the pointer's own device)",
                            call, addr, pi->ordinal, device, pi->ordinal);
    if ((uintptr_t)addr + len > pi->base + pi->size)
        return ferry__error(FERRY_EINVAL,
                            "%s: [%p, +%zu) runs past the end of its device "
                            "allocation [%p, +%zu)",
                            call, addr, len, (void *)pi->base, pi->size);
    return 0;
}

int ferry__mem_register_any(struct ferry_context *ctx, void *addr, size_t len,
                            enum ferry_mem_kind kind, int device,
                            unsigned access, bool oneshot, const char *call,
                            struct ferry_mem **out)
{
    struct ferry__hmem_ptr pi;
    struct ferry_mem *mem;
    int ret = classify_memory(ctx, addr, len, kind, device, call, &pi);

    if (ret != 0)
        return ret;
    if (!pi.device)
        return ferry__mem_register(ctx, addr, len, access, oneshot, out);
    mem = mem_new(ctx, addr, len, access, oneshot);
    if (mem == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a registration");
    mem->kind = FERRY_MEM_CUDA;
    mem->device = pi.ordinal;
    mem->buffer_id = pi.buffer_id;
    return mem_finish(mem, register_device(ctx, mem), out);
}

void ferry__mem_close_locked(struct ferry_mem *mem)
{
    if (mem->magic == FERRY__MAGIC_MEM && exposed(mem))
        atomic_fetch_sub(&mem->ctx->exposed_regions, 1);
    close_rails(mem);
    /* The mirror is freed only once no registration covers it. */
    if (mem->mirror != NULL)
        ferry__hmem()->host_free(mem->mirror);
    mem->magic = FERRY__MAGIC_DEAD;
    free(mem);
}

void ferry__mem_close(struct ferry_mem *mem)
{
    struct ferry_context *ctx = mem->ctx;

    pthread_mutex_lock(&ctx->lock);
    ferry__mem_close_locked(mem);
    pthread_mutex_unlock(&ctx->lock);
}

int ferry_mem_register(ferry_context_t *ctx, void *addr, size_t len,
                       enum ferry_mem_kind kind, int device, unsigned access,
                       ferry_mem_t **out)
{
    struct ferry_mem *mem;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_mem_register")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_mem_register: out is NULL");
    if (addr == NULL || len == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: %s; pass a buffer and its "
                            "length in bytes",
                            addr == NULL ? "addr is NULL" : "len is 0");
    if ((uintptr_t)addr + len < (uintptr_t)addr)
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: [%p, +%zu) wraps around the "
                            "address space",
                            addr, len);
    if (access & ~(unsigned)(FERRY_ACCESS_REMOTE_READ |
                             FERRY_ACCESS_REMOTE_WRITE))
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: access 0x%x has bits that "
                            "are not FERRY_ACCESS_REMOTE_READ/WRITE",
                            access);
    if (kind != FERRY_MEM_HOST && kind != FERRY_MEM_CUDA &&
        kind != FERRY_MEM_AUTO)
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: kind %d is not FERRY_MEM_HOST, "
                            "FERRY_MEM_CUDA or FERRY_MEM_AUTO",
                            (int)kind);
    ret = ferry__mem_register_any(ctx, addr, len, kind, device, access, false,
                                  "ferry_mem_register", &mem);
    if (ret != 0)
        return ret;
    if (mem->path == FERRY__DEV_STAGED)
        FERRY_LOG_INFO("[%p, +%zu) on device %d is staged through host "
                       "buffers: %s",
                       addr, len, mem->device, ctx->dev_why);
    pthread_mutex_lock(&ctx->lock);
    mem->next = ctx->mems;
    if (ctx->mems)
        ctx->mems->prev = mem;
    ctx->mems = mem;
    pthread_mutex_unlock(&ctx->lock);
    *out = mem;
    return 0;
}

int ferry_mem_deregister(ferry_mem_t *mem)
{
    struct ferry_context *ctx;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (mem == NULL)
        return 0;
    if ((ret = ferry__check_mem(mem, "ferry_mem_deregister")))
        return ret;
    ctx = mem->ctx;
    pthread_mutex_lock(&ctx->lock);
    /* Requests take and drop their references under the lock too, so the
     * count cannot rise between this check and the unlink. */
    users = atomic_load_explicit(&mem->users, memory_order_relaxed);
    if (users == 0) {
        if (mem->prev)
            mem->prev->next = mem->next;
        else
            ctx->mems = mem->next;
        if (mem->next)
            mem->next->prev = mem->prev;
    }
    pthread_mutex_unlock(&ctx->lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_mem_deregister: [%p, +%zu) has %u "
                            "user%s: requests with operations in flight or "
                            "descriptor lists; wait for or free the "
                            "requests, destroy the lists first",
                            (void *)mem->addr, mem->len, users,
                            users == 1 ? "" : "s");
    ferry__mem_close(mem);
    return 0;
}

int ferry_mem_export(const ferry_mem_t *mem, void *blob, size_t *len)
{
    const struct ferry_context *ctx;
    struct ferry__blob_writer w;
    unsigned flags = 0;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_mem(mem, "ferry_mem_export")))
        return ret;
    if (len == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_mem_export: len is NULL");
    if (!(mem->access &
          (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE)))
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_export: [%p, +%zu) was registered "
                            "without remote access; register it with "
                            "FERRY_ACCESS_REMOTE_READ and/or _WRITE to export "
                            "it",
                            (void *)mem->addr, mem->len);
    ctx = mem->ctx;
    if (ctx->mr_mode & FERRY_MR_VIRT_ADDR)
        flags |= RKEY_VIRT_ADDR;
    if (ctx->mr_mode & FERRY_MR_RAW)
        flags |= RKEY_RAW;
    if (mem->mirror != NULL)
        flags |= RKEY_MIRROR;
    ferry__blob_begin(&w, blob, *len, FERRY__BLOB_RKEY);
    ferry__blob_put_str(&w, ctx->rails[0].info->fabric_attr->prov_name);
    ferry__blob_put_u32(&w, flags);
    ferry__blob_put_u32(&w, mem->access);
    /* Peers reach a staged region's mirror, registered in its place. */
    ferry__blob_put_u64(&w, (uint64_t)(uintptr_t)(mem->mirror != NULL
                                                      ? mem->mirror
                                                      : mem->addr));
    ferry__blob_put_u64(&w, mem->len);
    if (mem->mirror != NULL)
        ferry__blob_put_u64(&w, mem->mirror_id);
    ferry__blob_put_u16(&w, (uint16_t)ctx->nrails);
    for (unsigned i = 0; i < ctx->nrails; i++) {
        ferry__blob_put_u64(&w, mem->raw_base[i]);
        ferry__blob_put_u16(&w, (uint16_t)mem->key_len[i]);
        ferry__blob_put_bytes(&w, mem->key[i], mem->key_len[i]);
    }
    return ferry__blob_end(&w, len);
}

/* Reads the per-rail keys of a remote-key blob into rmem. */
static int import_keys(struct ferry_context *ctx, struct ferry__blob_reader *r,
                       struct ferry_rmem *rmem, bool raw)
{
    unsigned rails = ferry__blob_get_u16(r);

    if (r->bad || rails == 0 || rails > FERRY__MAX_RAILS)
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob lists %u rails; expected 1 to %d",
                            rails, FERRY__MAX_RAILS);
    rmem->nrails = rails < ctx->nrails ? rails : ctx->nrails;
    for (unsigned i = 0; i < rails; i++) {
        uint8_t key[FERRY__KEY_MAX];
        uint64_t raw_base = ferry__blob_get_u64(r);
        size_t klen = ferry__blob_get_u16(r);

        if (r->bad || klen == 0 || klen > FERRY__KEY_MAX)
            return ferry__error(FERRY_EBLOB,
                                "remote-key blob: rail %u key of %zu bytes is "
                                "empty, too long or cut short",
                                i, klen);
        ferry__blob_get_bytes(r, key, klen);
        if (r->bad)
            return ferry__error(FERRY_EBLOB,
                                "remote-key blob: rail %u key is cut short", i);
        if (i >= rmem->nrails)
            continue;
        if (!raw) {
            if (klen > 8)
                return ferry__error(FERRY_EBLOB,
                                    "remote-key blob: rail %u has a %zu-byte "
                                    "key without the raw-key flag",
                                    i, klen);
            rmem->key[i] = ferry__key_to_u64(key, klen);
            continue;
        }
        int ret = fi_mr_map_raw(ctx->rails[i].domain, raw_base, key, klen,
                                &rmem->key[i], 0);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_map_raw of a %zu-byte key on domain %s "
                                "failed (raw keys, FI_MR_RAW): %s",
                                klen, ctx->rails[i].info->domain_attr->name,
                                fi_strerror(-ret));
        rmem->key_mapped[i] = true;
    }
    if (r->pos != r->len)
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob has %zu bytes after its last "
                            "field",
                            r->len - r->pos);
    return 0;
}

static void rmem_release(struct ferry_rmem *rmem)
{
    struct ferry_context *ctx = rmem->peer->ctx;

    for (unsigned i = 0; i < ctx->nrails; i++)
        if (rmem->key_mapped[i])
            fi_mr_unmap_key(ctx->rails[i].domain, rmem->key[i]);
    if (rmem->magic == FERRY__MAGIC_RMEM && rmem->mirror)
        ctx->mirror_rmems--;
    atomic_fetch_sub(&rmem->peer->rmem_count, 1);
    rmem->magic = FERRY__MAGIC_DEAD;
    free(rmem);
}

static int parse_rkey(struct ferry_context *ctx, struct ferry__blob_reader *r,
                      struct ferry_rmem *rmem)
{
    const char *ours = ctx->rails[0].info->fabric_attr->prov_name;
    bool raw_here = ctx->mr_mode & FERRY_MR_RAW;
    unsigned flags;

    ferry__blob_get_str(r, rmem->provider, sizeof(rmem->provider));
    flags = ferry__blob_get_u32(r);
    rmem->access = ferry__blob_get_u32(r);
    rmem->base = ferry__blob_get_u64(r);
    rmem->len = ferry__blob_get_u64(r);
    if (r->bad)
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob ends inside its fields: it was "
                            "truncated");
    if (strcmp(rmem->provider, ours) != 0)
        return ferry__error(FERRY_EINCOMPAT,
                            "remote-key blob was made by a peer using "
                            "provider '%s' but this context uses '%s': choose "
                            "the same provider on both sides",
                            rmem->provider, ours);
    if (!!(flags & RKEY_RAW) != raw_here)
        return ferry__error(FERRY_EINCOMPAT,
                            "remote-key blob %s raw keys (FI_MR_RAW) but this "
                            "context %s: both sides must use the same "
                            "provider and mr_mode",
                            (flags & RKEY_RAW) ? "carries" : "has no",
                            raw_here ? "uses them" : "does not");
    if (flags & RKEY_MIRROR)
        rmem->mirror_id = ferry__blob_get_u64(r);
    if (flags & ~(RKEY_VIRT_ADDR | RKEY_RAW | RKEY_MIRROR) || rmem->len == 0 ||
        rmem->base + rmem->len < rmem->base ||
        rmem->access & ~(unsigned)(FERRY_ACCESS_REMOTE_READ |
                                   FERRY_ACCESS_REMOTE_WRITE))
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob has unknown flags 0x%x, access "
                            "0x%x or an empty or wrapping region",
                            flags, rmem->access);
    rmem->virt_addr = flags & RKEY_VIRT_ADDR;
    rmem->mirror = flags & RKEY_MIRROR;
    return import_keys(ctx, r, rmem, raw_here);
}

int ferry_rmem_import(ferry_peer_t *peer, const void *blob, size_t len,
                      ferry_rmem_t **out)
{
    struct ferry__blob_reader r;
    struct ferry_context *ctx;
    struct ferry_rmem *rmem;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_peer(peer, "ferry_rmem_import")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_rmem_import: out is NULL");
    if ((ret = ferry__blob_open(&r, blob, len, FERRY__BLOB_RKEY,
                                "remote-key blob")))
        return ret;
    ctx = peer->ctx;
    rmem = calloc(1, sizeof(*rmem));
    if (rmem == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a remote region");
    rmem->peer = peer;
    atomic_fetch_add(&peer->rmem_count, 1);
    pthread_mutex_lock(&ctx->lock);
    ret = parse_rkey(ctx, &r, rmem);
    if (ret == 0) {
        rmem->magic = FERRY__MAGIC_RMEM;
        ctx->mirror_rmems += rmem->mirror;
        rmem->next = ctx->rmems;
        if (ctx->rmems)
            ctx->rmems->prev = rmem;
        ctx->rmems = rmem;
    } else {
        rmem_release(rmem);
    }
    pthread_mutex_unlock(&ctx->lock);
    if (ret != 0)
        return ret;
    *out = rmem;
    return 0;
}

size_t ferry_rmem_length(const ferry_rmem_t *rmem)
{
    return rmem != NULL && rmem->magic == FERRY__MAGIC_RMEM ? rmem->len : 0;
}

int ferry_rmem_free(ferry_rmem_t *rmem)
{
    struct ferry_context *ctx;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (rmem == NULL)
        return 0;
    if ((ret = ferry__check_rmem(rmem, "ferry_rmem_free")))
        return ret;
    ctx = rmem->peer->ctx;
    pthread_mutex_lock(&ctx->lock);
    users = atomic_load_explicit(&rmem->users, memory_order_relaxed);
    if (users == 0) {
        if (rmem->prev)
            rmem->prev->next = rmem->next;
        else
            ctx->rmems = rmem->next;
        if (rmem->next)
            rmem->next->prev = rmem->prev;
        rmem_release(rmem);
    }
    pthread_mutex_unlock(&ctx->lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_rmem_free: the remote region has %u "
                            "user%s: requests with operations in flight or "
                            "descriptor lists; wait for or free the "
                            "requests, destroy the lists first",
                            users, users == 1 ? "" : "s");
    return 0;
}

void ferry__mems_destroy(struct ferry_context *ctx)
{
    while (ctx->rmems != NULL) {
        struct ferry_rmem *next = ctx->rmems->next;
        rmem_release(ctx->rmems);
        ctx->rmems = next;
    }
    while (ctx->mems != NULL) {
        struct ferry_mem *next = ctx->mems->next;
        ferry__mem_close(ctx->mems);
        ctx->mems = next;
    }
}

const char *ferry_mem_path(const ferry_mem_t *mem)
{
    if (mem == NULL || mem->magic != FERRY__MAGIC_MEM)
        return NULL;
    switch (mem->kind == FERRY_MEM_CUDA ? mem->path : FERRY__DEV_NONE) {
    case FERRY__DEV_DMABUF:
        return "cuda dmabuf";
    case FERRY__DEV_VA:
        return "cuda FI_HMEM";
    case FERRY__DEV_STAGED:
        return "cuda staged";
    default:
        return "host";
    }
}

int ferry_mem_refresh(ferry_mem_t *mem)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_mem(mem, "ferry_mem_refresh")))
        return ret;
    if (mem->mirror == NULL)
        return 0; /* peers reach the memory itself */
    return ferry__hmem()->copy(mem->mirror, mem->addr, mem->len);
}
