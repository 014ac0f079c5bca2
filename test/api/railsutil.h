/*
 * Helpers of the rails suites (test/api/check_rails.c and
 * test/unit/check_rails.c), on the public API only: two tcp rails (the
 * ethernet interface and lo), writes over them, and a fake machine whose
 * topology orders them.
 */
#ifndef FERRY_RAILSUTIL_H
#define FERRY_RAILSUTIL_H

#include "testutil.h"

#define TCP tu_tcp()

/* Two tcp rails: rails_run checked that this machine has two tcp domains. */
void two_rail_config(struct ferry_config *cfg);
/* Writes len bytes from init to target with the given request size. */
void write_all(struct tu_pair *p, size_t len, size_t per_request,
               uint64_t seed);
/* Bytes each of the context's two rails has posted. */
void rail_bytes(ferry_context_t *ctx, uint64_t *r0, uint64_t *r1);

/* Asserts that the context's why (ferry_context_info) says phrase. */
void why_says(ferry_context_t *ctx, const char *phrase);

/*
 * The order from the topology, on a fake sysfs and a saved topology.
 * 24em64t has NICs 0000:05:00.0 and 0000:04:00.0, both under the host
 * bridge of GPUs 0 and 1, so balancing gives each GPU its own primary.
 * The ethernet interface pretends to be 0000:04:00.0 and lo 0000:05:00.0:
 * for one of the two GPUs the topology's choice (lo) goes against the
 * rank order (ethernet first).  cfg: two tcp rails on that machine.
 */
void fake_machine(struct ferry_config *cfg);

/* Runs the suite, or exits 77 (SKIP) saying why when this machine has
 * fewer than two tcp domains. */
int rails_run(Suite *(*suite)(void));

#endif /* FERRY_RAILSUTIL_H */
