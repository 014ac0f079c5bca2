/*
 * ferry/meta.h: how peers meet: the metadata service and the bootstrap.
 * Part of ferry's public API: include <ferry.h>, or this and
 * <ferry/core.h>, which it includes.
 */
#ifndef FERRY_API_META_H
#define FERRY_API_META_H

#include <ferry/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Bootstrap over TCP, for programs without a control plane of their own.
 *
 * The listening side publishes named regions; the connecting side learns
 * the listener's address (a peer) and looks regions up by name, and may
 * offer regions of its own, which the listening side finds through the
 * connection ferry_oob_accept() returns, for as long as that connection
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
typedef struct ferry_oob ferry_oob_t;
typedef struct ferry_oob_conn ferry_oob_conn_t;

/*
 * Listens on "host:port" (":port" for every address; port 0 picks a free
 * one, see ferry_oob_port) and serves clients from a thread of its own.
 * The token is read now.  Without a token, only a loopback address may
 * be listened on (anyone who reaches the port could import every
 * published region and write to it) unless config.oob_insecure (or
 * FERRY_OOB_INSECURE=1) accepts that.  Returns 0, FERRY_EINVAL (bad
 * address, a non-loopback address without a token, a token of 128
 * characters or more: the sentence says), FERRY_EEXIST (the address is
 * already in use), FERRY_EHOSTUNREACH (host does not resolve) or
 * FERRY_ENOMEM.
 */
FERRY_API int ferry_oob_listen(ferry_context_t *ctx, const char *hostport,
                               ferry_oob_t **lis);
/* The same with this token instead of the context's (NULL: the context's),
 * for one context serving, or joining, groups with different secrets. */
FERRY_API int ferry_oob_listen_token(ferry_context_t *ctx,
                                     const char *hostport, const char *token,
                                     ferry_oob_t **lis);
/* The port the listener is bound to, or FERRY_EINVAL for NULL. */
FERRY_API int ferry_oob_port(const ferry_oob_t *lis);
/* Makes mem findable by name (1 to 127 characters), replacing an earlier
 * publication of that name. */
FERRY_API int ferry_oob_publish(ferry_oob_t *lis, const char *name,
                                const ferry_mem_t *mem);
/*
 * Waits up to timeout_ms (ferry.h's rule) for a client that has
 * connected, proven the token and not yet been accepted.  *conn carries
 * its peer.  Returns 0, FERRY_EAGAIN (none came in time), or the error of
 * adding the client as a peer.
 */
FERRY_API int ferry_oob_accept(ferry_oob_t *lis, int timeout_ms,
                               ferry_oob_conn_t **conn);
/* Stops serving and frees the listener; accepted connections stay valid
 * until ferry_oob_disconnect.  NULL-safe. */
FERRY_API void ferry_oob_close(ferry_oob_t *lis);

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
FERRY_API int ferry_oob_connect(ferry_context_t *ctx, const char *hostport,
                                int timeout_ms, ferry_oob_conn_t **conn);
/* The same with this token instead of the context's (NULL: the context's). */
FERRY_API int ferry_oob_connect_token(ferry_context_t *ctx,
                                      const char *hostport, const char *token,
                                      int timeout_ms,
                                      ferry_oob_conn_t **conn);
/* The peer at the other end (owned by the context). */
FERRY_API ferry_peer_t *ferry_oob_conn_peer(const ferry_oob_conn_t *conn);
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
FERRY_API int ferry_oob_lookup(ferry_oob_conn_t *conn, const char *name,
                               int timeout_ms, ferry_rmem_t **rmem);
/*
 * Connecting side only: offers mem to the listener under name, replacing
 * an earlier offer of that name; the offer lasts as long as the
 * connection.  FERRY_ENOSPC (the connection stays usable) beyond 1024
 * offers or 1 MiB of them per connection.
 */
FERRY_API int ferry_oob_offer(ferry_oob_conn_t *conn, const char *name,
                              const ferry_mem_t *mem, int timeout_ms);
/* Closes the connection (the peer stays with the context); its offers go
 * with it.  NULL-safe. */
FERRY_API void ferry_oob_disconnect(ferry_oob_conn_t *conn);

