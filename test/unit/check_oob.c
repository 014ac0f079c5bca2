/*
 * oob module (TCP bootstrap) on the wire, with frames built by ferry's own
 * blob writer: every malformed frame a raw socket can send is refused
 * without hurting the listener, and a client facing a fake server fails
 * with the right error within its deadline.  (The exchange, tokens and
 * bad arguments through the API: test/api/check_oob.c.)
 *
 * Listeners bind 127.0.0.1:0 (ferry_oob_port tells the port), so suites
 * running side by side never collide.
 */
#include "oobutil.h"

#include "base/blob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Frame kinds and limits of lib/oob.c (the wire format under test). */
enum {
    K_HELLO = 16,
    K_HELLO_OK,
    K_LOOKUP,
    K_FOUND,
    K_NOTFOUND,
    K_OFFER,
    K_OFFER_OK,
    K_ERROR,
};
#define FRAME_MAX (64u * 1024u)
#define HDR FERRY__BLOB_HEADER_LEN

/* ---- raw sockets and frames --------------------------------------------------- */

static int raw_connect(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_msg(fd >= 0, "socket: %s", strerror(errno));
    ck_assert_msg(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0,
                  "raw connect to port %d: %s", port, strerror(errno));
    return fd;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        ck_assert_msg(n > 0, "raw send: %s", strerror(errno));
        p += n;
        len -= (size_t)n;
    }
}

/* A frame of `kind` with an optional string and u32-length-prefixed bytes,
 * as lib/oob.c builds them. */
static size_t frame(uint8_t *buf, size_t cap, unsigned kind, const char *str,
                    const void *bytes, size_t n)
{
    struct ferry__blob_writer w;
    size_t len = 0;

    ferry__blob_begin(&w, buf, cap, (enum ferry__blob_kind)kind);
    if (str != NULL)
        ferry__blob_put_str(&w, str);
    if (bytes != NULL) {
        ferry__blob_put_u32(&w, (uint32_t)n);
        ferry__blob_put_bytes(&w, bytes, n);
    }
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* A bare 16-byte header. */
static void header(uint8_t *h, uint32_t magic, unsigned version,
                   unsigned kind, uint32_t total)
{
    put32(h, magic);
    h[4] = (uint8_t)version;
    h[5] = (uint8_t)(version >> 8);
    h[6] = (uint8_t)kind;
    h[7] = (uint8_t)(kind >> 8);
    put32(h + 8, total);
    put32(h + 12, 0);
}

/* The HELLO a real client sends, carrying the address blob of ctx. */
static size_t hello_frame(uint8_t *buf, size_t cap, ferry_context_t *ctx,
                          const char *token)
{
    uint8_t addr[512];
    size_t alen = sizeof(addr);
    int ret = ferry_context_address(ctx, addr, &alen);

    ck_assert_msg(ret == 0, "address: %s", ferry_last_error());
    return frame(buf, cap, K_HELLO, token != NULL ? token : "", addr, alen);
}

/* Reads one whole frame within timeout_ms; returns its kind. */
static unsigned raw_read_frame(int fd, uint8_t *buf, size_t cap,
                               int timeout_ms, size_t *len)
{
    double end = now_s() + timeout_ms / 1000.0;
    size_t got = 0, want = HDR;

    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - now_s()) * 1000);
        ssize_t n;

        ck_assert_msg(ms > 0 && poll(&pfd, 1, ms) == 1,
                      "no whole frame from the server within %d ms (%zu "
                      "bytes so far)",
                      timeout_ms, got);
        n = recv(fd, buf + got, want - got, 0);
        ck_assert_msg(n > 0, "server closed or failed mid-frame: %s",
                      n == 0 ? "EOF" : strerror(errno));
        got += (size_t)n;
        if (got == HDR) {
            want = get32(buf + 8);
            ck_assert_msg(want >= HDR && want <= cap,
                          "server frame announces %zu bytes", want);
        }
    }
    *len = got;
    return (unsigned)buf[6] | (unsigned)buf[7] << 8;
}

