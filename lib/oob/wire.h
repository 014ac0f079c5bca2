/*
 * The bootstrap's wire: frame kinds, limits, deadlines, and reading and
 * writing whole frames on a blocking-with-deadline socket (the client
 * side; the server's non-blocking loop is serve.c).
 *
 * Every frame is a ferry blob (base/blob.h): magic, version, kind, length
 * and checksum in a 16-byte header, so a truncated, oversized, corrupted
 * or wrong-version frame is refused before its payload is used.
 */
#ifndef FERRY_OOB_WIRE_H
#define FERRY_OOB_WIRE_H

#include "base/blob.h"
#include "base/ferry-internal.h"

#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Frame kinds.  The handshake kinds are new numbers: a peer of the
 * release that sent its token in clear (FERRY__FRAME_OLD_HELLO) is told
 * so instead of being half understood.  FERRY__FRAME_ERROR keeps its
 * number so that peers of either release read each other's refusals.
 */
enum ferry__frame_kind {
    FERRY__FRAME_OLD_HELLO = 16,  /* retired: token in clear text */
    FERRY__FRAME_ERROR = 23,      /* either: sentence [, u32 code]; closing */
    FERRY__FRAME_AUTH_HELLO = 32, /* client: its nonce */
    FERRY__FRAME_AUTH_CHALLENGE,  /* server: its nonce, its proof */
    FERRY__FRAME_AUTH_PROOF,      /* client: its proof, address blob */
    FERRY__FRAME_AUTH_OK,         /* server: address blob */
    FERRY__FRAME_LOOKUP,          /* client: name */
    FERRY__FRAME_FOUND,           /* server: blob */
    FERRY__FRAME_NOTFOUND,        /* server: (empty) */
    FERRY__FRAME_OFFER,           /* client: name, blob */
    FERRY__FRAME_OFFER_OK,        /* server: (empty) */
    FERRY__FRAME_WITHDRAW,        /* client: name */
    FERRY__FRAME_WITHDRAW_OK,     /* server: (empty); NOTFOUND if none */
    FERRY__FRAME_PING,            /* client: (empty), keeps it from idling */
    FERRY__FRAME_PONG,            /* server: (empty) */
    FERRY__FRAME_REFUSED,         /* server: sentence, u32 code; this request
                                     only, the connection stays */
    FERRY__FRAME_LOOKUP_OWN,      /* client: name; the listener's own
                                     publications only */
};

/* The largest frame either side accepts: the biggest legitimate one (an
 * offer: a 300-character name and a 512-byte blob) with room to spare. */
#define FERRY__FRAME_MAX 4096u
/* Names on the wire: the metadata backend's keys ("regions/N/R") are
 * longer than the public API's 127 characters. */
#define FERRY__OOB_NAME_MAX 300u
/* Names of the public API, ferry__oob_*. */
#define FERRY__OOB_PUBLIC_NAME_MAX 127u
/* A published or offered blob (address and remote-key blobs fit). */
#define FERRY__OOB_BLOB_MAX (FERRY__ADDR_MAX * 2u)

/* FERRY_EINVAL, with a sentence starting with call, unless name has 1 to
 * max characters. */
int ferry__oob_check_name(const char *name, size_t max, const char *call);

/* Deadlines are absolute ferry__now_ns() values; 0 means none. */
uint64_t ferry__oob_deadline(int timeout_ms);
/* Milliseconds left (rounded up), 0 once passed, -1 without a deadline. */
int ferry__oob_remaining_ms(uint64_t deadline);

/*
 * Splits "host:port", "[v6]:port" or ":port" and resolves it (passive:
 * for bind).  The caller frees *out with freeaddrinfo.
 */
int ferry__oob_resolve(const char *hostport, bool passive,
                       struct addrinfo **out);

/* The length a frame header announces, or FERRY_EPROTO / FERRY_EINCOMPAT
 * with a sentence naming `where` for a bad header. */
int ferry__oob_frame_length(const uint8_t *hdr, size_t *len, const char *where);
/* The kind in a frame header. */
unsigned ferry__oob_frame_kind(const uint8_t *hdr);

/* Frame with an optional name and an optional u32-length-prefixed byte
 * field (the shape of every request and most answers) into buf, which
 * holds FERRY__FRAME_MAX bytes. */
int ferry__oob_build(uint8_t *buf, size_t *len, unsigned kind, const char *name,
                     const void *bytes, size_t nbytes);
/* An ERROR or REFUSED frame: the sentence, then the ferry code. */
int ferry__oob_build_error(uint8_t *buf, size_t *len, unsigned kind,
                           const char *why, int code);
/* Reads a u32-length-prefixed byte field of at most cap bytes; false (and
 * r->bad) when it does not fit. */
bool ferry__oob_get_field(struct ferry__blob_reader *r, uint8_t *out,
                          size_t cap, size_t *len);
/*
 * The error an ERROR or REFUSED frame carries, recorded with its
 * sentence: "bootstrap: WHERE refused: WHY" (or "closed the
 * connection" for FERRY_ECONNRESET).  Codes other than a few known ones
 * read as FERRY_EPROTO: a peer cannot make us return anything.
 */
int ferry__oob_error_from(struct ferry__blob_reader *r, const char *where);

/* Sends all of buf before the deadline (blocking or not). */
int ferry__oob_send_all(int fd, const void *buf, size_t len, uint64_t deadline,
                        const char *where);
/* Reads one whole frame into buf (FERRY__FRAME_MAX bytes) before the
 * deadline and opens it; *kind is its kind. */
int ferry__oob_recv_frame(int fd, uint8_t *buf, uint64_t deadline,
                          const char *where, struct ferry__blob_reader *r,
                          unsigned *kind);

#endif /* FERRY_OOB_WIRE_H */
