/*
 * The etcd backend's watcher thread (etcd.h): lists PREFIX/peers/, then
 * follows etcd's watch stream from that revision; after any break it
 * lists again and reports the difference, so no join or leave is lost to
 * an outage.
 */
#include "oob/etcd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Pause before listing again after the watch stream broke. */
#define REWATCH_MS 500
/* Whatever the stream holds unread is at most this big. */
#define STREAM_MAX (16u << 20)

/*
 * The peers the watcher has reported as present, sorted, so that a look
 * for a name is a binary search: a listing of n peers costs n log n, not
 * n squared (two listings of 20,000 names held the watcher for 22 s
 * here when each look was a scan; 0.3 s sorted).
 */
struct names {
    char (*v)[FERRY__META_NAME_MAX];
    size_t n, cap;
};

/* Whether name is in s; *at is where it is, or where it would go. */
static bool names_find(const struct names *s, const char *name, size_t *at)
{
    size_t lo = 0, hi = s->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(s->v[mid], name);

        if (c == 0) {
            *at = mid;
            return true;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *at = lo;
    return false;
}

static bool names_has(const struct names *s, const char *name)
{
    size_t at;

    return names_find(s, name, &at);
}

/* Appends name, leaving s unsorted until names_settle. */
static bool names_append(struct names *s, const char *name)
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

static int name_order(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* Sorts what names_append gave, each name once (an answer may repeat a
 * key). */
static void names_settle(struct names *s)
{
    size_t kept = 0;

    if (s->n == 0)
        return;
    qsort(s->v, s->n, sizeof(*s->v), name_order);
    for (size_t i = 1; i < s->n; i++)
        if (strcmp(s->v[i], s->v[kept]) != 0)
            memmove(s->v[++kept], s->v[i], sizeof(*s->v));
    s->n = kept + 1;
}

/* Puts name at its place at (names_find's), in order. */
static bool names_insert(struct names *s, size_t at, const char *name)
{
    if (!names_append(s, name))
        return false;
    memmove(s->v[at + 1], s->v[at], (s->n - 1 - at) * sizeof(*s->v));
    snprintf(s->v[at], sizeof(*s->v), "%s", name);
    return true;
}

static void names_drop(struct names *s, size_t at)
{
    memmove(s->v[at], s->v[at + 1], (s->n - 1 - at) * sizeof(*s->v));
    s->n--;
}

static void names_clear(struct names *s)
{
    free(s->v);
    *s = (struct names){0};
}

/* The NAME of a full key PREFIX/peers/NAME (base64), or false. */
static bool name_of_key(struct etcd *e, const char *b64, char *name)
{
    char full[PREFIX_LEN + FERRY__META_KEY_MAX + 2];
    size_t len = 0, plen = strlen(e->prefix);
    const char *peer;

    if (!ferry__etcd_b64_decode(b64, (uint8_t *)full, sizeof(full) - 1, &len))
        return false;
    full[len] = '\0';
    /* A key with a NUL in it would read as a shorter one, another peer's
     * (peers/beta\0x as beta): it is no peer's. */
    if (strlen(full) != len || len <= plen + 1 ||
        strncmp(full, e->prefix, plen) != 0 || full[plen] != '/' ||
        (peer = ferry__meta_peer_of_key(full + plen + 1)) == NULL)
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
    return ferry__etcd_add_b64(o, "key", from, (size_t)n) &&
           ferry__etcd_add_b64(o, "range_end", to, (size_t)n);
}

/* Adds the peer of the listing's kvs[i] to now (other keys under
 * PREFIX/peers/ are no peer's). */
static int listed_peer(struct etcd *e, const struct ferry__etcd_value *kvs,
                       size_t i, struct names *now)
{
    struct ferry__etcd_value kv;
    const char *key;
    char name[FERRY__META_NAME_MAX];
    int ret = ferry__etcd_item(kvs, i, json_type_object, &kv);

    if (ret == 0)
        ret = ferry__etcd_string(&kv, "key", true, &key);
    if (ret == 0 && name_of_key(e, key, name))
        names_append(now, name);
    return ret;
}

/* Lists the peers present now, and the revision of that listing. */
static int list_peers(struct etcd *e, CURL *h, struct names *now,
                      int64_t *revision)
{
    json_object *req = json_object_new_object();
    struct ferry__etcd_value resp, hdr, kvs = {0};
    int ret;

    if (!add_peers_range(e, req)) {
        json_object_put(req);
        return ferry__error(FERRY_ENOMEM, "out of memory");
    }
    json_object_object_add(req, "keys_only", json_object_new_boolean(1));
    ret = ferry__etcd_call(e, h, "/v3/kv/range", req, e->m->timeout_ms, &resp);
    json_object_put(req);
    if (ret == 0)
        ret = ferry__etcd_field(&resp, "header", json_type_object, true, &hdr);
    if (ret == 0)
        ret = ferry__etcd_revision(&hdr, "revision", revision);
    if (ret == 0)
        ret = ferry__etcd_field(&resp, "kvs", json_type_array, false, &kvs);
    for (size_t i = 0; ret == 0 && i < ferry__etcd_length(&kvs); i++)
        ret = listed_peer(e, &kvs, i, now);
    names_settle(now);
    json_object_put(resp.json);
    return ret;
}

/* Reports the difference between what was known and what is there now,
 * and makes now the known set. */
static void report_difference(struct etcd *e, struct names *known,
                              struct names *now)
{
    for (size_t i = 0; i < known->n; i++)
        if (!names_has(now, known->v[i]))
            ferry__meta_saw(e->m, FERRY_META_LEAVE, known->v[i]);
    for (size_t i = 0; i < now->n; i++)
        if (!names_has(known, now->v[i]))
            ferry__meta_saw(e->m, FERRY_META_JOIN, now->v[i]);
    free(known->v);
    *known = *now;
    *now = (struct names){0}; /* moved, not freed */
}

/* The watch stream being read: newline-separated JSON messages. */
struct stream {
    struct etcd *e;
    const char *endpoint; /* which streams */
    struct names *known;
    struct ferry__etcd_buf unread; /* a message's start, until its end */
    bool broken; /* etcd ended the watch, or sent what ferry cannot take:
                    the listing that follows makes up for what was lost */
};

/* Reports the join or leave of the frame's events[i], if it is a peer's. */
static int stream_event(struct stream *st,
                        const struct ferry__etcd_value *events, size_t i)
{
    struct ferry__etcd_value ev, kv;
    const char *type = NULL, *key = NULL;
    char name[FERRY__META_NAME_MAX];
    bool deleted, present;
    size_t at;
    int ret = ferry__etcd_item(events, i, json_type_object, &ev);

    /* proto3's JSON leaves out a put's type (0). */
    if (ret == 0)
        ret = ferry__etcd_string(&ev, "type", false, &type);
    if (ret == 0)
        ret = ferry__etcd_field(&ev, "kv", json_type_object, true, &kv);
    if (ret == 0)
        ret = ferry__etcd_string(&kv, "key", true, &key);
    if (ret != 0 || !name_of_key(st->e, key, name))
        return ret;
    deleted = type != NULL && strcmp(type, "DELETE") == 0;
    present = names_find(st->known, name, &at);
    /* A put of a name already present is a republish: no new join. */
    if (deleted && present) {
        names_drop(st->known, at);
        ferry__meta_saw(st->e->m, FERRY_META_LEAVE, name);
    } else if (!deleted && !present && names_insert(st->known, at, name)) {
        ferry__meta_saw(st->e->m, FERRY_META_JOIN, name);
    }
    return 0;
}

/* The events of one frame; *ended when etcd ended the watch (an error
 * instead of a result, or a cancel). */
static int stream_frame(struct stream *st, const struct ferry__etcd_value *msg,
                        bool *ended)
{
    struct ferry__etcd_value result, events = {0};
    bool canceled = false;
    int ret = ferry__etcd_field(msg, "result", json_type_object, false,
                                &result);

    if (ret == 0 && result.json != NULL)
        ret = ferry__etcd_bool(&result, "canceled", &canceled);
    if (ret == 0 && result.json != NULL)
        ret = ferry__etcd_field(&result, "events", json_type_array, false,
                                &events);
    *ended = ret == 0 && (result.json == NULL || canceled);
    for (size_t i = 0; ret == 0 && !*ended && i < ferry__etcd_length(&events);
         i++)
        ret = stream_event(st, &events, i);
    return ret;
}

/* Ends the stream for what ferry could not take (why): the watcher lists
 * the peers again. */
static void stream_broke(struct stream *st, const char *why)
{
    FERRY_LOG_WARN("etcd: the watch stream broke: %s; listing the peers "
                   "again", why);
    st->broken = true;
}

static void stream_message(struct stream *st, const char *line)
{
    struct ferry__etcd_value msg;
    bool ended = false;
    int ret;

    if (line[strspn(line, " \t\r")] == '\0')
        return; /* an empty line carries nothing */
    ret = ferry__etcd_parse(st->endpoint, "/v3/watch", line, &msg);
    if (ret == 0)
        ret = stream_frame(st, &msg, &ended);
    if (ret != 0) {
        stream_broke(st, ferry_last_error());
    } else if (ended) {
        FERRY_LOG_WARN("etcd: the watch ended: %.200s", line);
        st->broken = true;
    }
    json_object_put(msg.json);
}

static size_t take_stream(char *p, size_t size, size_t n, void *arg)
{
    struct stream *st = arg;
    struct ferry__etcd_buf *b = &st->unread;
    size_t before = b->len; /* a line's start, without its newline */
    char *line, *from, *nl;
    char why[ENDPOINT_LEN + 64];

    if (!ferry__etcd_append(b, p, size * n, STREAM_MAX)) {
        if (b->overflow)
            snprintf(why, sizeof(why), "etcd at %s answered /v3/watch with a "
                     "line of more than %u MiB", st->endpoint,
                     STREAM_MAX >> 20);
        else
            snprintf(why, sizeof(why), "out of memory for a line from etcd "
                     "at %s", st->endpoint);
        stream_broke(st, why);
        return 0;
    }
    /* Newlines are looked for in what came only: a long line is not
     * searched again for every chunk of it. */
    for (line = b->data, from = b->data + before;
         !st->broken &&
         (nl = memchr(from, '\n', (size_t)(b->data + b->len - from))) != NULL;
         line = from = nl + 1) {
        *nl = '\0';
        stream_message(st, line);
    }
    b->len -= (size_t)(line - b->data);
    memmove(b->data, line, b->len + 1);
    return st->broken ? 0 : size * n;
}

/* Follows the watch stream from revision until it breaks or close. */
static void follow(struct etcd *e, CURL *h, struct names *known,
                   int64_t revision)
{
    json_object *req = json_object_new_object();
    json_object *create = json_object_new_object();
    struct stream st = {.e = e, .known = known};
    char url[ENDPOINT_LEN + 16];
    int running = 0;

    if (!add_peers_range(e, create)) {
        json_object_put(create);
        json_object_put(req);
        return;
    }
    ferry__etcd_add_int64(create, "start_revision", revision + 1);
    json_object_object_add(req, "create_request", create);
    pthread_mutex_lock(&e->lock);
    st.endpoint = e->endpoint[e->current];
    pthread_mutex_unlock(&e->lock);
    snprintf(url, sizeof(url), "%s/v3/watch", st.endpoint);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS,
                     json_object_to_json_string_ext(req,
                                                    JSON_C_TO_STRING_PLAIN));
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
    for (;;) {
        curl_multi_perform(e->watch_multi, &running);
        if (!running || ferry__etcd_stopping(e))
            break;
        curl_multi_poll(e->watch_multi, NULL, 0, 1000, NULL);
    }
    curl_multi_remove_handle(e->watch_multi, h);
    json_object_put(req);
    free(st.unread.data);
}

/* Whether a peer known before is missing from now. */
static bool any_missing(const struct names *known, const struct names *now)
{
    for (size_t i = 0; i < known->n; i++)
        if (!names_has(now, known->v[i]))
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
    names_clear(now);
    if (ferry__etcd_nap(e, e->m->ttl_s * 1000u + 1000u))
        return false;
    return list_peers(e, h, now, revision) == 0;
}

void *ferry__etcd_watcher_main(void *arg)
{
    struct etcd *e = arg;
    struct names known = {0}, now = {0};
    CURL *h = curl_easy_init();
    bool after_break = false, failing = false;

    if (h == NULL) {
        FERRY_LOG_WARN("etcd: no curl handle for the watcher: no events");
        return NULL;
    }
    ferry__etcd_setup_handle(e, h);
    while (!ferry__etcd_stopping(e)) {
        int64_t revision = 0;

        if (relist(e, h, &known, &now, &revision, after_break)) {
            if (failing)
                FERRY_LOG_INFO("etcd: %s's watcher lists the peers again",
                               e->m->name);
            failing = false;
            report_difference(e, &known, &now);
            follow(e, h, &known, revision);
            after_break = true;
        } else if (!ferry__etcd_stopping(e)) {
            /* Once a run of failures, as the keeper does: no event comes
             * until the watcher lists the peers again. */
            if (!failing)
                FERRY_LOG_WARN("etcd: %s's watcher cannot list the peers "
                               "(no events until it can; asking again): %s",
                               e->m->name, ferry_last_error());
            else
                FERRY_LOG_DEBUG("etcd watcher: %s", ferry_last_error());
            failing = true;
            names_clear(&now);
        }
        if (ferry__etcd_nap(e, REWATCH_MS))
            break;
    }
    names_clear(&known);
    names_clear(&now);
    curl_easy_cleanup(h);
    return NULL;
}
