/*
 * Notifications and counters delivered after the data: sending a
 * request's notification (as a message, or packed into a write's remote
 * CQ data), the mirror sync messages of staged memory, and on the target
 * the queue and per-id counters that arriving notifications feed.  All
 * with the lock held.
 */
#ifndef FERRY_XFER_NOTIFY_H
#define FERRY_XFER_NOTIFY_H

#include "xfer/op.h"

#define FERRY__RECV_DEPTH 64

struct ferry__recv {
    struct fi_context2 fi_ctx; /* first: libfabric hands it back */
    uint8_t buf[FERRY__MSG_SIZE];
};

/* Receive buffers (and their registrations) of the rail: after
 * fi_enable and ferry__txq_open. */
int ferry__notify_rail_open(struct ferry__xfer *x, struct ferry__rail *rail);
/* After the endpoint is closed. */
void ferry__notify_rail_close(struct ferry__xfer *x,
                              const struct ferry__rail *rail);
/* Posts the request's notification on op; returns fi_send's result. */
ssize_t ferry__notify_send(struct ferry_req *req, struct ferry__rail *rail,
                           struct ferry__op *op);
/* Posts the abort of a request that ended before its notification went
 * (xfer.c). */
ssize_t ferry__abort_send(struct ferry_req *req, struct ferry__rail *rail,
                          struct ferry__op *op);
/* Posts a heartbeat to peer (live.c): reads its pulse word into op's
 * message buffer; returns fi_read's result. */
ssize_t ferry__ping_post(struct ferry_peer *peer, struct ferry__rail *rail,
                         struct ferry__op *op);
/* Posts a key check (resume.c): reads the peer's pulse word of slot into
 * op's message buffer; returns fi_read's result. */
ssize_t ferry__check_post(struct ferry_peer *peer, struct ferry__rail *rail,
                          struct ferry__op *op, uint32_t slot);
/* What a completed heartbeat or check read: the peer's incarnation, or
 * the slot's generation. */
uint64_t ferry__ping_answer(const struct ferry__op *op);
/* Posts a mirror sync message (stage.c) on op. */
ssize_t ferry__sync_send(struct ferry_req *req, struct ferry__rail *rail,
                         struct ferry__op *op, uint64_t mirror_id,
                         uint64_t off, uint64_t len);
/* Bits of each half of the rail's remote CQ data word, one for the id and
 * one for the value (0: the rail has no CQ data). */
unsigned ferry__notify_data_bits(const struct ferry__rail *rail);
/* Whether {id, value} fits the rail's remote CQ data, and packed into it
 * (the target unpacks it with the same rail's size: both ends of a rail
 * run the same provider). */
bool ferry__notify_fits(const struct ferry__rail *rail, uint64_t id,
                        uint64_t value);
uint64_t ferry__notify_pack(const struct ferry__rail *rail, uint64_t id,
                            uint64_t value);
/* A peer's write arrived carrying a notification as remote CQ data. */
void ferry__notify_data_received(struct ferry__xfer *x,
                                 const struct ferry__rail *rail,
                                 uint64_t data);
/* A receive completed with len bytes; queues, counts, re-posts. */
void ferry__notify_received(struct ferry__xfer *x, struct ferry__rail *rail,
                            struct ferry__recv *rv, size_t len);
/* Delivers the notifications held back while mirror copies ran (once
 * ferry__stage_progress says none is queued any more). */
void ferry__notify_release_held(struct ferry__xfer *x);
/* Whether the queue may hold notifications: readable without the lock,
 * and possibly a moment late. */
bool ferry__notify_queued(struct ferry__xfer *x);
/* Moves up to max queued notifications, oldest first, into out. */
size_t ferry__notify_take(struct ferry__xfer *x,
                          struct ferry_notification *out, size_t max);
/* Delivers {id, value} as if a peer had sent it (a fan-out receiver
 * counting its own completion, fan.c). */
void ferry__notify_local(struct ferry__xfer *x, uint64_t id, uint64_t value);
/* Queues an event of ferry's own (a peer down, live.c) for
 * ferry_notify_poll. */
void ferry__notify_event(struct ferry__xfer *x,
                         const struct ferry_notification *n);
/* The sum counted for id (0 if none arrived), and into aborted the error
 * a sender's abort of it reported (0: none since the last reset). */
uint64_t ferry__counter_sum(struct ferry__xfer *x, uint64_t id,
                            int *aborted);
void ferry__notify_destroy(struct ferry__xfer *x);

#endif /* FERRY_XFER_NOTIFY_H */
