/*
 * The etcd v3 metadata backend (meta.h): etcd's HTTP/JSON gateway through
 * libcurl, JSON through json-c, base64 (etcd's keys and values) through
 * nettle.
 *
 * Every entry of a context hangs on one lease.  A keeper thread renews it
 * every third of its TTL; when etcd has lost it (the context could not
 * reach etcd for longer than the TTL, or etcd came back without its
 * data), the keeper takes a new lease and publishes every entry again.
 * The endpoints are tried in turn, starting with the last one that
 * answered.  A watcher thread lists PREFIX/peers/, then follows etcd's
 * watch stream from that revision; after any break it lists again and
 * reports the difference, so no join or leave is lost to an outage.
 *
 * Threads: the caller's (API calls, on m's handle under api_lock), the
 * keeper and the watcher each have a curl handle of their own.  The
 * entries and the lease are under e->lock.
 */
#include "oob/meta.h"

#include <curl/curl.h>
#include <json-c/json.h>
#include <nettle/base64.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ENDPOINTS 16
#define ENDPOINT_LEN 280
#define PREFIX_LEN 200
/* Whatever etcd answers is at most this big (a listing of 200 peers is
 * well under 200 KiB). */
#define REPLY_MAX (16u << 20)
/* The shortest attempt on one endpoint, however little time is left. */
#define MIN_ATTEMPT_MS 300
/* Pause before listing again after the watch stream broke. */
#define REWATCH_MS 500

/* What the context published: the keeper publishes it all again when the
 * lease was lost. */
struct entry {
    struct entry *next;
    char key[FERRY__META_KEY_MAX];
    size_t len;
    uint8_t blob[FERRY__META_BLOB_MAX];
};

struct etcd {
    struct ferry_meta *m;
    char endpoint[MAX_ENDPOINTS][ENDPOINT_LEN]; /* "http(s)://host:port" */
    unsigned n_endpoints;
    char prefix[PREFIX_LEN]; /* "ferry/prod", no trailing slash */
    const char *cacert, *cert, *key; /* FERRY_ETCD_* (TLS) or NULL */
    char join_key[FERRY__META_KEY_MAX];

    pthread_mutex_t lock;
    pthread_cond_t wake;      /* stopping */
    bool stopping;
    unsigned current;         /* the endpoint that answered last */
    int64_t lease;
    struct entry *entries;

    pthread_mutex_t api_lock; /* api: the callers' handle */
    CURL *api;
    pthread_t keeper;
    bool keeper_running;
    pthread_t watcher;
    bool watcher_running;
    CURLM *watch_multi;       /* woken by close (curl_multi_wakeup) */
};

static struct etcd *etcd_of(struct ferry_meta *m)
{
    return m->backend_state;
}

/* ---- base64 ------------------------------------------------------------ */

static char *b64_encode(const void *data, size_t len)
{
    char *out = malloc(BASE64_ENCODE_RAW_LENGTH(len) + 1);

    if (out == NULL)
        return NULL;
    base64_encode_raw(out, len, data);
    out[BASE64_ENCODE_RAW_LENGTH(len)] = '\0';
    return out;
}

/* Decodes s into out (cap bytes); false when malformed or too long. */
static bool b64_decode(const char *s, uint8_t *out, size_t cap, size_t *len)
{
    struct base64_decode_ctx d;
    size_t n = strlen(s);

    if (BASE64_DECODE_LENGTH(n) > cap)
        return false;
    base64_decode_init(&d);
    return base64_decode_update(&d, len, out, n, s) &&
           base64_decode_final(&d);
}

/* ---- one request ------------------------------------------------------- */

struct reply {
    char *data;
    size_t len;
};

static size_t take_reply(char *p, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    size_t add = size * n;
    char *grown;

    if (r->len + add > REPLY_MAX)
        return 0; /* makes curl fail the transfer */
    grown = realloc(r->data, r->len + add + 1);
    if (grown == NULL)
        return 0;
    r->data = grown;
    memcpy(r->data + r->len, p, add);
    r->len += add;
    r->data[r->len] = '\0';
    return add;
}

