/*
 * A fake etcd on loopback (fakeetcd.h).
 */
#include "fakeetcd.h"
#include "sockutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* A request's head and body, at most (ferry's are well under 4 KiB). */
#define REQUEST_MAX (64 * 1024)

/* What a healthy etcd of one empty cluster answers (the lease's ID and
 * TTL as etcd writes int64s: strings). */
static const char *const healthy[FE_ROUTES] = {
    [FE_GRANT] = "{\"header\":{\"revision\":\"1\"},\"ID\":\"7587869\","
                 "\"TTL\":\"10\"}",
    [FE_KEEPALIVE] = "{\"result\":{\"header\":{\"revision\":\"1\"},"
                     "\"ID\":\"7587869\",\"TTL\":\"10\"}}",
    [FE_REVOKE] = "{\"header\":{\"revision\":\"1\"}}",
    [FE_TXN] = "{\"header\":{\"revision\":\"2\"},\"succeeded\":true}",
    [FE_PUT] = "{\"header\":{\"revision\":\"3\"}}",
    [FE_DELETE] = "{\"header\":{\"revision\":\"4\"},\"deleted\":\"1\"}",
    [FE_RANGE] = "{\"header\":{\"revision\":\"4\"}}",
    [FE_LIST] = "{\"header\":{\"revision\":\"4\"}}",
    [FE_WATCH] = "{\"result\":{\"header\":{\"revision\":\"4\"},"
                 "\"created\":true}}\n",
    [FE_UNKNOWN] = "404 page not found\n",
};

/* ---- base64 ------------------------------------------------------------ */

char *fe_b64(const void *p, size_t len)
{
    static const char digit[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnop"
                                "qrstuvwxyz0123456789+/";
    const unsigned char *in = p;
    char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;

    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned)in[i] << 16;

        if (i + 1 < len)
            v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < len)
            v |= in[i + 2];
        *o++ = digit[v >> 18];
        *o++ = digit[(v >> 12) & 63];
        *o++ = i + 1 < len ? digit[(v >> 6) & 63] : '=';
        *o++ = i + 2 < len ? digit[v & 63] : '=';
    }
    *o = '\0';
    return out;
}

/* ---- answers ------------------------------------------------------------ */

static int answer_set(struct fe_answer *a, int status, const char *body,
                      size_t len, bool cut)
{
    char *copy = malloc(len + 1);

    if (copy == NULL)
        return -1;
    memcpy(copy, body, len);
    copy[len] = '\0';
    free(a->body);
    *a = (struct fe_answer){status, copy, len, cut};
    return 0;
}

/* answer_set under the server's lock. */
static int answer_set_locked(struct fe_server *s, struct fe_answer *a,
                             int status, const char *body, size_t len,
                             bool cut)
{
    int ret;

    pthread_mutex_lock(&s->lock);
    ret = answer_set(a, status, body, len, cut);
    pthread_mutex_unlock(&s->lock);
    return ret;
}

int fe_set(struct fe_server *s, enum fe_route route, int status,
           const char *body, size_t len, bool cut)
{
    return answer_set_locked(s, &s->answer[route], status, body, len, cut);
}

int fe_set_next(struct fe_server *s, enum fe_route route, int status,
                const char *body, size_t len, bool cut)
{
    return answer_set_locked(s, &s->next[route], status, body, len, cut);
}

unsigned fe_count(struct fe_server *s, enum fe_route route)
{
    unsigned n;

    pthread_mutex_lock(&s->lock);
    n = s->count[route];
    pthread_mutex_unlock(&s->lock);
    return n;
}

/* Counts a request of route and takes (a copy of) what it gets; false
 * when out of memory. */
static bool take_answer(struct fe_server *s, enum fe_route route,
                        struct fe_answer *out)
{
    struct fe_answer *a;
    bool ok;

    pthread_mutex_lock(&s->lock);
    s->count[route]++;
    a = s->next[route].body != NULL ? &s->next[route] : &s->answer[route];
    *out = (struct fe_answer){0};
    ok = answer_set(out, a->status, a->body, a->len, a->cut) == 0;
    if (a == &s->next[route]) {
        free(a->body);
        a->body = NULL;
    }
    pthread_mutex_unlock(&s->lock);
    return ok;
}

/* ---- one connection ------------------------------------------------------ */

static bool send_all(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n <= 0)
            return false;
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Reads a request (head and Content-Length bytes of body) into buf, NUL
 * terminated; false when the client went or sent more than it holds. */
