/*
 * The bootstrap's calls on raw blobs, below ferry__oob_publish / offer /
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

/*
 * Bootstrap over TCP, for programs without a control plane of their own.
 *
 * The listening side publishes named regions; the connecting side learns
 * the listener's address (a peer) and looks regions up by name, and may
 * offer regions of its own, which the listening side finds through the
 * connection ferry__oob_accept() returns, for as long as that connection
 * lasts.
 *
 * Both sides prove they hold the same shared secret, the token
 * (config.oob_token or FERRY_OOB_TOKEN; empty when neither is set), by a
 * challenge-response over fresh nonces: the token itself never crosses
 * the network, and a peer without it is refused with a sentence saying
 * the tokens differ.  The handshake keeps out whoever lacks the token;
 * what follows it is neither encrypted nor signed, so it does not stand
 * up to someone who can rewrite the traffic.
 *
 * The listener bounds what any client can cost it: a handshake must end
 * within 5 s, and idle handshakes cannot crowd out clients that answer;
 * an authenticated client silent for 5 minutes is closed (its next
 * request says so); one that does not read its answers is dropped after
 * 5 s; one connection offers at most 1024 regions.  Frames are checked
 * and bounded; every wait has a deadline.
 */
typedef struct ferry__oob ferry__oob_t;
typedef struct ferry__oob_conn ferry__oob_conn_t;

/*
 * Listens on "host:port" (":port" for every address; port 0 picks a free
 * one, see ferry__oob_port) and serves clients from a thread of its own.
 * The token is read now.  Without a token, only a loopback address may
 * be listened on (anyone who reaches the port could import every
 * published region and write to it) unless config.oob_insecure (or
 * FERRY_OOB_INSECURE=1) accepts that.  Returns 0, FERRY_EINVAL (bad
 * address, a non-loopback address without a token, a token of 128
 * characters or more: the sentence says), FERRY_EEXIST (the address is
 * already in use), FERRY_EHOSTUNREACH (host does not resolve) or
 * FERRY_ENOMEM.
 */
int ferry__oob_listen(ferry_context_t *ctx, const char *hostport,
                     ferry__oob_t **lis);
/* The same with this token instead of the context's (NULL: the context's),
 * for one context serving, or joining, groups with different secrets. */
int ferry__oob_listen_token(ferry_context_t *ctx,
                           const char *hostport, const char *token,
                           ferry__oob_t **lis);
/* The port the listener is bound to, or FERRY_EINVAL for NULL. */
int ferry__oob_port(const ferry__oob_t *lis);
/* Makes mem findable by name (1 to 127 characters), replacing an earlier
 * publication of that name. */
int ferry__oob_publish(ferry__oob_t *lis, const char *name,
                      const ferry_mem_t *mem);
/*
 * Waits up to timeout_ms (ferry.h's rule) for a client that has
 * connected, proven the token and not yet been accepted.  *conn carries
 * its peer.  Returns 0, FERRY_EAGAIN (none came in time), or the error of
 * adding the client as a peer.
 */
int ferry__oob_accept(ferry__oob_t *lis, int timeout_ms,
                     ferry__oob_conn_t **conn);
/* Stops serving and frees the listener; accepted connections stay valid
 * until ferry__oob_disconnect.  NULL-safe. */
void ferry__oob_close(ferry__oob_t *lis);

/*
 * Connects to a listener, retrying while the connection is refused until
 * timeout_ms (a deadline, ferry.h's rule: 0 the default, 10 s; < 0 none),
 * proves the token and exchanges addresses.
 * Returns 0, FERRY_ETIMEDOUT, FERRY_EHOSTUNREACH, FERRY_EPROTO (not a
 * ferry listener; the tokens differ, found by either side: the sentence
 * says), FERRY_EINCOMPAT (another frame version), FERRY_EAGAIN (the
 * listener serves as many clients as it takes), FERRY_EINVAL (a token of
 * 128 characters or more).
 */
int ferry__oob_connect(ferry_context_t *ctx, const char *hostport,
                      int timeout_ms, ferry__oob_conn_t **conn);
/* The same with this token instead of the context's (NULL: the context's). */
int ferry__oob_connect_token(ferry_context_t *ctx,
                            const char *hostport, const char *token,
                            int timeout_ms,
                            ferry__oob_conn_t **conn);