/* ==== Metadata =============================================================
 *
 * Where the peers of a fleet find each other by name.  A context joins
 * under a name unique in the service, and its entries live as long as it
 * does:
 *
 *   PREFIX/peers/NAME            its address blob
 *   PREFIX/regions/NAME/REGION   the key blob of each region it published
 *
 * The service is named by a URL:
 *
 *   etcd://HOST:PORT[,HOST:PORT...][/PREFIX]   etcd v3 (its HTTP/JSON
 *       gateway); every entry of a context hangs on one lease, kept alive
 *       by a thread, so a context that dies loses its entries within
 *       config.metadata_ttl_s and one that closes loses them at once.
 *       The endpoints are tried in turn; when etcd comes back after an
 *       outage, the entries are published again.  PREFIX defaults to
 *       "ferry".
 *   etcds://...   the same over TLS: FERRY_ETCD_CACERT (the CA that signed
 *       the servers), FERRY_ETCD_CERT and FERRY_ETCD_KEY (this client's
 *       certificate, when the servers ask for one).
 *   bootstrap://HOST:PORT   the embedded bootstrap (ferry_oob_*), no
 *       server to run: the first context to open it listens on HOST:PORT
 *       and keeps the entries (the hub); the others connect to it.  A
 *       member's entries go when its connection does.  No watch.
 *
 * Names and regions are 1 to 127 characters of [A-Za-z0-9._-].  Every
 * call has a deadline: its timeout_ms, or config.metadata_timeout_ms; a
 * failure names the endpoint and what failed.
 */
typedef struct ferry_meta ferry_meta_t;

/*
 * Joins the service at url (NULL: config.metadata, else FERRY_METADATA)
 * under name, publishing the context's address.  Returns 0, FERRY_EINVAL
 * (bad URL or name: the sentence says what is accepted), FERRY_ENOTSUP
 * (etcd:// in a ferry built without the etcd backend), FERRY_EEXIST
 * (another live context has that name), FERRY_ETIMEDOUT or
 * FERRY_EHOSTUNREACH (no endpoint answered: the sentence names each).
 */
FERRY_API int ferry_meta_open(ferry_context_t *ctx, const char *url,
                              const char *name, ferry_meta_t **meta);
/*
 * The service's URL, as given to ferry_meta_open, except that a context
 * that became the bootstrap hub at port 0 names the port it listens on
 * (bootstrap://127.0.0.1:0 -> bootstrap://127.0.0.1:40213): the URL the
 * others open.  NULL for a NULL or closed handle.
 */
FERRY_API const char *ferry_meta_url(const ferry_meta_t *meta);
/* Publishes mem under region (a later publication replaces it).  After a
 * failure the earlier publication stays; a publication whose request
 * timed out may still be applied by the service later, and then goes
 * with the others at ferry_meta_close. */
FERRY_API int ferry_meta_publish(ferry_meta_t *meta, const char *region,
                                 const ferry_mem_t *mem);
/* Withdraws a region; FERRY_ENOENT if it was not published. */
FERRY_API int ferry_meta_withdraw(ferry_meta_t *meta, const char *region);
/*
 * The peer published under name, waiting up to timeout_ms (ferry.h's
 * rule: 0 looks once, < 0 no limit) for it to appear.  The handle is added to the
 * context once per address and given again while that address stays
 * published; a context that came back under the same name gets a new
 * handle.  The handle is meta's while meta watches and the peer has not
 * left: do not ferry_peer_close it before its FERRY_META_LEAVE or
 * ferry_meta_close; after either it is the application's.  Returns 0,
 * FERRY_EAGAIN (not there when the wait ran out), or an error of the
 * service or of ferry_peer_add.
 */
FERRY_API int ferry_meta_peer(ferry_meta_t *meta, const char *name,
                              int timeout_ms, ferry_peer_t **peer);
/* Region `region` of peer `name`, waiting as ferry_meta_peer, imported as
 * by ferry_rmem_import (free it with ferry_rmem_close). */
FERRY_API int ferry_meta_lookup(ferry_meta_t *meta, const char *name,
                                const char *region, int timeout_ms,
                                ferry_rmem_t **rmem);

enum ferry_meta_event_kind {
    FERRY_META_JOIN = 1,  /* a context published its address */
    FERRY_META_LEAVE = 2, /* its entries went: closed, or its lease ended */
};

struct ferry_meta_event {
    enum ferry_meta_event_kind kind;
    char name[128];
};

/*
 * Starts watching the service's peers: every join and leave after this
 * call is queued for ferry_meta_event (the peers already there come first,
 * as joins).  When a peer that ferry_meta_peer handed out leaves, it is
 * also declared dead (ferry_peer_declare_dead): its requests end and a
 * FERRY_NOTIFICATION_PEER_DOWN event is queued on the context.  Returns 0,
 * FERRY_ENOTSUP (bootstrap://) or an error of the service.
 */
FERRY_API int ferry_meta_watch(ferry_meta_t *meta);
/* The next queued event, waiting up to timeout_ms (ferry.h's rule).
 * Returns 0, FERRY_EAGAIN (none in time), or FERRY_EINVAL (not
 * watching). */
FERRY_API int ferry_meta_event(ferry_meta_t *meta, int timeout_ms,
                               struct ferry_meta_event *event);
/* Withdraws everything the context published (at once: the lease is
 * revoked) and frees meta.  Peers it handed out stay with the context.
 * NULL-safe. */
FERRY_API int ferry_meta_close(ferry_meta_t *meta);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_API_META_H */
