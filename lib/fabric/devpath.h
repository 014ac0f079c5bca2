/*
 * The device path of a context: how its domains register device memory.
 */
#ifndef FERRY_FABRIC_DEVPATH_H
#define FERRY_FABRIC_DEVPATH_H

#include "fabric/fabric.h"

/* How a context registers device memory (ferry__dev_path_choose). */
enum ferry__dev_path {
    FERRY__DEV_NONE,   /* no device backend: device memory is refused */
    FERRY__DEV_DMABUF, /* FI_HMEM with a dmabuf fd (libfabric >= 1.20) */
    FERRY__DEV_VA,     /* FI_HMEM by virtual address (peer memory) */
    FERRY__DEV_STAGED, /* no FI_HMEM: copied through pinned host buffers */
};

/*
 * The device path of a context from facts alone, so every combination is
 * testable without a GPU: whether a backend runs, the domain's caps, the
 * libfabric versions at build time (FI_MR_DMABUF), at run time and
 * requested.  Writes a sentence saying why into why.
 */
struct ferry__dev_facts {
    const char *backend; /* NULL: none (backend_why says why) */
    const char *backend_why;
    bool simulated; /* the backend is ferry's simulated device */
    const char *provider, *domain;
    bool domain_hmem;       /* the domain was opened with FI_HMEM */
    /* libfabric's CUDA support, read from its parameters (the
     * hmem_cuda_* ones exist only in a libfabric built with CUDA). */
    bool fi_has_cuda;
    bool built_with_dmabuf; /* FI_MR_DMABUF in the headers ferry built with */
    uint32_t fi_runtime;    /* fi_version() */
    uint32_t fi_requested;  /* the API version ferry asked fi_getinfo for */
};
enum ferry__dev_path ferry__dev_path_choose(const struct ferry__dev_facts *f,
                                            char *why, size_t len);
const char *ferry__dev_path_name(enum ferry__dev_path path);
/* Whether the libfabric loaded was built with CUDA support. */
bool ferry__fi_has_cuda(void);
/* The path of fab's domains and device backend, and why, into why. */
void ferry__dev_path_init(const struct ferry__fabric *fab,
                          enum ferry__dev_path *path, char *why, size_t len);

#endif /* FERRY_FABRIC_DEVPATH_H */
