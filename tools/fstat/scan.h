/*
 * ferry_stat: every snapshot of a directory, live or stale (scan.c).
 */
#ifndef FERRY_STAT_SCAN_H
#define FERRY_STAT_SCAN_H

#include "snap.h"

#include <stdbool.h>
#include <stddef.h>

struct scan {
    const char *dir;
    struct snapshot **snaps; /* by pid, then context; owned */
    size_t nsnaps, cap_snaps;
    char **problems; /* one sentence each, naming the file; owned */
    size_t nproblems, cap_problems;
};

/*
 * Reads every DIR/ferry-PID-N.prom into sc (free with scan_free, even on
 * failure), and tells the live from the stale: a snapshot is stale when
 * its process is gone or is another one with the same pid.  A file that
 * cannot be read, is not a regular file, is malformed, or names a live
 * process that does not run as the file's owner is left out, with a
 * problem saying why.
 * With clean, stale snapshots are removed (snapshot.removed).  Returns 0,
 * or -errno with err filled when DIR itself cannot be read.
 */
int scan_dir(const char *dir, bool clean, struct scan *sc, char *err,
             size_t errlen);
void scan_free(struct scan *sc);
/* Adds a problem (printf-style); false when out of memory. */
bool scan_problem(struct scan *sc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/*
 * Gives each snapshot of now, from the same context in before, the
 * version to compute rates from (snapshot.base): the one of before when
 * it is older, else that one's own base (the file was not rewritten in
 * between).  Takes those from before, which stays for scan_free.
 */
void scan_take_bases(struct scan *now, struct scan *before);

#endif /* FERRY_STAT_SCAN_H */