/* Sends a real HELLO and checks the HELLO_OK. */
static void raw_hello(int fd, ferry_context_t *ctx)
{
    uint8_t buf[FRAME_MAX];
    size_t len = hello_frame(buf, sizeof(buf), ctx, NULL);

    raw_send(fd, buf, len);
    ck_assert_uint_eq(raw_read_frame(fd, buf, sizeof(buf), 3000, &len),
                      K_HELLO_OK);
}

/*
 * Reads until the server closes the socket (EOF, or a reset) or
 * timeout_ms passes.  Asserts that it was closed in time.  When want is
 * not NULL, the server must have sent an ERROR frame whose sentence
 * contains want; when it is NULL, it must have sent nothing.
 */
static void expect_dropped(int fd, int timeout_ms, const char *want,
                           double *elapsed)
{
    static uint8_t data[1u << 20];
    double t0 = now_s(), end = t0 + timeout_ms / 1000.0;
    size_t got = 0;
    bool closed = false, reset = false;
    char why[512] = "";

    while (!closed) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ms = (int)((end - now_s()) * 1000);
        ssize_t n;

        if (ms <= 0 || poll(&pfd, 1, ms) != 1)
            break;
        n = recv(fd, data + got, sizeof(data) - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (n == 0 || errno == ECONNRESET) {
            closed = true;
            reset = n != 0;
        } else if (errno != EINTR) {
            ck_abort_msg("raw recv: %s", strerror(errno));
        }
        ck_assert_msg(got < sizeof(data), "server keeps sending");
    }
    if (elapsed != NULL)
        *elapsed = now_s() - t0;
    ck_assert_msg(closed,
                  "the server did not close the socket within %d ms (%zu "
                  "bytes received)",
                  timeout_ms, got);
    /* What was received: whole frames; the last one may be an ERROR. */
    for (size_t pos = 0; pos + HDR <= got;) {
        size_t total = get32(data + pos + 8);
        unsigned kind = data[pos + 6] | data[pos + 7] << 8;
        struct ferry__blob_reader r;

        ck_assert_msg(total >= HDR && pos + total <= got,
                      "partial frame of %zu bytes from the server", total);
        ck_assert_msg(ferry__blob_open(&r, data + pos, total,
                                       (enum ferry__blob_kind)kind,
                                       "server frame") == 0,
                      "server sent a bad frame: %s", ferry_last_error());
        if (kind == K_ERROR) {
            ferry__blob_get_str(&r, why, sizeof(why));
            ck_assert_msg(!r.bad, "ERROR frame without a sentence");
        }
        pos += total;
    }
    if (want == NULL) {
        ck_assert_msg(got == 0, "expected no answer, got %zu bytes", got);
    } else {
        ck_assert_msg(!reset || why[0] != '\0',
                      "the server reset the socket before its ERROR frame "
                      "arrived");
        ck_assert_msg(strstr(why, want) != NULL,
                      "ERROR frame says \"%s\", expected it to contain "
                      "\"%s\"",
                      why, want);
    }
}

/*
 * Sends bytes on a raw socket (after a HELLO when greet), expects the
 * server to drop it (with an ERROR containing want, or silently when want
 * is NULL), then checks that a normal client is still served.
 */
static void raw_case(const uint8_t *bytes, size_t len, bool greet,
                     bool shut_wr, const char *want)
{
    struct srv s;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    if (greet)
        raw_hello(fd, s.ctx);
    raw_send(fd, bytes, len);
    if (shut_wr)
        ck_assert_int_eq(shutdown(fd, SHUT_WR), 0);
    expect_dropped(fd, 3000, want, NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}

/* ---- bad frames from a raw socket ------------------------------------------------- */

START_TEST(test_raw_garbage)
{
    /* Exactly one header's worth, so nothing is left unread. */
    static const char http[] = "GET / HTTP/1.1\r\n";

    ck_assert_uint_eq(sizeof(http) - 1, HDR);
    raw_case((const uint8_t *)http, HDR, false, false, "not a ferry frame");
}
END_TEST

START_TEST(test_raw_wrong_version)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 2, K_HELLO, HDR);
    raw_case(h, sizeof(h), false, false, "frame version 2");
}
END_TEST

