/*
 * The bootstrap's handshake (see auth.h): nonces, proofs, and the client's
 * side of the exchange.  The server's side runs in its service loop
 * (serve.c), one frame at a time, with the same proofs.
 */
#include "oob/auth.h"

#include "oob/wire.h"

#include <errno.h>
#include <nettle/hmac.h>
#include <nettle/memops.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

/* Labels: a server proof can never pass for a client proof. */
static const char server_label[] = "ferry server";
static const char client_label[] = "ferry client";

int ferry__oob_nonce(uint8_t *nonce)
{
    size_t got = 0;

    while (got < FERRY__OOB_NONCE_LEN) {
        ssize_t n = getrandom(nonce + got, FERRY__OOB_NONCE_LEN - got, 0);
        if (n > 0)
            got += (size_t)n;
        else if (n < 0 && errno != EINTR)
            return ferry__error(FERRY_EIO,
                                "bootstrap: no random bytes for a nonce "
                                "(getrandom: %s)",
                                strerror(errno));
    }
    return 0;
}

static void mac_begin(struct hmac_sha256_ctx *h, const char *secret,
                      const char *label)
{
    hmac_sha256_set_key(h, strlen(secret), (const uint8_t *)secret);
    hmac_sha256_update(h, strlen(label), (const uint8_t *)label);
}

void ferry__oob_server_proof(const char *secret, const uint8_t *cn,
                             const uint8_t *sn, uint8_t *proof)
{
    struct hmac_sha256_ctx h;

    mac_begin(&h, secret, server_label);
    hmac_sha256_update(&h, FERRY__OOB_NONCE_LEN, cn);
    hmac_sha256_update(&h, FERRY__OOB_NONCE_LEN, sn);
    hmac_sha256_digest(&h, FERRY__OOB_PROOF_LEN, proof);
}

void ferry__oob_client_proof(const char *secret, const uint8_t *sn,
                             const uint8_t *cn, const void *addr, size_t alen,
                             uint8_t *proof)
{
    struct hmac_sha256_ctx h;

    mac_begin(&h, secret, client_label);
    hmac_sha256_update(&h, FERRY__OOB_NONCE_LEN, sn);
    hmac_sha256_update(&h, FERRY__OOB_NONCE_LEN, cn);
    hmac_sha256_update(&h, alen, addr);
    hmac_sha256_digest(&h, FERRY__OOB_PROOF_LEN, proof);
}

bool ferry__oob_proof_ok(const uint8_t *got, const uint8_t *want)
{
    /* Constant time: how long a comparison takes must not tell how many
     * leading bytes of a forged proof were right. */
    return memeql_sec(got, want, FERRY__OOB_PROOF_LEN) != 0;
}

/* ---- the client's side -------------------------------------------------- */

/* Sends one frame the writer w built into buf. */
static int send_built(int fd, struct ferry__blob_writer *w, uint64_t deadline,
                      const char *where)
{
    size_t len;
    int ret = ferry__blob_end(w, &len);

    return ret != 0 ? ret
                    : ferry__oob_send_all(fd, w->buf, len, deadline, where);
}

/*
 * A server of the release before the handshake refuses our hello as "the
 * first frame must be a hello" (it expects its old one): say what that
 * means.
 */
static int older_server(int ret, unsigned want)
{
    char said[FERRY__FRAME_MAX / 2];

    if (want != FERRY__FRAME_AUTH_CHALLENGE ||
        strstr(ferry_last_error(), "first frame must be a hello") == NULL)
        return ret;
    snprintf(said, sizeof(said), "%s", ferry_last_error());
    return ferry__error(ret,
                        "%s (a listener of an older ferry, which expects "
                        "the token in clear text: use the same ferry "
                        "release on both sides)",
                        said);
}

/* Reads the answer to a handshake step: `want`, or the server's ERROR. */
static int recv_step(int fd, uint8_t *buf, uint64_t deadline, const char *where,
                     unsigned want, const char *step,
                     struct ferry__blob_reader *r)
{
    unsigned kind;
    int ret = ferry__oob_recv_frame(fd, buf, deadline, where, r, &kind);

