/*
 * Progress: completion queues, error translation, deadlines, the
 * optional progress thread, and every call that waits (ferry_req_wait,
 * ferry_notify_poll, ferry_counter_wait, ...).  Nothing below calls up
 * to it.
 */
#ifndef FERRY_PROGRESS_H
#define FERRY_PROGRESS_H

#include "progress/part.h"

/* Polls every rail once and enforces deadlines; caller holds the lock. */
int ferry__progress_locked(struct ferry_context *ctx);
int ferry__progress_thread_start(struct ferry_context *ctx);
void ferry__progress_thread_stop(struct ferry_context *ctx);
/* Closes the descriptor ferry_context_fd made, if any (after the thread
 * stopped). */
void ferry__progress_fd_close(struct ferry_context *ctx);
/* Between two polls of a loop that waits (spins counts them): runs what
 * progresses above (after_pass), then yields, naps or sleeps until the
 * progress thread has handled events. */
void ferry__progress_pause(struct ferry_context *ctx, unsigned spins);
/* ferry_req_test for ferry's own callers (the fan-out's driver, which
 * the progress thread runs too): with a progress thread, it leaves the
 * progress to the thread instead of taking its place. */
int ferry__req_look(ferry_req_t *req);
/* When a wait of timeout_ms ends (0: never, for timeout_ms < 0; 0 ms:
 * after one look, ferry.h's rule), and whether that time has come. */
uint64_t ferry__wait_until(int timeout_ms);
bool ferry__wait_over(uint64_t until);

#endif /* FERRY_PROGRESS_H */