/* The options every handle of this backend carries. */
static void setup_handle(struct etcd *e, CURL *h)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM */
    /* etcd is reached directly: an http_proxy meant for the web must not
     * carry the fleet's metadata (nor 127.0.0.1). */
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    if (e->cacert != NULL)
        curl_easy_setopt(h, CURLOPT_CAINFO, e->cacert);
    if (e->cert != NULL)
        curl_easy_setopt(h, CURLOPT_SSLCERT, e->cert);
    if (e->key != NULL)
        curl_easy_setopt(h, CURLOPT_SSLKEY, e->key);
}

/* What to do about a failed TLS handshake, in a few words. */
static const char *tls_hint(CURLcode c)
{
    switch (c) {
    case CURLE_PEER_FAILED_VERIFICATION:
        return " (set FERRY_ETCD_CACERT to the CA that signed the etcd "
               "server's certificate)";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_ERROR: /* TLS 1.3: the refusal comes after the handshake */
    case CURLE_RECV_ERROR:
        return " (if the server asks for client certificates, set "
               "FERRY_ETCD_CERT and FERRY_ETCD_KEY)";
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
        return " (check the files FERRY_ETCD_CACERT, FERRY_ETCD_CERT and "
               "FERRY_ETCD_KEY name)";
    default:
        return "";
    }
}

/* etcd's own error in an answer ({"error": ..., "message": ...}). */
static void etcd_error(const char *body, char *out, size_t len)
{
    json_object *j = json_tokener_parse(body), *msg;

    if (j != NULL && (json_object_object_get_ex(j, "message", &msg) ||
                      json_object_object_get_ex(j, "error", &msg)))
        snprintf(out, len, "%s", json_object_get_string(msg));
    else
        snprintf(out, len, "%.120s", body);
    json_object_put(j);
}

/* What one POST to one endpoint came to. */
enum post_result {
    POST_OK,
    POST_UNAVAILABLE, /* no answer, or etcd's 5xx: another member may do */
    POST_REFUSED,     /* etcd answered with an error of the request's own */
};

/* One POST to one endpoint; a sentence in why unless POST_OK. */
static enum post_result post_once(struct etcd *e, CURL *h, unsigned i,
                                  const char *path, const char *body,
                                  int timeout_ms, struct reply *r, char *why,
                                  size_t wlen)
{
    char url[ENDPOINT_LEN + 64];
    char curl_err[CURL_ERROR_SIZE] = "";
    long status = 0;
    CURLcode c;

    snprintf(url, sizeof(url), "%s%s", e->endpoint[i], path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, take_reply);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_err);
    r->len = 0;
    c = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    if (c != CURLE_OK) {
        snprintf(why, wlen, "%s: %s%s", e->endpoint[i],
                 curl_err[0] ? curl_err : curl_easy_strerror(c), tls_hint(c));
        return POST_UNAVAILABLE;
    }
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (status != 200) {
        char msg[160];

        etcd_error(r->data != NULL ? r->data : "", msg, sizeof(msg));
        snprintf(why, wlen, "%s: HTTP %ld: %s", e->endpoint[i], status, msg);
        return status >= 500 ? POST_UNAVAILABLE : POST_REFUSED;
    }
    return POST_OK;
}

/*
 * POSTs the JSON req to path, trying the endpoints in turn from the one
 * that answered last, within timeout_ms in all.  *resp: the parsed
 * answer (json_object_put it).  A failure names every endpoint tried and
 * what each said.
 */
