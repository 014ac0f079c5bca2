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
 * Device memory takes the context's device path (fabric/devpath.c): a
 * dmabuf fd, FI_HMEM by virtual address, or staging (xfer/stage.c) when
 * the domain cannot register it.  A domain without FI_HMEM never sees a
 * device pointer: libfabric would register it as system memory.
 *
 * Remote-key blob fields (after the common header, see blob.c):
 *   str provider | u32 flags | u32 access | u64 base | u64 len |
 *   [u64 mirror id, with RKEY_MIRROR] |
 *   [u32 pulse slot | u64 generation, with RKEY_SLOT] |
 *   u16 rails | rails x (u16 rail flags | u64 raw_base | u16 key_len |
 *                        key bytes) |
 *   [with RKEY_INBOX, the fan-out plan's inbox: u64 inbox id | u64 base |
 *    u16 rails | rails x (the same)]
 * The rails are every rail of the exporter, transport after transport
 * (its address blob's order); an importer reads the keys of the
 * transport its peer was added over (reg/peer.c).  A rail's key is empty
 * where the region could not be registered on it (device memory on
 * shared memory without FI_HMEM).
 */
#include "reg/mem.h"

#include "base/blob.h"
#include "base/keys.h"
#include "dev/hmem.h"
#include "reg/peer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RKEY_RAW 0x2u
#define RKEY_MIRROR 0x4u /* a host mirror of the exporter's device memory */
#define RKEY_INBOX 0x8u  /* a fan-out receiver's region, with its inbox */
#define RKEY_SLOT 0x10u  /* its key can be checked in the exporter's pulse */
/* Per rail: remote addresses on it are virtual (FI_MR_VIRT_ADDR), not
 * offsets into the region. */
#define RAIL_VIRT_ADDR 0x1u
#define ACCESS_ALL                                                            \
    (FERRY_ACCESS_REMOTE_READ | FERRY_ACCESS_REMOTE_WRITE |                   \
     FERRY_ACCESS_FANOUT)

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

static int read_key(struct ferry__reg *reg, struct ferry_mem *mem,
                    unsigned i)
{
    struct ferry__rail *rail = &reg->fab.rails[i];

    if (reg->fab.mr_mode & FERRY_MR_RAW) {
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

/* Caller holds the lock, or is the context's last thread (close). */
static void close_rails(struct ferry_mem *mem)
{
    for (unsigned i = 0; i < ferry__reg_of(mem->ctx)->fab.nrails; i++) {
        if (mem->mr[i] != NULL)
            fi_close(&mem->mr[i]->fid);
        mem->mr[i] = NULL;
        mem->desc[i] = NULL;
    }
}

/*
 * Registers attr on every rail into mem's per-rail slots, except device
 * memory on the rails of a shared-memory transport beside the network
 * that cannot take it (no FI_HMEM): peers of this host then cannot reach
 * the region over shm, and are told so when they import it.  All or
 * nothing: when a rail refuses, those that took it let it go, so that
 * the next path tried (register_device) starts from empty slots.
 */
static int register_rails(struct ferry__reg *reg, struct ferry_mem *mem,
                          struct fi_mr_attr *attr, uint64_t flags)
{
    int ret = 0;

    for (unsigned i = 0; i < reg->fab.nrails && ret == 0; i++) {
        const struct ferry__rail *rail = &reg->fab.rails[i];

        if (rail->transport != 0 && attr->iface != FI_HMEM_SYSTEM &&
            !(rail->info->caps & FI_HMEM))
            continue;
        /* The domain is FI_THREAD_DOMAIN: registration is serialised with
         * posting and polling by the context lock. */
        ferry__lock_acquire(&reg->fab.lock);
        ret = ferry__mr_open(&reg->fab, &reg->fab.rails[i], attr, flags,
                             &mem->mr[i]);
        if (ret == 0)
            ret = read_key(reg, mem, i);
        ferry__lock_release(&reg->fab.lock);
        if (ret == 0)
            mem->desc[i] = fi_mr_desc(mem->mr[i]);
    }
    if (ret != 0) {
        ferry__lock_acquire(&reg->fab.lock);
        close_rails(mem);
        ferry__lock_release(&reg->fab.lock);
    }
    return ret;
}

/*
 * [addr, +len) by virtual address on every rail: host memory, or device
 * memory of mem->device whose pages the provider resolves (FI_HMEM).
 */
static int register_va(struct ferry__reg *reg, struct ferry_mem *mem,
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
    return register_rails(reg, mem, &attr,
                          iface == FI_HMEM_CUDA ? mem->hmem_flags : 0);
}

/* Host memory [addr, +len) on every rail. */
static int register_host(struct ferry__reg *reg, struct ferry_mem *mem,
                         void *addr, size_t len)
{
    int ret;

    if ((reg->fab.mr_mode & FERRY_MR_ALLOCATED) &&
        (ret = check_allocated(addr, len)))
        return ret;
    return register_va(reg, mem, addr, len, FI_HMEM_SYSTEM);
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
static int register_device_dmabuf(struct ferry__reg *reg,
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
    ret = register_rails(reg, mem, &attr, FI_MR_DMABUF | mem->hmem_flags);
    /* The registrations hold their own reference to the buffer. */
    close(fd);
    return ret;
#else
    (void)reg;
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
static int register_device_staged(struct ferry__reg *reg,
                                  struct ferry_mem *mem)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    void *mirror = NULL;
    int ret;

    mem->staged = true;
    if ((ret = reg->mem.prepare_staging(mem->ctx, mem->device)) != 0 ||
        !exposed(mem))
        return ret;
    if ((ret = ops->host_alloc(mem->len, &mirror)) != 0)
        return ret;
    mem->mirror = mirror;
    if ((ret = ops->copy(mirror, mem->addr, mem->len)) != 0)
        return ret;
    ferry__lock_acquire(&reg->fab.lock);
    mem->mirror_id = ++reg->mem.next_mirror_id;
    ferry__lock_release(&reg->fab.lock);
    return register_host(reg, mem, mirror, mem->len);
}

/*
 * The context's device path, stepping down when a step fails: dmabuf to
 * virtual address when the driver exports no dmabuf for the range, and
 * FI_HMEM to staging when the provider advertises FI_HMEM but refuses
 * the registration (Debian's shm claims FI_HMEM, yet that libfabric was
 * built without CUDA support).  The step down is logged once per context.
 */
static int register_device(struct ferry__reg *reg, struct ferry_mem *mem)
{
    enum ferry__dev_path path = reg->mem.dev_path;
    int ret = 0;

    if (path == FERRY__DEV_DMABUF) {
        ret = register_device_dmabuf(reg, mem);
        if (ret == FERRY_ENOTSUP) {
            FERRY_LOG_INFO("dmabuf registration of [%p, +%zu) is not "
                           "possible (%s): registering it by virtual address",
                           (void *)mem->addr, mem->len, ferry_last_error());
            path = FERRY__DEV_VA;
        }
    }
    if (path == FERRY__DEV_VA)
        ret = register_va(reg, mem, mem->addr, mem->len, FI_HMEM_CUDA);
    if (ret != 0 && path != FERRY__DEV_STAGED) {
        ferry__lock_acquire(&reg->fab.lock);
        if (reg->mem.dev_path != FERRY__DEV_STAGED) {
            FERRY_LOG_WARN("provider %s advertises FI_HMEM but cannot "
                           "register CUDA memory (%s): device memory is "
                           "staged through host buffers from now on",
                           reg->fab.rails[0].info->fabric_attr->prov_name,
                           ferry_last_error());
            snprintf(reg->mem.dev_why, sizeof(reg->mem.dev_why),
                     "staged through pinned host buffers: provider %s "
                     "advertises FI_HMEM but refused a CUDA registration",
                     reg->fab.rails[0].info->fabric_attr->prov_name);
            reg->mem.dev_path = FERRY__DEV_STAGED;
        }
        ferry__lock_release(&reg->fab.lock);
        path = FERRY__DEV_STAGED;
    }
    if (path == FERRY__DEV_STAGED)
        ret = register_device_staged(reg, mem);
    else if (ret == 0 && exposed(mem) && mem->device < 32)
        atomic_fetch_or(&reg->mem.hmem_exposed_devices, 1u << mem->device);
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
    mem->slot = FERRY__PULSE_NO_SLOT;
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
        atomic_fetch_add(&ferry__reg_of(mem->ctx)->mem.exposed_regions, 1);
    *out = mem;
    return 0;
}

int ferry__mem_register(struct ferry_context *ctx, void *addr, size_t len,
                        unsigned access, bool oneshot, struct ferry_mem **out)
{
    struct ferry_mem *mem = mem_new(ctx, addr, len, access, oneshot);

    if (mem == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a registration");
    return mem_finish(mem, register_host(ferry__reg_of(ctx), mem, addr, len),
                      out);
}

/* Device memory asked for where there is no device backend. */
static int no_device_memory(struct ferry__reg *reg, const char *call,
                            void *addr, size_t len, int device)
{
    char on[32] = "on a CUDA device"; /* device -1: whichever owns it */

    if (device >= 0)
        snprintf(on, sizeof(on), "on CUDA device %d", device);
    return ferry__error(FERRY_ENOTSUP,
                        "%s: [%p, +%zu) %s: device memory is not available: "
                        "%s; register host memory (FERRY_MEM_HOST) instead",
                        call, addr, len, on, reg->mem.dev_why);
}

/*
 * What kind of memory addr is, checked against what the caller said:
 * host memory as CUDA, device memory as host, the wrong ordinal and a
 * range past the allocation are refused with the facts.  *pi is zeroed
 * (host) when there is no device backend and the kind is not CUDA.
 */
static int classify_memory(struct ferry__reg *reg, void *addr, size_t len,
                           enum ferry_mem_kind kind, int device,
                           const char *call, struct ferry__hmem_ptr *pi)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    int ret;

    memset(pi, 0, sizeof(*pi));
    if (ops == NULL) {
        if (kind != FERRY_MEM_CUDA)
            return 0; /* without a backend every pointer is host memory */
        return no_device_memory(reg, call, addr, len, device);
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
    int ret = classify_memory(ferry__reg_of(ctx), addr, len, kind, device,
                              call, &pi);

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
    mem->hmem_flags = pi.managed ? 0 : FI_HMEM_DEVICE_ONLY;
    return mem_finish(mem, register_device(ferry__reg_of(ctx), mem), out);
}

/*
 * The inbox of a region registered with FERRY_ACCESS_FANOUT: a buffer of
 * its own that peers write the fan-out's plan into.  Ids are unique in
 * the process, so a plan's notification names the region it is for.
 */
static int open_inbox(struct ferry_mem *mem)
{
    static _Atomic uint64_t next_id = 1;
    void *buf = calloc(1, FERRY__INBOX_SIZE);
    int ret;

    if (buf == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out inbox");
    ret = ferry__mem_register(mem->ctx, buf, FERRY__INBOX_SIZE,
                              FERRY_ACCESS_REMOTE_WRITE, false, &mem->inbox);
    if (ret != 0) {
        free(buf);
        return ret;
    }
    mem->inbox_id = atomic_fetch_add(&next_id, 1);
    return 0;
}

void ferry__mem_close_locked(struct ferry_mem *mem)
{
    if (mem->inbox != NULL) {
        void *buf = mem->inbox->addr;

        ferry__mem_close_locked(mem->inbox);
        free(buf);
    }
    if (mem->magic == FERRY__MAGIC_MEM && exposed(mem))
        atomic_fetch_sub(&ferry__reg_of(mem->ctx)->mem.exposed_regions, 1);
    /* Peers see its key stale before it stops answering. */
    ferry__pulse_slot_retire(&ferry__reg_of(mem->ctx)->fab, mem->slot);
    close_rails(mem);
    /* The mirror is freed only once no registration covers it. */
    if (mem->mirror != NULL)
        ferry__hmem()->host_free(mem->mirror);
    mem->magic = FERRY__MAGIC_DEAD;
    free(mem);
}

void ferry__mem_close(struct ferry_mem *mem)
{
    struct ferry__reg *reg = ferry__reg_of(mem->ctx);

    ferry__lock_acquire(&reg->fab.lock);
    ferry__mem_close_locked(mem);
    ferry__lock_release(&reg->fab.lock);
}

int ferry_mem_register(ferry_context_t *ctx, void *addr, size_t len,
                       enum ferry_mem_kind kind, int device, unsigned access,
                       ferry_mem_t **out)
{
    struct ferry__reg *reg = ferry__reg_of(ctx);
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
    if (access & ~(unsigned)ACCESS_ALL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: access 0x%x has bits that "
                            "are not FERRY_ACCESS_REMOTE_READ/WRITE/FANOUT",
                            access);
    if ((access & FERRY_ACCESS_FANOUT) &&
        !(access & FERRY_ACCESS_REMOTE_WRITE))
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: FERRY_ACCESS_FANOUT without "
                            "FERRY_ACCESS_REMOTE_WRITE; a fan-out writes into "
                            "the region: add FERRY_ACCESS_REMOTE_WRITE");
    if (kind != FERRY_MEM_HOST && kind != FERRY_MEM_CUDA &&
        kind != FERRY_MEM_AUTO)
        return ferry__error(FERRY_EINVAL,
                            "ferry_mem_register: kind %d is not FERRY_MEM_HOST, "
                            "FERRY_MEM_CUDA or FERRY_MEM_AUTO",
                            (int)kind);
    ret = ferry__mem_register_any(ctx, addr, len, kind, device, access, false,
                                  "ferry_mem_register", &mem);
    if (ret == 0 && (access & FERRY_ACCESS_FANOUT) &&
        (ret = open_inbox(mem)) != 0)
        ferry__mem_close(mem);
    if (ret != 0)
        return ret;
    if (mem->path == FERRY__DEV_STAGED)
        FERRY_LOG_INFO("[%p, +%zu) on device %d is staged through host "
                       "buffers: %s",
                       addr, len, mem->device, reg->mem.dev_why);
    ferry__lock_acquire(&reg->fab.lock);
    if (exposed(mem))
        mem->slot = ferry__pulse_slot_take(&reg->fab, &mem->generation);
    mem->next = reg->mem.list;
    if (reg->mem.list)
        reg->mem.list->prev = mem;
    reg->mem.list = mem;
    ferry__lock_release(&reg->fab.lock);
    *out = mem;
    return 0;
}

int ferry_mem_close(ferry_mem_t *mem)
{
    struct ferry__reg *reg;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (mem == NULL)
        return 0;
    if ((ret = ferry__check_mem(mem, "ferry_mem_close")))
        return ret;
    reg = ferry__reg_of(mem->ctx);
    ferry__lock_acquire(&reg->fab.lock);
    /* References are taken under the lock (lock.h), so the count cannot
     * rise between this check and the unlink. */
    users = ferry__users_read(&mem->users, &reg->fab.lock) + mem->requests;
    if (users == 0) {
        if (mem->prev)
            mem->prev->next = mem->next;
        else
            reg->mem.list = mem->next;
        if (mem->next)
            mem->next->prev = mem->prev;
    }
    ferry__lock_release(&reg->fab.lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_mem_close: [%p, +%zu) has %u "
                            "user%s: requests with operations in flight, "
                            "descriptor lists, or a fan-out it receives "
                            "(until the fan-out ends); wait for or free the "
                            "requests, close the lists first",
                            (void *)mem->addr, mem->len, users,
                            users == 1 ? "" : "s");
    ferry__mem_close(mem);
    return 0;
}

static void put_keys(struct ferry__blob_writer *w, const struct ferry__reg *reg,
                     const struct ferry_mem *mem)
{
    ferry__blob_put_u16(w, (uint16_t)reg->fab.nrails);
    for (unsigned i = 0; i < reg->fab.nrails; i++) {
        const struct ferry__rail *rail = &reg->fab.rails[i];
        unsigned modes = reg->fab.transports[rail->transport].mr_mode;

        ferry__blob_put_u16(
            w, (uint16_t)(modes & FERRY_MR_VIRT_ADDR ? RAIL_VIRT_ADDR : 0));
        ferry__blob_put_u64(w, mem->raw_base[i]);
        ferry__blob_put_u16(w, (uint16_t)mem->key_len[i]);
        ferry__blob_put_bytes(w, mem->key[i], mem->key_len[i]);
    }
}

int ferry_mem_export(const ferry_mem_t *mem, void *blob, size_t *len)
{
    const struct ferry__reg *reg;
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
    reg = ferry__reg_of(mem->ctx);
    if (reg->fab.mr_mode & FERRY_MR_RAW)
        flags |= RKEY_RAW;
    if (mem->mirror != NULL)
        flags |= RKEY_MIRROR;
    if (mem->inbox != NULL)
        flags |= RKEY_INBOX;
    if (mem->slot != FERRY__PULSE_NO_SLOT)
        flags |= RKEY_SLOT;
    ferry__blob_begin(&w, blob, *len, FERRY__BLOB_RKEY);
    ferry__blob_put_str(&w, reg->fab.rails[0].info->fabric_attr->prov_name);
    ferry__blob_put_u32(&w, flags);
    ferry__blob_put_u32(&w, mem->access);
    /* Peers reach a staged region's mirror, registered in its place. */
    ferry__blob_put_u64(&w, (uint64_t)(uintptr_t)(mem->mirror != NULL
                                                      ? mem->mirror
                                                      : mem->addr));
    ferry__blob_put_u64(&w, mem->len);
    if (mem->mirror != NULL)
        ferry__blob_put_u64(&w, mem->mirror_id);
    if (mem->slot != FERRY__PULSE_NO_SLOT) {
        ferry__blob_put_u32(&w, mem->slot);
        ferry__blob_put_u64(&w, mem->generation);
    }
    put_keys(&w, reg, mem);
    if (mem->inbox != NULL) {
        ferry__blob_put_u64(&w, mem->inbox_id);
        ferry__blob_put_u64(&w, (uint64_t)(uintptr_t)mem->inbox->addr);
        put_keys(&w, reg, mem->inbox);
    }
    return ferry__blob_end(&w, len);
}

/*
 * Reads the per-rail keys of a remote-key blob into rmem: those of the
 * rails of the transport its peer is reached over, into the context's
 * rails of that transport.
 */
static int import_keys(struct ferry__reg *reg, struct ferry__blob_reader *r,
                       struct ferry_rmem *rmem, bool raw)
{
    const struct ferry_peer *peer = rmem->peer;
    unsigned rails = ferry__blob_get_u16(r);

    if (r->bad || rails != peer->remote_rails)
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob lists %u rails, but its peer's "
                            "address blob lists %u: was it exported by "
                            "another context than the peer it is imported "
                            "for?",
                            rails, peer->remote_rails);
    rmem->nrails = peer->nrails;
    for (unsigned i = 0; i < rails; i++) {
        uint8_t key[FERRY__KEY_MAX];
        unsigned flags = ferry__blob_get_u16(r);
        uint64_t raw_base = ferry__blob_get_u64(r);
        size_t klen = ferry__blob_get_u16(r);
        unsigned k = i - peer->remote_rail0; /* wraps below the first */
        unsigned ours = peer->rail0 + k;

        if (r->bad || klen > FERRY__KEY_MAX)
            return ferry__error(FERRY_EBLOB,
                                "remote-key blob: rail %u key of %zu bytes is "
                                "too long or cut short",
                                i, klen);
        ferry__blob_get_bytes(r, key, klen);
        if (r->bad)
            return ferry__error(FERRY_EBLOB,
                                "remote-key blob: rail %u key is cut short", i);
        if (k >= rmem->nrails)
            continue; /* a rail of another transport, or one we lack */
        if (klen == 0)
            return ferry__error(
                FERRY_EINCOMPAT,
                "the region cannot be reached over %s: its exporter could "
                "not register it there (device memory on a transport "
                "without FI_HMEM); set FERRY_SHM_PEERS=0 on both sides so "
                "that peers of one host meet over %s",
                reg->fab.rails[ours].info->fabric_attr->prov_name,
                peer->remote_provider);
        if (k == 0)
            rmem->virt_addr = flags & RAIL_VIRT_ADDR;
        if (!raw) {
            if (klen > 8)
                return ferry__error(FERRY_EBLOB,
                                    "remote-key blob: rail %u has a %zu-byte "
                                    "key without the raw-key flag",
                                    i, klen);
            rmem->key[ours] = ferry__key_to_u64(key, klen);
            continue;
        }
        int ret = fi_mr_map_raw(reg->fab.rails[ours].domain, raw_base, key,
                                klen, &rmem->key[ours], 0);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_map_raw of a %zu-byte key on domain %s "
                                "failed (raw keys, FI_MR_RAW): %s",
                                klen,
                                reg->fab.rails[ours].info->domain_attr->name,
                                fi_strerror(-ret));
        rmem->key_mapped[ours] = true;
    }
    return 0;
}

static void rmem_release(struct ferry_rmem *rmem)
{
    struct ferry__reg *reg = ferry__reg_of(rmem->peer->ctx);

    if (rmem->inbox != NULL)
        rmem_release(rmem->inbox);
    free(rmem->blob);
    for (unsigned i = 0; i < reg->fab.nrails; i++)
        if (rmem->key_mapped[i])
            fi_mr_unmap_key(reg->fab.rails[i].domain, rmem->key[i]);
    if (rmem->magic == FERRY__MAGIC_RMEM && rmem->mirror)
        reg->mem.mirror_rmems--;
    ferry__users_drop(&rmem->peer->rmem_count);
    rmem->magic = FERRY__MAGIC_DEAD;
    free(rmem);
}

/* The inbox fields of a fan-out receiver's blob, into rmem->inbox. */
static int parse_inbox(struct ferry__reg *reg, struct ferry__blob_reader *r,
                       struct ferry_rmem *rmem)
{
    struct ferry_rmem *in = calloc(1, sizeof(*in));

    if (in == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a remote region");
    in->peer = rmem->peer;
    ferry__users_take(&rmem->peer->rmem_count, &reg->fab.lock);
    /* Freed with rmem from here on, whatever happens below. */
    rmem->inbox = in;
    memcpy(in->provider, rmem->provider, sizeof(in->provider));
    in->access = FERRY_ACCESS_REMOTE_WRITE;
    /* It lives and goes with its region. */
    in->slot = rmem->slot;
    in->generation = rmem->generation;
    rmem->inbox_id = ferry__blob_get_u64(r);
    in->base = ferry__blob_get_u64(r);
    in->len = FERRY__INBOX_SIZE;
    if (r->bad)
        return ferry__error(FERRY_EBLOB, "remote-key blob ends inside its "
                                         "fan-out inbox fields");
    if (in->base + in->len < in->base)
        return ferry__error(FERRY_EBLOB, "remote-key blob's fan-out inbox "
                            "at 0x%llx wraps past the end of the address "
                            "space", (unsigned long long)in->base);
    in->magic = FERRY__MAGIC_RMEM;
    return import_keys(reg, r, in, reg->fab.mr_mode & FERRY_MR_RAW);
}

static int parse_rkey(struct ferry__reg *reg, struct ferry__blob_reader *r,
                      struct ferry_rmem *rmem)
{
    const char *ours = rmem->peer->remote_provider;
    bool raw_here = reg->fab.mr_mode & FERRY_MR_RAW;
    unsigned flags;
    int ret;

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
                            "provider '%s' but the peer it is imported for "
                            "uses '%s': import a blob for the peer that "
                            "exported it, and choose the same provider on "
                            "both sides",
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
    rmem->slot = FERRY__PULSE_NO_SLOT;
    if (flags & RKEY_SLOT) {
        rmem->slot = ferry__blob_get_u32(r);
        rmem->generation = ferry__blob_get_u64(r);
    }
    if (flags & ~(RKEY_RAW | RKEY_MIRROR | RKEY_INBOX | RKEY_SLOT) ||
        rmem->len == 0 || rmem->base + rmem->len < rmem->base ||
        rmem->access & ~(unsigned)ACCESS_ALL ||
        ((flags & RKEY_SLOT) && rmem->slot >= FERRY__PULSE_SLOTS))
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob has unknown flags 0x%x, access "
                            "0x%x, an empty or wrapping region or a pulse "
                            "slot beyond %u",
                            flags, rmem->access, FERRY__PULSE_SLOTS);
    rmem->mirror = flags & RKEY_MIRROR;
    if ((ret = import_keys(reg, r, rmem, raw_here)) != 0 ||
        ((flags & RKEY_INBOX) && (ret = parse_inbox(reg, r, rmem)) != 0))
        return ret;
    if (r->pos != r->len)
        return ferry__error(FERRY_EBLOB,
                            "remote-key blob has %zu bytes after its last "
                            "field",
                            r->len - r->pos);
    return 0;
}

int ferry_rmem_import(ferry_peer_t *peer, const void *blob, size_t len,
                      ferry_rmem_t **out)
{
    struct ferry__blob_reader r;
    struct ferry__reg *reg;
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
    reg = ferry__reg_of(peer->ctx);
    rmem = calloc(1, sizeof(*rmem));
    if (rmem == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a remote region");
    rmem->peer = peer;
    ferry__lock_acquire(&reg->fab.lock);
    ferry__users_take(&peer->rmem_count, &reg->fab.lock);
    ret = parse_rkey(reg, &r, rmem);
    /* A fan-out source hands the blob on in its plan (fan.c). */
    if (ret == 0 && rmem->inbox != NULL) {
        if ((rmem->blob = malloc(len)) == NULL)
            ret = ferry__error(FERRY_ENOMEM, "out of memory for a remote "
                                             "region");
        else {
            memcpy(rmem->blob, blob, len);
            rmem->blob_len = len;
        }
    }
    if (ret == 0) {
        rmem->magic = FERRY__MAGIC_RMEM;
        reg->mem.mirror_rmems += rmem->mirror;
        rmem->next = reg->mem.rlist;
        if (reg->mem.rlist)
            reg->mem.rlist->prev = rmem;
        reg->mem.rlist = rmem;
    } else {
        rmem_release(rmem);
    }
    ferry__lock_release(&reg->fab.lock);
    if (ret != 0)
        return ret;
    *out = rmem;
    return 0;
}

const char *ferry__rmem_gone_why(void)
{
    return "the target no longer has a region with this key registered (it "
           "deregistered the region, or registered it anew): import its new "
           "blob";
}

enum ferry__pulse_verdict ferry__rmem_verdict(const struct ferry_rmem *rmem)
{
    return ferry__pulse_region(&rmem->peer->pulse, rmem->slot,
                               rmem->generation);
}

size_t ferry_rmem_length(const ferry_rmem_t *rmem)
{
    return rmem != NULL && rmem->magic == FERRY__MAGIC_RMEM ? rmem->len : 0;
}

/*
 * What still holds a remote region: descriptor lists and requests, its
 * fan-out inbox's too.  The inbox goes with its region (rmem_release),
 * so a write into it still out -- a fan-out plan to a receiver that was
 * lost meanwhile -- holds the region; under the lock.
 */
static unsigned rmem_holds(struct ferry_rmem *rmem, struct ferry__lock *lock)
{
    unsigned n = 0;

    for (struct ferry_rmem *r = rmem; r != NULL; r = r->inbox)
        n += ferry__users_read(&r->users, lock) + r->requests;
    return n;
}

int ferry_rmem_close(ferry_rmem_t *rmem)
{
    struct ferry__reg *reg;
    unsigned users;
    int ret;

    ferry__error_clear();
    if (rmem == NULL)
        return 0;
    if ((ret = ferry__check_rmem(rmem, "ferry_rmem_close")))
        return ret;
    reg = ferry__reg_of(rmem->peer->ctx);
    ferry__lock_acquire(&reg->fab.lock);
    users = rmem_holds(rmem, &reg->fab.lock);
    if (users == 0) {
        if (rmem->prev)
            rmem->prev->next = rmem->next;
        else
            reg->mem.rlist = rmem->next;
        if (rmem->next)
            rmem->next->prev = rmem->prev;
        rmem_release(rmem);
    }
    ferry__lock_release(&reg->fab.lock);
    if (users != 0)
        return ferry__error(FERRY_EBUSY,
                            "ferry_rmem_close: the remote region has %u "
                            "user%s: requests with operations in flight or "
                            "descriptor lists; wait for or free the "
                            "requests, close the lists first",
                            users, users == 1 ? "" : "s");
    return 0;
}

void ferry__mems_destroy(struct ferry__reg *reg)
{
    while (reg->mem.rlist != NULL) {
        struct ferry_rmem *next = reg->mem.rlist->next;
        rmem_release(reg->mem.rlist);
        reg->mem.rlist = next;
    }
    while (reg->mem.list != NULL) {
        struct ferry_mem *next = reg->mem.list->next;
        ferry__mem_close(reg->mem.list);
        reg->mem.list = next;
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
