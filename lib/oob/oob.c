/*
 * Bootstrap over TCP for programs without a control plane of their own.
 *
 * A listener publishes the context's address and named regions; a client
 * connects, learns the address (and tells its own), and looks regions up
 * by name.  A client may offer regions too; the server side finds them
 * through the connection ferry_oob_accept() gives it.
 *
 * Every frame is a ferry blob (blob.c): magic, version, kind, length and
 * checksum in a 16-byte header, so a truncated, oversized, corrupted or
 * wrong-version frame is refused before its payload is used.  Frames are
 * at most FRAME_MAX bytes; every read and connect has a deadline; the
 * server drops a client whose frame stalls half-way instead of waiting.
 *
 * Threads: the listener runs one service thread (poll over every client);
 * the state it shares with callers sits under lis->lock.
 */
#include "base/blob.h"
#include "fabric/fabric.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define FRAME_MAX (64u * 1024u)
#define NAME_MAX_LEN 128u
#define MAX_CLIENTS 256u
#define STALL_MS 5000 /* a half-received frame older than this is dropped */
#define TOKEN_MAX 128u /* token bytes + NUL: struct ferry_oob.token */

enum frame_kind {
    FRAME_HELLO = 16, /* client: token, address blob */
    FRAME_HELLO_OK,   /* server: address blob */
    FRAME_LOOKUP,     /* client: name */
    FRAME_FOUND,      /* server: remote-key blob */
    FRAME_NOTFOUND,   /* server: (empty) */
    FRAME_OFFER,      /* client: name, remote-key blob */
    FRAME_OFFER_OK,   /* server: (empty) */
    FRAME_ERROR,      /* either: a sentence */
};

struct named_blob {
    struct named_blob *next;
    char name[NAME_MAX_LEN];
    size_t len;
    uint8_t blob[];
};

struct ferry_oob_conn {
    struct ferry_context *ctx;
    struct ferry_oob *lis;   /* server side: the listener; client: NULL */
    struct ferry_oob_conn *next; /* listener's list */
    int fd;
    char where[96];          /* "host:port" for sentences */
    ferry_peer_t *peer;
    pthread_mutex_t lock;    /* client side: one request at a time */
    /* server side, under lis->lock: */
    uint8_t *rx;
    size_t rx_len;
    size_t rx_want;          /* length of the frame being received */
    uint64_t rx_since_ns;    /* when the pending partial frame started */
    bool greeted;            /* HELLO received */
    bool closed;             /* socket gone */
    bool accepted;           /* handed to the application */
    uint8_t peer_addr[FERRY__ADDR_MAX * 2];
    size_t peer_addr_len;
    struct named_blob *offered; /* regions the client offered */
};

struct ferry_oob {
    struct ferry_context *ctx;
    int fd;
    int wake[2]; /* pipe: wakes the service thread to stop */
    int port;
    char token[TOKEN_MAX];
    uint8_t addr[FERRY__ADDR_MAX * 2]; /* the context's address blob */
    size_t addr_len;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a client greeted, offered or went away */
    struct ferry_oob_conn *conns;
    struct named_blob *published;
};

/* The shared secret: the one thing the bootstrap reads below the public
 * API, from the context's configuration. */
static const char *token_of(ferry_context_t *ctx)
{
    const char *t = ferry__fabric_of(ctx)->cfg.oob_token;

    if (t == NULL)
        t = getenv("FERRY_OOB_TOKEN");
    return t != NULL ? t : "";
}

/*
 * A token of TOKEN_MAX characters or more would be cut short by the
 * listener and then mismatch a client's identical token: refuse it up
 * front, on both sides.
 */
static int check_token(ferry_context_t *ctx, const char *call)
{
    size_t n = strlen(token_of(ctx));

    if (n >= TOKEN_MAX)
        return ferry__error(FERRY_EINVAL,
                            "%s: the bootstrap token (config.oob_token or "
                            "FERRY_OOB_TOKEN) is %zu characters; it may have "
                            "at most %u",
                            call, n, TOKEN_MAX - 1);
    return 0;
}

/* ---- addresses ---------------------------------------------------------- */