static int call(struct etcd *e, CURL *h, const char *path, json_object *req,
                int timeout_ms, json_object **resp)
{
    const char *body = json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    uint64_t deadline = ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
    struct reply r = {NULL, 0};
    char why[1024] = "", one[400];
    unsigned first, tried = 0;
    int ret = FERRY_ETIMEDOUT;

    pthread_mutex_lock(&e->lock);
    first = e->current;
    pthread_mutex_unlock(&e->lock);
    for (; tried < e->n_endpoints; tried++) {
        unsigned i = (first + tried) % e->n_endpoints;
        uint64_t now = ferry__now_ns();
        int left = now >= deadline ? 0 : (int)((deadline - now) / 1000000u);
        int attempt = left / (int)(e->n_endpoints - tried);

        if (left == 0)
            break;
        if (attempt < MIN_ATTEMPT_MS)
            attempt = left < MIN_ATTEMPT_MS ? left : MIN_ATTEMPT_MS;
        enum post_result pr = post_once(e, h, i, path, body, attempt, &r, one,
                                        sizeof(one));

        if (pr == POST_REFUSED) {
            free(r.data);
            return ferry__error(FERRY_EPROTO, "etcd %s refused: %s", path,
                                one);
        }
        if (pr == POST_OK) {
            *resp = json_tokener_parse(r.data != NULL ? r.data : "");
            free(r.data);
            if (*resp == NULL)
                return ferry__error(FERRY_EPROTO, "etcd %s%s answered "
                                    "something that is not JSON",
                                    e->endpoint[i], path);
            pthread_mutex_lock(&e->lock);
            e->current = i;
            pthread_mutex_unlock(&e->lock);
            return 0;
        }
        size_t used = strlen(why);
        snprintf(why + used, sizeof(why) - used, "%s%s", used ? "; " : "", one);
        ret = FERRY_EHOSTUNREACH;
    }
    free(r.data);
    if (tried < e->n_endpoints)
        ret = FERRY_ETIMEDOUT;
    return ferry__error(ret, "etcd %s failed within %d ms: %s", path,
                        timeout_ms, why[0] ? why : "no time left to try");
}

/* ---- JSON pieces --------------------------------------------------------- */

/* A base64 field of a request; false when out of memory. */
static bool add_b64(json_object *o, const char *field, const void *p,
                    size_t len)
{
    char *s = b64_encode(p, len);

    if (s == NULL)
        return false;
    json_object_object_add(o, field, json_object_new_string(s));
    free(s);
    return true;
}

/* Adds "key": base64(prefix/key). */
static bool add_key(struct etcd *e, json_object *o, const char *field,
                    const char *key)
{
    char full[PREFIX_LEN + FERRY__META_KEY_MAX + 2];
    int n = snprintf(full, sizeof(full), "%s/%s", e->prefix, key);

    return add_b64(o, field, full, (size_t)n);
}

/* etcd's int64s travel as strings: the ID of a lease, etc. */
static void add_int64(json_object *o, const char *field, int64_t v)
{
    char s[24];

    snprintf(s, sizeof(s), "%lld", (long long)v);
    json_object_object_add(o, field, json_object_new_string(s));
}

static int64_t get_int64(json_object *o, const char *field)
{
    json_object *v;

    return json_object_object_get_ex(o, field, &v) ? json_object_get_int64(v)
                                                   : 0;
}

static json_object *new_put(struct etcd *e, const char *key, const void *blob,
                            size_t len, int64_t lease)
{
    json_object *put = json_object_new_object();

    if (put == NULL || !add_key(e, put, "key", key) ||
        !add_b64(put, "value", blob, len)) {
        json_object_put(put);
        return NULL;
    }
    add_int64(put, "lease", lease);
    return put;
}

/* ---- leases and entries ------------------------------------------------ */

static int grant(struct etcd *e, CURL *h, int timeout_ms, int64_t *lease)
{
    json_object *req = json_object_new_object(), *resp = NULL;
    int ret;

    add_int64(req, "TTL", e->m->ttl_s);
    ret = call(e, h, "/v3/lease/grant", req, timeout_ms, &resp);
    json_object_put(req);
    if (ret == 0 && (*lease = get_int64(resp, "ID")) == 0)
        ret = ferry__error(FERRY_EPROTO, "etcd granted no lease (answer: "
                           "%s)", json_object_to_json_string(resp));
    json_object_put(resp);
    return ret;
}

/*
 * Creates key unless it exists (a transaction comparing its creation
 * revision with 0).  FERRY_EEXIST says how long the holder's lease has
 * left.
 */
