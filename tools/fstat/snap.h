/*
 * ferry_stat: one telemetry snapshot, DIR/ferry-PID-N.prom as libferry
 * writes it (FERRY_TELEMETRY): the header that says whose it is, then
 * Prometheus text (exposition format 0.0.4), read (snap.c) and checked
 * whole (parse.c) into what model.h describes, and the questions the
 * view asks of it.
 */
#ifndef FERRY_STAT_SNAP_H
#define FERRY_STAT_SNAP_H

#include "model.h"

#include <stdbool.h>
#include <stddef.h>

/*
 * Reads and checks the snapshot at path into *out (free with snap_free).
 * Returns 0; -ENOENT when the file is gone (its context closed: not an
 * error); -EINVAL with "PATH:LINE: why" in err for a malformed file;
 * another -errno with "PATH: why" in err.
 */
int snap_load(const char *path, struct snapshot **out, char *err,
              size_t errlen);
/* Frees s and its bases; NULL does nothing. */
void snap_free(struct snapshot *s);

/*
 * The sum of the samples of s named `name` that carry every label of
 * match (name, value, ..., NULL) into *sum.  Returns false when none
 * does, or s is NULL.
 */
bool snap_sum(const struct snapshot *s, const char *name,
              const char *const *match, double *sum);
/*
 * The distinct values of label `label` among the samples of s that carry
 * every label of match (name NULL: of any name), in the order they come,
 * into *values (the caller frees the array, not the strings) and *n.
 * Returns 0 or -ENOMEM.
 */
int snap_values(const struct snapshot *s, const char *name, const char *label,
                const char *const *match, const char ***values, size_t *n);

#endif /* FERRY_STAT_SNAP_H */