/* Splits "host:port", "[v6]:port" or ":port" and resolves it. */
static int resolve(const char *hostport, bool passive, struct addrinfo **out)
{
    char host[256];
    const char *colon, *port;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    size_t hlen;
    int ret;

    if (hostport == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap address is NULL; use "
                            "\"host:port\"");
    colon = strrchr(hostport, ':');
    if (colon == NULL || colon[1] == '\0')
        return ferry__error(FERRY_EINVAL,
                            "bootstrap address \"%s\" has no port; use "
                            "\"host:port\" (\":port\" to listen everywhere)",
                            hostport);
    port = colon + 1;
    hlen = (size_t)(colon - hostport);
    if (hlen >= sizeof(host))
        return ferry__error(FERRY_EINVAL, "bootstrap host name is too long");
    memcpy(host, hostport, hlen);
    host[hlen] = '\0';
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    for (const char *p = port; *p; p++)
        if (*p < '0' || *p > '9')
            return ferry__error(FERRY_EINVAL,
                                "bootstrap port \"%s\" is not a number", port);
    /* getaddrinfo would take "70000" and wrap it to port 4464. */
    if (strtoul(port, NULL, 10) > 65535)
        return ferry__error(FERRY_EINVAL,
                            "bootstrap port %s is out of range; ports are 0 "
                            "to 65535",
                            port);
    ret = getaddrinfo(host[0] ? host : NULL, port, &hints, out);
    if (ret != 0)
        return ferry__error(FERRY_EHOSTUNREACH,
                            "cannot resolve bootstrap host \"%s\": %s", host,
                            gai_strerror(ret));
    return 0;
}

static int remaining_ms(uint64_t deadline_ns)
{
    uint64_t now = ferry__now_ns();

    if (deadline_ns == 0)
        return -1;
    if (now >= deadline_ns)
        return 0;
    return (int)((deadline_ns - now + 999999u) / 1000000u);
}

static uint64_t deadline_after(int timeout_ms)
{
    return timeout_ms < 0 ? 0
                          : ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
}

/* ---- frames --------------------------------------------------------------- */

static int send_all(int fd, const uint8_t *p, size_t len, uint64_t deadline,
                    const char *where)
{
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            int ms = remaining_ms(deadline);
            if (ms == 0 || poll(&pfd, 1, ms) == 0)
                return ferry__error(FERRY_ETIMEDOUT,
                                    "bootstrap: sending to %s timed out",
                                    where);
            continue;
        }
        return ferry__error(FERRY_ECONNRESET, "bootstrap: sending to %s "
                            "failed: %s", where, strerror(errno));
    }
    return 0;
}

static int recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline,
                    const char *where)
{
    while (len > 0) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        ssize_t n;

        if (ms == 0 || poll(&pfd, 1, ms) == 0)
            return ferry__error(FERRY_ETIMEDOUT,
                                "bootstrap: no answer from %s before the "
                                "deadline",
                                where);
        n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return ferry__error(FERRY_ECONNRESET,
                                "bootstrap: %s closed the connection "
                                "mid-frame or before answering",
                                where);
        } else if (errno != EINTR && errno != EAGAIN) {
            return ferry__error(FERRY_ECONNRESET,
                                "bootstrap: reading from %s failed: %s", where,
                                strerror(errno));
        }
    }
    return 0;
}

/* Length a frame header announces, or an error for a bad header. */
static int frame_length(const uint8_t *hdr, size_t *len, const char *where)
{
    uint32_t magic = (uint32_t)hdr[0] | (uint32_t)hdr[1] << 8 |
                     (uint32_t)hdr[2] << 16 | (uint32_t)hdr[3] << 24;
    unsigned version = (unsigned)hdr[4] | (unsigned)hdr[5] << 8;
    size_t total = (size_t)hdr[8] | (size_t)hdr[9] << 8 |
                   (size_t)hdr[10] << 16 | (size_t)hdr[11] << 24;

    if (magic != FERRY__BLOB_MAGIC)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s sent something that is not a "
                            "ferry frame (is another program on that port?)",
                            where);
    if (version != FERRY__BLOB_VERSION)
        return ferry__error(FERRY_EINCOMPAT,
                            "bootstrap: %s speaks frame version %u, this "
                            "ferry speaks %u: use the same release on both "
                            "sides",
                            where, version, FERRY__BLOB_VERSION);
    if (total < FERRY__BLOB_HEADER_LEN || total > FRAME_MAX)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s announced a %zu-byte frame; frames "
                            "are %u to %u bytes",
                            where, total, FERRY__BLOB_HEADER_LEN, FRAME_MAX);
    *len = total;
    return 0;
}

/* Reads one whole frame into buf (FRAME_MAX bytes) and opens it. */
static int recv_frame(int fd, uint8_t *buf, uint64_t deadline,
                      const char *where, struct ferry__blob_reader *r,
                      unsigned *kind)
{
    size_t len;
    int ret;

    if ((ret = recv_all(fd, buf, FERRY__BLOB_HEADER_LEN, deadline, where)) ||
        (ret = frame_length(buf, &len, where)) ||
        (ret = recv_all(fd, buf + FERRY__BLOB_HEADER_LEN,
                        len - FERRY__BLOB_HEADER_LEN, deadline, where)))
        return ret;
    *kind = (unsigned)buf[6] | (unsigned)buf[7] << 8;
    return ferry__blob_open(r, buf, len, *kind, "bootstrap frame");
}

