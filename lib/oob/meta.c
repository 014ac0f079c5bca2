/*
 * The metadata service, the part every backend shares (meta.h): which
 * backend a URL names, the checks on names, publishing through the
 * backend's key-value calls, lookups that wait, the peers handed out and
 * the queue of join/leave events.
 */
#include "oob/meta.h"

#include "fabric/fabric.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How often a lookup that waits asks the service again. */
#define LOOKUP_POLL_MS 50
/* The least time one look at the service gets. */
#define MIN_ATTEMPT_MS 200

static const struct ferry__meta_backend *const backends[] = {
    &ferry__meta_etcd,
    &ferry__meta_bootstrap,
};

/* The backend a URL names: its scheme, "etcds" being etcd's over TLS. */
static int pick_backend(const char *url, const struct ferry__meta_backend **be)
{
    const char *sep = url != NULL ? strstr(url, "://") : NULL;

    if (url == NULL || url[0] == '\0')
        return ferry__error(FERRY_EINVAL,
                            "ferry_meta_open: no metadata service given: pass "
                            "a URL, or set config.metadata or FERRY_METADATA "
                            "(etcd://HOST:PORT[,HOST:PORT]/PREFIX, etcds://..."
                            " or bootstrap://HOST:PORT)");
    for (size_t i = 0; sep != NULL && i < sizeof(backends) / sizeof(*backends);
         i++) {
        size_t n = strlen(backends[i]->scheme);
        size_t have = (size_t)(sep - url);

        if (strncmp(url, backends[i]->scheme, n) == 0 &&
            (have == n || (have == n + 1 && backends[i]->tls_scheme &&
                           url[n] == 's'))) {
            *be = backends[i];
            return 0;
        }
    }
    return ferry__error(FERRY_EINVAL,
                        "metadata URL \"%s\" names no service ferry knows; "
                        "use etcd://HOST:PORT[,HOST:PORT]/PREFIX, etcds://... "
                        "(TLS) or bootstrap://HOST:PORT",
                        url);
}

/* Names and regions: 1 to 127 of [A-Za-z0-9._-], so that keys split
 * unambiguously and survive any shell or URL they are copied into. */
static int check_name(const char *s, const char *what, const char *call)
{
    size_t n = s != NULL ? strlen(s) : 0, good;

    if (n == 0 || n >= FERRY__META_NAME_MAX)
        return ferry__error(FERRY_EINVAL, "%s: %s is %s; give 1 to %d "
                            "characters of A-Z a-z 0-9 . _ -",
                            call, what, s == NULL ? "NULL" : n == 0 ? "empty"
                                                              : "too long",
                            FERRY__META_NAME_MAX - 1);
    good = strspn(s, FERRY__META_NAME_CHARS);
    if (good < n)
        return ferry__error(FERRY_EINVAL, "%s: %s \"%s\" has '%c' at %zu; "
                            "use only A-Z a-z 0-9 . _ -",
                            call, what, s, s[good], good);
    return 0;
}

static void peer_key(char *key, const char *name)
{
    snprintf(key, FERRY__META_KEY_MAX, "peers/%s", name);
}

static void region_key(char *key, const char *name, const char *region)
{
    snprintf(key, FERRY__META_KEY_MAX, "regions/%s/%s", name, region);
}

static void meta_release(struct ferry__owned *o);

