/*
 * What every file of lib/ builds on: the build configuration, the public
 * API, containers and limits.
 */
#ifndef FERRY_BASE_DEFS_H
#define FERRY_BASE_DEFS_H

#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <rdma/fabric.h>

#include "ferry.h"

#define ferry__container_of(ptr, type, member)                                \
    ((type *)((char *)(ptr) - offsetof(type, member)))

#define FERRY__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define FERRY__MAX_RAILS 8
#define FERRY__KEY_MAX 64          /* longest raw key carried in a blob */
#define FERRY__ADDR_MAX 256        /* longest endpoint name carried in a blob */
#define FERRY__NAME_MAX 64         /* provider / fabric / domain names in blobs */
/* The API version ferry asks for: the one of the headers it was built with. */
#define FERRY__FI_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

/*
 * Hands a public struct that starts with its size_t size back to the
 * caller (ferry_context_info, ferry_req_result...): `out`, filled in full
 * (`full` bytes), is copied into `caller` only as far as the caller's
 * size reaches, and says that size, so that a program built with an
 * older, shorter struct gets the fields it knows and nothing past them.
 */
static inline void ferry__hand_back(void *caller, void *out, size_t full)
{
    size_t size = *(const size_t *)caller;

    if (size > full)
        size = full;
    *(size_t *)out = size;
    memcpy(caller, out, size);
}

#endif /* FERRY_BASE_DEFS_H */
