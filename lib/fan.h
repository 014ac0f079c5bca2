/*
 * Fan-out (ferry_fanout): one region to many, pipelined through a chain
 * or a tree of the receivers, each forwarding what has landed.
 */
#ifndef FERRY_FAN_H
#define FERRY_FAN_H

#include "part.h"

/* Sets up the context's fan-out part and its notification sink. */
void ferry__fan_init(struct ferry_context *ctx);
/*
 * Drives the fan-outs: takes the arrived events, posts what every node
 * may post, settles what came back.  Called without the context lock by
 * whoever progresses (the progress thread, ferry_progress, waits); a
 * call that finds another thread driving returns at once.
 */
void ferry__fan_run(struct ferry_context *ctx);
/* The context a fan-out runs in (for ferry_fanout_wait, progress.c). */
struct ferry_context *ferry__fan_context(const struct ferry_fanout *f);
/* Frees every node (context destruction, progress thread stopped). */
void ferry__fan_destroy(struct ferry_context *ctx);

#endif /* FERRY_FAN_H */
