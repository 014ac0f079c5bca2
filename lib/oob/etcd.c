/*
 * The etcd v3 metadata backend (meta.h): etcd's HTTP/JSON gateway through
 * libcurl, JSON through json-c, base64 (etcd's keys and values) through
 * nettle.
 *
 * Every entry of a context hangs on one lease.  A keeper thread renews it
 * every third of its TTL; when etcd has lost it (the context could not
 * reach etcd for longer than the TTL, or etcd came back without its
 * data), the keeper takes a new lease and publishes every entry again.
 * The requests are in etcd_wire.c, the reading of the answers in
 * etcd_json.c, the watcher in etcd_watch.c.
 *
 * Threads: the caller's (API calls, on m's handle under api_lock), the
 * keeper and the watcher each have a curl handle of their own.  The
 * entries and the lease are under e->lock.
 */
#include "oob/etcd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct etcd *etcd_of(struct ferry_meta *m)
{
    return m->backend_state;
}

/* ---- leases and entries ------------------------------------------------ */

static int grant(struct etcd *e, CURL *h, int timeout_ms, int64_t *lease)
{
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp;
    int ret;

    ferry__etcd_add_int64(req, "TTL", e->m->ttl_s);
    ret = ferry__etcd_call(e, h, "/v3/lease/grant", req, timeout_ms, &resp);
    json_object_put(req);
    if (ret == 0 && (ret = ferry__etcd_int64(&resp, "ID", false, lease)) == 0 &&
        *lease == 0)
        ret = ferry__error(FERRY_EPROTO, "etcd at %s granted no lease "
                           "(answer: %s)",
                           resp.endpoint, json_object_to_json_string(resp.json));
    json_object_put(resp.json);
    return ret;
}

/* A one-element JSON array holding o. */
static json_object *array_of(json_object *o)
{
    json_object *a = json_object_new_array();

    json_object_array_add(a, o);
    return a;
}

/*
 * The transaction that creates key unless it exists: compare its creation
 * revision with 0, then put.  NULL when out of memory.
 */
static json_object *new_create(struct etcd *e, const char *key,
                               const void *blob, size_t len, int64_t lease)
{
    json_object *put = ferry__etcd_new_put(e, key, blob, len, lease);
    json_object *cmp = json_object_new_object(), *req, *step;

    if (put == NULL || !ferry__etcd_add_key(e, cmp, "key", key)) {
        json_object_put(put);
        json_object_put(cmp);
        return NULL;
    }
    json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
    json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
    ferry__etcd_add_int64(cmp, "create_revision", 0);
    step = json_object_new_object();
    json_object_object_add(step, "request_put", put);
    req = json_object_new_object();
    json_object_object_add(req, "compare", array_of(cmp));
    json_object_object_add(req, "success", array_of(step));
    return req;
}

/* Creates key unless another live context holds it (FERRY_EEXIST). */
static int create(struct etcd *e, CURL *h, const char *key, const void *blob,
                  size_t len, int64_t lease, int timeout_ms)
{
    json_object *req = new_create(e, key, blob, len, lease);
    struct ferry__etcd_value resp;
    bool created;
    int ret;

    if (req == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory building an etcd "
                            "request");
    ret = ferry__etcd_call(e, h, "/v3/kv/txn", req, timeout_ms, &resp);
    json_object_put(req);
    if (ret == 0 && (ret = ferry__etcd_bool(&resp, "succeeded", &created)) == 0 &&
        !created)
        ret = ferry__error(FERRY_EEXIST, "etcd %s: %s/%s is held by another "
                           "live context (its entry lasts until that context "
                           "closes, or up to its lease's TTL after it died); "
                           "choose another name, or wait",
                           resp.endpoint, e->prefix, key);
    json_object_put(resp.json);
    return ret;
}

static int put_key(struct etcd *e, CURL *h, const char *key, const void *blob,
                   size_t len, int64_t lease, int timeout_ms)
{
    json_object *req = ferry__etcd_new_put(e, key, blob, len, lease);
    struct ferry__etcd_value resp;
    int ret;

    if (req == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory building an etcd "
                            "request");
    ret = ferry__etcd_call(e, h, "/v3/kv/put", req, timeout_ms, &resp);
    json_object_put(req);
    json_object_put(resp.json);
    return ret;
}

