/*
 * Provider selection: fi_getinfo hints, filtering and ranking by
 * capability, and the mr_mode bits in ferry's and libfabric's terms.
 */
#ifndef FERRY_FABRIC_PROVIDER_H
#define FERRY_FABRIC_PROVIDER_H

#include "base/ferry-internal.h"

/* A provider/domain that fi_getinfo offered, with ferry's verdict on it. */
struct ferry__candidate {
    struct fi_info *info; /* owned */
    int rank;             /* lower is better */
    bool nic;             /* a hardware NIC, where registration matters */
    char verdict[160];    /* why it ranks where it does */
};

struct ferry__selection {
    struct ferry__candidate *cand; /* usable ones, best first */
    size_t ncand;
    char refused[1024]; /* "verbs: no device; sockets: ..." */
};

/* Probes fi_getinfo for cfg.  On FERRY_ENOPROVIDER the error says why. */
int ferry__provider_select(const struct ferry_config *cfg,
                           struct ferry__selection *sel);
void ferry__selection_free(struct ferry__selection *sel);

/* libfabric mr_mode bits <-> FERRY_MR_* bits. */
unsigned ferry__mr_mode_from_fi(uint64_t fi_mr_mode);
uint64_t ferry__mr_mode_to_fi(unsigned ferry_mr_mode);
/* "LOCAL|VIRT_ADDR" (or "none") into buf. */
const char *ferry__mr_mode_str(unsigned mr_mode, char *buf, size_t len);

#endif /* FERRY_FABRIC_PROVIDER_H */