/* Builds a frame of `kind` with up to two (string, bytes) fields. */
static int build_frame(uint8_t *buf, size_t *len, unsigned kind,
                       const char *str, const void *bytes, size_t nbytes)
{
    struct ferry__blob_writer w;

    ferry__blob_begin(&w, buf, FRAME_MAX, kind);
    if (str != NULL)
        ferry__blob_put_str(&w, str);
    if (bytes != NULL) {
        ferry__blob_put_u32(&w, (uint32_t)nbytes);
        ferry__blob_put_bytes(&w, bytes, nbytes);
    }
    return ferry__blob_end(&w, len);
}

/* Reads a u32-length-prefixed byte field; false when it does not fit. */
static bool get_field(struct ferry__blob_reader *r, uint8_t *out, size_t cap,
                      size_t *len)
{
    size_t n = ferry__blob_get_u32(r);

    if (r->bad || n > cap || n > r->len - r->pos) {
        r->bad = true;
        return false;
    }
    ferry__blob_get_bytes(r, out, n);
    *len = n;
    return !r->bad;
}

/* ---- the service thread (server side) ------------------------------------ */

static void send_reply(struct ferry_oob_conn *c, unsigned kind,
                       const char *str, const void *bytes, size_t n)
{
    uint8_t frame[FRAME_MAX];
    size_t len;

    /* The service thread never blocks on one client: a reply that cannot
     * go out within a second drops that client. */
    if (build_frame(frame, &len, kind, str, bytes, n) != 0 ||
        send_all(c->fd, frame, len, deadline_after(1000), c->where) != 0)
        c->closed = true;
}

static void refuse(struct ferry_oob_conn *c, const char *why)
{
    FERRY_LOG_WARN("bootstrap: dropping client %s: %s", c->where, why);
    send_reply(c, FRAME_ERROR, why, NULL, 0);
    c->closed = true;
}

static const struct named_blob *find_name(const struct named_blob *list,
                                          const char *name)
{
    for (; list != NULL; list = list->next)
        if (strcmp(list->name, name) == 0)
            return list;
    return NULL;
}

static struct named_blob *new_named(const char *name, const void *blob,
                                    size_t len)
{
    struct named_blob *nb = malloc(sizeof(*nb) + len);

    if (nb == NULL)
        return NULL;
    snprintf(nb->name, sizeof(nb->name), "%s", name);
    nb->len = len;
    memcpy(nb->blob, blob, len);
    nb->next = NULL;
    return nb;
}

/* One complete frame from client c; under lis->lock. */
static void serve_frame(struct ferry_oob *lis, struct ferry_oob_conn *c,
                        size_t len)
{
    struct ferry__blob_reader r;
    unsigned kind = (unsigned)c->rx[6] | (unsigned)c->rx[7] << 8;
    char name[NAME_MAX_LEN];
    uint8_t blob[FERRY__ADDR_MAX * 2];
    size_t blen = 0;

    if (ferry__blob_open(&r, c->rx, len, kind, "bootstrap frame") != 0) {
        refuse(c, ferry_last_error());
        return;
    }
    if (!c->greeted && kind != FRAME_HELLO) {
        refuse(c, "the first frame must be a hello");
        return;
    }
    switch (kind) {
    case FRAME_HELLO: {
        char token[sizeof(lis->token)];
        struct ferry__blob_reader ar;

        /* One hello per client: ferry_oob_accept reads c->peer_addr
         * without the lock once the client is greeted. */
        if (c->greeted) {
            refuse(c, "a client says hello only once");
            return;
        }
        ferry__blob_get_str(&r, token, sizeof(token));
        if (!get_field(&r, c->peer_addr, sizeof(c->peer_addr),
                       &c->peer_addr_len) || r.pos != r.len) {
            refuse(c, "malformed hello frame");
            return;
        }
        if (strcmp(token, lis->token) != 0) {
            refuse(c, "the client's bootstrap token does not match the "
                      "server's (set the same FERRY_OOB_TOKEN on both sides)");
            return;
        }
        /* A malformed address is refused now, not later as an error of
         * the application's ferry_oob_accept: its header (magic, version,
         * kind, length, checksum) is checked here, its fields by
         * ferry_peer_add at accept. */
        if (ferry__blob_open(&ar, c->peer_addr, c->peer_addr_len,
                             FERRY__BLOB_ADDR, "the hello's address blob")) {
            refuse(c, ferry_last_error());
            return;
        }
        c->greeted = true;
        send_reply(c, FRAME_HELLO_OK, NULL, lis->addr, lis->addr_len);
        pthread_cond_broadcast(&lis->changed);
        return;
    }
    case FRAME_LOOKUP: {
        const struct named_blob *nb;

        ferry__blob_get_str(&r, name, sizeof(name));
        if (r.bad || r.pos != r.len) {
            refuse(c, "malformed lookup frame");
            return;
        }
        nb = find_name(lis->published, name);
        if (nb != NULL)
            send_reply(c, FRAME_FOUND, NULL, nb->blob, nb->len);
        else
            send_reply(c, FRAME_NOTFOUND, NULL, NULL, 0);
        return;
    }
    case FRAME_OFFER: {
        struct named_blob *nb;

        ferry__blob_get_str(&r, name, sizeof(name));
        if (!get_field(&r, blob, sizeof(blob), &blen) || r.pos != r.len) {
            refuse(c, "malformed offer frame");
            return;
        }
        nb = new_named(name, blob, blen);
        if (nb == NULL) {
            refuse(c, "the server is out of memory");
            return;
        }
        nb->next = c->offered;
        c->offered = nb;
        send_reply(c, FRAME_OFFER_OK, NULL, NULL, 0);
        pthread_cond_broadcast(&lis->changed);
        return;
    }
    default:
        refuse(c, "unexpected frame kind from a client");
    }
}

