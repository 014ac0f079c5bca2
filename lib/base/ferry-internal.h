/*
 * The base every module of ferry stands on: the build configuration, the
 * public API, containers and limits, and the base modules nearly every
 * file calls (errors, logging, environment and clock, the context lock).
 * Never installed.  Each module above declares what it offers in a
 * header of its own beside it (lib/README.md lists them).
 */
#ifndef FERRY_INTERNAL_H
#define FERRY_INTERNAL_H

#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>

#include "ferry.h"

#include "base/env.h"
#include "base/error.h"
#include "base/lock.h"
#include "base/log.h"

#define ferry__container_of(ptr, type, member)                                \
    ((type *)((char *)(ptr) - offsetof(type, member)))

#define FERRY__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define FERRY__MAX_RAILS 8
#define FERRY__KEY_MAX 64          /* longest raw key carried in a blob */
#define FERRY__ADDR_MAX 256        /* longest endpoint name carried in a blob */
#define FERRY__NAME_MAX 64         /* provider / fabric / domain names in blobs */
/* The API version ferry asks for: the one of the headers it was built with. */
#define FERRY__FI_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

#endif /* FERRY_INTERNAL_H */
