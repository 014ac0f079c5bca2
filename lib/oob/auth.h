/*
 * The bootstrap's handshake: both sides prove they hold the shared secret
 * (config.oob_token / FERRY_OOB_TOKEN, empty when none) without sending
 * it, by HMAC-SHA256 over nonces the two sides chose:
 *
 *   client -> AUTH_HELLO      cn                      (32 random bytes)
 *   server -> AUTH_CHALLENGE  sn, HMAC(secret, "ferry server" | cn | sn)
 *   client    checks the server's proof (constant time)
 *   client -> AUTH_PROOF      HMAC(secret, "ferry client" | sn | cn | A), A
 *   server    checks the client's proof (constant time)
 *   server -> AUTH_OK         its address blob
 *
 * A is the client's address blob, bound into its proof so that nobody
 * can swap it for another.  Fresh nonces on both sides make a recorded
 * proof useless on another connection, and the two labels keep a proof
 * of one side from passing for one of the other.  What follows the
 * handshake travels in clear and unsigned: the handshake keeps out those
 * without the secret, not someone who can rewrite the traffic.
 */
#ifndef FERRY_OOB_AUTH_H
#define FERRY_OOB_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FERRY__OOB_NONCE_LEN 32u
#define FERRY__OOB_PROOF_LEN 32u /* SHA-256 */
/* The secret's bytes and NUL: a listener keeps a copy of this size. */
#define FERRY__OOB_SECRET_MAX 128u

/* Fills nonce with FERRY__OOB_NONCE_LEN random bytes (getrandom). */
int ferry__oob_nonce(uint8_t *nonce);
/* The server's proof for client nonce cn and server nonce sn. */
void ferry__oob_server_proof(const char *secret, const uint8_t *cn,
                             const uint8_t *sn, uint8_t *proof);
/* The client's proof, over both nonces and its address blob. */
void ferry__oob_client_proof(const char *secret, const uint8_t *sn,
                             const uint8_t *cn, const void *addr, size_t alen,
                             uint8_t *proof);
/* Whether a received proof equals the expected one, in constant time. */
bool ferry__oob_proof_ok(const uint8_t *got, const uint8_t *want);

/*
 * The client's side of the handshake on a connected socket fd, before
 * the deadline; `where` names the server in sentences.  On success the
 * server's address blob is in srv_addr (cap *srv_alen, set to its
 * length).  Returns 0, FERRY_EPROTO (the server refused: wrong token,
 * not a ferry listener; or it does not know the token: the sentence
 * says), FERRY_EINCOMPAT, FERRY_ETIMEDOUT, FERRY_ECONNRESET or
 * FERRY_EAGAIN (the server is full).  On failure fd is left as it is for
 * the caller to close.
 */
int ferry__oob_auth_client(int fd, const char *secret, const void *addr,
                           size_t alen, uint64_t deadline, const char *where,
                           uint8_t *srv_addr, size_t *srv_alen);

#endif /* FERRY_OOB_AUTH_H */
