/*
 * The etcd backend's shared parts (meta.h): its state, the requests
 * (etcd_wire.c) and the thread helpers the keeper (etcd.c) and the
 * watcher (etcd_watch.c) both use.
 */
#ifndef FERRY_OOB_ETCD_H
#define FERRY_OOB_ETCD_H

#include "oob/meta.h"

#include <curl/curl.h>
#include <json-c/json.h>

#define MAX_ENDPOINTS 16
#define ENDPOINT_LEN 280
#define PREFIX_LEN 200

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

/* ---- answers (etcd_json.c) ---- */

/*
 * A value in an answer of etcd, with where it is for the sentences.  Each
 * reader below checks the value's JSON kind before json-c reads it, and
 * fails with FERRY_EPROTO and a sentence naming the endpoint, the
 * request, the place and the kind expected: "etcd at http://h:2379
 * answered /v3/kv/range with "kvs" as an object, where an array was
 * expected".  A value belongs to the answer it was read from.
 */
struct ferry__etcd_value {
    json_object *json;    /* NULL: absent (an optional field) */
    const char *endpoint; /* "http://h:2379", which answered */
    const char *request;  /* "/v3/kv/range" */
    char place[96];       /* "kvs[0].value"; "" for the answer itself */
};

/* Parses text, etcd's answer to request, into *answer: a JSON object
 * (json_object_put answer->json; NULL after a failure). */
int ferry__etcd_parse(const char *endpoint, const char *request,
                      const char *text, struct ferry__etcd_value *answer);
/* Field name of object o, of kind want: 0 with *field, whose json is NULL
 * when the field is absent and not required. */
int ferry__etcd_field(const struct ferry__etcd_value *o, const char *name,
                      enum json_type want, bool required,
                      struct ferry__etcd_value *field);
/* The elements of an array (0 when absent), and element i, of kind want. */
size_t ferry__etcd_length(const struct ferry__etcd_value *array);
int ferry__etcd_item(const struct ferry__etcd_value *array, size_t i,
                     enum json_type want, struct ferry__etcd_value *item);
/* A string field (*s NULL when absent and not required; it lives as long
 * as the answer), a boolean (false when absent: proto3's JSON leaves
 * out false) and an int64 (0 when absent and not required; etcd writes
 * them as strings of digits). */
int ferry__etcd_string(const struct ferry__etcd_value *o, const char *name,
                       bool required, const char **s);
int ferry__etcd_bool(const struct ferry__etcd_value *o, const char *name,
                     bool *b);
int ferry__etcd_int64(const struct ferry__etcd_value *o, const char *name,
                      bool required, int64_t *v);
/* A revision: ferry__etcd_int64 of a required field, and from 0 to
 * INT64_MAX - 1 (the watcher asks for the one after it). */
int ferry__etcd_revision(const struct ferry__etcd_value *o, const char *name,
                         int64_t *v);

/* ---- requests (etcd_wire.c) ---- */

/* Bytes received from etcd, NUL-terminated. */
struct ferry__etcd_buf {
    char *data;
    size_t len;
    size_t cap;    /* bytes allocated at data */
    bool overflow; /* more came than the reader takes */
};

/* Appends n bytes at p to b; false (which makes curl fail the transfer)
 * past max bytes in all (b->overflow) or out of memory. */
bool ferry__etcd_append(struct ferry__etcd_buf *b, const char *p, size_t n,
                        size_t max);

/* Decodes base64 s into out (cap bytes); false when malformed or too long. */
bool ferry__etcd_b64_decode(const char *s, uint8_t *out, size_t cap,
                            size_t *len);
/* The options every curl handle of this backend carries. */
void ferry__etcd_setup_handle(struct etcd *e, CURL *h);
/*
 * POSTs the JSON req to path, trying the endpoints in turn from the one
 * that answered last, round after round, within timeout_ms in all.  *resp: the
 * answer, an object (json_object_put resp->json).  A failure names every
 * endpoint tried and what each said last; etcd's own refusal of the
 * request (4xx), and an answer that is not a JSON object of at most 16
 * MiB, are FERRY_EPROTO at once, and a call the closing backend abandoned
 * FERRY_ECANCELED.
 */
int ferry__etcd_call(struct etcd *e, CURL *h, const char *path,
                     json_object *req, int timeout_ms,
                     struct ferry__etcd_value *resp);
/* Request fields: base64 bytes, base64 "PREFIX/key", an int64 (etcd's
 * travel as strings); false when out of memory. */
bool ferry__etcd_add_b64(json_object *o, const char *field, const void *p,
                         size_t len);
bool ferry__etcd_add_key(struct etcd *e, json_object *o, const char *field,
                         const char *key);
void ferry__etcd_add_int64(json_object *o, const char *field, int64_t v);
/* A put request of key on lease; NULL when out of memory. */
json_object *ferry__etcd_new_put(struct etcd *e, const char *key,
                                 const void *blob, size_t len, int64_t lease);

/* ---- threads (etcd.c, etcd_watch.c) ---- */

/* Whether the backend is closing (etcd_life.c). */
bool ferry__etcd_stopping(struct etcd *e);
/* Sleeps up to ms; true when the backend is closing. */
bool ferry__etcd_nap(struct etcd *e, unsigned ms);
/* The watcher thread (etcd_watch.c): reports joins and leaves. */
void *ferry__etcd_watcher_main(void *arg);

#endif
