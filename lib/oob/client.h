/*
 * The bootstrap's connecting side: dialling, the handshake, and one
 * request at a time with a deadline.
 */
#ifndef FERRY_OOB_CLIENT_H
#define FERRY_OOB_CLIENT_H

#include "oob/conn.h"

/*
 * Connects to hostport, retrying while the connection is refused (the
 * server may start a moment after us) until timeout_ms (> 0), proves
 * secret (auth.h) and adds the server as a peer of ctx; the first refusal
 * is logged at once (a warning naming hostport and the time left), for a
 * caller who would otherwise wait in silence.  probing: the caller
 * expects that nobody may listen (the metadata backend looking for its
 * hub before it becomes it): a refusal ends the attempt at once, unlogged
 * (FERRY_EHOSTUNREACH).  The
 * caller frees *out with ferry__oob_conn_free.  Returns 0 or the error,
 * with its sentence (ferry__oob_connect lists them).
 */
int ferry__oob_client_open(struct ferry_context *ctx, const char *hostport,
                           int timeout_ms, const char *secret,
                           bool probing, struct ferry__oob_conn **out);

/*
 * Sends a request (a frame of kind with name and, unless NULL, the bytes)
 * and reads its answer into buf (FERRY__FRAME_MAX bytes), opened in r;
 * *answer is its kind.  An ERROR answer returns its error and closes the
 * connection, a REFUSED one returns its error only.  A failure half-way
 * closes the connection too: the late answer would otherwise be taken
 * for the next request's, and the next call says so.
 */
int ferry__oob_client_call(struct ferry__oob_conn *c, unsigned kind,
                           const char *name, const void *bytes, size_t n,
                           int timeout_ms, uint8_t *buf,
                           struct ferry__blob_reader *r, unsigned *answer);

#endif /* FERRY_OOB_CLIENT_H */
