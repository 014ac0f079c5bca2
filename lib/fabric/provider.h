/*
 * Provider selection: fi_getinfo hints, filtering and ranking by
 * capability.
 */
#ifndef FERRY_FABRIC_PROVIDER_H
#define FERRY_FABRIC_PROVIDER_H

#include "base/ferry-internal.h"
#include "fabric/mr_mode.h"
#include "fabric/selection.h"

/* Probes fi_getinfo for cfg.  On FERRY_ENOPROVIDER the error says why. */
int ferry__provider_select(const struct ferry_config *cfg,
                           struct ferry__selection *sel);
void ferry__selection_free(struct ferry__selection *sel);

/*
 * Whether candidate c could be a rail beside first (the chosen one): the
 * same provider and address format, and as much on the route to the
 * peer host as first is.
 */
bool ferry__rail_mates(const struct ferry__candidate *first,
                       const struct ferry__candidate *c);

#endif /* FERRY_FABRIC_PROVIDER_H */
