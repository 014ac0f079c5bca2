/*
 * ferry_stat --prometheus (serve.c): the live snapshots of a directory
 * served over HTTP, for Prometheus to scrape.
 */
#ifndef FERRY_STAT_SERVE_H
#define FERRY_STAT_SERVE_H

#include <stdbool.h>

/*
 * Listens on addr ([HOST]:PORT; HOST 127.0.0.1 when empty, PORT 0 any
 * free port) and answers GET /metrics with merge_write's text of dir,
 * read anew at each request (clean: stale snapshots removed as they are
 * found).  Says where it listens on stderr, then serves until killed.
 * Returns only when it cannot listen or serve: the exit status, 1.
 */
int serve(const char *dir, bool clean, const char *addr);

#endif /* FERRY_STAT_SERVE_H */
