/*
 * Bootstrap over TCP for programs without a control plane of their own:
 * the API (ferry__oob_* in ferry.h, ferry__oob_* in oob.h).
 *
 * A listener publishes the context's address and named blobs (remote
 * keys); a client connects, both prove they hold the same secret
 * (auth.h), the client learns the address (and tells its own) and looks
 * names up.  A client may offer blobs too; the server finds them through
 * the connection ferry__oob_accept() gives it, or by name (ferry__oob_find).
 *
 * The parts, lowest first: wire.c (frames, deadlines), auth.c (the
 * handshake's proofs, the client's side of it), names.c (the listener's
 * table of names), conn.c (connections, the handshake queues), client.c
 * (dialling, one request at a time), request.c (the client's requests),
 * reply.c (the listener's output and closing), handle.c (what the
 * listener does with each frame), serve.c (its service thread).  This
 * file holds the listener's calls and the rest of the API.
 *
 * Threads: the listener runs one service thread; the state it shares with
 * callers sits under lis->lock.  A client connection serves one request
 * at a time (conn->lock).
 */
#include "oob/oob.h"

#include "fabric/fabric.h"
#include "oob/client.h"
#include "oob/serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A connection's deadline when the call gives 0 (the default). */
#define DEFAULT_CONNECT_MS 10000

/* ---- the secret --------------------------------------------------------- */

/* The shared secret: the caller's, else the one thing the bootstrap reads
 * below the public API, the context's configuration. */
static const char *token_of(ferry_context_t *ctx, const char *token)
{
    const char *t = token != NULL ? token : ferry__fabric_of(ctx)->cfg.oob_token;

    if (t == NULL)
        t = getenv("FERRY_OOB_TOKEN");
    return t != NULL ? t : "";
}

/* A listener keeps a copy of the secret of bounded size: a longer one is
 * refused up front, on both sides, rather than cut short and never
 * matching. */
static int check_token(const char *token, const char *call)
{
    size_t n = strlen(token);

    if (n >= FERRY__OOB_SECRET_MAX)
        return ferry__error(FERRY_EINVAL,
                            "%s: the bootstrap token (config.oob_token, "
                            "FERRY_OOB_TOKEN or the call's) is %zu characters; "
                            "it may have "
                            "at most %u",
                            call, n, FERRY__OOB_SECRET_MAX - 1);
    return 0;
}

/* ---- listening ---------------------------------------------------------- */

