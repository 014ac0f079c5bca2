/*
 * The bootstrap backend of the metadata service (meta.h): the same calls
 * over ferry's own TCP bootstrap, with no server to run.
 *
 * bootstrap://HOST:PORT names a hub.  A context that finds no hub there
 * becomes it (listens at HOST:PORT) and keeps its entries as
 * publications; the others connect and offer theirs, which the hub keeps
 * as long as their connection lasts: a member that dies loses its
 * entries when its connection drops.  Lookups ask the hub, which answers
 * from its own publications and every member's offers.  The hub keeps no
 * history, so there is no watch; its own entries go when it closes.
 */
#include "oob/meta.h"

#include "oob/oob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* How long a context looks for a hub before trying to become it. */
#define HUB_PROBE_MS 300
/* A member's pings: well inside the hub's idle limit (FERRY__OOB_IDLE_MS),
 * which would otherwise drop the connection and the member's entries. */
#define PING_MS 60000

struct boot {
    ferry__oob_t *hub;       /* this context is the hub */
    ferry__oob_conn_t *conn; /* this context is a member */
    /* a member's pinger thread */
    pthread_t pinger;
    bool pinging;
    pthread_mutex_t lock;
    pthread_cond_t stop_cv;
    bool stop;
    int timeout_ms;
};

static struct boot *boot_of(struct ferry_meta *m)
{
    return m->backend_state;
}

/* A member pings the hub every PING_MS until the backend closes, or
 * until the connection to the hub has ended: then no ping could help. */
static void *pinger_main(void *arg)
{
    struct boot *b = arg;
    bool lost = false;

    pthread_mutex_lock(&b->lock);
    while (!b->stop && !lost) {
        struct timespec until = ferry__realtime_after(PING_MS);

        if (pthread_cond_timedwait(&b->stop_cv, &b->lock, &until) == 0 ||
            b->stop)
            continue;
        pthread_mutex_unlock(&b->lock);
        if (ferry__oob_ping(b->conn, b->timeout_ms) != 0) {
            lost = ferry__oob_conn_lost(b->conn);
            FERRY_LOG_WARN("metadata: the bootstrap hub did not answer a "
                           "ping: %s%s", ferry_last_error(),
                           lost ? "; no more pings" : "");
        }
        pthread_mutex_lock(&b->lock);
    }
    pthread_mutex_unlock(&b->lock);
    return NULL;
}

/*
 * Connects to the hub at hostport, or becomes it.  A hub that answers
 * within HUB_PROBE_MS is joined; otherwise this context listens there,
 * and if it cannot because the address is taken (another context became
 * the hub meanwhile, or the address is another host's), it connects with
 * the whole timeout.  Port 0 (any free port) can only mean a new hub:
 * no probe, no fallback.  ":PORT" (every address of this host) falls back
 * only when the port is taken, so that a listen refused for another reason
 * (a public address without a token) says so at once.
 */
static int find_hub(struct ferry_meta *m, struct boot *b, const char *hostport)
{
    const char *port = strrchr(hostport, ':') + 1;
    bool any_port = strcmp(port, "0") == 0;
    char first[512];
    int ret = any_port ? FERRY_EHOSTUNREACH
                       : ferry__oob_probe(m->ctx, hostport, HUB_PROBE_MS,
                                          &b->conn);

    if (ret == 0 || (ret != FERRY_ETIMEDOUT && ret != FERRY_EHOSTUNREACH))
        return ret;
    ret = ferry__oob_listen(m->ctx, hostport, &b->hub);
    if (ret == 0) {
        /* Port 0 asked for any free port: say which one. */
        snprintf(m->url, sizeof(m->url), "bootstrap://%.*s:%d",
                 (int)(port - 1 - hostport), hostport,
                 ferry__oob_port(b->hub));
        return 0;
    }
    if (any_port || (hostport[0] == ':' && ret != FERRY_EEXIST))
        return ret;
    snprintf(first, sizeof(first), "%s", ferry_last_error());
    ret = ferry__oob_connect(m->ctx, hostport, m->timeout_ms, &b->conn);
    if (ret != 0)
        return ferry__error(ret, "bootstrap://%s: no hub answers there (%s), "
                            "and this context cannot become it (%s)",
                            hostport, ferry_last_error(), first);
    return 0;
}