/* Reads what client c has sent and serves a completed frame; under lock. */
static void serve_readable(struct ferry_oob *lis, struct ferry_oob_conn *c)
{
    size_t want = c->rx_len < FERRY__BLOB_HEADER_LEN ? FERRY__BLOB_HEADER_LEN
                                                     : c->rx_want;
    ssize_t n = recv(c->fd, c->rx + c->rx_len, want - c->rx_len,
                     MSG_DONTWAIT);

    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        c->closed = true;
        pthread_cond_broadcast(&lis->changed);
        return;
    }
    if (n < 0)
        return;
    if (c->rx_len == 0)
        c->rx_since_ns = ferry__now_ns();
    c->rx_len += (size_t)n;
    /* The header is checked as soon as it is in: an oversized or foreign
     * frame is refused before a byte of its payload is read. */
    if (c->rx_len == FERRY__BLOB_HEADER_LEN &&
        frame_length(c->rx, &c->rx_want, c->where) != 0) {
        refuse(c, ferry_last_error());
        return;
    }
    if (c->rx_len >= FERRY__BLOB_HEADER_LEN && c->rx_len == c->rx_want) {
        serve_frame(lis, c, c->rx_want);
        c->rx_len = 0;
    }
}

static void conn_free(struct ferry_oob_conn *c)
{
    while (c->offered != NULL) {
        struct named_blob *nb = c->offered;
        c->offered = nb->next;
        free(nb);
    }
    if (c->fd >= 0)
        close(c->fd);
    free(c->rx);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void accept_client(struct ferry_oob *lis)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    struct ferry_oob_conn *c;
    char host[64] = "?", port[16] = "?";
    unsigned count = 0;
    /* Non-blocking: send_reply's one-second bound relies on EAGAIN, or a
     * client that sends requests and never reads the answers would
     * freeze the service thread in send(). */
    int fd = accept4(lis->fd, (struct sockaddr *)&ss, &sl,
                     SOCK_NONBLOCK | SOCK_CLOEXEC);

    if (fd < 0)
        return;
    for (c = lis->conns; c != NULL; c = c->next)
        count++;
    c = count < MAX_CLIENTS ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL || (c->rx = malloc(FRAME_MAX)) == NULL) {
        free(c);
        close(fd);
        FERRY_LOG_WARN("bootstrap: refusing a client: %u clients already",
                   count);
        return;
    }
    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port,
                sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->where, sizeof(c->where), "client %s:%s", host, port);
    c->fd = fd;
    c->ctx = lis->ctx;
    c->lis = lis;
    pthread_mutex_init(&c->lock, NULL);
    c->next = lis->conns;
    lis->conns = c;
}

/* Drops clients that closed, unless the application holds them. */
static void reap(struct ferry_oob *lis)
{
    uint64_t now = ferry__now_ns();

    for (struct ferry_oob_conn **pc = &lis->conns; *pc != NULL;) {
        struct ferry_oob_conn *c = *pc;

        if (!c->closed && c->rx_len > 0 &&
            now - c->rx_since_ns > (uint64_t)STALL_MS * 1000000u)
            refuse(c, "a frame stalled half-way");
        if (c->closed && !c->accepted) {
            *pc = c->next;
            conn_free(c);
            continue;
        }
        pc = &c->next;
    }
}

