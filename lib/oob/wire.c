/*
 * The bootstrap's wire (see wire.h): addresses, deadlines, and whole
 * frames read and written with a deadline.
 */
#include "oob/wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int ferry__oob_check_name(const char *name, size_t max, const char *call)
{
    if (name == NULL || name[0] == '\0' || strlen(name) > max)
        return ferry__error(FERRY_EINVAL,
                            "%s: a region name is 1 to %zu characters", call,
                            max);
    return 0;
}

/* ---- deadlines ---------------------------------------------------------- */

uint64_t ferry__oob_deadline(int timeout_ms)
{
    return timeout_ms < 0 ? 0
                          : ferry__now_ns() + (uint64_t)timeout_ms * 1000000u;
}

int ferry__oob_remaining_ms(uint64_t deadline)
{
    uint64_t now = ferry__now_ns();

    if (deadline == 0)
        return -1;
    if (now >= deadline)
        return 0;
    return (int)((deadline - now + 999999u) / 1000000u);
}

/* ---- addresses ---------------------------------------------------------- */

/* Copies the host part of "host:port" ("[v6]" unbracketed) into host. */
static int split_host(const char *hostport, const char *colon, char *host,
                      size_t cap)
{
    size_t hlen = (size_t)(colon - hostport);

    if (hlen >= cap)
        return ferry__error(FERRY_EINVAL, "bootstrap host name is too long");
    memcpy(host, hostport, hlen);
    host[hlen] = '\0';
    if (hlen >= 2 && host[0] == '[' && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    return 0;
}

static int check_port(const char *port)
{
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
    return 0;
}

int ferry__oob_resolve(const char *hostport, bool passive,
                       struct addrinfo **out)
{
    char host[256];
    const char *colon;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
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
    if ((ret = split_host(hostport, colon, host, sizeof(host))) ||
        (ret = check_port(colon + 1)))
        return ret;
    ret = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, out);
    if (ret != 0)
        return ferry__error(FERRY_EHOSTUNREACH,
                            "cannot resolve bootstrap host \"%s\": %s", host,
                            gai_strerror(ret));
    return 0;
}

/* ---- frames ------------------------------------------------------------- */

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

unsigned ferry__oob_frame_kind(const uint8_t *hdr)
{
    return (unsigned)hdr[6] | (unsigned)hdr[7] << 8;
}

int ferry__oob_frame_length(const uint8_t *hdr, size_t *len, const char *where)
{
    unsigned version = (unsigned)hdr[4] | (unsigned)hdr[5] << 8;
    size_t total = le32(hdr + 8);

    if (le32(hdr) != FERRY__BLOB_MAGIC)
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
    if (total < FERRY__BLOB_HEADER_LEN || total > FERRY__FRAME_MAX)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s announced a %zu-byte frame; frames "
                            "are %u to %u bytes",
                            where, total, FERRY__BLOB_HEADER_LEN,
                            FERRY__FRAME_MAX);
    *len = total;
    return 0;
}

int ferry__oob_build(uint8_t *buf, size_t *len, unsigned kind, const char *name,
                     const void *bytes, size_t nbytes)
{
    struct ferry__blob_writer w;

    ferry__blob_begin(&w, buf, FERRY__FRAME_MAX, (enum ferry__blob_kind)kind);
    if (name != NULL)
        ferry__blob_put_str(&w, name);
    if (bytes != NULL) {
        ferry__blob_put_u32(&w, (uint32_t)nbytes);
        ferry__blob_put_bytes(&w, bytes, nbytes);
    }
    return ferry__blob_end(&w, len);
}

int ferry__oob_build_error(uint8_t *buf, size_t *len, unsigned kind,
                           const char *why, int code)
{
    struct ferry__blob_writer w;
    char cut[FERRY__FRAME_MAX / 2];

    /* A sentence naming a long name must still fit the frame. */
    snprintf(cut, sizeof(cut), "%s", why);
    ferry__blob_begin(&w, buf, FERRY__FRAME_MAX, (enum ferry__blob_kind)kind);
    ferry__blob_put_str(&w, cut);
    ferry__blob_put_u32(&w, (uint32_t)code);
    return ferry__blob_end(&w, len);
}

bool ferry__oob_get_field(struct ferry__blob_reader *r, uint8_t *out,
                          size_t cap, size_t *len)
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

