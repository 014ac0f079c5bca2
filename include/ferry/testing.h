/*
 * ferry/testing.h: device memory for tests, examples and benches.
 * Part of ferry's public API: include <ferry.h>, or this and
 * <ferry/core.h>, which it includes.
 */
#ifndef FERRY_API_TESTING_H
#define FERRY_API_TESTING_H

#include <ferry/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Device memory for programs without a CUDA runtime of their own
 * (examples, benches, tests), through ferry's device backend: CUDA's
 * driver API (libcuda.so.1, loaded at run time), or the simulated device
 * when FERRY_SIM_DEVICES=N is set (N devices whose memory the CPU cannot
 * touch: for tests only).  Each returns 0, FERRY_EINVAL, or FERRY_ENOTSUP
 * when there is no backend (ferry_device_status() says why).
 */
/* "cuda", "simulated", or NULL when there is none. */
FERRY_API const char *ferry_device_backend(void);
/* One sentence: which backend runs and why, or why none does. */
FERRY_API const char *ferry_device_status(void);
FERRY_API int ferry_device_count(int *count);
FERRY_API int ferry_device_alloc(int device, size_t len, void **ptr);
FERRY_API int ferry_device_free(void *ptr);
/* A blocking copy; either side may be host or device memory. */
FERRY_API int ferry_device_copy(void *dst, const void *src, size_t len);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_API_TESTING_H */
