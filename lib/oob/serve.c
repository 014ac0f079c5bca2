/*
 * The listener's service thread (see serve.h).
 *
 * One thread serves every client, so nothing here may wait on a client:
 * sockets are non-blocking, answers go into a per-connection output
 * queue written when poll says the socket takes more, and a connection
 * with output pending is not read (it must take its answers before it
 * asks again).  Each connection is read one frame per pass, so a client
 * that pipelines requests gets no more turns than one that waits.
 *
 * Bounds, so that no client can lock others out (limits.h): a handshake
 * must finish in time, and when too many connections are in it the one
 * that got least far goes, oldest first (conn.h); a socket that says
 * nothing is not even handed over by the kernel until its time is up
 * (TCP_DEFER_ACCEPT); authenticated connections have a budget of their own,
 * which handshakes cannot eat; an authenticated client that stays silent
 * is closed, one that takes no output is dropped; offers are capped per
 * connection; client frames are small (FERRY__FRAME_MAX).
 *
 * This file is the loop: accepting, reading, deadlines.  What a frame
 * does is handle.c's; answering and closing, reply.c's.  Everything runs
 * with lis->lock held except the poll itself.
 */
#include "oob/serve.h"

#include "oob/handle.h"
#include "oob/reply.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* A frame that stops half-way is dropped after this long. */
#define FRAME_STALL_MS 5000
/* Accepts per pass: others get their turn between batches. */
#define ACCEPT_BATCH 64
/* With no descriptor to spare and no handshake to drop, accepting rests
 * this long instead of spinning on a listening socket that stays
 * readable. */
#define ACCEPT_REST_MS 100

static uint64_t ms_ns(int ms)
{
    return (uint64_t)ms * 1000000u;
}

/*
 * Drops the handshake that got least far (ferry__oob_hs_victim) to make
 * room; cause says why room is needed.  One that has not sent its whole
 * hello is only closed: it is not waiting for an answer, and a flood of
 * such sockets must cost the server as little as possible each.
 */
static void evict(struct ferry__oob *lis, const char *cause)
{
    struct ferry__oob_conn *c = ferry__oob_hs_victim(lis);

    if (c->hs_class != FERRY__OOB_HS_CHALLENGED) {
        ferry__oob_note_drop(c, cause);
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_drop(c, FERRY_EAGAIN,
                    "%s (%u are in the handshake); this one, which got "
                    "least far, makes room for a newcomer: try again",
                    cause, lis->n_handshake);
}

/*
 * A socket that connects and stays silent then costs the listener
 * nothing, however many there are: the kernel keeps it, and it never
 * pushes a client that answers out of the handshake queue.  One still
 * silent when the time is up is handed over, and dropped for its
 * handshake's timeout.
 */
void ferry__oob_defer_accept(int fd, int handshake_ms)
{
#ifdef TCP_DEFER_ACCEPT
    int s = (handshake_ms + 999) / 1000;

    if (setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &s, sizeof(s)) != 0)
        FERRY_LOG_INFO("bootstrap: TCP_DEFER_ACCEPT: %s; silent sockets are "
                       "accepted at once",
                       strerror(errno));
#else
    (void)fd;
    (void)handshake_ms;
#endif
}

/* ---- input -------------------------------------------------------------- */

/*
 * Reads what c has sent, up to the end of one frame, and serves it.  The
 * header is checked as soon as it is in: an oversized or foreign frame
 * is refused before a byte of its payload is read.
 */
static void serve_readable(struct ferry__oob *lis, struct ferry__oob_conn *c)
{
    while (!c->closed) {
        size_t want = c->rx_len < FERRY__BLOB_HEADER_LEN
                          ? FERRY__BLOB_HEADER_LEN
                          : c->rx_want;
        ssize_t n =
            recv(c->fd, c->rx + c->rx_len, want - c->rx_len, MSG_DONTWAIT);

        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            ferry__oob_shut(c);
            return;
        }
        if (n < 0)
            return;
        if (c->rx_len == 0)
            c->rx_since_ns = ferry__now_ns();
        if (c->hs_class == FERRY__OOB_HS_SILENT && c->state == FERRY__OOB_HELLO)
            ferry__oob_hs_move(lis, c, FERRY__OOB_HS_TALKING);
        c->rx_len += (size_t)n;
        if (c->rx_len == FERRY__BLOB_HEADER_LEN &&
            ferry__oob_frame_length(c->rx, &c->rx_want, c->where) != 0) {
            ferry__oob_drop(c, FERRY_EPROTO, "%s", ferry_last_error());
            return;
        }
        if (c->rx_len >= FERRY__BLOB_HEADER_LEN && c->rx_len == c->rx_want) {
            ferry__oob_handle_frame(lis, c);
            c->rx_len = 0;
            return; /* one frame per pass: the others get their turn */
        }
    }
}

