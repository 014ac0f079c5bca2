/*
 * Shared memory for the peers of this host, beside a network provider:
 * whether a context wants it and can have it, and the selection its
 * rails come from (fabric.c opens them as transport 1).
 */
#ifndef FERRY_FABRIC_LOCAL_H
#define FERRY_FABRIC_LOCAL_H

#include "fabric/selection.h"

/*
 * With the context's provider chosen (net, its FERRY_MR_* bits in
 * net_modes): true with sel holding shm's candidates (free it with
 * ferry__selection_free) when the peers of this host should use shared
 * memory; false when not (net is shm already, the config turns it off or
 * names the provider, shm is missing or refused).  Either way why says
 * what peers on this host use and why.
 */
bool ferry__local_select(const struct ferry_config *cfg,
                         const struct fi_info *net, unsigned net_modes,
                         struct ferry__selection *sel, char *why,
                         size_t len);

#endif /* FERRY_FABRIC_LOCAL_H */
