/*
 * How the listener answers a client and ends its connection (see
 * reply.h).
 */
#include "oob/reply.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/*
 * A warning for an authenticated client, which someone set up; only
 * information for one still in the handshake, which any stranger can
 * make come and go, and whose every drop must not cost a line of the
 * application's log.
 */
void ferry__oob_note_drop(const struct ferry__oob_conn *c, const char *why)
{
    if (c->state == FERRY__OOB_READY)
        FERRY_LOG_WARN("bootstrap: dropping %s: %s", c->where, why);
    else
        FERRY_LOG_INFO("bootstrap: dropping %s: %s", c->where, why);
}

/*
 * After a last frame, what the client sent and will never be read is
 * read away first: closing over unread input resets the connection, and
 * a reset can destroy the frame on its way.
 */
void ferry__oob_shut(struct ferry__oob_conn *c)
{
    ferry__oob_conn_close(c);
    if (c->fd < 0)
        return;
    if (c->closing) {
        uint8_t sink[4096];
        for (int i = 0; i < 16; i++)
            if (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) <= 0)
                break;
        shutdown(c->fd, SHUT_WR);
    }
    close(c->fd);
    c->fd = -1;
}

void ferry__oob_flush(struct ferry__oob_conn *c)
{
    while (c->tx_pos < c->tx_len) {
        ssize_t n = send(c->fd, c->tx + c->tx_pos, c->tx_len - c->tx_pos,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->tx_pos += (size_t)n;
            c->tx_since_ns = ferry__now_ns();
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        } else {
            c->closing = false; /* nothing more can reach it */
            ferry__oob_shut(c);
            return;
        }
    }
    c->tx_pos = c->tx_len = 0;
    if (c->closing)
        ferry__oob_shut(c);
}

/* Queues a built frame; false when the queue has no room. */
static bool enqueue(struct ferry__oob_conn *c, const uint8_t *frame, size_t len)
{
    if (c->tx_pos > 0) {
        memmove(c->tx, c->tx + c->tx_pos, c->tx_len - c->tx_pos);
        c->tx_len -= c->tx_pos;
        c->tx_pos = 0;
    }
    if (len > sizeof(c->tx) - c->tx_len)
        return false;
    /* The stall clock starts when output starts waiting. */
    if (c->tx_len == 0)
        c->tx_since_ns = ferry__now_ns();
    memcpy(c->tx + c->tx_len, frame, len);
    c->tx_len += len;
    return true;
}

void ferry__oob_reply_frame(struct ferry__oob_conn *c, const uint8_t *frame,
                            size_t len)
{
    if (!enqueue(c, frame, len)) {
        c->closing = false; /* a last frame would not fit either */
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_flush(c);
}

void ferry__oob_reply(struct ferry__oob_conn *c, unsigned kind, const char *name,
                      const void *bytes, size_t n)
{
    uint8_t frame[FERRY__FRAME_MAX];
    size_t len;

    if (ferry__oob_build(frame, &len, kind, name, bytes, n) != 0) {
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_reply_frame(c, frame, len);
}

/* A REFUSED or ERROR frame saying why; false if it cannot be built. */
__attribute__((format(printf, 5, 0))) static bool
build_why(uint8_t *frame, size_t *len, unsigned kind, int code, const char *fmt,
          va_list ap)
{
    char why[FERRY__FRAME_MAX / 2];

    vsnprintf(why, sizeof(why), fmt, ap);
    return ferry__oob_build_error(frame, len, kind, why, code) == 0;
}

void ferry__oob_refuse(struct ferry__oob_conn *c, int code, const char *fmt, ...)
{
    uint8_t frame[FERRY__FRAME_MAX];
    size_t len;
    va_list ap;
    bool built;

    va_start(ap, fmt);
    built = build_why(frame, &len, FERRY__FRAME_REFUSED, code, fmt, ap);
    va_end(ap);
    if (!built) {
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_reply_frame(c, frame, len);
}

void ferry__oob_drop(struct ferry__oob_conn *c, int code, const char *fmt, ...)
{
    uint8_t frame[FERRY__FRAME_MAX];
    char why[FERRY__FRAME_MAX / 2];
    size_t len;
    va_list ap;

    if (c->closed || c->closing)
        return;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    ferry__oob_note_drop(c, why);
    c->closing = true;
    if (ferry__oob_build_error(frame, &len, FERRY__FRAME_ERROR, why, code) !=
        0) {
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_reply_frame(c, frame, len);
    if (!c->closed && c->state != FERRY__OOB_READY)
        ferry__oob_shut(c);
}