/* ---- accepting ---------------------------------------------------------- */

static void name_client(struct ferry__oob_conn *c,
                        const struct sockaddr_storage *ss, socklen_t sl)
{
    char host[64] = "?", port[16] = "?";

    getnameinfo((const struct sockaddr *)ss, sl, host, sizeof(host), port,
                sizeof(port), NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(c->where, sizeof(c->where), "client %s:%s", host, port);
}

/* Takes a new connection into the handshake, making room first. */
static void admit(struct ferry__oob *lis, int fd,
                  const struct sockaddr_storage *ss, socklen_t sl)
{
    struct ferry__oob_conn *c;

    if (lis->n_handshake >= lis->limits.max_unauth)
        evict(lis, "the server keeps no more connections in the handshake");
    c = ferry__oob_conn_new(lis->ctx);
    if (c == NULL) {
        close(fd);
        FERRY_LOG_WARN("bootstrap: out of memory for a new client");
        return;
    }
    name_client(c, ss, sl);
    c->fd = fd;
    c->lis = lis;
    c->state = FERRY__OOB_HELLO;
    c->born_ns = c->heard_ns = ferry__now_ns();
    ferry__oob_hs_push(lis, c, FERRY__OOB_HS_SILENT);
    c->next = lis->conns;
    lis->conns = c;
    /* What it sent is read now, not at the next pass: the kernel hands
     * over a client once its hello is in (TCP_DEFER_ACCEPT), and until
     * read, a client that answers would look as silent as the sockets
     * to be dropped before it. */
    serve_readable(lis, c);
}

/*
 * accept() failed with err; true to try again.  Out of descriptors, the
 * oldest handshake gives its own up; with none to give, accepting rests
 * rather than spin on a listening socket that stays readable.
 */
static bool accept_failed(struct ferry__oob *lis, int err)
{
    if (err == EINTR || err == ECONNABORTED)
        return true;
    if (err != EMFILE && err != ENFILE && err != ENOBUFS && err != ENOMEM)
        return false;
    if (lis->n_handshake > 0) {
        evict(lis, "the server is out of file descriptors");
        return true;
    }
    FERRY_LOG_WARN("bootstrap: cannot accept a client: %s; accepting again "
                   "in %d ms",
                   strerror(err), ACCEPT_REST_MS);
    lis->accept_again_ns = ferry__now_ns() + ms_ns(ACCEPT_REST_MS);
    return false;
}

static void accept_some(struct ferry__oob *lis)
{
    for (int i = 0; i < ACCEPT_BATCH; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lis->fd, (struct sockaddr *)&ss, &sl,
                         SOCK_NONBLOCK | SOCK_CLOEXEC);

        if (fd >= 0)
            admit(lis, fd, &ss, sl);
        else if (!accept_failed(lis, errno))
            return;
    }
}

/* ---- deadlines ---------------------------------------------------------- */

static void check_deadlines(struct ferry__oob *lis, struct ferry__oob_conn *c,
                            uint64_t now)
{
    const struct ferry__oob_limits *lim = &lis->limits;

    if (c->tx_len > c->tx_pos &&
        now - c->tx_since_ns > ms_ns(lim->send_stall_ms)) {
        ferry__oob_note_drop(c, "it takes none of its answers");
        c->closing = false; /* its last frame could not go either */
        ferry__oob_shut(c);
    } else if (c->rx_len > 0 && now - c->rx_since_ns > ms_ns(FRAME_STALL_MS)) {
        ferry__oob_drop(c, FERRY_EPROTO, "a frame stalled half-way for %d ms",
                        FRAME_STALL_MS);
    } else if (c->state != FERRY__OOB_READY &&
               now - c->born_ns > ms_ns(lim->handshake_ms)) {
        ferry__oob_drop(c, FERRY_ETIMEDOUT,
                        "the handshake did not finish within %d ms%s",
                        lim->handshake_ms,
                        c->rx_len > 0 ? " (a frame stalled half-way)" : "");
    } else if (c->state == FERRY__OOB_READY && c->rx_len == 0 &&
               now - c->heard_ns > ms_ns(lim->idle_ms)) {
        ferry__oob_drop(
            c, FERRY_ECONNRESET,
            "the server closed this connection after %d %s without a "
            "request; join again (ferry_meta_open)",
            lim->idle_ms >= 1000 ? lim->idle_ms / 1000 : lim->idle_ms,
            lim->idle_ms >= 1000 ? "s" : "ms");
    }
}

/* Applies the deadlines, closes the sockets of closed connections and
 * frees those the application does not hold. */