static void *service_main(void *arg)
{
    struct ferry_oob *lis = arg;
    struct pollfd pfd[MAX_CLIENTS + 2];
    struct ferry_oob_conn *who[MAX_CLIENTS + 2];

    for (;;) {
        nfds_t n = 0;

        pthread_mutex_lock(&lis->lock);
        reap(lis);
        pfd[n++] = (struct pollfd){.fd = lis->wake[0], .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = lis->fd, .events = POLLIN};
        for (struct ferry_oob_conn *c = lis->conns; c != NULL; c = c->next) {
            if (c->closed)
                continue;
            who[n] = c;
            pfd[n++] = (struct pollfd){.fd = c->fd, .events = POLLIN};
        }
        pthread_mutex_unlock(&lis->lock);
        /* Wake at least every second to drop stalled clients. */
        if (poll(pfd, n, 1000) < 0 && errno != EINTR)
            break;
        if (pfd[0].revents)
            break;
        pthread_mutex_lock(&lis->lock);
        if (pfd[1].revents & POLLIN)
            accept_client(lis);
        for (nfds_t i = 2; i < n; i++)
            if (pfd[i].revents)
                serve_readable(lis, who[i]);
        pthread_mutex_unlock(&lis->lock);
    }
    return NULL;
}

/* ---- listener API ----------------------------------------------------------- */