/* The peer at the other end (owned by the context). */
ferry_peer_t *ferry__oob_conn_peer(const ferry__oob_conn_t *conn);
/*
 * Looks up a region by name: on a connecting side, one the listener
 * published (FERRY_ENOENT if none); on an accepted connection, one this
 * client offered, waiting up to timeout_ms for it (FERRY_ECONNRESET once
 * it disconnected).  *rmem
 * as from ferry_rmem_import.  A connection the listener closed (idle for
 * 5 minutes) answers FERRY_ECONNRESET with the listener's sentence.
 * timeout_ms is the request's deadline over the connection, 0 meaning
 * now (the bootstrap's own rule, older than ferry.h's): past it the call
 * ends with FERRY_ETIMEDOUT and the connection closes, since a late
 * answer could not be told from the next one's.
 */
int ferry__oob_lookup(ferry__oob_conn_t *conn, const char *name,
                     int timeout_ms, ferry_rmem_t **rmem);
/*
 * Connecting side only: offers mem to the listener under name, replacing
 * an earlier offer of that name; the offer lasts as long as the
 * connection.  FERRY_ENOSPC (the connection stays usable) beyond 1024
 * offers or 1 MiB of them per connection.
 */
int ferry__oob_offer(ferry__oob_conn_t *conn, const char *name,
                    const ferry_mem_t *mem, int timeout_ms);
/* Closes the connection (the peer stays with the context); its offers go
 * with it.  NULL-safe. */
void ferry__oob_disconnect(ferry__oob_conn_t *conn);

/* Listener side: makes blob findable under name, replacing an earlier
 * publication of that name.  FERRY_EINVAL, FERRY_ENOMEM. */
int ferry__oob_publish_blob(ferry__oob_t *lis, const char *name,
                            const void *blob, size_t len);
/* Listener side: removes the publication of name; FERRY_ENOENT if none. */
int ferry__oob_withdraw(ferry__oob_t *lis, const char *name);
/*
 * Listener side, no wait: copies the blob of name (its own publication,
 * else an authenticated client's offer) into blob.  *len is the room in,
 * the length out.  FERRY_ENOENT; FERRY_ENOSPC with *len set to the
 * length needed.
 */
int ferry__oob_find(ferry__oob_t *lis, const char *name, void *blob,
                    size_t *len);

/*
 * Client side: offers blob to the listener under name, replacing an
 * earlier offer of that name.  FERRY_ENOSPC (with a sentence) beyond the
 * connection's caps (FERRY__OOB_MAX_OFFERS, FERRY__OOB_MAX_OFFER_BYTES);
 * the connection stays usable then.
 */
int ferry__oob_offer_blob(ferry__oob_conn_t *conn, const char *name,
                          const void *blob, size_t len, int timeout_ms);
/* Client side: withdraws this connection's offer of name; FERRY_ENOENT
 * if it made none. */
int ferry__oob_withdraw_offer(ferry__oob_conn_t *conn, const char *name,
                              int timeout_ms);
/*
 * Client side: asks the listener for name (as ferry__oob_find answers
 * it).  *len is the room in, the length out.  FERRY_ENOENT; FERRY_ENOSPC
 * with *len set to the length needed.
 */
int ferry__oob_lookup_blob(ferry__oob_conn_t *conn, const char *name,
                           int timeout_ms, void *blob, size_t *len);
/*
 * Client side: the same, but only the listener's own publications (an
 * offer is another process's region: imported through the listener's
 * peer, as ferry__oob_lookup does, it would aim at the wrong process).
 */
int ferry__oob_lookup_published(ferry__oob_conn_t *conn, const char *name,
                                int timeout_ms, void *blob, size_t *len);
/* Client side: a request that does nothing but keep the connection from
 * being closed as idle. */
int ferry__oob_ping(ferry__oob_conn_t *conn, int timeout_ms);
/* Client side: whether a request failed in a way that ended the
 * connection (closed by the other side, timed out mid-answer): every
 * later request fails at once, and only a new connection helps. */
bool ferry__oob_conn_lost(ferry__oob_conn_t *conn);

/*
 * ferry__oob_connect with the context's token for a caller that expects
 * nobody to listen yet (the metadata backend looking for its hub before
 * it becomes the hub): a refusal answers at once, unlogged.
 */
int ferry__oob_probe(ferry_context_t *ctx, const char *hostport,
                     int timeout_ms, ferry__oob_conn_t **out);

/*
 * Tests only: replaces the listener's limits (limits.h), e.g. to see a
 * handshake time out in 300 ms rather than 5 s.  Applies to connections
 * already open too.  FERRY_EINVAL for a zero or negative bound.
 */
int ferry__oob_set_limits(ferry__oob_t *lis,
                          const struct ferry__oob_limits *limits);

#endif