    if (ret != 0)
        return ret;
    if (kind == FERRY__FRAME_ERROR)
        return older_server(ferry__oob_error_from(r, where), want);
    if (kind != want)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s answered the %s with frame kind "
                            "%u (not a ferry listener of this release?)",
                            where, step, kind);
    return 0;
}

/* Tells the server why we hang up (best effort: we close right after). */
static void say_why(int fd, const char *why)
{
    uint8_t buf[FERRY__FRAME_MAX];
    size_t len;

    if (ferry__oob_build_error(buf, &len, FERRY__FRAME_ERROR, why,
                               FERRY_EPROTO) == 0 &&
        send(fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        (void)0; /* the refusal below is what the caller learns */
}

/* Sends the hello, reads the challenge and checks the server's proof;
 * leaves the server's nonce in sn. */
static int challenge(int fd, const char *secret, const uint8_t *cn, uint8_t *sn,
                     uint64_t deadline, const char *where)
{
    uint8_t buf[FERRY__FRAME_MAX], got[FERRY__OOB_PROOF_LEN];
    uint8_t want[FERRY__OOB_PROOF_LEN];
    struct ferry__blob_writer w;
    struct ferry__blob_reader r;
    int ret;

    ferry__blob_begin(&w, buf, sizeof(buf),
                      (enum ferry__blob_kind)FERRY__FRAME_AUTH_HELLO);
    ferry__blob_put_bytes(&w, cn, FERRY__OOB_NONCE_LEN);
    if ((ret = send_built(fd, &w, deadline, where)) ||
        (ret = recv_step(fd, buf, deadline, where, FERRY__FRAME_AUTH_CHALLENGE,
                         "hello", &r)))
        return ret;
    ferry__blob_get_bytes(&r, sn, FERRY__OOB_NONCE_LEN);
    ferry__blob_get_bytes(&r, got, FERRY__OOB_PROOF_LEN);
    if (r.bad || r.pos != r.len)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s sent a malformed challenge", where);
    ferry__oob_server_proof(secret, cn, sn, want);
    if (!ferry__oob_proof_ok(got, want)) {
        say_why(fd, "the server's proof does not match the client's "
                    "bootstrap token (give both sides the same token: "
                    "FERRY_OOB_TOKEN or config.oob_token)");
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s does not know this client's "
                            "token: the bootstrap token does not match the "
                            "server's (give both sides the same token: "
                            "FERRY_OOB_TOKEN or config.oob_token)",
                            where);
    }
    return 0;
}

int ferry__oob_auth_client(int fd, const char *secret, const void *addr,
                           size_t alen, uint64_t deadline, const char *where,
                           uint8_t *srv_addr, size_t *srv_alen)
{
    uint8_t cn[FERRY__OOB_NONCE_LEN], sn[FERRY__OOB_NONCE_LEN];
    uint8_t proof[FERRY__OOB_PROOF_LEN], buf[FERRY__FRAME_MAX];
    struct ferry__blob_writer w;
    struct ferry__blob_reader r;
    int ret;

    if ((ret = ferry__oob_nonce(cn)) ||
        (ret = challenge(fd, secret, cn, sn, deadline, where)))
        return ret;
    ferry__oob_client_proof(secret, sn, cn, addr, alen, proof);
    ferry__blob_begin(&w, buf, sizeof(buf),
                      (enum ferry__blob_kind)FERRY__FRAME_AUTH_PROOF);
    ferry__blob_put_bytes(&w, proof, sizeof(proof));
    ferry__blob_put_u32(&w, (uint32_t)alen);
    ferry__blob_put_bytes(&w, addr, alen);
    if ((ret = send_built(fd, &w, deadline, where)) ||
        (ret = recv_step(fd, buf, deadline, where, FERRY__FRAME_AUTH_OK,
                         "proof", &r)))
        return ret;
    if (!ferry__oob_get_field(&r, srv_addr, *srv_alen, srv_alen) ||
        r.pos != r.len)
        return ferry__error(FERRY_EPROTO,
                            "bootstrap: %s sent a malformed handshake answer",
                            where);
    return 0;
}
