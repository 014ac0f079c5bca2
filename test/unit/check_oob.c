/*
 * oob module (TCP bootstrap) on the wire, with frames built by ferry's own
 * blob writer and the handshake's own proofs: every malformed frame a raw
 * socket can send is refused without hurting the listener, a client
 * facing a fake server fails with the right error within its deadline,
 * the listener's bounds hold against raw clients (handshakes and idle
 * clients time out, clients that never read do not stall others, offers
 * are capped), and the blob-level calls of oob.h work across clients.
 * (The exchange, tokens and bad arguments through the API:
 * test/api/check_oob.c; hostile clients the public API can show:
 * test/api/check_oob_hostile.c.)
 *
 * Listeners bind 127.0.0.1:0 (ferry__oob_port tells the port), so suites
 * running side by side never collide.
 */
#include "bootutil.h"
#include "sockutil.h"

#include "base/blob.h"
#include "oob/auth.h"
#include "oob/conn.h"
#include "oob/oob.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Frame kinds and limits of lib/oob (the wire format under test). */
enum {
    K_OLD_HELLO = FERRY__FRAME_OLD_HELLO,
    K_ERROR = FERRY__FRAME_ERROR,
    K_HELLO = FERRY__FRAME_AUTH_HELLO,
    K_CHALLENGE = FERRY__FRAME_AUTH_CHALLENGE,
    K_PROOF = FERRY__FRAME_AUTH_PROOF,
    K_AUTH_OK = FERRY__FRAME_AUTH_OK,
    K_LOOKUP = FERRY__FRAME_LOOKUP,
    K_FOUND = FERRY__FRAME_FOUND,
    K_OFFER = FERRY__FRAME_OFFER,
};
#define FRAME_MAX FERRY__FRAME_MAX
#define HDR FERRY__BLOB_HEADER_LEN
#define NONCE FERRY__OOB_NONCE_LEN

/* ---- raw sockets and frames --------------------------------------------------- */

static int raw_connect(int port)
{
    int fd = su_dial(port);

    ck_assert_msg(fd >= 0, "raw connect to port %d: %s", port,
                  strerror(errno));
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
/* A frame version this ferry does not speak. */
#define WRONG_VERSION (FERRY__BLOB_VERSION + 1u)

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

/* The address blob of ctx into addr (512 bytes); its length. */
static size_t address_of(ferry_context_t *ctx, uint8_t *addr)
{
    size_t alen = 512;
    int ret = ferry_context_address(ctx, addr, &alen);

    ck_assert_msg(ret == 0, "address: %s", ferry_last_error());
    return alen;
}

/* The hello a real client sends: a fresh nonce, kept in cn. */
static size_t hello_frame(uint8_t *buf, size_t cap, uint8_t *cn)
{
    struct ferry__blob_writer w;
    size_t len = 0;

    ck_assert_int_eq(ferry__oob_nonce(cn), 0);
    ferry__blob_begin(&w, buf, cap, (enum ferry__blob_kind)K_HELLO);
    ferry__blob_put_bytes(&w, cn, NONCE);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
}

/*
 * A proof frame for nonces cn and sn with secret and address addr, as a
 * real client builds it; `extra` appends a stray field.
 */
static size_t proof_frame(uint8_t *buf, size_t cap, const char *secret,
                          const uint8_t *cn, const uint8_t *sn,
                          const void *addr, size_t alen, bool extra)
{
    struct ferry__blob_writer w;
    uint8_t proof[FERRY__OOB_PROOF_LEN];
    size_t len = 0;

    ferry__oob_client_proof(secret, sn, cn, addr, alen, proof);
    ferry__blob_begin(&w, buf, cap, (enum ferry__blob_kind)K_PROOF);
    ferry__blob_put_bytes(&w, proof, sizeof(proof));
    ferry__blob_put_u32(&w, (uint32_t)alen);
    ferry__blob_put_bytes(&w, addr, alen);
    if (extra)
        ferry__blob_put_u16(&w, 7);
    ck_assert_int_eq(ferry__blob_end(&w, &len), 0);
    return len;
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

/* Sends a hello and reads the challenge: the server's nonce into sn
 * (checking its proof for an empty secret). */
static void raw_challenge(int fd, uint8_t *cn, uint8_t *sn)
{
    uint8_t buf[FRAME_MAX], want[FERRY__OOB_PROOF_LEN];
    size_t len = hello_frame(buf, sizeof(buf), cn);

    raw_send(fd, buf, len);
    ck_assert_uint_eq(raw_read_frame(fd, buf, sizeof(buf), 3000, &len),
                      K_CHALLENGE);
    ck_assert_uint_eq(len, HDR + NONCE + FERRY__OOB_PROOF_LEN);
    memcpy(sn, buf + HDR, NONCE);
    ferry__oob_server_proof("", cn, sn, want);
    ck_assert_msg(memcmp(buf + HDR + NONCE, want, sizeof(want)) == 0,
                  "the server's proof for an empty token is wrong");
}

/* The whole handshake of a real client with the address of ctx and an
 * empty token, on a raw socket. */
static void raw_hello(int fd, ferry_context_t *ctx)
{
    uint8_t addr[512], srv[512];
    size_t alen = address_of(ctx, addr), slen = sizeof(srv);
    int ret = ferry__oob_auth_client(fd, "", addr, alen,
                                     ferry__oob_deadline(3000), "raw server",
                                     srv, &slen);

    ck_assert_msg(ret == 0, "raw handshake: %s", ferry_last_error());
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

    header(h, FERRY__BLOB_MAGIC, WRONG_VERSION, K_HELLO, HDR);
    char said[64];

    snprintf(said, sizeof(said), "frame version %u", WRONG_VERSION);
    raw_case(h, sizeof(h), false, false, said);
}
END_TEST

START_TEST(test_raw_oversized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, FERRY__BLOB_VERSION, K_HELLO, 1u << 20);
    raw_case(h, sizeof(h), false, false, "announced a 1048576-byte frame");
}
END_TEST

START_TEST(test_raw_undersized)
{
    uint8_t h[HDR];

    header(h, FERRY__BLOB_MAGIC, FERRY__BLOB_VERSION, K_HELLO, 8);
    raw_case(h, sizeof(h), false, false, "announced a 8-byte frame");
}
END_TEST

START_TEST(test_raw_truncated_then_close)
{
    uint8_t buf[HDR + 20];

    memset(buf, 0xab, sizeof(buf));
    header(buf, FERRY__BLOB_MAGIC, FERRY__BLOB_VERSION, K_HELLO, 64);
    raw_case(buf, sizeof(buf), false, true, NULL);
}
END_TEST

START_TEST(test_raw_bad_checksum)
{
    struct srv s;
    uint8_t buf[FRAME_MAX], cn[NONCE];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    len = hello_frame(buf, sizeof(buf), cn);
    buf[len - 1] ^= 0x40; /* one payload bit */
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "checksum", NULL);
    close(fd);
    /* And a corrupted checksum field itself. */
    len = hello_frame(buf, sizeof(buf), cn);
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
    uint8_t junk[40], buf[FRAME_MAX], cn[NONCE], sn[NONCE];
    ferry__oob_conn_t *acc = NULL;
    size_t len;
    int fd, ret;

    memset(junk, 0x5a, sizeof(junk));
    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_challenge(fd, cn, sn);
    /* The right proof, over an address that is no address blob. */
    len = proof_frame(buf, sizeof(buf), "", cn, sn, junk, sizeof(junk),
                      false);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "address blob", NULL);
    close(fd);
    /* It never reaches the application's accept. */
    ret = ferry__oob_accept(s.lis, 300, &acc);
    ck_assert_msg(ret == FERRY_EAGAIN, "accept gave %d: %s", ret,
                  ferry_last_error());
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

