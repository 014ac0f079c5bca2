/*
 * Device (CUDA) memory.  This release registers host memory only; the
 * CUDA path (dlopen of libcuda.so.1, FI_HMEM, dmabuf, staging) arrives in
 * its own change.  The entry point exists now so the public API and its
 * errors do not change when it does.
 */
#include "ferry-internal.h"

int ferry__hmem_register(struct ferry_context *ctx, void *addr, size_t len,
                         int device)
{
    (void)ctx;
    return ferry__error(FERRY_ENOTSUP,
                        "ferry_mem_register: [%p, +%zu) on CUDA device %d: "
                        "%s; register host memory (FERRY_MEM_HOST) instead",
                        addr, len, device,
                        HAVE_CUDA ? "CUDA memory registration is not "
                                    "implemented in this ferry release yet"
                                  : "ferry was built without CUDA support "
                                    "(configure --with-cuda)");
}
