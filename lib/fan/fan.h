/*
 * Fan-out (ferry_fanout): one region to many, pipelined through a chain
 * or a tree of the receivers, each forwarding what has landed.
 */
#ifndef FERRY_FAN_H
#define FERRY_FAN_H

#include "fan/part.h"

/* Makes the context's fan-out part, and hands up its notification sink
 * (to notify) and its driver (to progress, as after_pass); 0 or
 * FERRY_ENOMEM. */
int ferry__fan_init(struct ferry_context *ctx);
/*
 * Drives the fan-outs: takes the arrived events, posts what every node
 * may post, settles what came back.  Called without the context lock by
 * whoever progresses (the progress thread, ferry_progress, waits); a
 * call that finds another thread driving returns at once.
 */
void ferry__fan_run(struct ferry_context *ctx);
/* Frees every node and the part (context destruction, progress thread
 * stopped); nothing after a failed ferry__fan_init. */
void ferry__fan_destroy(struct ferry_context *ctx);

#endif /* FERRY_FAN_H */