START_TEST(test_raw_hello_trailing_bytes)
{
    struct srv s;
    uint8_t addr[512], buf[FRAME_MAX], cn[NONCE], sn[NONCE];
    size_t alen, len;
    int fd;

    srv_open(&s, NULL);
    alen = address_of(s.ctx, addr);
    fd = raw_connect(s.port);
    raw_challenge(fd, cn, sn);
    len = proof_frame(buf, sizeof(buf), "", cn, sn, addr, alen, true);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "malformed proof frame", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* A second hello could rewrite the address accept is reading. */
START_TEST(test_raw_hello_twice)
{
    struct srv s;
    uint8_t buf[FRAME_MAX], cn[NONCE];
    size_t len;
    int fd;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, s.ctx);
    len = hello_frame(buf, sizeof(buf), cn);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "hello only once", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * The server's side of a wrong token: a client whose proof was made with
 * another secret is refused with the sentence, and never accepted.
 */
START_TEST(test_raw_wrong_proof)
{
    struct srv s;
    uint8_t addr[512], buf[FRAME_MAX], cn[NONCE], sn[NONCE];
    ferry__oob_conn_t *acc = NULL;
    size_t alen, len;
    int fd, ret;

    srv_open(&s, NULL); /* empty token, on loopback */
    alen = address_of(s.ctx, addr);
    fd = raw_connect(s.port);
    raw_challenge(fd, cn, sn);
    len = proof_frame(buf, sizeof(buf), "guess", cn, sn, addr, alen, false);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000,
                   "the client's bootstrap token does not match the "
                   "server's (give both sides the same token: "
                   "FERRY_OOB_TOKEN or config.oob_token)",
                   NULL);
    close(fd);
    ret = ferry__oob_accept(s.lis, 300, &acc);
    ck_assert_msg(ret == FERRY_EAGAIN, "accept gave %d: %s", ret,
                  ferry_last_error());
    /* One try per connection: a proof after the refusal is not read, and
     * a proof before any challenge is no hello. */
    fd = raw_connect(s.port);
    len = proof_frame(buf, sizeof(buf), "", cn, sn, addr, alen, false);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "first frame must be a hello", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* A client of the release that sent its token in clear is told so. */
START_TEST(test_raw_old_hello)
{
    struct srv s;
    uint8_t addr[512], buf[FRAME_MAX];
    size_t alen, len;
    int fd;

    srv_open(&s, NULL);
    alen = address_of(s.ctx, addr);
    len = frame(buf, sizeof(buf), K_OLD_HELLO, "", addr, alen);
    fd = raw_connect(s.port);
    raw_send(fd, buf, len);
    expect_dropped(fd, 3000, "older ferry", NULL);
    close(fd);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/*
 * A client address that is a well-formed blob of another provider passes
 * the hello; ferry__oob_accept then reports the peer error, with the
 * client named and the reason intact.
 */
START_TEST(test_accept_reports_incompatible_client)
{
    struct srv s;
    ferry_context_t *shm = ctx_open("shm", 0, NULL);
    ferry__oob_conn_t *acc = NULL;
    int fd, ret;

    srv_open(&s, NULL);
    fd = raw_connect(s.port);
    raw_hello(fd, shm);
    ret = ferry__oob_accept(s.lis, 3000, &acc);
    ck_assert_msg(ret == FERRY_EINCOMPAT, "accept gave %d: %s", ret,
                  ferry_last_error());
    ck_assert_ptr_null(acc);
    ck_assert_msg(strstr(ferry_last_error(),
                         "bootstrap accept: client 127.0.0.1:") ==
                      ferry_last_error(),
                  "sentence: %s", ferry_last_error());
    ck_assert_msg(strstr(ferry_last_error(), "provider 'shm'") != NULL,
                  "sentence: %s", ferry_last_error());
    /* The refused client is dropped, not offered again. */
    expect_dropped(fd, 3000, NULL, NULL);
    close(fd);
    ret = ferry__oob_accept(s.lis, 200, &acc);
    ck_assert_int_eq(ret, FERRY_EAGAIN);
    client_ok(&s, NULL);
    srv_close(&s);
    ferry_context_close(shm);
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
    header(buf, FERRY__BLOB_MAGIC, FERRY__BLOB_VERSION, K_HELLO, 64);
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
 * freeze the service thread: the server stops reading it once its
 * answers cannot go out, drops it when they stay stuck (500 ms here), and
 * others are served.
 */
START_TEST(test_raw_flood_without_reading)
{
    struct srv s;
    struct ferry__oob_limits lim = FERRY__OOB_LIMITS_DEFAULT;
    static uint8_t chunk[64 * 1024];
    uint8_t one[64];
    size_t flen, n, sent = 0;
    bool dropped = false;
    double t0;
    int fd;

    srv_open(&s, NULL);
    lim.send_stall_ms = 500;
    ck_assert_int_eq(ferry__oob_set_limits(s.lis, &lim), 0);
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

/* ---- the listener's bounds, with raw clients ---------------------------- */

/* The listener of s with the default limits but those set in `set`. */
static void limits(struct srv *s, void (*set)(struct ferry__oob_limits *))
{
    struct ferry__oob_limits lim = FERRY__OOB_LIMITS_DEFAULT;

    set(&lim);
    ck_assert_int_eq(ferry__oob_set_limits(s->lis, &lim), 0);
}

static void short_handshake(struct ferry__oob_limits *l)
{
    l->handshake_ms = 300;
}

/* A socket that never finishes the handshake is dropped once its time is
 * up, whether it said nothing or stopped after its hello. */
START_TEST(test_handshake_times_out)
{
    struct srv s;
    uint8_t cn[NONCE], sn[NONCE];
    double dt;
    int quiet, halfway;

    srv_open(&s, NULL);
    limits(&s, short_handshake);
    quiet = raw_connect(s.port);
    halfway = raw_connect(s.port);
    raw_challenge(halfway, cn, sn);
    expect_dropped(quiet, 5000, "the handshake did not finish within 300 ms",
                   &dt);
    expect_dropped(halfway, 5000, "the handshake did not finish", NULL);
    close(quiet);
    close(halfway);
    client_ok(&s, NULL); /* a client that answers has time enough */
    srv_close(&s);
}
END_TEST

static void short_idle(struct ferry__oob_limits *l)
{
    l->idle_ms = 400;
}

/* An authenticated client silent past the idle limit is closed, and its
 * next request says why; one that pings is kept. */
START_TEST(test_idle_client_closed)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry__oob_conn_t *idle = NULL, *pinger = NULL;
    ferry_rmem_t *rmem = NULL;
    int ret;

    srv_open(&s, NULL);
    limits(&s, short_idle);
    ctx = ctx_open(PROV, 0, NULL);
    ck_assert_int_eq(ferry__oob_connect(ctx, s.hostport, 3000, &idle), 0);
    ck_assert_int_eq(ferry__oob_connect(ctx, s.hostport, 3000, &pinger), 0);
    for (int i = 0; i < 12; i++) {
        usleep(100 * 1000);
        ret = ferry__oob_ping(pinger, 2000);
        ck_assert_msg(ret == 0, "ping %d: %s", i, ferry_last_error());
    }
    ret = ferry__oob_lookup(idle, "reg", 2000, &rmem);
    ck_assert_msg(ret == FERRY_ECONNRESET, "lookup after idling gave %d: %s",
                  ret, ferry_last_error());
    tu_assert_sentence("closed the connection",
                       "after 400 ms without a request; join again", NULL);
    ret = ferry__oob_lookup(pinger, "reg", 2000, &rmem);
    ck_assert_msg(ret == 0, "the pinging client: %s", ferry_last_error());
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ferry__oob_disconnect(idle);
    ferry__oob_disconnect(pinger);
    ferry_context_close(ctx);
    srv_close(&s);
}
END_TEST

static void two_clients(struct ferry__oob_limits *l)
{
    l->max_auth = 2;
}

/* Beyond the authenticated budget a client is told to come back later;
 * a slot that frees up is taken again. */
START_TEST(test_too_many_clients)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry__oob_conn_t *c[3] = {NULL, NULL, NULL};
    int ret;

    srv_open(&s, NULL);
    limits(&s, two_clients);
    ctx = ctx_open(PROV, 0, NULL);
    ck_assert_int_eq(ferry__oob_connect(ctx, s.hostport, 3000, &c[0]), 0);
    ck_assert_int_eq(ferry__oob_connect(ctx, s.hostport, 3000, &c[1]), 0);
    ret = ferry__oob_connect(ctx, s.hostport, 3000, &c[2]);
    ck_assert_msg(ret == FERRY_EAGAIN, "third client gave %d: %s", ret,
                  ferry_last_error());
    tu_assert_sentence("already serves 2 clients", "try again later", NULL);
    ferry__oob_disconnect(c[0]);
    /* The server notices the disconnect in its own time. */
    for (int i = 0; i < 100 && ret != 0; i++) {
        usleep(20 * 1000);
        ret = ferry__oob_connect(ctx, s.hostport, 3000, &c[2]);
    }
    ck_assert_msg(ret == 0, "after a disconnect: %s", ferry_last_error());
    ferry__oob_disconnect(c[1]);
    ferry__oob_disconnect(c[2]);
    ferry_context_close(ctx);
    srv_close(&s);
}
END_TEST

/* Clients that pipeline lookups and never read, reconnecting when they
 * are dropped: they run in a thread of their own (no asserts there). */
#define NFLOOD 8
struct flood {
    int port;
    uint8_t addr[512];
    size_t alen;
    atomic_bool stop; /* set by the test, read by the flood thread */
    int fd[NFLOOD];
    size_t sent, drops;
};

/* A raw, authenticated, non-blocking socket; -1 on failure. */
static int flood_connect(struct flood *f)
{
    uint8_t srv[512];
    size_t slen = sizeof(srv);
    int fd = su_dial(f->port);

    if (fd < 0 ||
        ferry__oob_auth_client(fd, "", f->addr, f->alen,
                               ferry__oob_deadline(3000), "flood", srv,
                               &slen) != 0 ||
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static void *flood_main(void *arg)
{
    struct flood *f = arg;
    static uint8_t chunk[16 * 1024];
    uint8_t one[64];
    struct ferry__blob_writer w;
    size_t flen = 0, n;

    ferry__blob_begin(&w, one, sizeof(one), (enum ferry__blob_kind)K_LOOKUP);
    ferry__blob_put_str(&w, "reg");
    if (ferry__blob_end(&w, &flen) != 0)
        return NULL;
    n = sizeof(chunk) / flen * flen;
    for (size_t i = 0; i < n; i += flen)
        memcpy(chunk + i, one, flen);
    while (!atomic_load(&f->stop)) {
        struct pollfd pfd[NFLOOD];

        for (int i = 0; i < NFLOOD; i++) {
            if (f->fd[i] < 0)
                f->fd[i] = flood_connect(f);
            pfd[i] = (struct pollfd){.fd = f->fd[i], .events = POLLOUT};
        }
        if (poll(pfd, NFLOOD, 50) <= 0)
            continue;
        for (int i = 0; i < NFLOOD; i++) {
            ssize_t k;

            if (pfd[i].revents == 0)
                continue;
            k = pfd[i].revents & (POLLERR | POLLHUP)
                    ? -1
                    : send(f->fd[i], chunk + f->sent % flen,
                           n - f->sent % flen, MSG_NOSIGNAL);
            if (k > 0) {
                f->sent += (size_t)k;
            } else if (k < 0 && errno != EAGAIN && errno != EINTR) {
                close(f->fd[i]);
                f->fd[i] = -1;
                f->drops++;
            }
        }
    }
    for (int i = 0; i < NFLOOD; i++)
        if (f->fd[i] >= 0)
            close(f->fd[i]);
    return NULL;
}

/*
 * Eight clients that pipeline lookups and never read their answers do
 * not keep a legitimate client from connecting and looking up, each with
 * a 2000 ms timeout.
 */
START_TEST(test_pipelining_clients_do_not_stall_others)
{
    struct srv s;
    struct flood f = {0};
    pthread_t th;

    srv_open(&s, NULL);
    f.port = s.port;
    f.alen = address_of(s.ctx, f.addr); /* any well-formed address */
    for (int i = 0; i < NFLOOD; i++)
        f.fd[i] = -1;
    ck_assert_int_eq(pthread_create(&th, NULL, flood_main, &f), 0);
    usleep(300 * 1000); /* let them fill their sockets */
    for (int i = 0; i < 5; i++) {
        ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
        ferry__oob_conn_t *conn = NULL;
        ferry_rmem_t *rmem = NULL;
        int ret = ferry__oob_connect(ctx, s.hostport, 2000, &conn);

        ck_assert_msg(ret == 0, "connect %d under the flood: %s", i,
                      ferry_last_error());
        ret = ferry__oob_lookup(conn, "reg", 2000, &rmem);
        ck_assert_msg(ret == 0, "lookup %d under the flood: %s", i,
                      ferry_last_error());
        ck_assert_int_eq(ferry_rmem_close(rmem), 0);
        ferry__oob_disconnect(conn);
        ferry_context_close(ctx);
    }
    atomic_store(&f.stop, true);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_msg(f.sent > 0, "the flood sent nothing");
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

static void small_offers(struct ferry__oob_limits *l)
{
    l->max_offers = 16;
    l->max_offer_bytes = 4096;
}

/* The server's count of c's offers and of all names; under its lock. */
static void offer_counts(struct srv *s, size_t *names)
{
    pthread_mutex_lock(&s->lis->lock);
    *names = s->lis->names.count;
    pthread_mutex_unlock(&s->lis->lock);
}

/*
 * Offers beyond a connection's caps (16 offers, 4096 bytes here) are
 * refused with a sentence, the connection stays, the server holds no
 * more than the caps however many come, and an offer of a name already
 * offered replaces it.
 */
START_TEST(test_offer_caps)
{
    struct srv s;
    ferry_context_t *ctx;
    ferry__oob_conn_t *conn = NULL;
    uint8_t blob[512];
    char name[32];
    size_t names;
    int ret;

    memset(blob, 0x42, sizeof(blob));
    srv_open(&s, NULL);
    limits(&s, small_offers);
    ctx = ctx_open(PROV, 0, NULL);
    ck_assert_int_eq(ferry__oob_connect(ctx, s.hostport, 3000, &conn), 0);
    for (int i = 0; i < 16; i++) {
        snprintf(name, sizeof(name), "o%d", i);
        ret = ferry__oob_offer_blob(conn, name, blob, 16, 2000);
        ck_assert_msg(ret == 0, "offer %d: %s", i, ferry_last_error());
    }
    for (int i = 16; i < 2000; i++) {
        snprintf(name, sizeof(name), "o%d", i);
        ret = ferry__oob_offer_blob(conn, name, blob, 16, 2000);
        ck_assert_msg(ret == FERRY_ENOSPC, "offer %d gave %d: %s", i, ret,
                      ferry_last_error());
    }
    tu_assert_sentence("already offers 16 regions",
                       "withdraw one first", NULL);
    offer_counts(&s, &names);
    ck_assert_uint_eq(names, 16 + 1); /* and "reg" */
    /* A name already offered is replaced, not added. */
    ck_assert_int_eq(ferry__oob_offer_blob(conn, "o3", blob, 32, 2000), 0);
    /* Withdrawn, there is room again. */
    ck_assert_int_eq(ferry__oob_withdraw_offer(conn, "o0", 2000), 0);
    for (int i = 1; i < 16; i++) {
        snprintf(name, sizeof(name), "o%d", i);
        ck_assert_int_eq(ferry__oob_withdraw_offer(conn, name, 2000), 0);
    }
    /* The byte cap: 8 blobs of 512 bytes and their names pass 4096. */
    for (int i = 0; i < 7; i++) {
        snprintf(name, sizeof(name), "big%d", i);
        ret = ferry__oob_offer_blob(conn, name, blob, sizeof(blob), 2000);
        ck_assert_msg(ret == 0, "big offer %d: %s", i, ferry_last_error());
    }
    ret = ferry__oob_offer_blob(conn, "big7", blob, sizeof(blob), 2000);
    ck_assert_msg(ret == FERRY_ENOSPC, "the 8th big offer gave %d: %s", ret,
                  ferry_last_error());
    tu_assert_sentence("offering \"big7\" would bring this connection's "
                       "offers to",
                       "the most is 4096", NULL);
    /* The connection still serves. */
    ck_assert_int_eq(ferry__oob_ping(conn, 2000), 0);
    ferry__oob_disconnect(conn);
    ferry_context_close(ctx);
    srv_close(&s);
}
END_TEST

/* The highest descriptor this process has open. */
static int highest_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int high = 2;

    ck_assert_ptr_nonnull(d);
    while ((e = readdir(d)) != NULL)
        if (atoi(e->d_name) > high)
            high = atoi(e->d_name);
    closedir(d);
    return high;
}

/*
 * With no descriptor left, the listener makes room by dropping the oldest
 * handshake (with a sentence, for one that sent its hello) and accepts
 * the newcomer, rather than spinning on a listening socket that stays
 * readable.
 */
START_TEST(test_out_of_descriptors)
{
    struct srv s;
    struct rlimit rl, low;
    uint8_t cn[NONCE], sn[NONCE];
    int raw[8], dups[512], extra;
    size_t ndup = 0;

    srv_open(&s, NULL);
    for (int i = 0; i < 8; i++) {
        raw[i] = raw_connect(s.port);
        raw_challenge(raw[i], cn, sn); /* and then nothing */
    }
    usleep(200 * 1000); /* let the listener take them */
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    low = rl;
    low.rlim_cur = (rlim_t)highest_fd() + 16;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    while (ndup < TU_ARRAY_LEN(dups) && (dups[ndup] = dup(0)) >= 0)
        ndup++;
    ck_assert_msg(ndup < TU_ARRAY_LEN(dups) && errno == EMFILE,
                  "could not use up the descriptors (%zu dups)", ndup);
    /* One left: the newcomer's socket takes it, the listener has none. */
    close(dups[--ndup]);
    extra = raw_connect(s.port);
    raw_send(extra, "F", 1);
    expect_dropped(raw[0], 3000, "the server is out of file descriptors",
                   NULL);
    while (ndup > 0)
        close(dups[--ndup]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    for (int i = 0; i < 8; i++)
        close(raw[i]);
    close(extra);
    client_ok(&s, NULL);
    srv_close(&s);
}
END_TEST

/* ---- the blob-level calls (oob.h) --------------------------------------- */

/* Polls the listener's find until it gives want (the client's
 * disconnect reaches the server in its own time). */
static void find_until(struct srv *s, const char *name, int want)
{
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    size_t len = sizeof(blob);
    int ret = ferry__oob_find(s->lis, name, blob, &len);

    for (int i = 0; i < 200 && ret != want; i++) {
        usleep(10 * 1000);
        len = sizeof(blob);
        ret = ferry__oob_find(s->lis, name, blob, &len);
    }
    ck_assert_msg(ret == want, "find \"%s\" gave %d, expected %d: %s", name,
                  ret, want, ferry_last_error());
}

/* Looks name up through conn and checks it is `want` (len bytes). */
static void lookup_is(ferry__oob_conn_t *conn, const char *name,
                      const void *want, size_t wlen)
{
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    size_t len = sizeof(blob);
    int ret = ferry__oob_lookup_blob(conn, name, 2000, blob, &len);

    ck_assert_msg(ret == 0, "lookup \"%.40s\": %s", name, ferry_last_error());
    ck_assert_uint_eq(len, wlen);
    ck_assert_msg(memcmp(blob, want, len) == 0, "\"%.40s\" differs", name);
}

START_TEST(test_blob_calls)
{
    struct srv s;
    ferry_context_t *ca, *cb;
    ferry__oob_conn_t *a = NULL, *b = NULL;
    uint8_t pub[40], offer[60], out[FERRY__OOB_BLOB_MAX];
    char longname[FERRY__OOB_NAME_MAX + 2];
    size_t len;
    int ret;

    memset(pub, 'p', sizeof(pub));
    memset(offer, 'o', sizeof(offer));
    memset(longname, 'n', sizeof(longname));
    longname[FERRY__OOB_NAME_MAX] = '\0'; /* 300 characters: allowed */
    srv_open(&s, NULL);
    ca = ctx_open(PROV, 0, NULL);
    cb = ctx_open(PROV, 0, NULL);
    ck_assert_int_eq(ferry__oob_connect(ca, s.hostport, 3000, &a), 0);
    ck_assert_int_eq(ferry__oob_connect(cb, s.hostport, 3000, &b), 0);

    /* The listener's own: publish, replace, find, withdraw. */
    ck_assert_int_eq(ferry__oob_publish_blob(s.lis, "peers/srv", offer, 10),
                     0);
    ck_assert_int_eq(ferry__oob_publish_blob(s.lis, "peers/srv", pub,
                                             sizeof(pub)),
                     0);
    lookup_is(b, "peers/srv", pub, sizeof(pub));
    len = 8;
    ret = ferry__oob_find(s.lis, "peers/srv", out, &len);
    ck_assert_msg(ret == FERRY_ENOSPC && len == sizeof(pub),
                  "find with 8 bytes of room gave %d, len %zu", ret, len);
    len = 8;
    ret = ferry__oob_lookup_blob(b, "peers/srv", 2000, out, &len);
    ck_assert_msg(ret == FERRY_ENOSPC && len == sizeof(pub),
                  "lookup with 8 bytes of room gave %d, len %zu", ret, len);
    ck_assert_int_eq(ferry__oob_withdraw(s.lis, "peers/srv"), 0);
    ck_assert_int_eq(ferry__oob_withdraw(s.lis, "peers/srv"), FERRY_ENOENT);
    find_until(&s, "peers/srv", FERRY_ENOENT);

    /* A's offers: found by B's lookups and by the listener. */
    ret = ferry__oob_offer_blob(a, longname, offer, sizeof(offer), 2000);
    ck_assert_msg(ret == 0, "offer of a 300-character name: %s",
                  ferry_last_error());
    ck_assert_int_eq(ferry__oob_offer_blob(a, "regions/a/x", offer, 20, 2000),
                     0);
    lookup_is(b, longname, offer, sizeof(offer));
    lookup_is(b, "regions/a/x", offer, 20);
    find_until(&s, "regions/a/x", 0);
    /* Not among the listener's own publications, which is all that
     * ferry__oob_lookup asks for. */
    len = sizeof(out);
    ret = ferry__oob_lookup_published(b, "regions/a/x", 2000, out, &len);
    ck_assert_msg(ret == FERRY_ENOENT, "published-only lookup gave %d: %s",
                  ret, ferry_last_error());
    tu_assert_sentence("it published none under that name", NULL);
    /* The listener's own publication comes first. */
    ck_assert_int_eq(ferry__oob_publish_blob(s.lis, "regions/a/x", pub, 5),
                     0);
    lookup_is(b, "regions/a/x", pub, 5);
    len = sizeof(out);
    ck_assert_int_eq(
        ferry__oob_lookup_published(b, "regions/a/x", 2000, out, &len), 0);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(ferry__oob_withdraw(s.lis, "regions/a/x"), 0);
    lookup_is(b, "regions/a/x", offer, 20);
    /* Withdrawn by A: gone; a second withdrawal says there was none. */
    ck_assert_int_eq(ferry__oob_withdraw_offer(a, "regions/a/x", 2000), 0);
    ret = ferry__oob_withdraw_offer(a, "regions/a/x", 2000);
    ck_assert_msg(ret == FERRY_ENOENT, "second withdrawal gave %d: %s", ret,
                  ferry_last_error());
    len = sizeof(out);
    ret = ferry__oob_lookup_blob(b, "regions/a/x", 2000, out, &len);
    ck_assert_msg(ret == FERRY_ENOENT, "lookup after withdrawal gave %d: %s",
                  ret, ferry_last_error());
    /* B cannot withdraw what A offered. */
    ck_assert_int_eq(ferry__oob_withdraw_offer(b, longname, 2000),
                     FERRY_ENOENT);

    /* Names: 1 to 300 characters. */
    longname[FERRY__OOB_NAME_MAX] = 'n';
    longname[FERRY__OOB_NAME_MAX + 1] = '\0';
    ck_assert_int_eq(ferry__oob_offer_blob(a, longname, offer, 4, 2000),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry__oob_publish_blob(s.lis, "", pub, 4),
                     FERRY_EINVAL);
    longname[FERRY__OOB_NAME_MAX] = '\0';

    /* A goes away: its offers go with it. */
    ferry__oob_disconnect(a);
    find_until(&s, longname, FERRY_ENOENT);
    len = sizeof(out);
    ret = ferry__oob_lookup_blob(b, longname, 2000, out, &len);
    ck_assert_msg(ret == FERRY_ENOENT, "lookup after A left gave %d: %s", ret,
                  ferry_last_error());
    ferry__oob_disconnect(b);
    ferry_context_close(ca);
    ferry_context_close(cb);
    srv_close(&s);
}
END_TEST

/* ---- the client facing a fake server ---------------------------------------------- */

enum fake_mode {
    FAKE_SILENT,     /* accepts, reads the hello, never answers */
    FAKE_GARBAGE,    /* answers with text */
    FAKE_VERSION,    /* answers with a frame of another version */
    FAKE_MIDFRAME,   /* answers half a frame, then closes */
    FAKE_HUGE,       /* announces a 1 MiB frame */
    FAKE_ERROR,      /* answers with an ERROR frame */
    FAKE_WRONG_KIND, /* answers the hello with a FOUND */
    FAKE_BAD_PROOF,  /* a challenge whose proof is not the token's */
    FAKE_OLD,        /* refuses the hello as a listener before the
                        handshake did */
    FAKE_HANGUP,     /* reads the hello, closes without a byte */
    FAKE_SLAM,       /* closes at once, the hello unread (a reset) */
};

struct fake {
    int lfd;
    int port;
    int stop[2];
    enum fake_mode mode;
    pthread_t th;
    bool got_hello;
    char got_error[512]; /* FAKE_BAD_PROOF: the client's parting sentence */
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
    if (fd < 0 || f->mode == FAKE_SLAM) {
        close(fd);
        return NULL;
    }
    f->got_hello = fake_read_frame(fd, buf, sizeof(buf)) &&
                   (buf[6] | buf[7] << 8) == K_HELLO;
    switch (f->mode) {
    case FAKE_SILENT:
    case FAKE_HANGUP:
    case FAKE_SLAM:
        break;
    case FAKE_GARBAGE:
        len = (size_t)snprintf((char *)buf, sizeof(buf),
                               "HTTP/1.1 400 Bad Request\r\n\r\n");
        break;
    case FAKE_VERSION:
        header(buf, FERRY__BLOB_MAGIC, WRONG_VERSION, K_CHALLENGE, HDR);
        len = HDR;
        break;
    case FAKE_MIDFRAME:
        len = frame(buf, sizeof(buf), K_CHALLENGE, NULL, "0123456789abcdef",
                    16);
        len -= 10;
        break;
    case FAKE_HUGE:
        header(buf, FERRY__BLOB_MAGIC, FERRY__BLOB_VERSION, K_CHALLENGE, 1u << 20);
        len = HDR;
        break;
    case FAKE_ERROR:
        len = frame(buf, sizeof(buf), K_ERROR, "the fake says no", NULL, 0);
        break;
    case FAKE_OLD:
        len = frame(buf, sizeof(buf), K_ERROR,
                    "the first frame must be a hello", NULL, 0);
        break;
    case FAKE_WRONG_KIND:
        len = frame(buf, sizeof(buf), K_FOUND, NULL, "x", 1);
        break;
    case FAKE_BAD_PROOF: {
        struct ferry__blob_writer w;
        uint8_t body[NONCE + FERRY__OOB_PROOF_LEN];

        memset(body, 0x33, sizeof(body));
        ferry__blob_begin(&w, buf, sizeof(buf),
                          (enum ferry__blob_kind)K_CHALLENGE);
        ferry__blob_put_bytes(&w, body, sizeof(body));
        if (ferry__blob_end(&w, &len) != 0)
            len = 0;
        break;
    }
    }
    if (len > 0 && send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
        f->got_hello = false;
    if (f->mode == FAKE_BAD_PROOF && fake_read_frame(fd, buf, sizeof(buf)) &&
        (buf[6] | buf[7] << 8) == K_ERROR) {
        struct ferry__blob_reader r;

        if (ferry__blob_open(&r, buf, get32(buf + 8),
                             (enum ferry__blob_kind)K_ERROR, "frame") == 0)
            ferry__blob_get_str(&r, f->got_error, sizeof(f->got_error));
    }
    if (f->mode == FAKE_SILENT)
        (void)poll(&pfd[1], 1, 10000); /* until the test is done */
    close(fd);
    return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
    memset(f, 0, sizeof(*f));
    f->mode = mode;
    f->lfd = su_listen(&f->port);
    ck_assert_int_ge(f->lfd, 0);
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
/* The sentence of fake_case's connect (closing its context clears it). */
static char fake_err[512];

static void fake_case(enum fake_mode mode, int timeout_ms, int want_ret,
                      const char *want, double max_s)
{
    struct fake f;
    ferry_context_t *ctx = ctx_open(PROV, 0, NULL);
    ferry__oob_conn_t *conn = NULL;
    char hostport[32], *err = fake_err;
    double t0, dt;
    int ret;

    fake_start(&f, mode);
    snprintf(hostport, sizeof(hostport), "127.0.0.1:%d", f.port);
    t0 = now_s();
    ret = ferry__oob_connect(ctx, hostport, timeout_ms, &conn);
    dt = now_s() - t0;
    snprintf(err, sizeof(fake_err), "%s", ferry_last_error());
    fake_stop(&f);
    ck_assert_msg(f.got_hello || mode == FAKE_SLAM,
                  "the fake server did not get a hello");
    ck_assert_msg(ret == want_ret, "connect gave %d (%s): %s, expected %d",
                  ret, ferry_strerror(ret), err, want_ret);
    ck_assert_ptr_null(conn);
    ck_assert_msg(strstr(err, want) != NULL,
                  "sentence \"%s\" lacks \"%s\"", err, want);
    ck_assert_msg(dt < max_s, "connect took %.3f s", dt);
    ck_assert_msg(mode != FAKE_SILENT || dt >= timeout_ms / 1000.0 - 0.05,
                  "gave up after %.3f s, before its %d ms", dt, timeout_ms);
    ck_assert_msg(mode != FAKE_BAD_PROOF ||
                      strstr(f.got_error, "server's proof does not match") !=
                          NULL,
                  "the client told the fake \"%s\"", f.got_error);
    ferry_context_close(ctx);
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
    char said[64];

    snprintf(said, sizeof(said), "version %u", WRONG_VERSION);
    fake_case(FAKE_VERSION, 3000, FERRY_EINCOMPAT, said, 2.0);
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
    char want[64];

    snprintf(want, sizeof(want), "answered the hello with frame kind %d",
             K_FOUND);
    fake_case(FAKE_WRONG_KIND, 3000, FERRY_EPROTO, want, 2.0);
}
END_TEST

/* A port that accepts and hangs up without a byte (a port forward with
 * nothing behind it, say) is not said to have sent something: the client
 * says it closed without answering, and what that likely means. */
START_TEST(test_fake_server_hangs_up)
{
    fake_case(FAKE_HANGUP, 3000, FERRY_ECONNRESET,
              "closed the connection without answering", 2.0);
    ck_assert_msg(strstr(fake_err, "not a ferry listener") != NULL &&
                      strstr(fake_err, "port forward") != NULL,
                  "the sentence does not say what may have answered: %s",
                  fake_err);
    fake_case(FAKE_SLAM, 3000, FERRY_ECONNRESET,
              "closed the connection without answering", 2.0);
}
END_TEST

/* A listener of the release before the handshake: the client says so. */
START_TEST(test_fake_server_older_release)
{
    fake_case(FAKE_OLD, 3000, FERRY_EPROTO,
              "refused: the first frame must be a hello (a listener of an "
              "older ferry",
              2.0);
}
END_TEST

/* The client's side of a wrong token: the server's proof does not match,
 * the client says so (to the server too) before sending anything else. */
START_TEST(test_fake_server_bad_proof)
{
    fake_case(FAKE_BAD_PROOF, 3000, FERRY_EPROTO,
              "does not know this client's token: the bootstrap token does "
              "not match the server's (give both sides the same token: "
              "FERRY_OOB_TOKEN",
              2.0);
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
    tcase_add_test(tc, test_raw_wrong_proof);
    tcase_add_test(tc, test_raw_old_hello);
    tcase_add_test(tc, test_accept_reports_incompatible_client);
    tcase_add_test(tc, test_raw_stalled_frame);
    tcase_add_test(tc, test_raw_flood_without_reading);
    tc = tu_tcase(s, "bounds", 60);
    tcase_add_test(tc, test_handshake_times_out);
    tcase_add_test(tc, test_idle_client_closed);
    tcase_add_test(tc, test_too_many_clients);
    tcase_add_test(tc, test_pipelining_clients_do_not_stall_others);
    tcase_add_test(tc, test_offer_caps);
    tcase_add_test(tc, test_out_of_descriptors);
    tc = tu_tcase(s, "blobs", 60);
    tcase_add_test(tc, test_blob_calls);
    tc = tu_tcase(s, "fake-server", 60);
    tcase_add_test(tc, test_fake_server_silent);
    tcase_add_test(tc, test_fake_server_garbage);
    tcase_add_test(tc, test_fake_server_wrong_version);
    tcase_add_test(tc, test_fake_server_closes_mid_frame);
    tcase_add_test(tc, test_fake_server_hangs_up);
    tcase_add_test(tc, test_fake_server_huge_frame);
    tcase_add_test(tc, test_fake_server_error_frame);
    tcase_add_test(tc, test_fake_server_wrong_kind);
    tcase_add_test(tc, test_fake_server_bad_proof);
    tcase_add_test(tc, test_fake_server_older_release);
    return s;
}

int main(void)
{
    return tu_run(oob_suite());
}