/* The link to the entry of key (or to the list's end); under e->lock. */
static struct entry **entry_link(struct etcd *e, const char *key)
{
    struct entry **pe = &e->entries;

    while (*pe != NULL && strcmp((*pe)->key, key) != 0)
        pe = &(*pe)->next;
    return pe;
}

/* Remembers (or replaces) what the context published under key. */
static int remember(struct etcd *e, const char *key, const void *blob,
                    size_t len)
{
    struct entry *en;

    pthread_mutex_lock(&e->lock);
    en = *entry_link(e, key);
    if (en == NULL && (en = calloc(1, sizeof(*en))) != NULL) {
        snprintf(en->key, sizeof(en->key), "%s", key);
        en->next = e->entries;
        e->entries = en;
    }
    if (en != NULL) {
        memcpy(en->blob, blob, len);
        en->len = len;
    }
    pthread_mutex_unlock(&e->lock);
    return en != NULL ? 0
                      : ferry__error(FERRY_ENOMEM, "out of memory publishing");
}

static void forget(struct etcd *e, const char *key)
{
    struct entry **pe, *gone;

    pthread_mutex_lock(&e->lock);
    pe = entry_link(e, key);
    gone = *pe;
    if (gone != NULL)
        *pe = gone->next;
    pthread_mutex_unlock(&e->lock);
    free(gone);
}

/* ---- the keeper thread ----------------------------------------------- */

/* Publishes every entry again on a new lease (the old one is gone). */
static int republish(struct etcd *e, CURL *h)
{
    struct entry *copies = NULL, **tail = &copies;
    int64_t lease;
    int ret = grant(e, h, e->m->timeout_ms, &lease);

    if (ret != 0)
        return ret;
    /* Copied under the lock, sent without it. */
    pthread_mutex_lock(&e->lock);
    e->lease = lease;
    for (struct entry *en = e->entries; en != NULL; en = en->next) {
        struct entry *c = malloc(sizeof(*c));
        if (c == NULL)
            break;
        *c = *en;
        c->next = NULL;
        *tail = c;
        tail = &c->next;
    }
    pthread_mutex_unlock(&e->lock);
    while (copies != NULL) {
        struct entry *c = copies;
        copies = c->next;
        if (ret == 0)
            ret = strcmp(c->key, e->join_key) == 0
                      ? create(e, h, c->key, c->blob, c->len, lease,
                               e->m->timeout_ms)
                      : put_key(e, h, c->key, c->blob, c->len, lease,
                                e->m->timeout_ms);
        free(c);
    }
    /* Half published: no lease, so that the next keep-alive fails and the
     * keeper starts over rather than renewing a lease some entries lack. */
    if (ret != 0) {
        pthread_mutex_lock(&e->lock);
        if (e->lease == lease)
            e->lease = 0;
        pthread_mutex_unlock(&e->lock);
    }
    return ret;
}

/* Renews the lease; FERRY_ENOENT when etcd no longer has it. */
static int keep_alive(struct etcd *e, CURL *h)
{
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp, result;
    int64_t lease, ttl = 0;
    int ret;

    pthread_mutex_lock(&e->lock);
    lease = e->lease;
    pthread_mutex_unlock(&e->lock);
    if (lease == 0) {
        json_object_put(req);
        return FERRY_ENOENT;
    }
    ferry__etcd_add_int64(req, "ID", lease);
    ret = ferry__etcd_call(e, h, "/v3/lease/keepalive", req, e->m->timeout_ms,
                           &resp);
    json_object_put(req);
    if (ret == 0)
        ret = ferry__etcd_field(&resp, "result", json_type_object, false,
                                &result);
    if (ret == 0 && result.json != NULL)
        ret = ferry__etcd_int64(&result, "TTL", false, &ttl);
    /* A lease etcd has lost comes back with no TTL (or 0), or with an
     * error instead of a result. */
    if (ret == 0 && ttl <= 0)
        ret = FERRY_ENOENT;
    json_object_put(resp.json);
    return ret;
}

/* curl's progress callback on the keeper's handle: a request in flight
 * ends (within a second) when the backend closes, so that close does not
 * wait out its timeout. */
static int abort_if_stopping(void *arg, curl_off_t dt, curl_off_t dn,
                             curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    return ferry__etcd_stopping(arg) ? 1 : 0;
}