static int create(struct etcd *e, CURL *h, const char *key, const void *blob,
                  size_t len, int64_t lease, int timeout_ms)
{
    json_object *req = json_object_new_object(), *resp = NULL, *ok;
    json_object *cmp = json_object_new_object(), *put = json_object_new_object();
    json_object *cmps = json_object_new_array(), *succ = json_object_new_array();
    json_object *p = new_put(e, key, blob, len, lease);
    int ret = FERRY_ENOMEM;

    if (p != NULL && add_key(e, cmp, "key", key)) {
        json_object_object_add(cmp, "target", json_object_new_string("CREATE"));
        json_object_object_add(cmp, "result", json_object_new_string("EQUAL"));
        add_int64(cmp, "create_revision", 0);
        json_object_array_add(cmps, cmp);
        json_object_object_add(put, "request_put", p);
        json_object_array_add(succ, put);
        json_object_object_add(req, "compare", cmps);
        json_object_object_add(req, "success", succ);
        ret = call(e, h, "/v3/kv/txn", req, timeout_ms, &resp);
        cmp = put = cmps = succ = p = NULL;
    }
    if (ret == FERRY_ENOMEM)
        ferry__error(ret, "out of memory building an etcd request");
    json_object_put(req);
    json_object_put(cmp);
    json_object_put(put);
    json_object_put(cmps);
    json_object_put(succ);
    json_object_put(p);
    if (ret == 0 && !(json_object_object_get_ex(resp, "succeeded", &ok) &&
                      json_object_get_boolean(ok)))
        ret = ferry__error(FERRY_EEXIST, "etcd %s: %s/%s is held by another "
                           "live context (its entry lasts until that context "
                           "closes, or up to its lease's TTL after it died); "
                           "choose another name, or wait",
                           e->endpoint[e->current], e->prefix, key);
    json_object_put(resp);
    return ret;
}

static int put_key(struct etcd *e, CURL *h, const char *key, const void *blob,
                   size_t len, int64_t lease, int timeout_ms)
{
    json_object *req = new_put(e, key, blob, len, lease), *resp = NULL;
    int ret;

    if (req == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory building an etcd "
                            "request");
    ret = call(e, h, "/v3/kv/put", req, timeout_ms, &resp);
    json_object_put(req);
    json_object_put(resp);
    return ret;
}

/* Remembers (or replaces) what the context published under key. */
static int remember(struct etcd *e, const char *key, const void *blob,
                    size_t len)
{
    struct entry *en;

    pthread_mutex_lock(&e->lock);
    for (en = e->entries; en != NULL; en = en->next)
        if (strcmp(en->key, key) == 0)
            break;
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
    pthread_mutex_lock(&e->lock);
    for (struct entry **pe = &e->entries; *pe != NULL; pe = &(*pe)->next)
        if (strcmp((*pe)->key, key) == 0) {
            struct entry *gone = *pe;
            *pe = gone->next;
            free(gone);
            break;
        }
    pthread_mutex_unlock(&e->lock);
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
    json_object *req = json_object_new_object(), *resp = NULL, *result;
    int64_t lease;
    int ret;

    pthread_mutex_lock(&e->lock);
    lease = e->lease;
    pthread_mutex_unlock(&e->lock);
    if (lease == 0) {
        json_object_put(req);
        return FERRY_ENOENT;
    }
    add_int64(req, "ID", lease);
    ret = call(e, h, "/v3/lease/keepalive", req, e->m->timeout_ms, &resp);
    json_object_put(req);
    /* A lease etcd has lost comes back with no TTL (or 0). */
    if (ret == 0 && !(json_object_object_get_ex(resp, "result", &result) &&
                      get_int64(result, "TTL") > 0))
        ret = FERRY_ENOENT;
    json_object_put(resp);
    return ret;
}

static bool stopping(struct etcd *e)
{
    bool stop;

    pthread_mutex_lock(&e->lock);
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return stop;
}

/* curl's progress callback on the keeper's handle: a request in flight
 * ends (within a second) when the backend closes, so that close does not
 * wait out its timeout. */
static int abort_if_stopping(void *arg, curl_off_t dt, curl_off_t dn,
                             curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    return stopping(arg) ? 1 : 0;
}

/* Sleeps up to ms; true when the backend is closing. */
static bool nap(struct etcd *e, unsigned ms)
{
    struct timespec until = ferry__realtime_after(ms);
    bool stop;

    pthread_mutex_lock(&e->lock);
    while (!e->stopping &&
           pthread_cond_timedwait(&e->wake, &e->lock, &until) == 0)
        ;
    stop = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return stop;
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
    setup_handle(e, h);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, abort_if_stopping);
    curl_easy_setopt(h, CURLOPT_XFERINFODATA, e);
    /* While etcd does not answer, ask every second: the entries must be
     * back soon after it is. */
    while (!nap(e, failing ? 1000u : period_ms)) {
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

/* ---- the watcher thread ---------------------------------------------------- */

/* The peers the watcher has reported as present. */
struct names {
    char (*v)[FERRY__META_NAME_MAX];
    size_t n, cap;
};

static ssize_t names_find(const struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (strcmp(s->v[i], name) == 0)
            return (ssize_t)i;
    return -1;
}

static bool names_add(struct names *s, const char *name)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        void *v = realloc(s->v, cap * sizeof(*s->v));
        if (v == NULL)
            return false;
        s->v = v;
        s->cap = cap;
    }
    snprintf(s->v[s->n++], sizeof(*s->v), "%s", name);
    return true;
}

