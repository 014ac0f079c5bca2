/*
 * How a context registers device memory: dmabuf, FI_HMEM by virtual
 * address, or staging, chosen from the facts of its domains, its device
 * backend and the libfabric versions, with the sentence that says why.
 */
#include "fabric/devpath.h"

#include <stdio.h>
#include <string.h>

#include "dev/hmem.h"

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
    if (f->simulated) {
        /* A GPU machine's libfabric built with CUDA took the simulated
         * device's memory as CUDA memory and crashed (an H200, 2.1). */
        snprintf(why, len,
                 "staged through pinned host buffers: the simulated "
                 "device's memory is host memory, which libfabric would "
                 "hand to the CUDA driver as device memory");
        return FERRY__DEV_STAGED;
    }
    if (!f->domain_hmem) {
        /* libfabric would register a device pointer as host memory. */
        snprintf(why, len,
                 "staged through pinned host buffers: domain %s of provider "
                 "%s does not register device memory (no FI_HMEM; %s)",
                 f->domain, f->provider,
                 f->fi_has_cuda
                     ? "libfabric has CUDA support, but this provider does "
                       "not offer it here, or libfabric could not load the "
                       "CUDA driver"
                     : "the libfabric loaded was built without CUDA "
                       "support: it has no hmem_cuda parameters");
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

bool ferry__fi_has_cuda(void)
{
    struct fi_param *params = NULL;
    int n = 0;
    bool cuda = false;

    if (fi_getparams(&params, &n) != 0)
        return false;
    /* Named as their variables: FI_HMEM_CUDA_USE_GDRCOPY... */
    for (int i = 0; i < n && !cuda; i++)
        cuda = strstr(params[i].name, "FI_HMEM_CUDA_") != NULL;
    fi_freeparams(params);
    return cuda;
}

void ferry__dev_path_init(const struct ferry__fabric *fab,
                          enum ferry__dev_path *path, char *why, size_t len)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    const struct fi_info *fi = fab->rails[0].info;
    struct ferry__dev_facts f = {
        .backend = ops != NULL ? ops->name : NULL,
        .backend_why = ferry__hmem_status(),
        .simulated = ops != NULL && ops->simulated,
        .provider = fi->fabric_attr->prov_name,
        .domain = fi->domain_attr->name,
        .domain_hmem = true,
        .fi_has_cuda = ferry__fi_has_cuda(),
#ifdef FI_MR_DMABUF
        .built_with_dmabuf = true,
#endif
        .fi_runtime = fi_version(),
        .fi_requested = FERRY__FI_VERSION,
    };

    /* Every rail must register device memory for one to be given it. */
    for (unsigned i = 0; i < fab->nrails; i++)
        f.domain_hmem &= (fab->rails[i].info->caps & FI_HMEM) != 0;
    *path = ferry__dev_path_choose(&f, why, len);
}