static void *keeper_main(void *arg)
{
    struct etcd *e = arg;
    CURL *h = curl_easy_init();
    unsigned period_ms = e->m->ttl_s * 1000u / 3u;
    bool failing = false;

    if (h == NULL) {
        FERRY_LOG_WARN("etcd: no curl handle for the lease keeper: entries "
                       "will expire");
        return NULL;
    }
    ferry__etcd_setup_handle(e, h);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_if_stopping);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, e);
    /* While etcd does not answer, ask every second: the entries must be
     * back soon after it is. */
    while (!ferry__etcd_nap(e, failing ? 1000u : period_ms)) {
        int ret = keep_alive(e, h);

        if (ret == FERRY_ENOENT) {
            FERRY_LOG_WARN("etcd: the lease of %s was lost; publishing its "
                           "entries again", e->m->name);
            ret = republish(e, h);
        }
        if (ret != 0 && !failing)
            FERRY_LOG_WARN("etcd: cannot keep %s's entries alive: %s",
                           e->m->name, ferry_last_error());
        else if (ret == 0 && failing)
            FERRY_LOG_INFO("etcd: %s's entries are kept alive again",
                           e->m->name);
        failing = ret != 0;
    }
    curl_easy_cleanup(h);
    return NULL;
}

/* ---- the backend --------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

/* curl_global_init is not thread-safe in every libcurl: once, here. */
static void init_curl(void)
{
    curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/*
 * Checks the endpoint HOST:PORT of url (n bytes at p).  The port is the
 * part after the last ':' ([::1]:2379), and is refused here rather than
 * by every attempt to connect until the call's deadline.
 */
static int check_endpoint(const char *url, const char *p, size_t n)
{
    const char *colon = n > 0 ? memrchr(p, ':', n) : NULL;
    const char *port;
    size_t port_len;

    if (colon == NULL || colon == p || colon + 1 == p + n ||
        n > ENDPOINT_LEN - 16)
        return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": endpoint "
                            "\"%.*s\" is not HOST:PORT",
                            url, (int)n, p);
    port = colon + 1;
    port_len = (size_t)(p + n - port);
    /* At most 5 digits: strtoul cannot overflow. */
    if (port_len > 5 || strspn(port, "0123456789") < port_len ||
        strtoul(port, NULL, 10) == 0 || strtoul(port, NULL, 10) > 65535)
        return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": endpoint "
                            "\"%.*s\" has port \"%.*s\"; a port is a number "
                            "from 1 to 65535",
                            url, (int)n, p, (int)port_len, port);
    return 0;
}

/* Splits etcd[s]://HOST:PORT[,HOST:PORT...][/PREFIX] into e. */
static int parse_url(struct etcd *e, const char *url)
{
    bool tls = strncmp(url, "etcds://", 8) == 0;
    const char *p = url + (tls ? 8 : 7), *slash = strchr(p, '/');
    size_t hosts_len = slash != NULL ? (size_t)(slash - p) : strlen(p);
    const char *prefix = slash != NULL ? slash + 1 : "";

    while (hosts_len > 0) {
        const char *comma = memchr(p, ',', hosts_len);
        size_t n = comma != NULL ? (size_t)(comma - p) : hosts_len;
        int ret;

        /* A trailing comma: an empty endpoint after it. */
        if (comma != NULL && n + 1 == hosts_len)
            return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": endpoint "
                                "\"\" is not HOST:PORT",
                                url);
        if ((ret = check_endpoint(url, p, n)) != 0)
            return ret;
        if (e->n_endpoints == MAX_ENDPOINTS)
            return ferry__error(FERRY_EINVAL, "metadata URL \"%s\" names more "
                                "than %d endpoints",
                                url, MAX_ENDPOINTS);
        snprintf(e->endpoint[e->n_endpoints++], ENDPOINT_LEN, "%s://%.*s",
                 tls ? "https" : "http", (int)n, p);
        p += n + (comma != NULL);
        hosts_len -= n + (comma != NULL);
    }
    if (e->n_endpoints == 0)
        return ferry__error(FERRY_EINVAL, "metadata URL \"%s\" names no "
                            "endpoint; use etcd://HOST:PORT[,HOST:PORT]/PREFIX",
                            url);
    while (*prefix == '/')
        prefix++;
    if (strlen(prefix) >= PREFIX_LEN - 1)
        return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": the prefix is "
                            "longer than %d characters",
                            url, PREFIX_LEN - 2);
    snprintf(e->prefix, sizeof(e->prefix), "%s", prefix[0] ? prefix : "ferry");
    for (size_t n = strlen(e->prefix); n > 0 && e->prefix[n - 1] == '/'; n--)
        e->prefix[n - 1] = '\0';
    if (tls) {
        e->cacert = getenv("FERRY_ETCD_CACERT");
        e->cert = getenv("FERRY_ETCD_CERT");
        e->key = getenv("FERRY_ETCD_KEY");
    }
    return 0;
}

