/*
 * The configuration a context is made with (ferry_config_init is the
 * public side).
 */
#ifndef FERRY_FABRIC_CONFIG_H
#define FERRY_FABRIC_CONFIG_H

#include "fabric/fabric.h"

/* Copies and checks the caller's config (NULL: the defaults and the
 * environment) into fab->cfg, its names into fab's own copies. */
int ferry__config_adopt(struct ferry__fabric *fab,
                        const struct ferry_config *user);

#endif /* FERRY_FABRIC_CONFIG_H */
