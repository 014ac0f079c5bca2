/*
 * ferry: one-sided RMA between the memories of machines over libfabric.
 *
 * The whole public API, by subject:
 *   <ferry/core.h>     contexts, registration, peers, transfers,
 *                      notifications, descriptor lists, fan-out
 *   <ferry/meta.h>     how peers meet: the metadata service, the bootstrap
 *   <ferry/topo.h>     the topology: which NICs each GPU should use
 *   <ferry/testing.h>  device memory for tests, examples and benches
 *   <ferry/errno.h>    the error codes (core.h includes it)
 */
#ifndef FERRY_H
#define FERRY_H

#include <ferry/core.h>
#include <ferry/meta.h>
#include <ferry/testing.h>
#include <ferry/topo.h>

#endif /* FERRY_H */
