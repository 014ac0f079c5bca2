/*
 * A selection: the candidates fi_getinfo offered that ferry may use, best
 * first, and why the other providers were refused.  Made by provider.c,
 * explained by refusal.c, read by rails.c, fabric.c and probe.c.
 */
#ifndef FERRY_FABRIC_SELECTION_H
#define FERRY_FABRIC_SELECTION_H

#include "base/ferry-internal.h"

/* What ferry asks every provider for. */
#define FERRY__REQUIRED_CAPS                                                  \
    (FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_MSG)

/* A provider/domain that fi_getinfo offered, with ferry's verdict on it. */
struct ferry__candidate {
    struct fi_info *info; /* owned */
    int rank;             /* lower is better */
    bool nic;             /* a hardware NIC, where registration matters */
    bool off_route;       /* not on the route to the config's peer host */
    char verdict[512];    /* why it ranks where it does */
};

#define FERRY__MAX_REFUSALS 32

/* Why a provider gave no candidate. */
struct ferry__refusal {
    char provider[48];
    char reason[256];
};

struct ferry__selection {
    struct ferry__candidate *cand; /* usable ones, best first */
    size_t ncand;
    struct ferry__refusal refusals[FERRY__MAX_REFUSALS];
    size_t nrefusals;
    char refused[3072]; /* the same as one sentence: "verbs: ...; efa: ..." */
    /* /dev/shm, read once per selection: whether shm has room there, and
     * the sentence ("/dev/shm has 11.7 GiB free of 12 GiB"). */
    bool shm_fits;
    char shm_room[320];
};

#endif /* FERRY_FABRIC_SELECTION_H */