START_TEST(test_raw_oversized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 1, K_HELLO, 1u << 20);
    raw_case(h, sizeof(h), false, false, "announced a 1048576-byte frame");
}
END_TEST

START_TEST(test_raw_undersized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, 1, K_HELLO, 8);
    raw_case(h, sizeof(h), false, false, "announced a 8-byte frame");
}
END_TEST

START_TEST(test_raw_truncated_then_close)
{
    uint8_t buf[HDR + 20];

    memset(buf, 0xab, sizeof(buf));
    header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO, 64);
    raw_case(buf, sizeof(buf), false, true, NULL);
}
END_TEST

START_TEST(test_raw_bad_checksum)
{
    struct srv s;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    buf[len - 1] ^= 0x40; /* one payload bit */
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "checksum", NULL);
    close(fd);
    /* And a corrupted checksum field itself. */
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    buf[12] ^= 0x01;
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "checksum", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_raw_unknown_kind)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), 99, "what", NULL, 0);

    raw_case(buf, len, true, false, "unexpected frame kind");
}
END_TEST

START_TEST(test_raw_server_kind_from_client)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), K_FOUND, NULL, "x", 1);

    raw_case(buf, len, true, false, "unexpected frame kind");
}
END_TEST

START_TEST(test_raw_lookup_before_hello)
{
    uint8_t buf[256];
    size_t len = frame(buf, sizeof(buf), K_LOOKUP, "reg", NULL, 0);

    raw_case(buf, len, false, false, "first frame must be a hello");
}
END_TEST

START_TEST(test_raw_malformed_lookup)
{
    struct ferry__blob_writer w;
    uint8_t buf[256];
    size_t len;

    /* A name that claims 500 bytes in a frame of a few. */
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_LOOKUP);
    ferry__blob_put_u16(&w, 500);
    ferry__blob_put_bytes(&w, "reg", 3);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    raw_case(buf, len, true, false, "malformed lookup frame");
}
END_TEST

START_TEST(test_raw_malformed_offer)
{
    struct ferry__blob_writer w;
    uint8_t buf[256];
    size_t len;

    /* A remote-key field that claims 10000 bytes. */
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_OFFER);
    ferry__blob_put_str(&w, "x");
    ferry__blob_put_u32(&w, 10000);
    ferry__blob_put_bytes(&w, "abcdefgh", 8);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    raw_case(buf, len, true, false, "malformed offer frame");
}
END_TEST

