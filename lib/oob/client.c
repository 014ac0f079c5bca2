/*
 * The bootstrap's connecting side (see client.h).
 */
#include "oob/client.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- dialling ----------------------------------------------------------- */

/* One connect attempt; the socket, or -errno. */
static int connect_once(const struct addrinfo *ai, uint64_t deadline)
{
    int fd =
        socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct pollfd pfd = {.fd = fd, .events = POLLOUT};
    int err = 0, one = 1;
    socklen_t el = sizeof(err);

    if (fd < 0)
        return -errno;
    /* Requests are small and each waits for its answer. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
        return fd;
    if (errno != EINPROGRESS) {
        err = errno;
        close(fd);
        return -err;
    }
    if (poll(&pfd, 1, ferry__oob_remaining_ms(deadline)) <= 0) {
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

/* How long since start_ns, in seconds. */
static double seconds_since(uint64_t start_ns)
{
    return (double)(ferry__now_ns() - start_ns) / 1e9;
}

/*
 * Connects, retrying refusals until the deadline: the server may start
 * a moment after the client.  The first refusal is said at once (the wait
 * may be long, and nothing else shows why a connect has not returned),
 * the last in the error.  A probe takes the first refusal for an answer.
 */
static int dial(const char *hostport, uint64_t deadline, bool probing,
                int *fd)
{
    struct addrinfo *ai = NULL;
    int ret = ferry__oob_resolve(hostport, false, &ai), last = -ECONNREFUSED;
    uint64_t start = ferry__now_ns();
    bool said = false;

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
        if (ferry__oob_remaining_ms(deadline) == 0 || last == -ETIMEDOUT ||
            (probing && last == -ECONNREFUSED))
            break;
        if (!said && last == -ECONNREFUSED) {
            FERRY_LOG_WARN("bootstrap: %s refused the connection (nothing "
                           "listens there yet?); retrying until the "
                           "deadline, %d ms from now",
                           hostport, ferry__oob_remaining_ms(deadline));
            said = true;
        }
        usleep(20000);
    }
    freeaddrinfo(ai);
    if (last == -ECONNREFUSED)
        return ferry__error(FERRY_EHOSTUNREACH,
                            "bootstrap: cannot connect to %s: connection "
                            "refused, tried for %.1f s: nothing listens "
                            "there; start the listener first, give a longer "
                            "timeout, or check the host and port",
                            hostport, seconds_since(start));
    return ferry__error(
        last == -ETIMEDOUT ? FERRY_ETIMEDOUT : FERRY_EHOSTUNREACH,
        "bootstrap: cannot connect to %s: %s (tried for %.1f s)", hostport,
        strerror(-last), seconds_since(start));
}

/* The handshake on c's socket, then the server as a peer. */
static int greet(struct ferry__oob_conn *c, const char *secret,
                 uint64_t deadline)
{
    uint8_t addr[FERRY__OOB_BLOB_MAX], srv[FERRY__OOB_BLOB_MAX];
    size_t alen = sizeof(addr), slen = sizeof(srv);
    int ret;

    if ((ret = ferry_context_address(c->ctx, addr, &alen)) ||
        (ret = ferry__oob_auth_client(c->fd, secret, addr, alen, deadline,
                                      c->where, srv, &slen)))
        return ret;
    return ferry_peer_add(c->ctx, srv, slen, &c->peer);
}

int ferry__oob_client_open(struct ferry_context *ctx, const char *hostport,
                           int timeout_ms, const char *secret,
                           bool probing, struct ferry__oob_conn **out)
{
    uint64_t deadline = ferry__oob_deadline(timeout_ms);
    struct ferry__oob_conn *c = ferry__oob_conn_new(ctx);
    int ret;

    if (c == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a connection");
    snprintf(c->where, sizeof(c->where), "server %s", hostport);
    ret = dial(hostport, deadline, probing, &c->fd);
    if (ret == 0)
        ret = greet(c, secret, deadline);
    if (ret != 0) {
        ferry__oob_conn_free(c);
        return ret;
    }
    *out = c;
    return 0;
}

/* ---- requests ----------------------------------------------------------- */

/*
 * After a send failed: the server may have closed the connection with a
 * reason (idle too long, say) that is already waiting to be read, which
 * says more than the failed send does.
 */
static int reason_or(struct ferry__oob_conn *c, int ret, uint8_t *buf)
{
    struct ferry__blob_reader r;
    unsigned kind;
    char sent[512];

    snprintf(sent, sizeof(sent), "%s", ferry_last_error());
    /* A short wait: a reason the server sent is here already. */
    if (ferry__oob_recv_frame(c->fd, buf, ferry__oob_deadline(20), c->where, &r,
                              &kind) == 0 &&
        kind == FERRY__FRAME_ERROR)
        return ferry__oob_error_from(&r, c->where);
    return ferry__error(ret, "%s", sent);
}

static void hang_up(struct ferry__oob_conn *c)
{
    close(c->fd);
    c->fd = -1;
}

/* The exchange, with c->lock held. */
static int call_locked(struct ferry__oob_conn *c, const uint8_t *req, size_t len,
                       uint64_t deadline, uint8_t *buf,
                       struct ferry__blob_reader *r, unsigned *answer)
{
    int ret;

    if (c->fd < 0)
        return ferry__error(FERRY_ECONNRESET,
                            "bootstrap: the connection to "
                            "%s was closed after an earlier failure; join "
                            "again (ferry_meta_open)",
                            c->where);
    ret = ferry__oob_send_all(c->fd, req, len, deadline, c->where);
    if (ret != 0)
        ret = reason_or(c, ret, buf);
    else
        ret = ferry__oob_recv_frame(c->fd, buf, deadline, c->where, r, answer);
    /* A REFUSED request leaves the connection as it was; anything else
     * that failed leaves it unusable. */
    if (ret == 0 && *answer == FERRY__FRAME_REFUSED)
        return ferry__oob_error_from(r, c->where);
    if (ret == 0 && *answer == FERRY__FRAME_ERROR)
        ret = ferry__oob_error_from(r, c->where);
    if (ret != 0)
        hang_up(c);
    return ret;
}

int ferry__oob_client_call(struct ferry__oob_conn *c, unsigned kind,
                           const char *name, const void *bytes, size_t n,
                           int timeout_ms, uint8_t *buf,
                           struct ferry__blob_reader *r, unsigned *answer)
{
    uint8_t req[FERRY__FRAME_MAX];
    size_t len;
    int ret = ferry__oob_build(req, &len, kind, name, bytes, n);

    *answer = 0;
    if (ret != 0)
        return ret;
    pthread_mutex_lock(&c->lock);
    ret = call_locked(c, req, len, ferry__oob_deadline(timeout_ms), buf, r,
                      answer);
    pthread_mutex_unlock(&c->lock);
    return ret;
}
