/*
 * The etcd backend's requests (etcd.h): base64 through nettle, one POST
 * through libcurl, the endpoints in turn, JSON through json-c.
 */
#include "oob/etcd.h"

#include <nettle/base64.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Whatever etcd answers is at most this big (a listing of 200 peers is
 * well under 200 KiB). */
#define REPLY_MAX (16u << 20)
/* The shortest attempt on one endpoint, however little time is left. */
#define MIN_ATTEMPT_MS 300
/* The pause after every endpoint failed once, before asking again: a
 * cluster electing a leader answers again within a second or two. */
#define ROUND_PAUSE_MS 100

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

bool ferry__etcd_b64_decode(const char *s, uint8_t *out, size_t cap,
                            size_t *len)
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

bool ferry__etcd_append(struct ferry__etcd_buf *b, const char *p, size_t n,
                        size_t max)
{
    if (b->len + n > max) {
        b->overflow = true;
        return false;
    }
    if (b->len + n + 1 > b->cap) {
        /* Doubling: a long answer, in curl's chunks of 16 KiB, is not
         * copied again for every chunk. */
        size_t cap = b->cap ? b->cap : 4096;
        char *grown;

        while (cap < b->len + n + 1)
            cap *= 2;
        if ((grown = realloc(b->data, cap)) == NULL)
            return false;
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return true;
}

/* curl's write callback of a request: the answer, whole. */
static size_t take_reply(char *p, size_t size, size_t n, void *arg)
{
    return ferry__etcd_append(arg, p, size * n, REPLY_MAX) ? size * n : 0;
}

/* The options every handle of this backend carries. */
void ferry__etcd_setup_handle(struct etcd *e, CURL *h)
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

/* etcd's own error in an answer ({"error": ..., "message": ...}): the
 * first of the two that is a string, else the body's start. */
static void etcd_error(const char *body, char *out, size_t len)
{
    static const char *const fields[] = {"message", "error"};
    json_object *j = json_tokener_parse(body), *msg;

    snprintf(out, len, "%.120s", body);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (json_object_object_get_ex(j, fields[i], &msg) &&
            json_object_is_type(msg, json_type_string)) {
            snprintf(out, len, "%s", json_object_get_string(msg));
            break;
        }
    json_object_put(j);
}

/* What one POST to one endpoint came to. */
enum post_result {
    POST_OK,
    POST_UNAVAILABLE, /* no answer, or etcd's 5xx: another member may do */
    POST_TIMED_OUT,   /* the same, for want of time */
    POST_REFUSED,     /* etcd answered with an error of the request's own,
                         or TLS refused the server's or our certificate */
    POST_TOO_LONG,    /* the answer passed REPLY_MAX */
    POST_ABORTED,     /* the backend is closing (etcd.c's progress check) */
};

/* One POST to one endpoint; a sentence in why unless POST_OK. */
static enum post_result post_once(struct etcd *e, CURL *h, unsigned i,
                                  const char *path, const char *body,
                                  int timeout_ms, struct ferry__etcd_buf *r,
                                  char *why,
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
    r->overflow = false;
    c = curl_easy_perform(h);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
    /* Another member holds the same data: asking it cannot help. */
    if (c == CURLE_WRITE_ERROR && r->overflow) {
        snprintf(why, wlen, "etcd at %s answered %s with more than %u MiB",
                 e->endpoint[i], path, REPLY_MAX >> 20);
        return POST_TOO_LONG;
    }
    if (c != CURLE_OK) {
        snprintf(why, wlen, "%s: %s%s", e->endpoint[i],
                 curl_err[0] ? curl_err : curl_easy_strerror(c), tls_hint(c));
        switch (c) {
        case CURLE_ABORTED_BY_CALLBACK:
            return POST_ABORTED;
        case CURLE_OPERATION_TIMEDOUT:
            return POST_TIMED_OUT;
        /* Certificates are configuration: asking again cannot help. */
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CACERT_BADFILE:
            return POST_REFUSED;
        default:
            return POST_UNAVAILABLE;
        }
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

/* Milliseconds left before deadline (ns), 0 once passed. */
static int ms_left(uint64_t deadline)
{
    uint64_t now = ferry__now_ns();

    return now >= deadline ? 0 : (int)((deadline - now) / 1000000u);
}

/* "endpoint: what it said; ..." for every endpoint asked, into why. */
static void list_failures(const struct etcd *e,
                          char said[][ENDPOINT_LEN + 160], char *why,
                          size_t len)
{
    why[0] = '\0';
    for (unsigned i = 0; i < e->n_endpoints; i++) {
        size_t used = strlen(why);

        if (said[i][0] != '\0')
            snprintf(why + used, len - used, "%s%s", used ? "; " : "",
                     said[i]);
    }
    if (why[0] == '\0')
        snprintf(why, len, "no time left to try");
}

int ferry__etcd_call(struct etcd *e, CURL *h, const char *path,
                     json_object *req, int timeout_ms,
                     struct ferry__etcd_value *resp)
{
    const char *body =
        json_object_to_json_string_ext(req, JSON_C_TO_STRING_PLAIN);
    uint64_t deadline = ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
    struct ferry__etcd_buf r = {0};
    char said[MAX_ENDPOINTS][ENDPOINT_LEN + 160] = {{0}}, why[2048];
    char one[sizeof(said[0])];
    enum post_result pr = POST_TIMED_OUT;
    unsigned first, i = 0;
    int ret;

    resp->json = NULL;
    pthread_mutex_lock(&e->lock);
    first = e->current;
    pthread_mutex_unlock(&e->lock);
    /* The endpoints in turn, round after round, until one answers or the
     * deadline passes: a member that is down, or a cluster between two
     * leaders, costs time but not the call. */
    for (unsigned k = 0; ms_left(deadline) > 0; k++) {
        int left = ms_left(deadline);
        int attempt = left / (int)e->n_endpoints;

        i = (first + k) % e->n_endpoints;
        if (attempt < MIN_ATTEMPT_MS)
            attempt = left < MIN_ATTEMPT_MS ? left : MIN_ATTEMPT_MS;
        pr = post_once(e, h, i, path, body, attempt, &r, one, sizeof(one));
        /* What an endpoint said first stays, unless it was only that
         * time ran out: a reason says more than a later timeout. */
        if (said[i][0] == '\0' || pr != POST_TIMED_OUT)
            snprintf(said[i], sizeof(said[i]), "%s", one);
        if (pr == POST_OK) {
            ret = ferry__etcd_parse(e->endpoint[i], path,
                                    r.data != NULL ? r.data : "", resp);
            free(r.data);
            if (ret != 0)
                return ret;
            pthread_mutex_lock(&e->lock);
            e->current = i;
            pthread_mutex_unlock(&e->lock);
            return 0;
        }
        if (pr == POST_REFUSED || pr == POST_ABORTED || pr == POST_TOO_LONG)
            break;
        if (i == (first + e->n_endpoints - 1) % e->n_endpoints) {
            int pause = ms_left(deadline);
            struct timespec ts = {0, 0};

            ts.tv_nsec = (pause < ROUND_PAUSE_MS ? pause : ROUND_PAUSE_MS) *
                         1000000L;
            nanosleep(&ts, NULL);
        }
    }
    free(r.data);
    if (pr == POST_TOO_LONG)
        return ferry__error(FERRY_EPROTO, "%s", said[i]);
    if (pr == POST_REFUSED || pr == POST_ABORTED)
        return ferry__error(pr == POST_REFUSED ? FERRY_EPROTO
                                               : FERRY_ECANCELED,
                            "etcd %s %s: %s", path,
                            pr == POST_REFUSED ? "refused"
                                               : "abandoned (closing)",
                            said[i]);
    list_failures(e, said, why, sizeof(why));
    /* The last attempt says why: no answer in time, or none at all. */
    return ferry__error(pr == POST_TIMED_OUT ? FERRY_ETIMEDOUT
                                             : FERRY_EHOSTUNREACH,
                        "etcd %s failed within %d ms: %s", path, timeout_ms,
                        why);
}

/* ---- JSON pieces --------------------------------------------------------- */

bool ferry__etcd_add_b64(json_object *o, const char *field, const void *p,
                         size_t len)
{
    char *s = b64_encode(p, len);

    if (s == NULL)
        return false;
    json_object_object_add(o, field, json_object_new_string(s));
    free(s);
    return true;
}

bool ferry__etcd_add_key(struct etcd *e, json_object *o, const char *field,
                         const char *key)
{
    char full[PREFIX_LEN + FERRY__META_KEY_MAX + 2];
    int n = snprintf(full, sizeof(full), "%s/%s", e->prefix, key);

    return ferry__etcd_add_b64(o, field, full, (size_t)n);
}

void ferry__etcd_add_int64(json_object *o, const char *field, int64_t v)
{
    char s[24];

    snprintf(s, sizeof(s), "%lld", (long long)v);
    json_object_object_add(o, field, json_object_new_string(s));
}

json_object *ferry__etcd_new_put(struct etcd *e, const char *key,
                                 const void *blob, size_t len,
                                 int64_t lease)
{
    json_object *put = json_object_new_object();

    if (put == NULL || !ferry__etcd_add_key(e, put, "key", key) ||
        !ferry__etcd_add_b64(put, "value", blob, len)) {
        json_object_put(put);
        return NULL;
    }
    ferry__etcd_add_int64(put, "lease", lease);
    return put;
}
