/*
 * ferry_stat: what a person reads (view.c): the list of snapshots, and
 * the live view of the live ones.
 */
#ifndef FERRY_STAT_VIEW_H
#define FERRY_STAT_VIEW_H

#include "scan.h"

#include <stdio.h>

/* --list: one line per snapshot: pid, context, state, age, program. */
void view_list(const struct scan *sc, FILE *out);
/*
 * One frame of the view: per live context, its requests and, per peer
 * and rail, what moved per second between the snapshot and its base.
 * Returns 0 or -ENOMEM.
 */
int view_frame(const struct scan *sc, FILE *out);
/* The scan's problems, one line each. */
void view_problems(const struct scan *sc, FILE *out);

#endif /* FERRY_STAT_VIEW_H */