static bool is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a =
            &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) ||
               (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/*
 * Without a secret, whoever reaches the port could import every region
 * published (their keys allow remote writes): only this host may reach
 * it then, unless the configuration says that is accepted.
 */
static int check_exposure(const struct ferry__oob *lis, const char *hostport,
                          const struct sockaddr *sa)
{
    if (is_loopback(sa) || lis->secret[0] != '\0' ||
        ferry__fabric_of(lis->ctx)->cfg.oob_insecure)
        return 0;
    return ferry__error(FERRY_EINVAL,
                        "bootstrap listen: \"%s\" is not a loopback address "
                        "and no bootstrap token is set: anyone who reaches "
                        "the port could import every published region and "
                        "write to it.  Set the same FERRY_OOB_TOKEN (or "
                        "config.oob_token) on both sides, or set "
                        "config.oob_insecure (FERRY_OOB_INSECURE=1) to "
                        "accept that",
                        hostport);
}

static int bind_error(const char *hostport, int err)
{
    if (err == EADDRINUSE)
        return ferry__error(FERRY_EEXIST,
                            "bootstrap: cannot listen on %s: the address is "
                            "already in use (another listener has it); pick "
                            "another port, or 0 for a free one",
                            hostport);
    return ferry__error(FERRY_EINVAL, "bootstrap: cannot listen on %s: %s",
                        hostport, strerror(err));
}

/* Non-blocking: the service thread accepts until EAGAIN. */
static int bind_listen(struct ferry__oob *lis, const char *hostport,
                       const struct addrinfo *ai)
{
    int one = 1;

    lis->fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (lis->fd < 0)
        return ferry__error(FERRY_ENOMEM, "bootstrap: no socket: %s",
                            strerror(errno));
    if (setsockopt(lis->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
        bind(lis->fd, ai->ai_addr, ai->ai_addrlen) ||
        listen(lis->fd, SOMAXCONN))
        return bind_error(hostport, errno);
    ferry__oob_defer_accept(lis->fd, lis->limits.handshake_ms);
    return 0;
}

static int open_listen_socket(struct ferry__oob *lis, const char *hostport)
{
    struct addrinfo *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    int ret;

    if ((ret = ferry__oob_resolve(hostport, true, &ai)))
        return ret;
    ret = check_exposure(lis, hostport, ai->ai_addr);
    if (ret == 0)
        ret = bind_listen(lis, hostport, ai);
    freeaddrinfo(ai);
    if (ret != 0)
        return ret;
    getsockname(lis->fd, (struct sockaddr *)&ss, &sl);
    lis->port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

/* Frees a listener whose thread never ran or has ended. */
static void listener_free(struct ferry__oob *lis)
{
    if (lis->fd >= 0)
        close(lis->fd);
    if (lis->wake[0] >= 0) {
        close(lis->wake[0]);
        close(lis->wake[1]);
    }
    ferry__oob_names_fini(&lis->names);
    /* The secret does not outlive the listener in freed memory. */
    explicit_bzero(lis->secret, sizeof(lis->secret));
    free(lis->pfd);
    free(lis->who);
    pthread_cond_destroy(&lis->changed);
    pthread_mutex_destroy(&lis->lock);
    free(lis);
}

static struct ferry__oob *listener_new(ferry_context_t *ctx, const char *secret)
{
    struct ferry__oob *lis = calloc(1, sizeof(*lis));

    if (lis == NULL)
        return NULL;
    lis->ctx = ctx;
    lis->fd = lis->wake[0] = lis->wake[1] = -1;
    lis->limits = FERRY__OOB_LIMITS_DEFAULT;
    snprintf(lis->secret, sizeof(lis->secret), "%s", secret);
    pthread_mutex_init(&lis->lock, NULL);
    pthread_cond_init(&lis->changed, NULL);
    if (ferry__oob_names_init(&lis->names) != 0) {
        listener_free(lis);
        return NULL;
    }
    return lis;
}

int ferry__oob_listen(ferry_context_t *ctx, const char *hostport,
                     ferry__oob_t **out)
{
    return ferry__oob_listen_token(ctx, hostport, NULL, out);
}

int ferry__oob_listen_token(ferry_context_t *ctx, const char *hostport,
                           const char *token, ferry__oob_t **out)
{
    struct ferry__oob *lis;
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "bootstrap listen")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap listen: out is NULL");
    token = token_of(ctx, token);
    if ((ret = check_token(token, "bootstrap listen")))
        return ret;
    lis = listener_new(ctx, token);
    if (lis == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a listener");
    /* Taken now, in the caller's thread: the service thread must not touch
     * the endpoint, which the context serialises under its own lock. */
    lis->addr_len = sizeof(lis->addr);
    ret = ferry_context_address(ctx, lis->addr, &lis->addr_len);
    if (ret == 0)
        ret = open_listen_socket(lis, hostport);
    if (ret == 0 && pipe2(lis->wake, O_CLOEXEC) != 0)
        ret = ferry__error(FERRY_ENOMEM, "bootstrap: pipe2 failed");
    if (ret == 0 &&
        pthread_create(&lis->thread, NULL, ferry__oob_serve, lis) != 0)
        ret = ferry__error(FERRY_ENOMEM, "bootstrap: cannot start thread");
    if (ret != 0) {
        listener_free(lis);
        return ret;
    }
    *out = lis;
    return 0;
}

int ferry__oob_port(const ferry__oob_t *lis)
{
    return lis != NULL ? lis->port : FERRY_EINVAL;
}

void ferry__oob_close(ferry__oob_t *lis)
{
    if (lis == NULL)
        return;
    if (write(lis->wake[1], "x", 1) != 1)
        FERRY_LOG_WARN("bootstrap: cannot wake the service thread");
    pthread_join(lis->thread, NULL);
    while (lis->conns != NULL) {
        struct ferry__oob_conn *c = lis->conns;

        lis->conns = c->next;
        ferry__oob_conn_close(c);
        if (c->accepted) {
            /* The application still holds it: detach, it frees it. */
            if (c->fd >= 0)
                close(c->fd);
            c->fd = -1;
            c->lis = NULL;
            continue;
        }
        ferry__oob_conn_free(c);
    }
    listener_free(lis);
}

/* ---- publishing and finding (listener side) ----------------------------- */

int ferry__oob_publish_blob(ferry__oob_t *lis, const char *name,
                            const void *blob, size_t len)
{
    int ret;

    if (lis == NULL || blob == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry__oob_publish_blob: lis or blob is NULL");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_NAME_MAX, "publishing")))
        return ret;
    if (len > FERRY__OOB_BLOB_MAX)
        return ferry__error(FERRY_EINVAL,
                            "publishing \"%s\": the blob is %zu bytes; the "
                            "most is %u",
                            name, len, FERRY__OOB_BLOB_MAX);
    pthread_mutex_lock(&lis->lock);
    ret = ferry__oob_names_put(&lis->names, NULL, NULL, name, blob, len);
    pthread_mutex_unlock(&lis->lock);
    if (ret != 0)
        return ferry__error(FERRY_ENOMEM, "out of memory publishing \"%s\"",
                            name);
    return 0;
}

int ferry__oob_withdraw(ferry__oob_t *lis, const char *name)
{
    long ret;

    if (lis == NULL)
        return ferry__error(FERRY_EINVAL, "ferry__oob_withdraw: lis is NULL");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_NAME_MAX, "withdrawing")))
        return (int)ret;
    pthread_mutex_lock(&lis->lock);
    ret = ferry__oob_names_remove(&lis->names, NULL, NULL, name);
    pthread_mutex_unlock(&lis->lock);
    if (ret < 0)
        return ferry__error(FERRY_ENOENT,
                            "withdrawing \"%s\": this listener has published "
                            "nothing under that name",
                            name);
    return 0;
}

/* Copies e's blob into blob (room *len); under lis->lock. */
static int copy_out(const struct ferry__oob_entry *e, void *blob, size_t *len)
{
    if (e->len > *len) {
        size_t room = *len;
        *len = e->len;
        return ferry__error(FERRY_ENOSPC,
                            "the blob of \"%s\" is %zu bytes; %zu given",
                            e->name, e->len, room);
    }
    memcpy(blob, e->data, e->len);
    *len = e->len;
    return 0;
}

int ferry__oob_find(ferry__oob_t *lis, const char *name, void *blob, size_t *len)
{
    const struct ferry__oob_entry *e;
    int ret;

    if (lis == NULL || blob == NULL || len == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry__oob_find: lis, blob or len is NULL");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_NAME_MAX, "finding")))
        return ret;
    pthread_mutex_lock(&lis->lock);
    e = ferry__oob_names_find(&lis->names, name);
    ret = e != NULL ? copy_out(e, blob, len)
                    : ferry__error(FERRY_ENOENT,
                                   "nothing named \"%s\" is published here "
                                   "or offered by a client",
                                   name);
    pthread_mutex_unlock(&lis->lock);
    return ret;
}

int ferry__oob_set_limits(ferry__oob_t *lis, const struct ferry__oob_limits *l)
{
    if (lis == NULL || l == NULL || l->handshake_ms <= 0 || l->idle_ms <= 0 ||
        l->send_stall_ms <= 0 || l->max_unauth == 0 || l->max_auth == 0 ||
        l->max_offers == 0 || l->max_offer_bytes == 0)
        return ferry__error(FERRY_EINVAL, "ferry__oob_set_limits: every "
                                          "limit must be positive");
    pthread_mutex_lock(&lis->lock);
    lis->limits = *l;
    pthread_mutex_unlock(&lis->lock);
    ferry__oob_defer_accept(lis->fd, l->handshake_ms);
    return 0;
}

int ferry__oob_publish(ferry__oob_t *lis, const char *name,
                      const ferry_mem_t *mem)
{
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    size_t len = sizeof(blob);
    int ret;

    ferry__error_clear();
    if (lis == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap publish: lis is NULL");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_PUBLIC_NAME_MAX,
                                     "bootstrap publish")) ||
        (ret = ferry_mem_export(mem, blob, &len)))
        return ret;
    return ferry__oob_publish_blob(lis, name, blob, len);
}