static int boot_get(struct ferry_meta *m, const char *key, void *blob,
                    size_t *len, int timeout_ms)
{
    struct boot *b = boot_of(m);

    return b->hub != NULL
               ? ferry__oob_find(b->hub, key, blob, len)
               : ferry__oob_lookup_blob(b->conn, key, timeout_ms, blob, len);
}

static bool boot_lost(struct ferry_meta *m)
{
    struct boot *b = boot_of(m);

    return b->conn != NULL && ferry__oob_conn_lost(b->conn);
}

static int boot_put(struct ferry_meta *m, const char *key, const void *blob,
                    size_t len)
{
    struct boot *b = boot_of(m);

    return b->hub != NULL
               ? ferry__oob_publish_blob(b->hub, key, blob, len)
               : ferry__oob_offer_blob(b->conn, key, blob, len, m->timeout_ms);
}

static int boot_del(struct ferry_meta *m, const char *key)
{
    struct boot *b = boot_of(m);

    return b->hub != NULL ? ferry__oob_withdraw(b->hub, key)
                          : ferry__oob_withdraw_offer(b->conn, key,
                                                      m->timeout_ms);
}

static void boot_close(struct ferry_meta *m)
{
    struct boot *b = boot_of(m);

    if (b->pinging) {
        pthread_mutex_lock(&b->lock);
        b->stop = true;
        pthread_cond_signal(&b->stop_cv);
        pthread_mutex_unlock(&b->lock);
        pthread_join(b->pinger, NULL);
    }
    pthread_cond_destroy(&b->stop_cv);
    pthread_mutex_destroy(&b->lock);
    ferry__oob_disconnect(b->conn);
    ferry__oob_close(b->hub);
    free(b);
    m->backend_state = NULL;
}

static int boot_open(struct ferry_meta *m, const char *url, const char *key,
                     const void *blob, size_t len)
{
    const char *hostport = url + strlen("bootstrap://");
    uint8_t held[FERRY__META_BLOB_MAX];
    size_t hlen = sizeof(held);
    struct boot *b;
    int ret;

    if (strchr(hostport, ':') == NULL || strchr(hostport, '/') != NULL)
        return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": use "
                            "bootstrap://HOST:PORT",
                            url);
    b = calloc(1, sizeof(*b));
    if (b == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory");
    m->backend_state = b;
    b->timeout_ms = m->timeout_ms;
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->stop_cv, NULL);
    ret = find_hub(m, b, hostport);
    /* The hub is the first to open: the name is free there.  A member
     * asks first (a race between two members of one name is not
     * excluded: the later offer wins). */
    if (ret == 0 && b->conn != NULL &&
        boot_get(m, key, held, &hlen, m->timeout_ms) == 0)
        ret = ferry__error(FERRY_EEXIST, "bootstrap://%s: %s is held by "
                           "another live context; choose another name",
                           hostport, key);
    if (ret == 0)
        ret = boot_put(m, key, blob, len);
    if (ret == 0 && b->conn != NULL) {
        if (pthread_create(&b->pinger, NULL, pinger_main, b) != 0)
            ret = ferry__error(FERRY_ENOMEM, "metadata: cannot start the "
                               "thread that keeps the hub connection");
        b->pinging = ret == 0;
    }
    if (ret != 0)
        boot_close(m);
    return ret;
}

static int boot_watch(struct ferry_meta *m)
{
    (void)m;
    return ferry__error(FERRY_ENOTSUP,
                        "ferry_meta_watch: the bootstrap hub keeps no "
                        "history of joins and leaves; use etcd:// for "
                        "watches (ferry_peer_watch notices a dead peer "
                        "either way)");
}

const struct ferry__meta_backend ferry__meta_bootstrap = {
    .scheme = "bootstrap",
    .open = boot_open,
    .put = boot_put,
    .del = boot_del,
    .get = boot_get,
    .lost = boot_lost,
    .watch = boot_watch,
    .close = boot_close,
};