static void free_etcd(struct etcd *e)
{
    while (e->entries != NULL) {
        struct entry *en = e->entries;
        e->entries = en->next;
        free(en);
    }
    if (e->watch_multi != NULL)
        curl_multi_cleanup(e->watch_multi);
    if (e->api != NULL)
        curl_easy_cleanup(e->api);
    pthread_cond_destroy(&e->wake);
    pthread_mutex_destroy(&e->api_lock);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* Revoking the lease deletes every entry at once; if etcd does not
 * answer within timeout_ms, they go when the lease ends. */
static void revoke(struct etcd *e, int timeout_ms)
{
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp;

    ferry__etcd_add_int64(req, "ID", e->lease);
    if (ferry__etcd_call(e, e->api, "/v3/lease/revoke", req, timeout_ms, &resp))
        FERRY_LOG_WARN("etcd: %s's entries stay until its lease ends (%u s): "
                       "%s",
                       e->m->name, e->m->ttl_s, ferry_last_error());
    json_object_put(req);
    json_object_put(resp.json);
}

static int etcd_open(struct ferry_meta *m, const char *url, const char *key,
                     const void *blob, size_t len)
{
    struct etcd *e = calloc(1, sizeof(*e));
    int ret;

    if (e == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for etcd");
    e->m = m;
    pthread_mutex_init(&e->lock, NULL);
    pthread_mutex_init(&e->api_lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    snprintf(e->join_key, sizeof(e->join_key), "%s", key);
    pthread_once(&curl_once, init_curl);
    if ((ret = parse_url(e, url)) != 0) {
        free_etcd(e);
        return ret;
    }
    if (curl_init_result != CURLE_OK || (e->api = curl_easy_init()) == NULL) {
        free_etcd(e);
        return ferry__error(FERRY_ENOMEM, "etcd: libcurl did not start");
    }
    ferry__etcd_setup_handle(e, e->api);
    m->backend_state = e;
    ret = grant(e, e->api, m->timeout_ms, &e->lease);
    if (ret == 0)
        ret = create(e, e->api, key, blob, len, e->lease, m->timeout_ms);
    if (ret == 0)
        ret = remember(e, key, blob, len);
    if (ret == 0 && pthread_create(&e->keeper, NULL, keeper_main, e) != 0)
        ret = ferry__error(FERRY_ENOMEM, "etcd: cannot start the lease "
                           "keeper thread");
    if (ret != 0) {
        /* The lease would end by itself: a short try, and the sentence
         * stays the one that says why the open failed. */
        char why[1024];

        snprintf(why, sizeof(why), "%s", ferry_last_error());
        if (e->lease != 0)
            revoke(e, m->timeout_ms < 1000 ? m->timeout_ms : 1000);
        ferry__error(ret, "%s", why);
        m->backend_state = NULL;
        free_etcd(e);
        return ret;
    }
    e->keeper_running = true;
    return 0;
}

/* A copy of what the context published under key; false if nothing. */
static bool recall(struct etcd *e, const char *key, struct entry *copy)
{
    struct entry *en;

    pthread_mutex_lock(&e->lock);
    en = *entry_link(e, key);
    if (en != NULL)
        *copy = *en;
    pthread_mutex_unlock(&e->lock);
    return en != NULL;
}

static int etcd_put(struct ferry_meta *m, const char *key, const void *blob,
                    size_t len)
{
    struct etcd *e = etcd_of(m);
    struct entry before;
    bool had = recall(e, key, &before);
    int64_t lease;
    int ret = remember(e, key, blob, len);

    if (ret != 0)
        return ret;
    pthread_mutex_lock(&e->lock);
    lease = e->lease;
    pthread_mutex_unlock(&e->lock);
    pthread_mutex_lock(&e->api_lock);
    ret = put_key(e, e->api, key, blob, len, lease, m->timeout_ms);
    /* etcd lost the lease (it came back without its data) and the keeper
     * has not noticed yet: publish everything again now, this entry
     * included. */
    if (ret == FERRY_EPROTO && strstr(ferry_last_error(), "lease not found"))
        ret = republish(e, e->api);
    pthread_mutex_unlock(&e->api_lock);
    /* Failed: the keeper republishes what was there before, not this.
     * (A put that timed out may still be applied by etcd later, e.g. by a
     * paused member when it resumes; it then goes with the lease.) */
    if (ret != 0 && had)
        remember(e, key, before.blob, before.len);
    else if (ret != 0)
        forget(e, key);
    return ret;
}

static int etcd_del(struct ferry_meta *m, const char *key)
{
    struct etcd *e = etcd_of(m);
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp;
    int64_t deleted;
    int ret;

    forget(e, key);
    if (!ferry__etcd_add_key(e, req, "key", key)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&e->api_lock);
    ret = ferry__etcd_call(e, e->api, "/v3/kv/deleterange", req, m->timeout_ms,
                           &resp);
    pthread_mutex_unlock(&e->api_lock);
    if (ret == 0 && (ret = ferry__etcd_int64(&resp, "deleted", false,
                                             &deleted)) == 0 &&
        deleted == 0)
        ret = FERRY_ENOENT;
    json_object_put(req);
    json_object_put(resp.json);
    return ret;
}

/* The value of the first key of a range answer (NULL when etcd left it
 * out: empty); FERRY_ENOENT when there is no key. */
static int range_value(const struct ferry__etcd_value *resp,
                       const char **value)
{
    struct ferry__etcd_value kvs, kv;
    int ret = ferry__etcd_field(resp, "kvs", json_type_array, false, &kvs);

    if (ret == 0 && ferry__etcd_length(&kvs) == 0)
        return FERRY_ENOENT;
    if (ret == 0)
        ret = ferry__etcd_item(&kvs, 0, json_type_object, &kv);
    if (ret == 0)
        ret = ferry__etcd_string(&kv, "value", false, value);
    return ret;
}

static int etcd_get(struct ferry_meta *m, const char *key, void *blob,
                    size_t *len, int timeout_ms)
{
    struct etcd *e = etcd_of(m);
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp;
    const char *value = NULL;
    size_t cap = *len;
    int ret;

    if (!ferry__etcd_add_key(e, req, "key", key)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&e->api_lock);
    ret = ferry__etcd_call(e, e->api, "/v3/kv/range", req, timeout_ms, &resp);
    pthread_mutex_unlock(&e->api_lock);
    json_object_put(req);
    if (ret == 0)
        ret = range_value(&resp, &value);
    if (ret == 0 &&
        (value == NULL || !ferry__etcd_b64_decode(value, blob, cap, len)))
        ret = ferry__error(FERRY_EBLOB, "etcd: the value of %s/%s is not a "
                           "ferry blob of at most %zu bytes",
                           e->prefix, key, cap);
    json_object_put(resp.json);
    return ret;
}

static int etcd_watch(struct ferry_meta *m)
{
    struct etcd *e = etcd_of(m);

    e->watch_multi = curl_multi_init();
    if (e->watch_multi == NULL ||
        pthread_create(&e->watcher, NULL, ferry__etcd_watcher_main, e) != 0)
        return ferry__error(FERRY_ENOMEM, "etcd: cannot start the watcher");
    e->watcher_running = true;
    return 0;
}

static void etcd_close(struct ferry_meta *m)
{
    struct etcd *e = etcd_of(m);

    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    pthread_cond_broadcast(&e->wake);
    pthread_mutex_unlock(&e->lock);
    if (e->watcher_running) {
        curl_multi_wakeup(e->watch_multi);
        pthread_join(e->watcher, NULL);
    }
    if (e->keeper_running)
        pthread_join(e->keeper, NULL);
    revoke(e, m->timeout_ms);
    free_etcd(e);
    m->backend_state = NULL;
}

const struct ferry__meta_backend ferry__meta_etcd = {
    .scheme = "etcd",
    .tls_scheme = true,
    .open = etcd_open,
    .put = etcd_put,
    .del = etcd_del,
    .get = etcd_get,
    .watch = etcd_watch,
    .close = etcd_close,
};