START_TEST(test_raw_hello_bad_address)
{
    struct srv s;
    uint8_t junk[40], buf[256];
    ferry_oob_conn_t *acc = NULL;
    size_t len;
    int fd, ret;

    memset(junk, 0x5a, sizeof(junk));
    srv_open(&s, NULL);
    len = frame(buf, sizeof(buf), K_HELLO, "", junk, sizeof(junk));
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "address blob", NULL);
    close(fd);
    /* It never reaches the application's accept. */
    ret = ferry_oob_accept(s.lis, 300, &acc);
    ck_assert_msg(ret == FERRY_ETIMEDOUT, "accept gave %d: %s", ret,
                  ferry_last_error());
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_raw_hello_trailing_bytes)
{
    struct srv s;
    struct ferry__blob_writer w;
    uint8_t addr[512], buf[1024];
    size_t alen = sizeof(addr), len;
    int fd;

    srv_open(&s, NULL);
    ck_assert_int_eq(ferry_context_address(s.ctx, addr, &alen), 0);
    ferry__blob_begin(&w, buf, sizeof(buf), (enum ferry__blob_kind)K_HELLO);
    ferry__blob_put_str(&w, "");
    ferry__blob_put_u32(&w, (uint32_t)alen);
    ferry__blob_put_bytes(&w, addr, alen);
    ferry__blob_put_u16(&w, 7);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "malformed hello frame", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* A second hello could rewrite the address accept is reading. */
START_TEST(test_raw_hello_twice)
{
    struct srv s;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, s.ctx);
    len = hello_frame(buf, sizeof(buf), s.ctx, NULL);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "hello only once", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * A client address that is a well-formed blob of another provider passes
 * the hello; ferry_oob_accept then reports the peer error, with the
 * client named and the reason intact.
 */
START_TEST(test_accept_reports_incompatible_client)
{
    struct srv s;
    ferry_context_t *shm = ctx_open("shm", 0, NULL);
    ferry_oob_conn_t *acc = NULL;
    uint8_t buf[FRAME_MAX];
    size_t len;
    int fd, ret;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    len = hello_frame(buf, sizeof(buf), shm, NULL);
    raw_send(fd, buf, len);
    ck_assert_uint_eq(raw_read_frame(fd, buf, sizeof(buf), 3000, &len),
                      K_HELLO_OK);
    ret = ferry_oob_accept(s.lis, 3000, &acc);
    ck_assert_msg(ret == FERRY_EINCOMPAT, "accept gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_null(acc);
    ck_assert_msg(strstr(ferry_last_error(),
                         "ferry_oob_accept: client 127.0.0.1:") ==
                      ferry_last_error(),
                  "sentence: %s", ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "provider 'shm'") != NULL,
                  "sentence: %s", ferry_last_error());
    /* The refused client is dropped, not offered again. */
    expect_dropped(fd, 3000, NULL, NULL);
    close(fd);
    ret = ferry_oob_accept(s.lis, 200, &acc);
    ck_assert_int_eq(ret, FERRY_ETIMEDOUT);
    client_ok(&s, NULL);
    srv_close(&s);
    ferry_context_destroy(shm);
}
END_TEST

/* A frame that stops half-way is dropped after ~5 s; others are served
 * meanwhile and afterwards. */
START_TEST(test_raw_stalled_frame)
{
    struct srv s;
    uint8_t buf[HDR + 10];
    double t0, dt;
    int fd;

    srv_open(&s, NULL);
    memset(buf, 0, sizeof(buf));
    header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO, 64);
    fd = raw_connect(s.port);
    t0 = now_s();
    raw_send(fd, buf, sizeof(buf));
    client_ok(&s, NULL); /* served while the stalled one waits */
    expect_dropped(fd, 9000, "stalled", NULL);
    dt = now_s() - t0;
    ck_assert_msg(dt > 4.5 && dt < 8.0,
                  "stalled frame dropped after %.2f s, expected about 5", dt);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * A client that floods lookups and never reads its answers must not
 * freeze the service thread: once the answers cannot go out it is
 * dropped (within about a second), and others are served.
 */
START_TEST(test_raw_flood_without_reading)
{
    struct srv s;
    static uint8_t chunk[64 * 1024];
    uint8_t one[64];
    size_t flen, n, sent = 0;
    bool dropped = false;
    double t0;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, s.ctx);
    flen = frame(one, sizeof(one), K_LOOKUP, "reg", NULL, 0);
    n = sizeof(chunk) / flen * flen;
    for (size_t i = 0; i < n; i += flen)
        memcpy(chunk + i, one, flen);
    ck_assert_int_eq(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0);
    /* Each ~20-byte lookup earns a ~100-byte answer: the answers fill both
     * socket buffers long before 256 MiB of lookups.  Stop when the server
     * drops us, or when it has taken nothing for 4 s (it is stuck). */
    t0 = now_s();
    while (!dropped && sent < (256u << 20) && now_s() - t0 < 30) {
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        size_t off = sent % n;
        ssize_t k;

        if (poll(&pfd, 1, 4000) != 1)
            break;
        if (pfd.revents & (POLLERR | POLLHUP)) {
            dropped = true;
            break;
        }
        k = send(fd, chunk + off, n - off, MSG_NOSIGNAL);
        if (k > 0)
            sent += (size_t)k;
        else if (k < 0 && (errno == EPIPE || errno == ECONNRESET))
            dropped = true;
        else if (k < 0 && errno != EAGAIN && errno != EINTR)
            ck_abort_msg("flood send: %s", strerror(errno));
    }
    ck_assert_msg(dropped,
                  "after %zu bytes of lookups the server neither reads more "
                  "nor drops the client that does not read (stuck sending "
                  "to it?)",
                  sent);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* ---- the client facing a fake server ---------------------------------------------- */

enum fake_mode {
    FAKE_SILENT,     /* accepts, reads the hello, never answers */
    FAKE_GARBAGE,    /* answers with text */
    FAKE_VERSION,    /* answers with a frame of version 2 */
    FAKE_MIDFRAME,   /* answers half a frame, then closes */
    FAKE_HUGE,       /* announces a 1 MiB frame */
    FAKE_ERROR,      /* answers with an ERROR frame */
    FAKE_WRONG_KIND, /* answers the hello with a FOUND */
};

struct fake {
    int lfd;
    int port;
    int stop[2];
    enum fake_mode mode;
    pthread_t th;
    bool got_hello;
};

/* Reads one frame with a deadline; false on anything else. */
static bool fake_read_frame(int fd, uint8_t *buf, size_t cap)
{
    size_t got = 0, want = HDR;

    while (got < want) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        ssize_t n;

        if (poll(&pfd, 1, 5000) != 1)
            return false;
        n = recv(fd, buf + got, want - got, 0);
        if (n <= 0)
            return false;
        got += (size_t)n;
        if (got == HDR) {
            want = get32(buf + 8);
            if (want < HDR || want > cap)
                return false;
        }
    }
    return true;
}

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    struct pollfd pfd[2] = {{.fd = f->lfd, .events = POLLIN},
                            {.fd = f->stop[0], .events = POLLIN}};
    static uint8_t buf[FRAME_MAX];
    size_t len = 0;
    int fd;

    if (poll(pfd, 2, 10000) != 1 || pfd[1].revents)
        return NULL;
    fd = accept(f->lfd, NULL, NULL);
    if (fd < 0)
        return NULL;
    f->got_hello = fake_read_frame(fd, buf, sizeof(buf)) &&
                   (buf[6] | buf[7] << 8) == K_HELLO;
    switch (f->mode) {
    case FAKE_SILENT:
        break;
    case FAKE_GARBAGE:
        len = (size_t)snprintf((char *)buf, sizeof(buf),
                               "HTTP/1.1 400 Bad Request\r\n\r\n");
        break;
    case FAKE_VERSION:
        header(buf, FERRY__BLOB_MAGIC, 2, K_HELLO_OK, HDR);
        len = HDR;
        break;
    case FAKE_MIDFRAME:
        len = frame(buf, sizeof(buf), K_HELLO_OK, NULL, "0123456789abcdef",
                    16);
        len -= 10;
        break;
    case FAKE_HUGE:
        header(buf, FERRY__BLOB_MAGIC, 1, K_HELLO_OK, 1u << 20);
        len = HDR;
        break;
    case FAKE_ERROR:
        len = frame(buf, sizeof(buf), K_ERROR, "the fake says no", NULL, 0);
        break;
    case FAKE_WRONG_KIND:
        len = frame(buf, sizeof(buf), K_FOUND, NULL, "x", 1);
        break;
    }
    if (len > 0 && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
        f->got_hello = false;
    if (f->mode == FAKE_SILENT)
        (void)poll(&pfd[1], 1, 10000); /* until the test is done */
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);

    memset(f, 0, sizeof(*f));
    f->mode = mode;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    f->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(f->lfd, 0);
    ck_assert_int_eq(bind(f->lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(f->lfd, 4), 0);
    ck_assert_int_eq(getsockname(f->lfd, (struct sockaddr *)&sa, &sl), 0);
    f->port = ntohs(sa.sin_port);
    ck_assert_int_eq(pipe(f->stop), 0);
    ck_assert_int_eq(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    tu_write_all(f->stop[1], "x", 1);
    ck_assert_int_eq(pthread_join(f->th, NULL), 0);
    close(f->lfd);
    close(f->stop[0]);
    close(f->stop[1]);
}

/* Connects to a fake server of `mode`; checks the error, its sentence
 * (want) and that it came within max_s seconds. */
static void fake_case(enum fake_mode mode, int timeout_ms, int want_ret,
                      const char *want, double max_s)
{
    struct fake f;
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry_oob_conn_t *conn = NULL;
    char hostport[32], err[512];
    double t0, dt;
    int ret;

    fake_start(&f, mode);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", f.port);
    t0 = now_s();
    ret = ferry_oob_connect(ctx, hostport, timeout_ms, &conn);
    dt = now_s() - t0;
    snprintf(err, sizeof(err), "%s", ferry_last_error());
    fake_stop(&f);
    ck_assert_msg(f.got_hello, "the fake server did not get a hello");
    ck_assert_msg(ret == want_ret, "connect gave %d (%s): %s, expected %d",
                  ret, ferry_strerror(ret), err, want_ret);
    ck_assert_ptr_null(conn);
    ck_assert_msg(strstr(err, want) != NULL,
                  "sentence \"%s\" lacks \"%s\"", err, want);
    ck_assert_msg(dt < max_s, "connect took %.3f s", dt);
    ck_assert_msg(mode != FAKE_SILENT || dt >= timeout_ms / 1000.0 - 0.05,
                  "gave up after %.3f s, before its %d ms", dt, timeout_ms);
    ferry_context_destroy(ctx);
}

START_TEST(test_fake_server_silent)
{
    /* The deadline holds: 300 ms, not the 2 s allowed here. */
    fake_case(FAKE_SILENT, 300, FERRY_ETIMEDOUT, "deadline", 2.0);
}
END_TEST

START_TEST(test_fake_server_garbage)
{
    fake_case(FAKE_GARBAGE, 3000, FERRY_EPROTO, "not a ferry frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_wrong_version)
{
    fake_case(FAKE_VERSION, 3000, FERRY_EINCOMPAT, "version 2", 2.0);
}
END_TEST

START_TEST(test_fake_server_closes_mid_frame)
{
    fake_case(FAKE_MIDFRAME, 3000, FERRY_ECONNRESET, "mid-frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_huge_frame)
{
    fake_case(FAKE_HUGE, 3000, FERRY_EPROTO, "1048576-byte frame", 2.0);
}
END_TEST

START_TEST(test_fake_server_error_frame)
{
    fake_case(FAKE_ERROR, 3000, FERRY_EPROTO, "refused: the fake says no",
              2.0);
}
END_TEST

START_TEST(test_fake_server_wrong_kind)
{
    fake_case(FAKE_WRONG_KIND, 3000, FERRY_EPROTO,
              "answered the hello with frame kind 19", 2.0);
}
END_TEST

/* ---- suite ------------------------------------------------------------------------------ */

static Suite *oob_suite(void)
{
    Suite *s = suite_create("oob");
    TCase *tc;

    tc = tu_tcase(s, "raw", 60);
    tcase_add_test(tc, test_raw_garbage);
    tcase_add_test(tc, test_raw_wrong_version);
    tcase_add_test(tc, test_raw_oversized);
    tcase_add_test(tc, test_raw_undersized);
    tcase_add_test(tc, test_raw_truncated_then_close);
    tcase_add_test(tc, test_raw_bad_checksum);
    tcase_add_test(tc, test_raw_unknown_kind);
    tcase_add_test(tc, test_raw_server_kind_from_client);
    tcase_add_test(tc, test_raw_lookup_before_hello);
    tcase_add_test(tc, test_raw_malformed_lookup);
    tcase_add_test(tc, test_raw_malformed_offer);
    tcase_add_test(tc, test_raw_hello_bad_address);
    tcase_add_test(tc, test_raw_hello_trailing_bytes);
    tcase_add_test(tc, test_raw_hello_twice);
    tcase_add_test(tc, test_accept_reports_incompatible_client);
    tcase_add_test(tc, test_raw_stalled_frame);
    tcase_add_test(tc, test_raw_flood_without_reading);
    tc = tu_tcase(s, "fake-server", 60);
    tcase_add_test(tc, test_fake_server_silent);
    tcase_add_test(tc, test_fake_server_garbage);
    tcase_add_test(tc, test_fake_server_wrong_version);
    tcase_add_test(tc, test_fake_server_closes_mid_frame);
    tcase_add_test(tc, test_fake_server_huge_frame);
    tcase_add_test(tc, test_fake_server_error_frame);
    tcase_add_test(tc, test_fake_server_wrong_kind);
    return s;
}

int main(void)
{
    return tu_run(oob_suite());
}