static void names_drop(struct names *s, size_t i)
{
    memmove(s->v[i], s->v[s->n - 1], sizeof(*s->v));
    s->n--;
}

/* The NAME of a full key PREFIX/peers/NAME (base64), or false. */
static bool name_of_key(struct etcd *e, const char *b64, char *name)
{
    char full[PREFIX_LEN + FERRY__META_KEY_MAX + 2];
    size_t len = 0, plen = strlen(e->prefix);
    const char *peer;

    if (!b64_decode(b64, (uint8_t *)full, sizeof(full) - 1, &len))
        return false;
    full[len] = '\0';
    if (len <= plen + 1 || strncmp(full, e->prefix, plen) != 0 ||
        full[plen] != '/' ||
        (peer = ferry__meta_peer_of_key(full + plen + 1)) == NULL ||
        strlen(peer) >= FERRY__META_NAME_MAX)
        return false;
    strcpy(name, peer);
    return true;
}

/* Adds "key" and "range_end" covering PREFIX/peers/. */
static bool add_peers_range(struct etcd *e, json_object *o)
{
    char from[PREFIX_LEN + 8], to[PREFIX_LEN + 8];
    int n = snprintf(from, sizeof(from), "%s/peers/", e->prefix);

    memcpy(to, from, (size_t)n + 1);
    to[n - 1] = '/' + 1; /* the first key after every PREFIX/peers/... */
    return add_b64(o, "key", from, (size_t)n) &&
           add_b64(o, "range_end", to, (size_t)n);
}

