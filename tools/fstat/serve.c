/*
 * ferry_stat --prometheus: an HTTP/1.0 server in one thread, a poll loop
 * over non-blocking sockets.  Each connection asks once and is closed
 * after the answer; a client that stalls is dropped after CONN_TIMEOUT_MS
 * so that it cannot hold the others up, or sooner when MAX_CONNS are
 * taken and another connects.
 */
#include "serve.h"

#include "merge.h"
#include "scan.h"
#include "util.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_CONNS 32
#define MAX_REQUEST 8192
#define CONN_TIMEOUT_MS 10000

struct conn {
    int fd;
    char in[MAX_REQUEST]; /* the request so far, NUL-terminated */
    size_t inlen;
    char *out; /* the answer, once the request is in; NULL before */
    size_t outlen, sent;
    uint64_t deadline_ms;
};

struct server {
    const char *dir;
    bool clean;
    int fd;
    struct conn conns[MAX_CONNS];
    size_t nconns;
    /* The problems the last request printed: a malformed file is said
     * once, not at every scrape. */
    char **said;
    size_t nsaid;
};

static uint64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000 + (uint64_t)t.tv_nsec / 1000000;
}

/* addr's HOST (brackets of an IPv6 address dropped) and PORT. */
static bool split_address(const char *addr, char *host, size_t hostlen,
                          char *port, size_t portlen)
{
    const char *colon = strrchr(addr, ':');
    size_t n;

    if (colon == NULL || colon[1] == '\0' ||
        colon[1 + strspn(colon + 1, "0123456789")] != '\0' ||
        strlen(colon + 1) >= portlen || atol(colon + 1) > 65535)
        return false;
    snprintf(port, portlen, "%s", colon + 1);
    n = (size_t)(colon - addr);
    if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
        addr++;
        n -= 2;
    }
    if (n == 0) {
        addr = "127.0.0.1";
        n = strlen(addr);
    }
    if (n >= hostlen)
        return false;
    memcpy(host, addr, n);
    host[n] = '\0';
    return true;
}

/* A listening socket on addr, or -1 with err filled. */
static int listen_on(const char *addr, char *err, size_t errlen)
{
    struct addrinfo hints = {.ai_flags = AI_PASSIVE | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res;
    char host[256], port[8];
    int fd = -1, ret, why = 0;

    if (!split_address(addr, host, sizeof(host), port, sizeof(port))) {
        snprintf(err, errlen, "--prometheus wants [HOST]:PORT, not \"%s\"",
                 addr);
        return -1;
    }
    if ((ret = getaddrinfo(host, port, &hints, &res)) != 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", addr,
                 gai_strerror(ret));
        return -1;
    }
    for (struct addrinfo *a = res; a != NULL && fd < 0; a = a->ai_next) {
        int one = 1;

        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                    a->ai_protocol);
        if (fd < 0) {
            why = errno;
            continue;
        }
        /* A restart may bind while the last run's connections linger in
         * TIME_WAIT; a port another socket listens on stays refused. */
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            why = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        snprintf(err, errlen, "cannot listen on %s: %s%s", addr,
                 strerror(why),
                 why == EADDRINUSE ? " (choose another port, or stop what "
                                     "listens there)"
                                   : "");
    return fd;
}

