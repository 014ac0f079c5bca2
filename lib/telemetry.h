/*
 * Telemetry snapshots of a context's metrics in a directory, for
 * ferry_stat(1) (telemetry.c says what a snapshot holds).
 */
#ifndef FERRY_TELEMETRY_H
#define FERRY_TELEMETRY_H

#include <ferry/core.h>

/* Starts writing ctx's snapshots into dir every interval_ms (dir NULL or
 * "": nothing).  Returns 0, FERRY_EINVAL (dir cannot be made or written;
 * an interval under 100 ms) or FERRY_ENOMEM. */
int ferry__telemetry_start(ferry_context_t *ctx, const char *dir,
                           unsigned interval_ms);
/* Stops, and removes ctx's snapshot. */
void ferry__telemetry_stop(ferry_context_t *ctx);

#endif /* FERRY_TELEMETRY_H */