/* Lists the peers present now, and the revision of that listing. */
static int list_peers(struct etcd *e, CURL *h, struct names *now,
                      int64_t *revision)
{
    json_object *req = json_object_new_object(), *resp = NULL, *kvs, *hdr;
    int ret;

    if (!add_peers_range(e, req)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    ret = call(e, h, "/v3/kv/range", req, e->m->timeout_ms, &resp);
    json_object_put(req);
    if (ret != 0)
        return ret;
    *revision = json_object_object_get_ex(resp, "header", &hdr)
                    ? get_int64(hdr, "revision")
                    : 0;
    if (json_object_object_get_ex(resp, "kvs", &kvs))
        for (size_t i = 0; i < json_object_array_length(kvs); i++) {
            json_object *kv = json_object_array_get_idx(kvs, i), *k;
            char name[FERRY__META_NAME_MAX];

            if (json_object_object_get_ex(kv, "key", &k) &&
                name_of_key(e, json_object_get_string(k), name))
                names_add(now, name);
        }
    json_object_put(resp);
    return 0;
}

/* Reports the difference between what was known and what is there now,
 * and makes now the known set. */
static void report_difference(struct etcd *e, struct names *known,
                              struct names *now)
{
    for (size_t i = 0; i < known->n; i++)
        if (names_find(now, known->v[i]) < 0)
            ferry__meta_saw(e->m, FERRY_META_LEAVE, known->v[i]);
    for (size_t i = 0; i < now->n; i++)
        if (names_find(known, now->v[i]) < 0)
            ferry__meta_saw(e->m, FERRY_META_JOIN, now->v[i]);
    free(known->v);
    *known = *now;
    *now = (struct names){0};
}

/* The watch stream being read: newline-separated JSON messages. */
struct stream {
    struct etcd *e;
    struct names *known;
    char *buf;
    size_t len;
    bool broken; /* etcd cancelled the watch or sent an error */
};

static void stream_event(struct stream *st, json_object *ev)
{
    json_object *type, *kv, *key;
    char name[FERRY__META_NAME_MAX];
    bool deleted = json_object_object_get_ex(ev, "type", &type) &&
                   strcmp(json_object_get_string(type), "DELETE") == 0;
    ssize_t at;

    if (!json_object_object_get_ex(ev, "kv", &kv) ||
        !json_object_object_get_ex(kv, "key", &key) ||
        !name_of_key(st->e, json_object_get_string(key), name))
        return;
    at = names_find(st->known, name);
    /* A put of a name already present is a republish: no new join. */
    if (deleted && at >= 0) {
        names_drop(st->known, (size_t)at);
        ferry__meta_saw(st->e->m, FERRY_META_LEAVE, name);
    } else if (!deleted && at < 0 && names_add(st->known, name)) {
        ferry__meta_saw(st->e->m, FERRY_META_JOIN, name);
    }
}

static void stream_message(struct stream *st, const char *line)
{
    json_object *msg = json_tokener_parse(line), *result, *events, *flag;

    if (msg == NULL)
        return;
    if (!json_object_object_get_ex(msg, "result", &result) ||
        (json_object_object_get_ex(result, "canceled", &flag) &&
         json_object_get_boolean(flag))) {
        FERRY_LOG_WARN("etcd: the watch ended: %.200s", line);
        st->broken = true;
    } else if (json_object_object_get_ex(result, "events", &events)) {
        for (size_t i = 0; i < json_object_array_length(events); i++)
            stream_event(st, json_object_array_get_idx(events, i));
    }
    json_object_put(msg);
}

static size_t take_stream(char *p, size_t size, size_t n, void *arg)
{
    struct stream *st = arg;
    size_t add = size * n;
    char *grown, *line, *nl;

    if (st->len + add > REPLY_MAX ||
        (grown = realloc(st->buf, st->len + add + 1)) == NULL)
        return 0;
    st->buf = grown;
    memcpy(st->buf + st->len, p, add);
    st->len += add;
    st->buf[st->len] = '\0';
    for (line = st->buf; (nl = strchr(line, '\n')) != NULL; line = nl + 1) {
        *nl = '\0';
        stream_message(st, line);
    }
    st->len -= (size_t)(line - st->buf);
    memmove(st->buf, line, st->len + 1);
    return st->broken ? 0 : add;
}

/* Follows the watch stream from revision until it breaks or close. */
static void follow(struct etcd *e, CURL *h, struct names *known,
                   int64_t revision)
{
    json_object *req = json_object_new_object(), *create = json_object_new_object();
    struct stream st = {.e = e, .known = known};
    char url[ENDPOINT_LEN + 16];
    int running = 1;

    if (!add_peers_range(e, create)) {
        json_object_put(create);
        json_object_put(req);
        return;
    }
    add_int64(create, "start_revision", revision + 1);
    json_object_object_add(req, "create_request", create);
    pthread_mutex_lock(&e->lock);
    snprintf(url, sizeof(url), "%s/v3/watch", e->endpoint[e->current]);
    pthread_mutex_unlock(&e->lock);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS,
                     json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 0L); /* a stream: no end */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)e->m->timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, take_stream);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &st);
    /* A member that vanishes without closing the connection (a pulled
     * cable) is noticed by TCP keep-alive within seconds. */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_multi_add_handle(e->watch_multi, h);
    while (running) {
        bool stop;

        curl_multi_perform(e->watch_multi, &running);
        stop = stopping(e);
        if (stop || !running)
            break;
        curl_multi_poll(e->watch_multi, NULL, 0, 1000, NULL);
    }
    curl_multi_remove_handle(e->watch_multi, h);
    json_object_put(req);
    free(st.buf);
}

/* Whether a peer known before is missing from now. */
static bool any_missing(const struct names *known, const struct names *now)
{
    for (size_t i = 0; i < known->n; i++)
        if (names_find(now, known->v[i]) < 0)
            return true;
    return false;
}

/*
 * Lists the peers present, holding back leaves seen right after the
 * watch broke: etcd may have come back without its data (or paused past
 * the TTL), and live peers' keepers publish again within their TTL.  A
 * peer still missing one TTL and a second later has left.  False when
 * closing.
 */
static bool relist(struct etcd *e, CURL *h, const struct names *known,
                   struct names *now, int64_t *revision, bool after_break)
{
    if (list_peers(e, h, now, revision) != 0)
        return false;
    if (!after_break || !any_missing(known, now))
        return true;
    free(now->v);
    *now = (struct names){0};
    if (nap(e, e->m->ttl_s * 1000u + 1000u))
        return false;
    return list_peers(e, h, now, revision) == 0;
}