/* ---- accepted connections (listener side) ------------------------------- */

/* Waits on lis->changed for at most 50 ms: the deadline is re-checked
 * that often. */
static void wait_changed(struct ferry__oob *lis)
{
    struct timespec until = ferry__realtime_after(50);

    pthread_cond_timedwait(&lis->changed, &lis->lock, &until);
}

/* An authenticated client not handed out yet; under lis->lock. */
static struct ferry__oob_conn *next_to_accept(struct ferry__oob *lis)
{
    for (struct ferry__oob_conn *c = lis->conns; c != NULL; c = c->next)
        if (c->state == FERRY__OOB_READY && !c->accepted && !c->closed)
            return c;
    return NULL;
}

/* The client's address becomes a peer; a client refused here is closed. */
static int adopt(struct ferry__oob *lis, struct ferry__oob_conn *c)
{
    char where[sizeof(c->where)];
    int ret =
        ferry_peer_add(lis->ctx, c->peer_addr, c->peer_addr_len, &c->peer);

    if (ret == 0)
        return 0;
    /* Copied before the unlock: once c is released the service thread
     * may free it. */
    memcpy(where, c->where, sizeof(where));
    pthread_mutex_lock(&lis->lock);
    c->accepted = false;
    ferry__oob_conn_close(c);
    pthread_mutex_unlock(&lis->lock);
    return ferry__error(ret, "bootstrap accept: %s: %s", where,
                        ferry_last_error());
}

