/*
 * The metadata service (ferry/meta.h): what every backend shares
 * (meta.c: names, keys, the peer cache, waiting, the event queue) and
 * what a backend provides (a key-value store whose entries live as long
 * as the context: etcd.c, meta_boot.c).
 *
 * Keys are given to a backend without its prefix: "peers/NAME",
 * "regions/NAME/REGION".
 */
#ifndef FERRY_OOB_META_H
#define FERRY_OOB_META_H

#include "base/ferry-internal.h"
#include "fabric/owned.h"

#include <pthread.h>

/* Names and regions: 1 to 127 of these characters. */
#define FERRY__META_NAME_MAX 128
#define FERRY__META_NAME_CHARS                                                 \
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-"
/* A key without prefix: "regions/" NAME "/" REGION. */
#define FERRY__META_KEY_MAX (16 + 2 * FERRY__META_NAME_MAX)
/* Address and remote-key blobs (as the bootstrap carries them). */
#define FERRY__META_BLOB_MAX (FERRY__ADDR_MAX * 2)

struct ferry_meta;

struct ferry__meta_backend {
    const char *scheme; /* "etcd", "bootstrap" */
    bool tls_scheme;    /* SCHEME"s://" is the same over TLS */
    /*
     * Connects to the service the URL names (SCHEME://...) and
     * joins: creates key (the context's "peers/NAME") with blob, failing
     * with FERRY_EEXIST while another live context holds it.  Sets
     * m->backend_state.
     */
    int (*open)(struct ferry_meta *m, const char *url, const char *key,
                const void *blob, size_t len);
    /* Creates or replaces key, attached to the context's lifetime.  put
     * and del are bounded by m->timeout_ms. */
    int (*put)(struct ferry_meta *m, const char *key, const void *blob,
               size_t len);
    /* Deletes key: FERRY_ENOENT if it was not there. */
    int (*del)(struct ferry_meta *m, const char *key);
    /* One look, no waiting, bounded by timeout_ms: 0, FERRY_ENOENT, or a
     * failure of the service.  *len: capacity in, length out. */
    int (*get)(struct ferry_meta *m, const char *key, void *blob,
               size_t *len, int timeout_ms);
    /* Whether the service is lost for good (its connection ended), so
     * that a failed get is not asked again; NULL when every request
     * reaches the service afresh. */
    bool (*lost)(struct ferry_meta *m);
    /* Starts reporting peers joining and leaving (ferry__meta_saw). */
    int (*watch)(struct ferry_meta *m);
    /* Leaves (every entry goes at once) and frees the backend's state. */
    void (*close)(struct ferry_meta *m);
};

extern const struct ferry__meta_backend ferry__meta_etcd;
extern const struct ferry__meta_backend ferry__meta_bootstrap;

/* An event waiting for ferry_meta_event. */
struct ferry__meta_queued {
    struct ferry__meta_queued *next;
    struct ferry_meta_event ev;
};

/* A peer ferry_meta_peer handed out, with the address it was added from. */
struct ferry__meta_known {
    struct ferry__meta_known *next;
    char name[FERRY__META_NAME_MAX];
    ferry_peer_t *peer;
    size_t len;
    uint8_t blob[FERRY__META_BLOB_MAX];
};

struct ferry_meta {
    uint32_t magic; /* FERRY__MAGIC_META: first, as in every handle */
    ferry_context_t *ctx;
    struct ferry__owned owned; /* on the context's list (owned.h) */
    const struct ferry__meta_backend *backend;
    void *backend_state;
    char name[FERRY__META_NAME_MAX];
    /* The service's URL as opened; a hub bound to port 0 writes the port
     * it got (ferry_meta_url). */
    char url[1024];
    int timeout_ms;   /* config.metadata_timeout_ms */
    unsigned ttl_s;   /* config.metadata_ttl_s */
    pthread_mutex_t lock;
    pthread_cond_t changed; /* an event was queued */
    bool watching;
    struct ferry__meta_queued *events, **events_tail;
    struct ferry__meta_known *known;
    /* Leaves seen so far (under lock): a lookup that read a peer's entry
     * before its leave was handled must not add the peer again after. */
    uint64_t leaves;
};

/*
 * A backend's watcher saw peer `name` join or leave.  Queues the event;
 * a leave also declares the peer ferry_meta_peer handed out for that name
 * dead and forgets it.  Any thread.
 */
void ferry__meta_saw(struct ferry_meta *m, enum ferry_meta_event_kind kind,
                     const char *name);

/* The NAME of "peers/NAME", or NULL for any other key, and for a NAME
 * that no ferry_meta_open accepts (a key another program wrote). */
const char *ferry__meta_peer_of_key(const char *key);

#endif
