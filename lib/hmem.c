/*
 * Chooses the device memory backend once per process, and the public
 * ferry_device_* helpers that let programs without a CUDA runtime of
 * their own (examples, benches, tests) allocate and copy device memory
 * through it.
 */
#include "hmem.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SIM_MAX_DEVICES 8

static pthread_once_t hmem_once = PTHREAD_ONCE_INIT;
static const struct ferry__hmem_ops *hmem_ops;
static char hmem_why[512];
static int sim_forced; /* ferry__hmem_use_sim() before the first use */

/* FERRY_SIM_DEVICES: 0 or unset (off), or 1..SIM_MAX_DEVICES. */
static int sim_devices_from_env(void)
{
    const char *s = getenv("FERRY_SIM_DEVICES");
    char *end;
    long n;

    if (s == NULL || *s == '\0')
        return 0;
    n = strtol(s, &end, 10);
    if (*end != '\0' || n < 0 || n > SIM_MAX_DEVICES) {
        FERRY_LOG_WARN("FERRY_SIM_DEVICES='%s' is not a number of simulated "
                       "devices from 0 to %d; the simulated device stays off",
                       s, SIM_MAX_DEVICES);
        return 0;
    }
    return (int)n;
}

static void hmem_choose(void)
{
    int sim = sim_forced ? sim_forced : sim_devices_from_env();

    if (sim > 0) {
        hmem_ops = ferry__hmem_sim_load(sim, hmem_why, sizeof(hmem_why));
        return;
    }
    hmem_ops = ferry__hmem_cuda_load(hmem_why, sizeof(hmem_why));
}

const struct ferry__hmem_ops *ferry__hmem(void)
{
    pthread_once(&hmem_once, hmem_choose);
    return hmem_ops;
}

const char *ferry__hmem_status(void)
{
    pthread_once(&hmem_once, hmem_choose);
    return hmem_why;
}

void ferry__hmem_use_sim(int ndevices)
{
    sim_forced = ndevices;
}

/* ---- public helpers --------------------------------------------------------- */

static int no_backend(const char *call)
{
    return ferry__error(FERRY_ENOTSUP, "%s: no device memory backend: %s",
                        call, ferry__hmem_status());
}

const char *ferry_device_backend(void)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    return ops != NULL ? ops->name : NULL;
}

const char *ferry_device_status(void)
{
    return ferry__hmem_status();
}

int ferry_device_count(int *count)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (count == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_count: count is NULL");
    *count = 0;
    if (ops == NULL)
        return no_backend("ferry_device_count");
    return ops->device_count(count);
}

int ferry_device_alloc(int device, size_t len, void **ptr)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    int count = 0;
    int ret;

    ferry__error_clear();
    if (ptr == NULL || len == 0)
        return ferry__error(FERRY_EINVAL, "ferry_device_alloc: %s",
                            ptr == NULL ? "ptr is NULL" : "len is 0");
    if (ops == NULL)
        return no_backend("ferry_device_alloc");
    if ((ret = ops->device_count(&count)) != 0)
        return ret;
    if (device < 0 || device >= count)
        return ferry__error(FERRY_EINVAL,
                            "ferry_device_alloc: device %d does not exist; "
                            "the %s backend has devices 0 to %d",
                            device, ops->name, count - 1);
    return ops->dev_alloc(device, len, ptr);
}

int ferry_device_free(void *ptr)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (ptr == NULL)
        return 0;
    if (ops == NULL)
        return no_backend("ferry_device_free");
    return ops->dev_free(ptr);
}

int ferry_device_copy(void *dst, const void *src, size_t len)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (dst == NULL || src == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_copy: %s is NULL",
                            dst == NULL ? "dst" : "src");
    if (len == 0)
        return 0;
    if (ops == NULL)
        return no_backend("ferry_device_copy");
    return ops->copy(dst, src, len);
}

/* ---- the device path of a context ----------------------------------------- */

const char *ferry__dev_path_name(enum ferry__dev_path path)
{
    switch (path) {
    case FERRY__DEV_DMABUF:
        return "dmabuf";
    case FERRY__DEV_VA:
        return "FI_HMEM by virtual address";
    case FERRY__DEV_STAGED:
        return "staged through pinned host buffers";
    default:
        return "none";
    }
}

#define V120 FI_VERSION(1, 20)

enum ferry__dev_path ferry__dev_path_choose(const struct ferry__dev_facts *f,
                                            char *why, size_t len)
{
    if (f->backend == NULL) {
        snprintf(why, len, "none: %s", f->backend_why);
        return FERRY__DEV_NONE;
    }
    if (!f->domain_hmem) {
        /* libfabric would register a device pointer as host memory. */
        snprintf(why, len,
                 "staged through pinned host buffers: domain %s of provider "
                 "%s does not register device memory (no FI_HMEM; Debian's "
                 "libfabric is built without CUDA)",
                 f->domain, f->provider);
        return FERRY__DEV_STAGED;
    }
    if (f->built_with_dmabuf && f->fi_runtime >= V120 &&
        f->fi_requested >= V120) {
        snprintf(why, len,
                 "dmabuf (FI_HMEM with FI_MR_DMABUF) on domain %s of "
                 "provider %s, by virtual address where the driver exports "
                 "no dmabuf",
                 f->domain, f->provider);
        return FERRY__DEV_DMABUF;
    }
    snprintf(why, len,
             "FI_HMEM by virtual address on domain %s of provider %s; not "
             "dmabuf because %s",
             f->domain, f->provider,
             !f->built_with_dmabuf ? "ferry was built against libfabric "
                                     "headers older than 1.20"
             : f->fi_runtime < V120 ? "the libfabric loaded is older than 1.20"
                                    : "ferry asks libfabric for an API "
                                      "older than 1.20");
    return FERRY__DEV_VA;
}

void ferry__dev_path_init(struct ferry_context *ctx)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    const struct fi_info *fi = ctx->rails[0].info;
    struct ferry__dev_facts f = {
        .backend = ops != NULL ? ops->name : NULL,
        .backend_why = ferry__hmem_status(),
        .provider = fi->fabric_attr->prov_name,
        .domain = fi->domain_attr->name,
        .domain_hmem = true,
#ifdef FI_MR_DMABUF
        .built_with_dmabuf = true,
#endif
        .fi_runtime = fi_version(),
        .fi_requested = FERRY__FI_VERSION,
    };

    /* Every rail must register device memory for one to be given it. */
    for (unsigned i = 0; i < ctx->nrails; i++)
        f.domain_hmem &= (ctx->rails[i].info->caps & FI_HMEM) != 0;
    ctx->dev_path = ferry__dev_path_choose(&f, ctx->dev_why,
                                           sizeof(ctx->dev_why));
}

void ferry__hmem_flush_rdma(struct ferry_context *ctx)
{
    unsigned devices = atomic_load_explicit(&ctx->hmem_exposed_devices,
                                            memory_order_relaxed);
    const struct ferry__hmem_ops *ops;

    if (devices == 0 || (ops = ferry__hmem()) == NULL ||
        ops->flush_rdma_writes == NULL)
        return;
    for (int d = 0; devices != 0; d++, devices >>= 1)
        if (devices & 1u)
            ops->flush_rdma_writes(d);
}
