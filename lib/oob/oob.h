/*
 * The bootstrap's calls on raw blobs, below ferry_oob_publish / offer /
 * lookup (which are these plus ferry_mem_export / ferry_rmem_import), for
 * the metadata service's bootstrap backend (meta_boot.c) and the tests.
 *
 * Names here are 1 to FERRY__OOB_NAME_MAX (300) characters, against the
 * public API's 127; blobs are at most FERRY__OOB_BLOB_MAX bytes.  A
 * listener answers a lookup from its own publications first, then from
 * the offers of its authenticated clients; an offer lives as long as the
 * connection that made it (the liveness the backend relies on), and an
 * authenticated client that sends nothing for FERRY__OOB_IDLE_MS (5 min)
 * is closed, so a client that must stay sends ferry__oob_ping now and
 * then.  Every call returns 0 or a ferry error with a sentence.
 */
#ifndef FERRY_OOB_OOB_H
#define FERRY_OOB_OOB_H

#include "base/ferry-internal.h"
#include "oob/limits.h"
#include "oob/wire.h"

/* Listener side: makes blob findable under name, replacing an earlier
 * publication of that name.  FERRY_EINVAL, FERRY_ENOMEM. */
int ferry__oob_publish_blob(ferry_oob_t *lis, const char *name,
                            const void *blob, size_t len);
/* Listener side: removes the publication of name; FERRY_ENOENT if none. */
int ferry__oob_withdraw(ferry_oob_t *lis, const char *name);
/*
 * Listener side, no wait: copies the blob of name (its own publication,
 * else an authenticated client's offer) into blob.  *len is the room in,
 * the length out.  FERRY_ENOENT; FERRY_ENOSPC with *len set to the
 * length needed.
 */
int ferry__oob_find(ferry_oob_t *lis, const char *name, void *blob,
                    size_t *len);

/*
 * Client side: offers blob to the listener under name, replacing an
 * earlier offer of that name.  FERRY_ENOSPC (with a sentence) beyond the
 * connection's caps (FERRY__OOB_MAX_OFFERS, FERRY__OOB_MAX_OFFER_BYTES);
 * the connection stays usable then.
 */
int ferry__oob_offer_blob(ferry_oob_conn_t *conn, const char *name,
                          const void *blob, size_t len, int timeout_ms);
/* Client side: withdraws this connection's offer of name; FERRY_ENOENT
 * if it made none. */
int ferry__oob_withdraw_offer(ferry_oob_conn_t *conn, const char *name,
                              int timeout_ms);
/*
 * Client side: asks the listener for name (as ferry__oob_find answers
 * it).  *len is the room in, the length out.  FERRY_ENOENT; FERRY_ENOSPC
 * with *len set to the length needed.
 */
int ferry__oob_lookup_blob(ferry_oob_conn_t *conn, const char *name,
                           int timeout_ms, void *blob, size_t *len);
/*
 * Client side: the same, but only the listener's own publications (an
 * offer is another process's region: imported through the listener's
 * peer, as ferry_oob_lookup does, it would aim at the wrong process).
 */
int ferry__oob_lookup_published(ferry_oob_conn_t *conn, const char *name,
                                int timeout_ms, void *blob, size_t *len);
/* Client side: a request that does nothing but keep the connection from
 * being closed as idle. */
int ferry__oob_ping(ferry_oob_conn_t *conn, int timeout_ms);

/*
 * ferry_oob_connect with the context's token for a caller that expects
 * nobody to listen yet (the metadata backend looking for its hub before
 * it becomes the hub): a refusal is not logged, only returned.
 */
int ferry__oob_probe(ferry_context_t *ctx, const char *hostport,
                     int timeout_ms, ferry_oob_conn_t **out);

/*
 * Tests only: replaces the listener's limits (limits.h), e.g. to see a
 * handshake time out in 300 ms rather than 5 s.  Applies to connections
 * already open too.  FERRY_EINVAL for a zero or negative bound.
 */
int ferry__oob_set_limits(ferry_oob_t *lis,
                          const struct ferry__oob_limits *limits);

#endif
