/*
 * How the listener's service thread answers a client and ends its
 * connection: the connection's output queue, written as the socket takes
 * it (never waiting for it), answers, refusals and the last ERROR frame.
 * Everything here runs in the service thread with lis->lock held.
 */
#ifndef FERRY_OOB_REPLY_H
#define FERRY_OOB_REPLY_H

#include "oob/conn.h"

/* Logs why c goes, at a level that depends on who it is. */
void ferry__oob_note_drop(const struct ferry__oob_conn *c, const char *why);
/* Closes c now (ferry__oob_conn_close, and its socket). */
void ferry__oob_shut(struct ferry__oob_conn *c);
/* Writes what the socket takes of c's output now; once it is all out, a
 * closing connection is closed. */
void ferry__oob_flush(struct ferry__oob_conn *c);
/* Queues a built frame and writes what the socket takes; c is closed
 * when its queue has no room (it has not taken its earlier output). */
void ferry__oob_reply_frame(struct ferry__oob_conn *c, const uint8_t *frame,
                            size_t len);
/* The same for a frame of kind with a name and bytes (ferry__oob_build). */
void ferry__oob_reply(struct ferry__oob_conn *c, unsigned kind, const char *name,
                      const void *bytes, size_t n);
/* Refuses one request with a REFUSED frame (code: what the client's call
 * returns) saying why; the connection stays. */
void ferry__oob_refuse(struct ferry__oob_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/*
 * Ends c with an ERROR frame saying why (code: what the client's call
 * returns).  An authenticated client gets the time a send may stall to
 * take it; one still in the handshake is closed at once, after a single
 * try, for its slot belongs to the next newcomer.  Does nothing to a
 * connection already ending.
 */
void ferry__oob_drop(struct ferry__oob_conn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* FERRY_OOB_REPLY_H */