static int open_listen_socket(struct ferry_oob *lis, const char *hostport)
{
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int one = 1, ret;

    if ((ret = resolve(hostport, true, &ai)))
        return ret;
    lis->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lis->fd < 0 ||
        setsockopt(lis->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(lis->fd, ai->ai_addr, ai->ai_addrlen) || listen(lis->fd, 64)) {
        ret = ferry__error(FERRY_EINVAL,
                           "bootstrap: cannot listen on %s: %s", hostport,
                           strerror(errno));
        freeaddrinfo(ai);
        return ret;
    }
    freeaddrinfo(ai);
    getsockname(lis->fd, (struct sockaddr *)&ss, &sl);
    lis->port = ntohs(ss.ss_family == AF_INET6
                          ? ((struct sockaddr_in6 *)&ss)->sin6_port
                          : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

int ferry_oob_listen(ferry_context_t *ctx, const char *hostport,
                     ferry_oob_t **out)
{
    struct ferry_oob *lis;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_oob_listen")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_oob_listen: out is NULL");
    if ((ret = check_token(ctx, "ferry_oob_listen")))
        return ret;
    lis = calloc(1, sizeof(*lis));
    if (lis == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a listener");
    lis->ctx = ctx;
    lis->fd = lis->wake[0] = lis->wake[1] = -1;
    snprintf(lis->token, sizeof(lis->token), "%s", token_of(ctx));
    pthread_mutex_init(&lis->lock, NULL);
    pthread_cond_init(&lis->changed, NULL);
    /* Taken now, in the caller's thread: the service thread must not touch
     * the endpoint, which the context serialises under its own lock. */
    lis->addr_len = sizeof(lis->addr);
    ret = ferry_context_address(ctx, lis->addr, &lis->addr_len);
    if (ret == 0)
        ret = open_listen_socket(lis, hostport);
    if (ret == 0 && pipe2(lis->wake, O_CLOEXEC) != 0)
        ret = ferry__error(FERRY_ENOMEM, "bootstrap: pipe2 failed");
    if (ret == 0 && pthread_create(&lis->thread, NULL, service_main, lis))
        ret = ferry__error(FERRY_ENOMEM, "bootstrap: cannot start thread");
    if (ret != 0) {
        if (lis->fd >= 0)
            close(lis->fd);
        if (lis->wake[0] >= 0) {
            close(lis->wake[0]);
            close(lis->wake[1]);
        }
        pthread_cond_destroy(&lis->changed);
        pthread_mutex_destroy(&lis->lock);
        free(lis);
        return ret;
    }
    *out = lis;
    return 0;
}

int ferry_oob_port(const ferry_oob_t *lis)
{
    return lis != NULL ? lis->port : FERRY_EINVAL;
}

static int check_name(const char *name, const char *call)
{
    if (name == NULL || name[0] == '\0' || strlen(name) >= NAME_MAX_LEN)
        return ferry__error(FERRY_EINVAL,
                            "%s: a region name is 1 to %u characters", call,
                            NAME_MAX_LEN - 1);
    return 0;
}

int ferry_oob_publish(ferry_oob_t *lis, const char *name,
                      const ferry_mem_t *mem)
{
    uint8_t blob[FERRY__ADDR_MAX * 2];
    size_t len = sizeof(blob);
    struct named_blob *nb;
    int ret;

    ferry__error_clear();
    if (lis == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_oob_publish: lis is NULL");
    if ((ret = check_name(name, "ferry_oob_publish")) ||
        (ret = ferry_mem_export(mem, blob, &len)))
        return ret;
    nb = new_named(name, blob, len);
    if (nb == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory publishing");
    pthread_mutex_lock(&lis->lock);
    /* The newest publication of a name wins: it is found first. */
    nb->next = lis->published;
    lis->published = nb;
    pthread_mutex_unlock(&lis->lock);
    return 0;
}

int ferry_oob_accept(ferry_oob_t *lis, int timeout_ms,
                     ferry_oob_conn_t **out)
{
    uint64_t deadline = deadline_after(timeout_ms);
    struct ferry_oob_conn *c = NULL;
    int ret = 0;

    ferry__error_clear();
    if (lis == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_oob_accept: lis or out is NULL");
    pthread_mutex_lock(&lis->lock);
    for (;;) {
        for (c = lis->conns; c != NULL; c = c->next)
            if (c->greeted && !c->accepted && !c->closed)
                break;
        if (c != NULL || remaining_ms(deadline) == 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000; /* re-check the deadline every 50 ms */
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&lis->changed, &lis->lock, &ts);
    }
    if (c != NULL)
        c->accepted = true;
    pthread_mutex_unlock(&lis->lock);
    if (c == NULL)
        return ferry__error(FERRY_ETIMEDOUT,
                            "ferry_oob_accept: no client connected within "
                            "%d ms",
                            timeout_ms);
    ret = ferry_peer_add(lis->ctx, c->peer_addr, c->peer_addr_len, &c->peer);
    if (ret != 0) {
        /* Copied before the unlock: once c is released the service
         * thread may free it. */
        char where[sizeof(c->where)];

        memcpy(where, c->where, sizeof(where));
        pthread_mutex_lock(&lis->lock);
        c->accepted = false;
        c->closed = true;
        pthread_mutex_unlock(&lis->lock);
        return ferry__error(ret, "ferry_oob_accept: %s: %s", where,
                            ferry_last_error());
    }
    *out = c;
    return 0;
}

void ferry_oob_close(ferry_oob_t *lis)
{
    if (lis == NULL)
        return;
    if (write(lis->wake[1], "x", 1) != 1)
        FERRY_LOG_WARN("bootstrap: cannot wake the service thread");
    pthread_join(lis->thread, NULL);
    while (lis->conns != NULL) {
        struct ferry_oob_conn *c = lis->conns;
        lis->conns = c->next;
        if (c->accepted) {
            /* The application still holds it: detach, it frees it. */
            close(c->fd);
            c->fd = -1;
            c->lis = NULL;
            c->closed = true;
            continue;
        }
        conn_free(c);
    }
    while (lis->published != NULL) {
        struct named_blob *nb = lis->published;
        lis->published = nb->next;
        free(nb);
    }
    close(lis->fd);
    close(lis->wake[0]);
    close(lis->wake[1]);
    pthread_cond_destroy(&lis->changed);
    pthread_mutex_destroy(&lis->lock);
    free(lis);
}

/* ---- client API ------------------------------------------------------------ */

static int connect_once(const struct addrinfo *ai, uint64_t deadline)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    0);
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0, one = 1;
    socklen_t el = sizeof(err);

    if (fd < 0)
        return -errno;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        err = errno;
        close(fd);
        return -err;
    }
    if (poll(&pfd, 1, remaining_ms(deadline)) <= 0) {
        close(fd);
        return -ETIMEDOUT;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    if (err != 0) {
        close(fd);
        return -err;
    }
    return fd;
}

/* Connects, retrying refusals until the deadline: the server may start
 * a moment after the client. */
static int dial(const char *hostport, uint64_t deadline, int *fd)
{
    struct addrinfo *ai = NULL;
    int ret = resolve(hostport, false, &ai), last = -ECONNREFUSED;

    if (ret != 0)
        return ret;
    for (;;) {
        for (struct addrinfo *a = ai; a != NULL; a = a->ai_next) {
            last = connect_once(a, deadline);
            if (last >= 0) {
                *fd = last;
                freeaddrinfo(ai);
                return 0;
            }
        }
        if (remaining_ms(deadline) == 0 || last == -ETIMEDOUT)
            break;
        usleep(20000);
    }
    freeaddrinfo(ai);
    return ferry__error(last == -ETIMEDOUT ? FERRY_ETIMEDOUT
                                           : FERRY_EHOSTUNREACH,
                        "bootstrap: cannot connect to %s: %s", hostport,
                        strerror(-last));
}

/* Sends a request frame and reads the answer into buf. */
static int exchange(struct ferry_oob_conn *c, const uint8_t *req, size_t len,
                    uint64_t deadline, uint8_t *buf,
                    struct ferry__blob_reader *r, unsigned *kind)
{
    int ret;

    if (c->fd < 0)
        return ferry__error(FERRY_ECONNRESET, "bootstrap: the connection to "
                            "%s was closed after an earlier failure; connect "
                            "again", c->where);
    if ((ret = send_all(c->fd, req, len, deadline, c->where)) ||
        (ret = recv_frame(c->fd, buf, deadline, c->where, r, kind))) {
        /* A request half sent or an answer not (fully) read would pair the
         * next request with this one's late answer: the connection is
         * unusable now, so close it and let the next call say so. */
        close(c->fd);
        c->fd = -1;
        return ret;
    }
    if (*kind == FRAME_ERROR) {
        char why[256];
        ferry__blob_get_str(r, why, sizeof(why));
        return ferry__error(FERRY_EPROTO, "bootstrap: %s refused: %s",
                            c->where, r->bad ? "(no reason given)" : why);
    }
    return 0;
}

static int hello(struct ferry_oob_conn *c, uint64_t deadline)
{
    uint8_t addr[FERRY__ADDR_MAX * 2], frame[FRAME_MAX], *buf;
    size_t alen = sizeof(addr), flen;
    struct ferry__blob_reader r;
    unsigned kind;
    int ret;

    if ((ret = ferry_context_address(c->ctx, addr, &alen)) ||
        (ret = build_frame(frame, &flen, FRAME_HELLO, token_of(c->ctx), addr,
                           alen)))
        return ret;
    buf = malloc(FRAME_MAX);
    if (buf == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory");
    ret = exchange(c, frame, flen, deadline, buf, &r, &kind);
    if (ret == 0 && kind != FRAME_HELLO_OK)
        ret = ferry__error(FERRY_EPROTO, "bootstrap: %s answered the hello "
                           "with frame kind %u", c->where, kind);
    if (ret == 0 && (!get_field(&r, addr, sizeof(addr), &alen) ||
                     r.pos != r.len))
        ret = ferry__error(FERRY_EPROTO, "bootstrap: %s sent a malformed "
                           "hello answer", c->where);
    if (ret == 0)
        ret = ferry_peer_add(c->ctx, addr, alen, &c->peer);
    free(buf);
    return ret;
}

int ferry_oob_connect(ferry_context_t *ctx, const char *hostport,
                      int timeout_ms, ferry_oob_conn_t **out)
{
    uint64_t deadline = deadline_after(timeout_ms < 0 ? 0 : timeout_ms);
    struct ferry_oob_conn *c;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "ferry_oob_connect")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_oob_connect: out is NULL");
    if (hostport == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_oob_connect: hostport is "
                            "NULL; use \"host:port\"");
    if (timeout_ms <= 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_oob_connect: timeout_ms is %d; give a "
                            "positive number of milliseconds",
                            timeout_ms);
    if ((ret = check_token(ctx, "ferry_oob_connect")))
        return ret;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a connection");
    c->ctx = ctx;
    c->fd = -1;
    pthread_mutex_init(&c->lock, NULL);
    snprintf(c->where, sizeof(c->where), "server %s", hostport);
    ret = dial(hostport, deadline, &c->fd);
    if (ret == 0)
        ret = hello(c, deadline);
    if (ret != 0) {
        conn_free(c);
        return ret;
    }
    *out = c;
    return 0;
}

ferry_peer_t *ferry_oob_conn_peer(const ferry_oob_conn_t *conn)
{
    return conn != NULL ? conn->peer : NULL;
}

/* Server side: wait until the client offers `name`. */
static int lookup_offered(struct ferry_oob_conn *c, const char *name,
                          uint64_t deadline, uint8_t *blob, size_t *len)
{
    struct ferry_oob *lis = c->lis;
    const struct named_blob *nb = NULL;

    if (lis == NULL)
        return ferry__error(FERRY_ECONNRESET, "bootstrap: the listener of "
                            "%s is closed", c->where);
    pthread_mutex_lock(&lis->lock);
    while ((nb = find_name(c->offered, name)) == NULL && !c->closed &&
           remaining_ms(deadline) != 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 50 * 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&lis->changed, &lis->lock, &ts);
    }
    if (nb != NULL) {
        memcpy(blob, nb->blob, nb->len);
        *len = nb->len;
    }
    pthread_mutex_unlock(&lis->lock);
    if (nb == NULL)
        return ferry__error(c->closed ? FERRY_ECONNRESET : FERRY_ENOENT,
                            "bootstrap: %s %s before offering a region "
                            "named \"%s\"",
                            c->where,
                            c->closed ? "disconnected" : "timed out", name);
    return 0;
}

/* Client side: ask the server for `name`. */
static int lookup_published(struct ferry_oob_conn *c, const char *name,
                            uint64_t deadline, uint8_t *blob, size_t *len)
{
    uint8_t frame[FRAME_MAX];
    uint8_t *buf = malloc(FRAME_MAX);
    struct ferry__blob_reader r;
    size_t flen;
    unsigned kind;
    int ret;

    if (buf == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory");
    pthread_mutex_lock(&c->lock);
    ret = build_frame(frame, &flen, FRAME_LOOKUP, name, NULL, 0);
    if (ret == 0)
        ret = exchange(c, frame, flen, deadline, buf, &r, &kind);
    pthread_mutex_unlock(&c->lock);
    if (ret == 0 && kind == FRAME_NOTFOUND)
        ret = ferry__error(FERRY_ENOENT,
                           "bootstrap: %s has published no region named "
                           "\"%s\"",
                           c->where, name);
    else if (ret == 0 && (kind != FRAME_FOUND ||
                          !get_field(&r, blob, *len, len) || r.pos != r.len))
        ret = ferry__error(FERRY_EPROTO, "bootstrap: %s sent a malformed "
                           "lookup answer", c->where);
    free(buf);
    return ret;
}

int ferry_oob_lookup(ferry_oob_conn_t *conn, const char *name, int timeout_ms,
                     ferry_rmem_t **out)
{
    uint8_t blob[FERRY__ADDR_MAX * 2];
    size_t len = sizeof(blob);
    /* < 0 is "no deadline", as for ferry_oob_accept. */
    uint64_t deadline = deadline_after(timeout_ms);
    int ret;

    ferry__error_clear();
    if (conn == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_oob_lookup: conn or out is NULL");
    if ((ret = check_name(name, "ferry_oob_lookup")))
        return ret;
    ret = conn->lis != NULL || conn->accepted
              ? lookup_offered(conn, name, deadline, blob, &len)
              : lookup_published(conn, name, deadline, blob, &len);
    if (ret != 0)
        return ret;
    return ferry_rmem_import(conn->peer, blob, len, out);
}

int ferry_oob_offer(ferry_oob_conn_t *conn, const char *name,
                    const ferry_mem_t *mem, int timeout_ms)
{
    uint8_t blob[FERRY__ADDR_MAX * 2], frame[FRAME_MAX], *buf;
    size_t len = sizeof(blob), flen;
    uint64_t deadline = deadline_after(timeout_ms); /* fix: as lookup */
    struct ferry__blob_reader r;
    unsigned kind;
    int ret;

    ferry__error_clear();
    if (conn == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_oob_offer: conn is NULL");
    if (conn->lis != NULL || conn->accepted)
        return ferry__error(FERRY_EINVAL,
                            "ferry_oob_offer: only the connecting side offers "
                            "regions; the listening side publishes them with "
                            "ferry_oob_publish");
    if ((ret = check_name(name, "ferry_oob_offer")) ||
        (ret = ferry_mem_export(mem, blob, &len)) ||
        (ret = build_frame(frame, &flen, FRAME_OFFER, name, blob, len)))
        return ret;
    buf = malloc(FRAME_MAX);
    if (buf == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory");
    pthread_mutex_lock(&conn->lock);
    ret = exchange(conn, frame, flen, deadline, buf, &r, &kind);
    pthread_mutex_unlock(&conn->lock);
    if (ret == 0 && kind != FRAME_OFFER_OK)
        ret = ferry__error(FERRY_EPROTO, "bootstrap: %s answered an offer "
                           "with frame kind %u", conn->where, kind);
    free(buf);
    return ret;
}

void ferry_oob_disconnect(ferry_oob_conn_t *conn)
{
    struct ferry_oob *lis;

    if (conn == NULL)
        return;
    lis = conn->lis;
    if (lis != NULL) {
        /* Server side: the service thread frees it once it is released. */
        pthread_mutex_lock(&lis->lock);
        conn->accepted = false;
        conn->closed = true;
        pthread_mutex_unlock(&lis->lock);
        return;
    }
    conn_free(conn);
}