static void *watcher_main(void *arg)
{
    struct etcd *e = arg;
    struct names known = {0}, now = {0};
    CURL *h = curl_easy_init();
    bool after_break = false;

    if (h == NULL) {
        FERRY_LOG_WARN("etcd: no curl handle for the watcher: no events");
        return NULL;
    }
    setup_handle(e, h);
    while (!stopping(e)) {
        int64_t revision = 0;

        if (relist(e, h, &known, &now, &revision, after_break)) {
            report_difference(e, &known, &now);
            follow(e, h, &known, revision);
            after_break = true;
        } else {
            FERRY_LOG_DEBUG("etcd watcher: %s", ferry_last_error());
            free(now.v);
            now = (struct names){0};
        }
        if (nap(e, REWATCH_MS))
            break;
    }
    free(known.v);
    free(now.v);
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
        const char *colon = memchr(p, ':', n);

        if (n == 0 || colon == NULL || colon == p || colon + 1 == p + n ||
            n > ENDPOINT_LEN - 16 ||
            strspn(colon + 1, "0123456789") != (size_t)(p + n - colon - 1) ||
            (comma != NULL && n + 1 == hosts_len))
            return ferry__error(FERRY_EINVAL, "metadata URL \"%s\": endpoint "
                                "\"%.*s\" is not HOST:PORT",
                                url, (int)n, p);
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
    json_object *req = json_object_new_object(), *resp = NULL;

    add_int64(req, "ID", e->lease);
    if (call(e, e->api, "/v3/lease/revoke", req, timeout_ms, &resp))
        FERRY_LOG_WARN("etcd: %s's entries stay until its lease ends (%u s): "
                       "%s",
                       e->m->name, e->m->ttl_s, ferry_last_error());
    json_object_put(req);
    json_object_put(resp);
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
    setup_handle(e, e->api);
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
    bool found = false;

    pthread_mutex_lock(&e->lock);
    for (struct entry *en = e->entries; en != NULL && !found; en = en->next)
        if (strcmp(en->key, key) == 0) {
            *copy = *en;
            found = true;
        }
    pthread_mutex_unlock(&e->lock);
    return found;
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
    json_object *req = json_object_new_object(), *resp = NULL;
    int ret;

    forget(e, key);
    if (!add_key(e, req, "key", key)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&e->api_lock);
    ret = call(e, e->api, "/v3/kv/deleterange", req, m->timeout_ms, &resp);
    pthread_mutex_unlock(&e->api_lock);
    if (ret == 0 && get_int64(resp, "deleted") == 0)
        ret = FERRY_ENOENT;
    json_object_put(req);
    json_object_put(resp);
    return ret;
}

static int etcd_get(struct ferry_meta *m, const char *key, void *blob,
                    size_t *len, int timeout_ms)
{
    struct etcd *e = etcd_of(m);
    json_object *req = json_object_new_object(), *resp = NULL, *kvs, *value;
    int ret;

    if (!add_key(e, req, "key", key)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    pthread_mutex_lock(&e->api_lock);
    ret = call(e, e->api, "/v3/kv/range", req, timeout_ms, &resp);
    pthread_mutex_unlock(&e->api_lock);
    json_object_put(req);
    if (ret == 0 && !(json_object_object_get_ex(resp, "kvs", &kvs) &&
                      json_object_array_length(kvs) > 0))
        ret = FERRY_ENOENT;
    else if (ret == 0 &&
             !(json_object_object_get_ex(json_object_array_get_idx(kvs, 0),
                                         "value", &value) &&
               b64_decode(json_object_get_string(value), blob, *len, len)))
        ret = ferry__error(FERRY_EBLOB, "etcd: the value of %s/%s is not a "
                           "ferry blob of at most %zu bytes",
                           e->prefix, key, *len);
    json_object_put(resp);
    return ret;
}

static int etcd_watch(struct ferry_meta *m)
{
    struct etcd *e = etcd_of(m);

    e->watch_multi = curl_multi_init();
    if (e->watch_multi == NULL ||
        pthread_create(&e->watcher, NULL, watcher_main, e) != 0)
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