/* The codes a peer's refusal may carry through to our caller. */
static int known_code(int code)
{
    switch (code) {
    case FERRY_ENOSPC:
    case FERRY_ENOMEM:
    case FERRY_EAGAIN:
    case FERRY_ETIMEDOUT:
    case FERRY_ECONNRESET:
    case FERRY_EINCOMPAT:
        return code;
    default:
        return FERRY_EPROTO;
    }
}

int ferry__oob_error_from(struct ferry__blob_reader *r, const char *where)
{
    char why[FERRY__FRAME_MAX];
    int code = FERRY_EPROTO;

    ferry__blob_get_str(r, why, sizeof(why));
    if (r->bad)
        snprintf(why, sizeof(why), "(no reason given)");
    /* The code is optional: a release before it sent the sentence only. */
    else if (r->len - r->pos >= 4)
        code = known_code((int)ferry__blob_get_u32(r));
    if (code == FERRY_ECONNRESET)
        return ferry__error(code, "bootstrap: %s closed the connection: %s",
                            where, why);
    return ferry__error(code, "bootstrap: %s refused: %s", where, why);
}

/* ---- blocking with a deadline (client side) ----------------------------- */

/* Waits for `events` on fd until the deadline; false when it passed. */
static bool wait_for(int fd, short events, uint64_t deadline)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int ms = ferry__oob_remaining_ms(deadline);

    return ms != 0 && poll(&pfd, 1, ms) > 0;
}

int ferry__oob_send_all(int fd, const void *buf, size_t len, uint64_t deadline,
                        const char *where)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (!wait_for(fd, POLLOUT, deadline))
                return ferry__error(FERRY_ETIMEDOUT,
                                    "bootstrap: sending to %s timed out",
                                    where);
        } else {
            return ferry__error(FERRY_ECONNRESET,
                                "bootstrap: sending to %s failed: %s", where,
                                strerror(errno));
        }
    }
    return 0;
}

/* The other side closed (or reset) the connection before the first byte
 * of a frame: no answer at all. */
static int closed_without_answer(const char *where)
{
    return ferry__error(FERRY_ECONNRESET,
                        "bootstrap: %s closed the connection without "
                        "answering: a ferry listener says why even when it "
                        "refuses, so what accepted is likely not a ferry "
                        "listener (another program on that port, or a port "
                        "forward or proxy with nothing behind it), or the "
                        "listener was closing (ferry_meta_close, or its "
                        "process ended)",
                        where);
}

/* Reads len bytes; at_frame_start: they begin a frame, so a close before
 * the first of them is no answer at all rather than a frame cut short. */
static int recv_all(int fd, uint8_t *p, size_t len, uint64_t deadline,
                    const char *where, bool at_frame_start)
{
    const size_t want = len;

    while (len > 0) {
        ssize_t n;

        if (!wait_for(fd, POLLIN, deadline))
            return ferry__error(FERRY_ETIMEDOUT,
                                "bootstrap: no answer from %s before the "
                                "deadline",
                                where);
        n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if ((n == 0 || errno == ECONNRESET) && at_frame_start &&
                   len == want) {
            return closed_without_answer(where);
        } else if (n == 0) {
            return ferry__error(FERRY_ECONNRESET,
                                "bootstrap: %s closed the connection "
                                "mid-frame",
                                where);
        } else if (errno != EINTR && errno != EAGAIN) {
            return ferry__error(FERRY_ECONNRESET,
                                "bootstrap: reading from %s failed: %s", where,
                                strerror(errno));
        }
    }
    return 0;
}

int ferry__oob_recv_frame(int fd, uint8_t *buf, uint64_t deadline,
                          const char *where, struct ferry__blob_reader *r,
                          unsigned *kind)
{
    /* Set by ferry__oob_frame_length whenever it returns 0; gcc -O3, not
     * knowing that ferry__error never returns 0, warns without the 0. */
    size_t len = 0;
    int ret;

    if ((ret = recv_all(fd, buf, FERRY__BLOB_HEADER_LEN, deadline, where,
                        true)) ||
        (ret = ferry__oob_frame_length(buf, &len, where)) ||
        (ret = recv_all(fd, buf + FERRY__BLOB_HEADER_LEN,
                        len - FERRY__BLOB_HEADER_LEN, deadline, where,
                        false)))
        return ret;
    *kind = ferry__oob_frame_kind(buf);
    return ferry__blob_open(r, buf, len, (enum ferry__blob_kind) * kind,
                            "bootstrap frame");
}