int ferry__oob_accept(ferry__oob_t *lis, int timeout_ms, ferry__oob_conn_t **out)
{
    uint64_t deadline = ferry__oob_deadline(timeout_ms);
    struct ferry__oob_conn *c;
    int ret;

    ferry__error_clear();
    if (lis == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "bootstrap accept: lis or out is NULL");
    pthread_mutex_lock(&lis->lock);
    while ((c = next_to_accept(lis)) == NULL &&
           ferry__oob_remaining_ms(deadline) != 0)
        wait_changed(lis);
    /* The address was written before READY and is never rewritten, so it
     * is read below without the lock. */
    if (c != NULL)
        c->accepted = true;
    pthread_mutex_unlock(&lis->lock);
    if (c == NULL)
        return ferry__error(FERRY_EAGAIN,
                            "bootstrap accept: no client connected within "
                            "%d ms (wait again)",
                            timeout_ms);
    if ((ret = adopt(lis, c)))
        return ret;
    *out = c;
    return 0;
}

/* Waits until the client of accepted connection c offers name. */
static int lookup_offered(struct ferry__oob_conn *c, const char *name,
                          uint64_t deadline, uint8_t *blob, size_t *len)
{
    struct ferry__oob *lis = c->lis;
    const struct ferry__oob_entry *e = NULL;
    bool closed;

    if (lis == NULL)
        return ferry__error(FERRY_ECONNRESET,
                            "bootstrap: the listener of "
                            "%s is closed",
                            c->where);
    pthread_mutex_lock(&lis->lock);
    while ((e = ferry__oob_names_get(&lis->names, c, name)) == NULL &&
           !c->closed && ferry__oob_remaining_ms(deadline) != 0)
        wait_changed(lis);
    if (e != NULL) {
        memcpy(blob, e->data, e->len);
        *len = e->len;
    }
    closed = c->closed;
    pthread_mutex_unlock(&lis->lock);
    if (e == NULL)
        return ferry__error(closed ? FERRY_ECONNRESET : FERRY_ENOENT,
                            "bootstrap: %s %s before offering a region "
                            "named \"%s\"",
                            c->where, closed ? "disconnected" : "timed out",
                            name);
    return 0;
}

