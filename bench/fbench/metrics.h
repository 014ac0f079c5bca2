/*
 * ferry_bench --metrics FILE: each side's ferry_metrics_text at the end
 * of the run; a loopback run merges the target's into the initiator's
 * file, every sample labelled side="initiator" or side="target".
 */
#ifndef FBENCH_METRICS_H
#define FBENCH_METRICS_H

#include "side.h"

#include <stddef.h>

/* The side's metrics into path: 0, or 1 with a message. */
int metrics_write(const struct side *s, const char *path);
/*
 * A loopback run: the target wrote its own into target_path; path (the
 * initiator's) becomes both, families once each, samples labelled.
 * target_path is removed.  0, or 1 with a message.
 */
int metrics_merge(const char *path, const char *target_path);
/* Where a loopback target writes its metrics: path with ".target". */
void metrics_target_path(const char *path, char *out, size_t len);

#endif /* FBENCH_METRICS_H */
