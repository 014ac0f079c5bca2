/*
 * The mr_mode bits in ferry's terms (FERRY_MR_*) and libfabric's (FI_MR_*).
 */
#ifndef FERRY_FABRIC_MR_MODE_H
#define FERRY_FABRIC_MR_MODE_H

#include "base/ferry-internal.h"

unsigned ferry__mr_mode_from_fi(uint64_t fi_mr_mode);
uint64_t ferry__mr_mode_to_fi(unsigned ferry_mr_mode);
/* "LOCAL|VIRT_ADDR" (or "none") into buf. */
const char *ferry__mr_mode_str(unsigned mr_mode, char *buf, size_t len);

#endif /* FERRY_FABRIC_MR_MODE_H */