static void sweep(struct ferry__oob *lis, uint64_t now)
{
    for (struct ferry__oob_conn **pc = &lis->conns; *pc != NULL;) {
        struct ferry__oob_conn *c = *pc;

        if (!c->closed)
            check_deadlines(lis, c, now);
        if (c->closed && c->fd >= 0) {
            close(c->fd);
            c->fd = -1;
        }
        if (c->closed && !c->accepted) {
            *pc = c->next;
            ferry__oob_conn_free(c);
            continue;
        }
        pc = &c->next;
    }
}

/* How often deadlines are checked: a fraction of the shortest, so each
 * fires at most a quarter late. */
static uint64_t tick_ns(const struct ferry__oob_limits *lim)
{
    int ms = FRAME_STALL_MS;

    if (lim->handshake_ms < ms)
        ms = lim->handshake_ms;
    if (lim->idle_ms < ms)
        ms = lim->idle_ms;
    if (lim->send_stall_ms < ms)
        ms = lim->send_stall_ms;
    ms /= 4;
    return ms_ns(ms < 5 ? 5 : ms > 250 ? 250 : ms);
}

/* ---- the loop ----------------------------------------------------------- */

/* Room for n poll entries; false (and the old room kept) when there is
 * no memory. */
static bool poll_room(struct ferry__oob *lis, size_t n)
{
    struct pollfd *pfd;
    struct ferry__oob_conn **who;
    size_t cap = lis->pcap;

    if (n <= cap)
        return true;
    while (cap < n)
        cap = cap < 64 ? 64 : cap * 2;
    pfd = realloc(lis->pfd, cap * sizeof(*pfd));
    if (pfd != NULL)
        lis->pfd = pfd;
    who = realloc(lis->who, cap * sizeof(*who));
    if (who != NULL)
        lis->who = who;
    if (pfd == NULL || who == NULL)
        return false;
    lis->pcap = cap;
    return true;
}

/*
 * The poll set: the wake pipe, the listening socket (unless accepting
 * rests), then each live connection, for output while it has some
 * pending (and then only for that: backpressure), else for input.
 */
static nfds_t poll_set(struct ferry__oob *lis, uint64_t now)
{
    size_t want = 2;
    nfds_t n = 0;

    for (struct ferry__oob_conn *c = lis->conns; c != NULL; c = c->next)
        want += !c->closed;
    if (!poll_room(lis, want) && lis->pcap < 2)
        return 0;
    lis->pfd[n++] = (struct pollfd){.fd = lis->wake[0], .events = POLLIN};
    lis->pfd[n++] = (struct pollfd){
        .fd = now < lis->accept_again_ns ? -1 : lis->fd, .events = POLLIN};
    for (struct ferry__oob_conn *c = lis->conns; c != NULL && n < lis->pcap;
         c = c->next) {
        if (c->closed)
            continue;
        lis->who[n] = c;
        lis->pfd[n++] = (struct pollfd){
            .fd = c->fd, .events = c->tx_len > c->tx_pos ? POLLOUT : POLLIN};
    }
    return n;
}

static void serve_events(struct ferry__oob *lis, nfds_t n)
{
    if (lis->pfd[1].revents & POLLIN)
        accept_some(lis);
    for (nfds_t i = 2; i < n; i++) {
        struct ferry__oob_conn *c = lis->who[i];
        short ev = lis->pfd[i].revents;

        /* Closed meanwhile (its descriptor may even be another's now). */
        if (c->closed || ev == 0)
            continue;
        if (lis->pfd[i].events & POLLOUT)
            ferry__oob_flush(c);
        else
            serve_readable(lis, c);
    }
}

void *ferry__oob_serve(void *arg)
{
    struct ferry__oob *lis = arg;
    uint64_t next_sweep = 0;

    for (;;) {
        uint64_t now;
        nfds_t n;
        int ms;

        pthread_mutex_lock(&lis->lock);
        now = ferry__now_ns();
        if (now >= next_sweep) {
            sweep(lis, now);
            next_sweep = now + tick_ns(&lis->limits);
        }
        n = poll_set(lis, now);
        pthread_mutex_unlock(&lis->lock);
        if (n == 0) {
            FERRY_LOG_WARN("bootstrap: out of memory for the poll set; the "
                           "listener stops serving");
            break;
        }
        ms = (int)((next_sweep - now + 999999u) / 1000000u);
        if (poll(lis->pfd, n, ms) < 0 && errno != EINTR) {
            FERRY_LOG_WARN("bootstrap: poll failed: %s; the listener stops "
                           "serving",
                           strerror(errno));
            break;
        }
        if (lis->pfd[0].revents)
            break;
        pthread_mutex_lock(&lis->lock);
        serve_events(lis, n);
        pthread_mutex_unlock(&lis->lock);
    }
    return NULL;
}
