/*
 * Helpers of the stage suites (test/api/check_stage.c and
 * test/unit/check_stage.c), on the public API only: the simulated device,
 * pairs with small staging chunks, device memory filled and checked, and
 * a rig with device memory on one side and host memory on the other.
 */
#ifndef FERRY_STAGEUTIL_H
#define FERRY_STAGEUTIL_H

#include "testutil.h"

/* Small chunks so that a few MiB make a pipeline of many. */
#define CHUNK (256 * KiB)
#define SLOTS 4

/* Every test starts here (two simulated devices): the backend is chosen
 * once per process, and Check runs each test in its own. */
void use_sim(void);

/* config.max_msg_size of the next pair (0: the default); Check runs each
 * test in a process of its own. */
extern size_t pair_max_op;
/* A pair (tu_pair_open) with CHUNK-sized staging chunks, SLOTS of them. */
void pair_open(struct tu_pair *p, const char *prov);

/* Device memory holding pattern seed. */
void *dev_filled(int device, size_t len, uint64_t seed);
/* First byte of device [dev, +len) that is not pattern seed, or SIZE_MAX. */
size_t dev_check(const void *dev, size_t len, uint64_t seed);
/* One write or read of len bytes, waited for; returns how it ended. */
int move(ferry_peer_t *peer, bool write, void *local, ferry_mem_t *lmem,
         ferry_rmem_t *rmem, uint64_t roff, size_t len,
         const struct ferry_xfer_opts *opts);

/*
 * A pair with a device buffer on one side and a host buffer on the other,
 * both len bytes and registered; the target's is shared with the
 * initiator (rmem).  The device buffer holds pattern seed.
 */
struct rig {
    struct tu_pair p;
    size_t len;
    void *dev;
    uint8_t *host;
    ferry_mem_t *dmem, *hmem;
    ferry_rmem_t *rmem;
};
void rig_open(struct rig *r, const char *prov, size_t len, bool dev_on_target,
              int device, uint64_t seed);
void rig_close(struct rig *r);

#endif /* FERRY_STAGEUTIL_H */
