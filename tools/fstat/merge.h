/*
 * ferry_stat: the live snapshots of a directory as one exposition
 * (merge.c), for --prometheus.
 */
#ifndef FERRY_STAT_MERGE_H
#define FERRY_STAT_MERGE_H

#include "scan.h"

#include <stdio.h>

/*
 * Writes the live snapshots of sc to out as one text of exposition
 * format 0.0.4: each family's HELP and TYPE once, then its samples from
 * every process, each with the labels pid and context put first (a
 * process's own label of either name becomes exported_pid or
 * exported_context, as when Prometheus scrapes).  Left out, each with a
 * problem added to sc: the samples of a family that a snapshot types
 * otherwise than the first that has it (no TYPE is untyped), and a family
 * named like a series of another's histogram or summary (x_count beside
 * a histogram x).  Returns 0 or -ENOMEM.
 */
int merge_write(struct scan *sc, FILE *out);

#endif /* FERRY_STAT_MERGE_H */