/* ---- the connecting side ------------------------------------------------ */

/* ferry__oob_connect_token; probing: as ferry__oob_client_open's. */
static int connect_with(ferry_context_t *ctx, const char *hostport,
                        const char *token, int timeout_ms, bool probing,
                        ferry__oob_conn_t **out)
{
    int ret;

    ferry__error_clear();
    if ((ret = ferry__check_ctx(ctx, "bootstrap connect")))
        return ret;
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap connect: out is NULL");
    if (hostport == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap connect: hostport is "
                                          "NULL; use \"host:port\"");
    /* A deadline (ferry(7) "Timeouts"): 0 the default, < 0 none. */
    if (timeout_ms == 0)
        timeout_ms = DEFAULT_CONNECT_MS;
    token = token_of(ctx, token);
    if ((ret = check_token(token, "bootstrap connect")))
        return ret;
    return ferry__oob_client_open(ctx, hostport, timeout_ms, token,
                                  probing, out);
}

int ferry__oob_connect(ferry_context_t *ctx, const char *hostport,
                      int timeout_ms, ferry__oob_conn_t **out)
{
    return connect_with(ctx, hostport, NULL, timeout_ms, false, out);
}

int ferry__oob_connect_token(ferry_context_t *ctx, const char *hostport,
                            const char *token, int timeout_ms,
                            ferry__oob_conn_t **out)
{
    return connect_with(ctx, hostport, token, timeout_ms, false, out);
}

int ferry__oob_probe(ferry_context_t *ctx, const char *hostport,
                     int timeout_ms, ferry__oob_conn_t **out)
{
    return connect_with(ctx, hostport, NULL, timeout_ms, true, out);
}

ferry_peer_t *ferry__oob_conn_peer(const ferry__oob_conn_t *conn)
{
    return conn != NULL ? conn->peer : NULL;
}

int ferry__oob_lookup(ferry__oob_conn_t *conn, const char *name, int timeout_ms,
                     ferry_rmem_t **out)
{
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    size_t len = sizeof(blob);
    int ret;

    ferry__error_clear();
    if (conn == NULL || out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "bootstrap lookup: conn or out is NULL");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_PUBLIC_NAME_MAX,
                                     "bootstrap lookup")))
        return ret;
    /* < 0 is "no deadline", as for ferry__oob_accept.  A client asks for
     * the listener's own publications only: the blob is imported through
     * the listener's peer, and another client's offer would aim there. */
    ret = ferry__oob_served(conn)
              ? lookup_offered(conn, name, ferry__oob_deadline(timeout_ms),
                               blob, &len)
              : ferry__oob_lookup_published(conn, name, timeout_ms, blob, &len);
    if (ret != 0)
        return ret;
    return ferry_rmem_import(conn->peer, blob, len, out);
}

void ferry__oob_disconnect(ferry__oob_conn_t *conn)
{
    struct ferry__oob *lis;

    if (conn == NULL)
        return;
    lis = conn->lis;
    if (lis != NULL) {
        /* Server side: the service thread frees it once it is released. */
        pthread_mutex_lock(&lis->lock);
        conn->accepted = false;
        ferry__oob_conn_close(conn);
        pthread_mutex_unlock(&lis->lock);
        return;
    }
    ferry__oob_conn_free(conn);
}