int ferry_meta_open(ferry_context_t *ctx, const char *url, const char *name,
                    ferry_meta_t **out)
{
    const struct ferry_config *cfg;
    const struct ferry__meta_backend *be = NULL;
    uint8_t addr[FERRY__META_BLOB_MAX];
    size_t alen = sizeof(addr);
    char key[FERRY__META_KEY_MAX];
    struct ferry_meta *m;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_meta_open")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_meta_open: meta is NULL");
    cfg = &ferry__fabric_of(ctx)->cfg;
    if (url == NULL)
        url = cfg->metadata != NULL ? cfg->metadata : getenv("FERRY_METADATA");
    if ((ret = check_name(name, "the name", "ferry_meta_open")) ||
        (ret = pick_backend(url, &be)))
        return ret;
    if (strlen(url) >= sizeof(m->url))
        return ferry__error(FERRY_EINVAL, "ferry_meta_open: the metadata "
                            "URL is %zu characters long; at most %zu are "
                            "accepted",
                            strlen(url), sizeof(m->url) - 1);
    if ((ret = ferry_context_address(ctx, addr, &alen)))
        return ret;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for metadata");
    m->ctx = ctx;
    m->backend = be;
    snprintf(m->name, sizeof(m->name), "%s", name);
    snprintf(m->url, sizeof(m->url), "%s", url);
    m->timeout_ms = cfg->metadata_timeout_ms;
    m->ttl_s = cfg->metadata_ttl_s;
    m->events_tail = &m->events;
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->changed, NULL);
    peer_key(key, name);
    ret = be->open(m, url, key, addr, alen);
    if (ret != 0) {
        pthread_cond_destroy(&m->changed);
        pthread_mutex_destroy(&m->lock);
        free(m);
        return ret;
    }
    m->magic = FERRY__MAGIC_META;
    m->owned.stage = FERRY__OWN_FIRST;
    m->owned.release = meta_release;
    ferry__own(&ferry__fabric_of(ctx)->owned, &m->owned);
    *out = m;
    return 0;
}

const char *ferry_meta_url(const ferry_meta_t *m)
{
    return m != NULL && m->magic == FERRY__MAGIC_META ? m->url : NULL;
}

