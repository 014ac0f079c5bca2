/*
 * What one bootstrap listener grants its clients: how long a handshake
 * and an idle connection may last, how many connections it keeps, and
 * how much each client may offer.  Every bound exists because a client
 * that ignores it could otherwise lock others out or grow the server
 * without end; the defaults are the FERRY__OOB_* constants below, and
 * only tests change them (ferry__oob_set_limits, oob.h).
 */
#ifndef FERRY_OOB_LIMITS_H
#define FERRY_OOB_LIMITS_H

#include <stddef.h>

/* A client that does not prove the secret within this time is dropped. */
#define FERRY__OOB_HANDSHAKE_MS 5000
/* An authenticated client silent for this long is closed (with a frame
 * saying so): it holds a slot, and its offers, for nothing. */
#define FERRY__OOB_IDLE_MS (5 * 60 * 1000)
/* A client that has taken none of its replies for this long is dropped:
 * it does not read, and its replies would otherwise pile up. */
#define FERRY__OOB_SEND_STALL_MS 5000
/* Connections still in the handshake; when a new one comes, the one
 * that got least far goes (oldest first), so idle sockets cannot lock out
 * a client that answers. */
#define FERRY__OOB_MAX_UNAUTH 256u
/* Authenticated connections; beyond, a new client is told to come back. */
#define FERRY__OOB_MAX_AUTH 1024u
/* Per connection: regions offered, and their bytes (names and blobs). */
#define FERRY__OOB_MAX_OFFERS 1024u
#define FERRY__OOB_MAX_OFFER_BYTES ((size_t)1 << 20)

struct ferry__oob_limits {
    int handshake_ms;
    int idle_ms;
    int send_stall_ms;
    unsigned max_unauth;
    unsigned max_auth;
    unsigned max_offers;
    size_t max_offer_bytes;
};

#define FERRY__OOB_LIMITS_DEFAULT                                              \
    ((struct ferry__oob_limits){.handshake_ms = FERRY__OOB_HANDSHAKE_MS,       \
                                .idle_ms = FERRY__OOB_IDLE_MS,                 \
                                .send_stall_ms = FERRY__OOB_SEND_STALL_MS,     \
                                .max_unauth = FERRY__OOB_MAX_UNAUTH,           \
                                .max_auth = FERRY__OOB_MAX_AUTH,               \
                                .max_offers = FERRY__OOB_MAX_OFFERS,           \
                                .max_offer_bytes =                             \
                                    FERRY__OOB_MAX_OFFER_BYTES})

#endif /* FERRY_OOB_LIMITS_H */