/* Says where the server listens: the port the system chose for PORT 0. */
static void say_listening(int fd, const char *dir)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    char host[256], port[16];

    if (getsockname(fd, (struct sockaddr *)&sa, &len) != 0 ||
        getnameinfo((struct sockaddr *)&sa, len, host, sizeof(host), port,
                    sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return;
    fprintf(stderr, "ferry_stat: serving http://%s%s%s:%s/metrics from %s\n",
            sa.ss_family == AF_INET6 ? "[" : "", host,
            sa.ss_family == AF_INET6 ? "]" : "", port, dir);
}

/* Sets c's answer; false when out of memory. */
static bool reply(struct conn *c, const char *status, const char *type,
                  const char *body, size_t len, bool head)
{
    FILE *f = open_memstream(&c->out, &c->outlen);

    if (f == NULL)
        return false;
    fprintf(f, "HTTP/1.0 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n",
            status, type, len);
    /* HTTP requires it with 405 (RFC 9110, 15.5.6). */
    if (strncmp(status, "405", 3) == 0)
        fputs("Allow: GET, HEAD\r\n", f);
    fputs("Connection: close\r\n\r\n", f);
    if (!head)
        fwrite(body, 1, len, f);
    return fclose(f) == 0;
}

static bool reply_text(struct conn *c, const char *status, const char *text,
                       bool head)
{
    return reply(c, status, "text/plain; charset=utf-8", text, strlen(text),
                 head);
}

/* Prints the problems of sc that the last request did not, and keeps
 * them as the last request's. */
static void tell(struct server *sv, struct scan *sc)
{
    for (size_t i = 0; i < sc->nproblems; i++) {
        bool said = false;

        for (size_t k = 0; k < sv->nsaid && !said; k++)
            said = strcmp(sv->said[k], sc->problems[i]) == 0;
        if (!said)
            fprintf(stderr, "ferry_stat: %s\n", sc->problems[i]);
    }
    for (size_t k = 0; k < sv->nsaid; k++)
        free(sv->said[k]);
    free(sv->said);
    sv->said = sc->problems;
    sv->nsaid = sc->nproblems;
    sc->problems = NULL;
    sc->nproblems = sc->cap_problems = 0;
}

static bool metrics(struct server *sv, struct conn *c, bool head)
{
    char err[1024], *body = NULL;
    struct scan sc;
    size_t len = 0;
    bool ok;
    FILE *f;

    if (scan_dir(sv->dir, sv->clean, &sc, err, sizeof(err)) != 0) {
        fprintf(stderr, "ferry_stat: %s\n", err);
        scan_free(&sc);
        return reply_text(c, "500 Internal Server Error", err, head);
    }
    if ((f = open_memstream(&body, &len)) == NULL) {
        scan_free(&sc);
        return false;
    }
    ok = merge_write(&sc, f) == 0;
    ok = fclose(f) == 0 && ok;
    tell(sv, &sc);
    ok = ok && reply(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8",
                     body, len, head);
    free(body);
    scan_free(&sc);
    return ok;
}

/* The answer to the request in c->in; false when out of memory. */
static bool respond(struct server *sv, struct conn *c)
{
    char method[16], target[1024];
    bool head;

    if (sscanf(c->in, "%15s %1023s", method, target) != 2)
        return reply_text(c, "400 Bad Request", "a malformed request\n",
                          false);
    head = strcmp(method, "HEAD") == 0;
    target[strcspn(target, "?")] = '\0';
    if (!head && strcmp(method, "GET") != 0)
        return reply_text(c, "405 Method Not Allowed",
                          "ferry_stat answers GET and HEAD\n", false);
    if (strcmp(target, "/metrics") == 0)
        return metrics(sv, c, head);
    if (strcmp(target, "/") == 0)
        return reply_text(c, "200 OK",
                          "ferry_stat: the metrics of the live ferry "
                          "processes are at /metrics\n",
                          head);
    return reply_text(c, "404 Not Found", "ferry_stat serves /metrics\n",
                      head);
}

/* Reads what c sent; false when c is to be closed. */
static bool conn_read(struct server *sv, struct conn *c)
{
    ssize_t n = recv(c->fd, c->in + c->inlen, sizeof(c->in) - 1 - c->inlen,
                     0);

    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    if (n == 0)
        return false;
    c->inlen += (size_t)n;
    c->in[c->inlen] = '\0';
    if (strstr(c->in, "\r\n\r\n") != NULL || strstr(c->in, "\n\n") != NULL)
        return respond(sv, c);
    if (c->inlen == sizeof(c->in) - 1)
        return reply_text(c, "400 Bad Request", "the request is too long\n",
                          false);
    return true;
}

/* Sends what is left of c's answer; false when c is to be closed. */
static bool conn_write(struct conn *c)
{
    ssize_t n = send(c->fd, c->out + c->sent, c->outlen - c->sent,
                     MSG_NOSIGNAL);

    if (n < 0)
        return errno == EAGAIN || errno == EINTR;
    c->sent += (size_t)n;
    return c->sent < c->outlen;
}

static void conn_close(struct server *sv, size_t i)
{
    close(sv->conns[i].fd);
    free(sv->conns[i].out);
    sv->conns[i] = sv->conns[--sv->nconns];
}

/*
 * The connection still waiting for its request that came first, or
 * MAX_CONNS when every one is being answered.  When all MAX_CONNS are
 * taken a new connection replaces it: clients that connect and say
 * nothing cannot keep a scraper out for CONN_TIMEOUT_MS.
 */
static size_t oldest_asking(const struct server *sv)
{
    size_t oldest = MAX_CONNS;

    for (size_t i = 0; i < sv->nconns; i++)
        if (sv->conns[i].out == NULL &&
            (oldest == MAX_CONNS ||
             sv->conns[i].deadline_ms < sv->conns[oldest].deadline_ms))
            oldest = i;
    return oldest;
}

static void accept_all(struct server *sv)
{
    for (;;) {
        int fd = accept4(sv->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct conn *c;

        if (fd < 0)
            return;
        if (sv->nconns == MAX_CONNS) {
            size_t oldest = oldest_asking(sv);

            if (oldest == MAX_CONNS) {
                close(fd);
                return;
            }
            conn_close(sv, oldest);
        }
        c = &sv->conns[sv->nconns++];
        c->fd = fd;
        c->inlen = 0;
        c->in[0] = '\0';
        c->out = NULL;
        c->outlen = c->sent = 0;
        c->deadline_ms = now_ms() + CONN_TIMEOUT_MS;
    }
}

/* Polls once: the listening socket, each connection for what it waits
 * for, until the nearest deadline.  False when poll fails. */
static bool serve_once(struct server *sv)
{
    struct pollfd pfd[MAX_CONNS + 1];
    uint64_t now = now_ms();
    int timeout = -1;
    bool room;

    for (size_t i = sv->nconns; i-- > 0;)
        if (sv->conns[i].deadline_ms <= now)
            conn_close(sv, i);
    room = sv->nconns < MAX_CONNS || oldest_asking(sv) < MAX_CONNS;
    pfd[0] = (struct pollfd){sv->fd, room ? POLLIN : 0, 0};
    for (size_t i = 0; i < sv->nconns; i++) {
        const struct conn *c = &sv->conns[i];
        int left = (int)(c->deadline_ms - now);

        pfd[i + 1] = (struct pollfd){c->fd, c->out ? POLLOUT : POLLIN, 0};
        timeout = timeout < 0 || left < timeout ? left : timeout;
    }
    if (poll(pfd, sv->nconns + 1, timeout) < 0)
        return errno == EINTR;
    /* Downwards: closing i moves the last connection, done already, in. */
    for (size_t i = sv->nconns; i-- > 0;) {
        struct conn *c = &sv->conns[i];
        bool keep = true;

        if (pfd[i + 1].revents & (POLLERR | POLLHUP | POLLNVAL))
            keep = false;
        else if (pfd[i + 1].revents & POLLIN)
            keep = conn_read(sv, c);
        else if (pfd[i + 1].revents & POLLOUT)
            keep = conn_write(c);
        if (!keep)
            conn_close(sv, i);
    }
    if (pfd[0].revents & POLLIN)
        accept_all(sv);
    return true;
}

int serve(const char *dir, bool clean, const char *addr)
{
    struct server *sv = calloc(1, sizeof(*sv));
    char err[512];

    if (sv == NULL) {
        fprintf(stderr, "ferry_stat: out of memory\n");
        return 1;
    }
    sv->dir = dir;
    sv->clean = clean;
    if ((sv->fd = listen_on(addr, err, sizeof(err))) < 0) {
        fprintf(stderr, "ferry_stat: %s\n", err);
        free(sv);
        return 1;
    }
    say_listening(sv->fd, dir);
    while (serve_once(sv))
        ;
    fprintf(stderr, "ferry_stat: poll: %s\n", strerror(errno));
    return 1;
}