int ferry_meta_publish(ferry_meta_t *m, const char *region,
                       const ferry_mem_t *mem)
{
    uint8_t blob[FERRY__META_BLOB_MAX];
    size_t len = sizeof(blob);
    char key[FERRY__META_KEY_MAX];
    int ret;

    ferry__error_clear();
    if (m == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_meta_publish: meta is NULL");
    if ((ret = check_name(region, "the region", "ferry_meta_publish")) ||
        (ret = ferry_mem_export(mem, blob, &len)))
        return ret;
    region_key(key, m->name, region);
    return m->backend->put(m, key, blob, len);
}

int ferry_meta_withdraw(ferry_meta_t *m, const char *region)
{
    char key[FERRY__META_KEY_MAX];
    int ret;

    ferry__error_clear();
    if (m == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_meta_withdraw: meta is NULL");
    if ((ret = check_name(region, "the region", "ferry_meta_withdraw")))
        return ret;
    region_key(key, m->name, region);
    ret = m->backend->del(m, key);
    if (ret == FERRY_ENOENT)
        return ferry__error(ret, "ferry_meta_withdraw: %s has published no "
                            "region \"%s\"", m->name, region);
    return ret;
}

/*
 * Asks until key is there or timeout_ms after start (the call's start:
 * one deadline for every wait of a call) has passed; at least once (a
 * timeout of 0), never giving up (< 0).  A failure of the service is
 * asked again too until the deadline, which then ends the call with that
 * failure's sentence; but a service the backend has lost for good (the
 * bootstrap hub's connection ended) ends the call at once, with the
 * sentence of the failure that lost it: asking again could only wait out
 * the deadline, or never end.
 */
static int get_waiting(struct ferry_meta *m, const char *key, int timeout_ms,
                       uint64_t start, void *blob, size_t *len,
                       const char *call)
{
    size_t cap = *len;
    int ret;

    for (;;) {
        uint64_t spent = (ferry__now_ns() - start) / 1000000u;
        int attempt = m->timeout_ms;

        /* Not waiting for the key to appear does not mean giving the
         * service no time to answer: an attempt has at least
         * MIN_ATTEMPT_MS, and at most config.metadata_timeout_ms. */
        if (timeout_ms > 0 && spent + MIN_ATTEMPT_MS < (uint64_t)timeout_ms)
            attempt = (int)((uint64_t)timeout_ms - spent);
        else if (timeout_ms > 0)
            attempt = MIN_ATTEMPT_MS;
        if (attempt > m->timeout_ms)
            attempt = m->timeout_ms;
        *len = cap;
        ret = m->backend->get(m, key, blob, len, attempt);
        if (ret == 0)
            return 0;
        if (ret != FERRY_ENOENT && m->backend->lost != NULL &&
            m->backend->lost(m))
            return ret;
        spent = (ferry__now_ns() - start) / 1000000u;
        if (timeout_ms >= 0 && spent + LOOKUP_POLL_MS > (uint64_t)timeout_ms)
            break;
        struct timespec nap = {0, LOOKUP_POLL_MS * 1000000L};
        nanosleep(&nap, NULL);
    }
    if (ret != FERRY_ENOENT)
        return ret;
    return ferry__error(FERRY_EAGAIN, "%s: nothing is published under %s "
                        "yet (waited %d ms)",
                        call, key, timeout_ms);
}

/* The handle given out for name's address blob, if it is still that. */
static struct ferry__meta_known *known_of(struct ferry_meta *m,
                                          const char *name)
{
    for (struct ferry__meta_known *k = m->known; k != NULL; k = k->next)
        if (strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

/* Adds (or finds) the peer whose address blob the service holds; under
 * m->lock. */
static int peer_from_locked(struct ferry_meta *m, const char *name,
                            const uint8_t *blob, size_t len,
                            ferry_peer_t **peer)
{
    struct ferry__meta_known *k = known_of(m, name);
    int ret;

    if (k != NULL && k->len == len && memcmp(k->blob, blob, len) == 0) {
        *peer = k->peer;
        return 0;
    }
    if (k == NULL && (k = calloc(1, sizeof(*k))) == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory");
    if ((ret = ferry_peer_add(m->ctx, blob, len, peer)) != 0) {
        if (k->len == 0) /* new, not linked yet */
            free(k);
        return ret;
    }
    /* A new address under a known name: the context came back; the old
     * handle stays (dead, or about to be) with the application. */
    if (k->len == 0) {
        snprintf(k->name, sizeof(k->name), "%s", name);
        k->next = m->known;
        m->known = k;
    }
    k->peer = *peer;
    memcpy(k->blob, blob, len);
    k->len = len;
    return 0;
}

/* Reads of a peer's entry that a leave overtook before one is believed
 * anyway (leaves of other peers can overtake a read too). */
#define FIND_PEER_READS 8

/* The peer under name, waiting as ferry_meta_peer from start. */
static int find_peer(struct ferry_meta *m, const char *name, int timeout_ms,
                     uint64_t start, ferry_peer_t **peer, const char *call)
{
    uint8_t blob[FERRY__META_BLOB_MAX];
    char key[FERRY__META_KEY_MAX];
    int ret;

    if ((ret = check_name(name, "the peer name", call)))
        return ret;
    peer_key(key, name);
    for (unsigned read = 1;; read++) {
        size_t len = sizeof(blob);
        uint64_t leaves;

        pthread_mutex_lock(&m->lock);
        leaves = m->leaves;
        pthread_mutex_unlock(&m->lock);
        if ((ret = get_waiting(m, key, timeout_ms, start, blob, &len, call)))
            return ret;
        pthread_mutex_lock(&m->lock);
        /* Fix: a leave handled between the read and here had already
         * declared the peer dead and forgotten it; adding it from the
         * entry read before gave the application a second, live-looking
         * handle to a dead peer, which no leave would ever end.  Read
         * again: the entry is gone now, or back from a new start. */
        if (m->leaves != leaves && read < FIND_PEER_READS) {
            pthread_mutex_unlock(&m->lock);
            continue;
        }
        ret = peer_from_locked(m, name, blob, len, peer);
        pthread_mutex_unlock(&m->lock);
        return ret;
    }
}

int ferry_meta_peer(ferry_meta_t *m, const char *name, int timeout_ms,
                    ferry_peer_t **peer)
{
    ferry__error_clear();
    if (m == NULL || peer == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_meta_peer: meta or peer is NULL");
    return find_peer(m, name, timeout_ms, ferry__now_ns(), peer,
                     "ferry_meta_peer");
}

int ferry_meta_lookup(ferry_meta_t *m, const char *name, const char *region,
                      int timeout_ms, ferry_rmem_t **rmem)
{
    uint8_t blob[FERRY__META_BLOB_MAX];
    size_t len = sizeof(blob);
    char key[FERRY__META_KEY_MAX];
    uint64_t start = ferry__now_ns();
    ferry_peer_t *peer;
    int ret;

    ferry__error_clear();
    if (m == NULL || rmem == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_meta_lookup: meta or rmem is NULL");
    if ((ret = check_name(region, "the region", "ferry_meta_lookup")) ||
        (ret = find_peer(m, name, timeout_ms, start, &peer,
                         "ferry_meta_lookup")))
        return ret;
    region_key(key, name, region);
    if ((ret = get_waiting(m, key, timeout_ms, start, blob, &len,
                           "ferry_meta_lookup")))
        return ret;
    return ferry_rmem_import(peer, blob, len, rmem);
}

int ferry_meta_watch(ferry_meta_t *m)
{
    int ret;

    ferry__error_clear();
    if (m == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_meta_watch: meta is NULL");
    pthread_mutex_lock(&m->lock);
    if (m->watching) {
        pthread_mutex_unlock(&m->lock);
        return 0;
    }
    m->watching = true;
    pthread_mutex_unlock(&m->lock);
    ret = m->backend->watch(m);
    if (ret != 0) {
        pthread_mutex_lock(&m->lock);
        m->watching = false;
        pthread_mutex_unlock(&m->lock);
    }
    return ret;
}

int ferry_meta_event(ferry_meta_t *m, int timeout_ms,
                     struct ferry_meta_event *event)
{
    struct ferry__meta_queued *q;
    struct timespec until;

    ferry__error_clear();
    if (m == NULL || event == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_meta_event: meta or event is NULL");
    until = ferry__realtime_after(timeout_ms > 0 ? (uint64_t)timeout_ms : 0);
    pthread_mutex_lock(&m->lock);
    if (!m->watching) {
        pthread_mutex_unlock(&m->lock);
        return ferry__error(FERRY_EINVAL, "ferry_meta_event: not watching; "
                            "call ferry_meta_watch first");
    }
    while (m->events == NULL && timeout_ms != 0)
        if (timeout_ms < 0)
            pthread_cond_wait(&m->changed, &m->lock);
        else if (pthread_cond_timedwait(&m->changed, &m->lock, &until) != 0)
            break;
    q = m->events;
    if (q != NULL) {
        m->events = q->next;
        if (m->events == NULL)
            m->events_tail = &m->events;
    }
    pthread_mutex_unlock(&m->lock);
    if (q == NULL)
        return ferry__error(FERRY_EAGAIN, "ferry_meta_event: no join or "
                            "leave within %d ms (wait again)", timeout_ms);
    *event = q->ev;
    free(q);
    return 0;
}

/* Withdraws everything m published and frees it. */
static void meta_free(struct ferry_meta *m)
{
    /* The backend's threads stop first: nothing queues after this. */
    m->backend->close(m);
    while (m->events != NULL) {
        struct ferry__meta_queued *q = m->events;
        m->events = q->next;
        free(q);
    }
    while (m->known != NULL) {
        struct ferry__meta_known *k = m->known;
        m->known = k->next;
        free(k);
    }
    pthread_cond_destroy(&m->changed);
    pthread_mutex_destroy(&m->lock);
    m->magic = FERRY__MAGIC_DEAD;
    free(m);
}

/* The context closes, with m still open (owned.h). */
static void meta_release(struct ferry__owned *o)
{
    meta_free(ferry__container_of(o, struct ferry_meta, owned));
}

int ferry_meta_close(ferry_meta_t *m)
{
    int ret;

    ferry__error_clear();
    if (m == NULL)
        return 0;
    if ((ret = ferry__check_meta(m, "ferry_meta_close")))
        return ret;
    ferry__disown(&ferry__fabric_of(m->ctx)->owned, &m->owned);
    meta_free(m);
    return 0;
}
