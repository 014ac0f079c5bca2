/*
 * What a provider is, in words, from its name as this libfabric uses it:
 * "tcp;ofi_rxm" is rxm over tcp's connected endpoints, and libfabric 1.17
 * calls its own reliable-datagram tcp provider "net" (1.18 renamed it
 * tcp).  Only a description: nothing is chosen by name.
 */
#ifndef FERRY_FABRIC_ABOUT_H
#define FERRY_FABRIC_ABOUT_H

#include "base/ferry-internal.h"

/* The description of prov_name ("tcp;ofi_rxm", "net", "shm"...) for
 * libfabric fi_runtime (FI_VERSION form) into buf. */
const char *ferry__provider_about(const char *prov_name, uint32_t fi_runtime,
                                  char *buf, size_t len);

#endif /* FERRY_FABRIC_ABOUT_H */
