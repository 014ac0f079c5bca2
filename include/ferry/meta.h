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
 * The one way peers meet: the metadata service.
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
 *   bootstrap://HOST:PORT   ferry's own bootstrap over TCP, no server to
 *       run: the first context to open it listens on HOST:PORT (port 0:
 *       any, see ferry_meta_url) and keeps the entries (the hub); the
 *       others connect to it.  A member's entries go when its connection
 *       does.  No watch.  Both sides prove they hold the same shared
 *       secret (config.oob_token or FERRY_OOB_TOKEN; empty when neither
 *       is set) by a challenge-response over fresh nonces, so the token
 *       never crosses the network; without a token a hub listens only on
 *       loopback unless config.oob_insecure (FERRY_OOB_INSECURE=1) accepts
 *       that anyone reaching the port could write into every published
 *       region.  What follows the handshake is neither encrypted nor
 *       signed.  The hub bounds what a member can cost it (handshakes end
 *       within 5 s, 1024 regions per member; ferry_meta(3)).
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
 * Returns 0 (also for NULL) or FERRY_EHANDLE. */
FERRY_API int ferry_meta_close(ferry_meta_t *meta);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_API_META_H */