static bool read_request(int fd, char *buf, size_t cap)
{
    size_t len = 0, want = 0;
    char *end = NULL;

    while (end == NULL || len < want) {
        ssize_t n = len + 1 < cap ? recv(fd, buf + len, cap - 1 - len, 0) : 0;

        if (n <= 0)
            return false;
        len += (size_t)n;
        buf[len] = '\0';
        if (end == NULL && (end = strstr(buf, "\r\n\r\n")) != NULL) {
            const char *cl = strcasestr(buf, "\r\nContent-Length:");

            want = (size_t)(end + 4 - buf) +
                   (cl != NULL && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
            /* curl waits a while for this before a large body. */
            if (strcasestr(buf, "\r\nExpect: 100-continue") != NULL &&
                !send_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", 25))
                return false;
        }
    }
    return true;
}

static enum fe_route route_of(const char *req)
{
    static const struct {
        const char *path;
        enum fe_route route;
    } paths[] = {
        {"/v3/lease/grant ", FE_GRANT},   {"/v3/lease/keepalive ", FE_KEEPALIVE},
        {"/v3/lease/revoke ", FE_REVOKE}, {"/v3/kv/txn ", FE_TXN},
        {"/v3/kv/put ", FE_PUT},          {"/v3/kv/deleterange ", FE_DELETE},
        {"/v3/watch ", FE_WATCH},
    };

    if (strncmp(req, "POST ", 5) != 0)
        return FE_UNKNOWN;
    if (strncmp(req + 5, "/v3/kv/range ", 13) == 0)
        return strstr(req, "\"range_end\"") != NULL ? FE_LIST : FE_RANGE;
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (strncmp(req + 5, paths[i].path, strlen(paths[i].path)) == 0)
            return paths[i].route;
    return FE_UNKNOWN;
}

/* Sends the head and body of a; a stream's head has no length: its body
 * lasts until the connection ends. */
static bool send_answer(int fd, const struct fe_answer *a, bool stream)
{
    char head[256];
    int n;

    if (stream)
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\n"
                     "Connection: close\r\n\r\n",
                     a->status);
    else
        n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d Fake\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                     a->status, a->len);
    return send_all(fd, head, (size_t)n) && send_all(fd, a->body, a->len);
}

/* A held stream: its connection and its server. */
struct held {
    struct fe_server *s;
    int fd;
};

/* Waits until the client closes the stream or the server stops. */
static void *hold_stream(void *arg)
{
    struct held *h = arg;
    struct pollfd p[2] = {{h->fd, POLLIN, 0}, {h->s->wake[0], POLLIN, 0}};
    char sink[4096];

    while (poll(p, 2, -1) >= 0 && !(p[1].revents & POLLIN) &&
           recv(h->fd, sink, sizeof(sink), 0) > 0)
        ;
    close(h->fd);
    free(h);
    return NULL;
}

/* Keeps fd open on a thread of its own; false when it cannot (the caller
 * then closes it). */
static bool hold(struct fe_server *s, int fd)
{
    struct held *h = malloc(sizeof(*h));
    bool held = false;

    if (h == NULL)
        return false;
    *h = (struct held){s, fd};
    pthread_mutex_lock(&s->lock);
    if (s->n_streams < FE_MAX_STREAMS &&
        pthread_create(&s->stream[s->n_streams], NULL, hold_stream, h) == 0) {
        s->n_streams++;
        held = true;
    }
    pthread_mutex_unlock(&s->lock);
    if (!held)
        free(h);
    return held;
}

/* Answers one connection; closes it unless a thread holds it. */
static void serve(struct fe_server *s, int fd)
{
    char *req = malloc(REQUEST_MAX);
    struct fe_answer a = {0};
    enum fe_route route = FE_UNKNOWN;
    bool held = false;

    if (req != NULL && read_request(fd, req, REQUEST_MAX) &&
        take_answer(s, route = route_of(req), &a) && a.body != NULL &&
        send_answer(fd, &a, route == FE_WATCH) && route == FE_WATCH &&
        !a.cut)
        held = hold(s, fd);
    if (!held)
        close(fd);
    free(a.body);
    free(req);
}

static void *server_main(void *arg)
{
    struct fe_server *s = arg;
    struct pollfd p[2] = {{s->fd, POLLIN, 0}, {s->wake[0], POLLIN, 0}};

    while (poll(p, 2, -1) >= 0 && !(p[1].revents & POLLIN)) {
        int fd = (p[0].revents & POLLIN) ? accept4(s->fd, NULL, NULL,
                                                   SOCK_CLOEXEC)
                                         : -1;
        if (fd >= 0)
            serve(s, fd);
    }
    return NULL;
}

/* ---- the server ------------------------------------------------------------ */

int fe_start(struct fe_server *s)
{
    int err;

    memset(s, 0, sizeof(*s));
    s->fd = s->wake[0] = s->wake[1] = -1;
    pthread_mutex_init(&s->lock, NULL);
    for (int r = 0; r < FE_ROUTES; r++)
        if (answer_set(&s->answer[r], r == FE_UNKNOWN ? 404 : 200, healthy[r],
                       strlen(healthy[r]), false) != 0)
            goto fail;
    if ((s->fd = su_listen(&s->port)) < 0 || pipe2(s->wake, O_CLOEXEC) != 0)
        goto fail;
    snprintf(s->endpoint, sizeof(s->endpoint), "http://127.0.0.1:%d", s->port);
    if ((errno = pthread_create(&s->thread, NULL, server_main, s)) == 0)
        return 0;
fail:
    err = errno;
    if (s->fd >= 0)
        close(s->fd);
    for (int i = 0; i < 2; i++)
        if (s->wake[i] >= 0)
            close(s->wake[i]);
    for (int r = 0; r < FE_ROUTES; r++)
        free(s->answer[r].body);
    pthread_mutex_destroy(&s->lock);
    errno = err;
    return -1;
}

void fe_stop(struct fe_server *s)
{
    if (write(s->wake[1], "x", 1) != 1)
        perror("fe_stop: waking the fake etcd's threads");
    pthread_join(s->thread, NULL);
    /* No new stream now: the server's thread, the only one adding, ended. */
    for (unsigned i = 0; i < s->n_streams; i++)
        pthread_join(s->stream[i], NULL);
    close(s->fd);
    close(s->wake[0]);
    close(s->wake[1]);
    for (int r = 0; r < FE_ROUTES; r++) {
        free(s->answer[r].body);
        free(s->next[r].body);
    }
    pthread_mutex_destroy(&s->lock);
}
