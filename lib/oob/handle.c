/*
 * What the listener does with each whole frame a client sends (see
 * handle.h): the handshake's two steps, then lookups, offers,
 * withdrawals and pings.  Runs in the service thread with lis->lock
 * held; answers go through reply.h, never waiting for the client.
 */
#include "oob/handle.h"

#include "oob/reply.h"

#include <string.h>

/* ---- the handshake ------------------------------------------------------ */

/* The challenge: the server's nonce and its proof, raw bytes with no
 * length field (both are of fixed size). */
static void send_challenge(struct ferry__oob *lis, struct ferry__oob_conn *c)
{
    struct ferry__blob_writer w;
    uint8_t frame[FERRY__FRAME_MAX], proof[FERRY__OOB_PROOF_LEN];
    size_t len;

    ferry__oob_server_proof(lis->secret, c->cnonce, c->snonce, proof);
    ferry__blob_begin(&w, frame, sizeof(frame),
                      (enum ferry__blob_kind)FERRY__FRAME_AUTH_CHALLENGE);
    ferry__blob_put_bytes(&w, c->snonce, FERRY__OOB_NONCE_LEN);
    ferry__blob_put_bytes(&w, proof, sizeof(proof));
    if (ferry__blob_end(&w, &len) != 0) {
        ferry__oob_shut(c);
        return;
    }
    ferry__oob_reply_frame(c, frame, len);
}

static void on_hello(struct ferry__oob *lis, struct ferry__oob_conn *c,
                     unsigned kind, struct ferry__blob_reader *r)
{
    if (kind == FERRY__FRAME_OLD_HELLO) {
        ferry__oob_drop(c, FERRY_EINCOMPAT,
                        "this client speaks the bootstrap protocol of an "
                        "older ferry, which sent its token in clear text; "
                        "use the same ferry release on both sides");
        return;
    }
    if (kind != FERRY__FRAME_AUTH_HELLO) {
        ferry__oob_drop(c, FERRY_EPROTO, "the first frame must be a hello");
        return;
    }
    ferry__blob_get_bytes(r, c->cnonce, FERRY__OOB_NONCE_LEN);
    if (r->bad || r->pos != r->len) {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed hello frame");
        return;
    }
    if (ferry__oob_nonce(c->snonce) != 0) {
        ferry__oob_drop(c, FERRY_EPROTO, "the server has no random bytes: %s",
                        ferry_last_error());
        return;
    }
    c->state = FERRY__OOB_PROOF;
    ferry__oob_hs_move(lis, c, FERRY__OOB_HS_CHALLENGED);
    send_challenge(lis, c);
}

/* Reads the proof frame's fields; false (and dropped) when malformed. */
static bool read_proof(struct ferry__oob_conn *c, struct ferry__blob_reader *r,
                       uint8_t *proof)
{
    ferry__blob_get_bytes(r, proof, FERRY__OOB_PROOF_LEN);
    if (!ferry__oob_get_field(r, c->peer_addr, sizeof(c->peer_addr),
                              &c->peer_addr_len) ||
        r->pos != r->len) {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed proof frame");
        return false;
    }
    return true;
}

static void on_proof(struct ferry__oob *lis, struct ferry__oob_conn *c,
                     unsigned kind, struct ferry__blob_reader *r)
{
    uint8_t got[FERRY__OOB_PROOF_LEN], want[FERRY__OOB_PROOF_LEN];
    struct ferry__blob_reader ar;

    if (kind != FERRY__FRAME_AUTH_PROOF) {
        ferry__oob_drop(c, FERRY_EPROTO,
                        "a client says hello only once, then proves "
                        "it knows the token");
        return;
    }
    if (!read_proof(c, r, got))
        return;
    ferry__oob_client_proof(lis->secret, c->snonce, c->cnonce, c->peer_addr,
                            c->peer_addr_len, want);
    if (!ferry__oob_proof_ok(got, want)) {
        ferry__oob_drop(
            c, FERRY_EPROTO,
            "the client's bootstrap token does not match the server's (give "
            "both sides the same token: FERRY_OOB_TOKEN or "
            "config.oob_token)");
        return;
    }
    /* A malformed address is refused now, not later as an error of the
     * application's ferry__oob_accept: its header (magic, version, kind,
     * length, checksum) is checked here, its fields by ferry_peer_add. */
    if (ferry__blob_open(&ar, c->peer_addr, c->peer_addr_len, FERRY__BLOB_ADDR,
                         "the client's address blob")) {
        ferry__oob_drop(c, FERRY_EPROTO, "%s", ferry_last_error());
        return;
    }
    if (lis->n_ready >= lis->limits.max_auth) {
        ferry__oob_drop(
            c, FERRY_EAGAIN,
            "the server already serves %u clients, the most it takes; try "
            "again later",
            lis->n_ready);
        return;
    }
    ferry__oob_hs_remove(lis, c);
    c->state = FERRY__OOB_READY;
    lis->n_ready++;
    ferry__oob_reply(c, FERRY__FRAME_AUTH_OK, NULL, lis->addr, lis->addr_len);
    pthread_cond_broadcast(&lis->changed);
}

/* ---- requests ---------------------------------------------------------- */

/* Reads a request's name; false (and dropped) when malformed. */
static bool read_name(struct ferry__oob_conn *c, struct ferry__blob_reader *r,
                      char *name, const char *what)
{
    ferry__blob_get_str(r, name, FERRY__OOB_NAME_MAX + 1);
    if (r->bad) {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed %s frame", what);
        return false;
    }
    return true;
}

/* A lookup: of anything (LOOKUP), or only of what the listener
 * published itself (LOOKUP_OWN). */
static void on_lookup(struct ferry__oob *lis, struct ferry__oob_conn *c,
                      unsigned kind, struct ferry__blob_reader *r)
{
    char name[FERRY__OOB_NAME_MAX + 1];
    const struct ferry__oob_entry *e;

    if (!read_name(c, r, name, "lookup"))
        return;
    if (r->pos != r->len) {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed lookup frame");
        return;
    }
    e = kind == FERRY__FRAME_LOOKUP_OWN
            ? ferry__oob_names_get(&lis->names, NULL, name)
            : ferry__oob_names_find(&lis->names, name);
    if (e != NULL)
        ferry__oob_reply(c, FERRY__FRAME_FOUND, NULL, e->data, e->len);
    else
        ferry__oob_reply(c, FERRY__FRAME_NOTFOUND, NULL, NULL, 0);
}

/* Whether c may offer blob under name: its caps, counting old (its
 * offer of that name, which this one replaces; NULL if none) as gone. */
static bool offer_fits(struct ferry__oob *lis, struct ferry__oob_conn *c,
                       const struct ferry__oob_entry *old, const char *name,
                       size_t len)
{
    size_t n = c->noffers + (old == NULL), bytes = c->offer_bytes;

    bytes -= old != NULL ? ferry__oob_entry_cost(old->name, old->len) : 0;
    bytes += ferry__oob_entry_cost(name, len);
    if (n > lis->limits.max_offers) {
        ferry__oob_refuse(
            c, FERRY_ENOSPC,
            "this connection already offers %zu regions, the most "
            "one connection may; withdraw one first (an offer "
            "under a name already offered replaces it)",
            c->noffers);
        return false;
    }
    if (bytes > lis->limits.max_offer_bytes) {
        ferry__oob_refuse(
            c, FERRY_ENOSPC,
            "offering \"%s\" would bring this connection's offers "
            "to %zu bytes; the most is %zu (withdraw some first)",
            name, bytes, lis->limits.max_offer_bytes);
        return false;
    }
    return true;
}

static void on_offer(struct ferry__oob *lis, struct ferry__oob_conn *c,
                     struct ferry__blob_reader *r)
{
    char name[FERRY__OOB_NAME_MAX + 1];
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    const struct ferry__oob_entry *old;
    size_t len = 0, old_cost;

    if (!read_name(c, r, name, "offer"))
        return;
    if (!ferry__oob_get_field(r, blob, sizeof(blob), &len) ||
        r->pos != r->len || name[0] == '\0') {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed offer frame");
        return;
    }
    old = ferry__oob_names_get(&lis->names, c, name);
    if (!offer_fits(lis, c, old, name, len))
        return;
    /* The replaced offer's cost, read before the put frees it. */
    old_cost = old != NULL ? ferry__oob_entry_cost(old->name, old->len) : 0;
    if (ferry__oob_names_put(&lis->names, c, &c->offers, name, blob, len)) {
        ferry__oob_refuse(c, FERRY_ENOMEM, "the server is out of memory");
        return;
    }
    c->offer_bytes =
        c->offer_bytes - old_cost + ferry__oob_entry_cost(name, len);
    c->noffers += old == NULL;
    ferry__oob_reply(c, FERRY__FRAME_OFFER_OK, NULL, NULL, 0);
    pthread_cond_broadcast(&lis->changed);
}

static void on_withdraw(struct ferry__oob *lis, struct ferry__oob_conn *c,
                        struct ferry__blob_reader *r)
{
    char name[FERRY__OOB_NAME_MAX + 1];
    long cost;

    if (!read_name(c, r, name, "withdraw"))
        return;
    if (r->pos != r->len) {
        ferry__oob_drop(c, FERRY_EPROTO, "malformed withdraw frame");
        return;
    }
    cost = ferry__oob_names_remove(&lis->names, c, &c->offers, name);
    if (cost < 0) {
        ferry__oob_reply(c, FERRY__FRAME_NOTFOUND, NULL, NULL, 0);
        return;
    }
    c->offer_bytes -= (size_t)cost;
    c->noffers--;
    ferry__oob_reply(c, FERRY__FRAME_WITHDRAW_OK, NULL, NULL, 0);
}

static void on_request(struct ferry__oob *lis, struct ferry__oob_conn *c,
                       unsigned kind, struct ferry__blob_reader *r)
{
    switch (kind) {
    case FERRY__FRAME_LOOKUP:
    case FERRY__FRAME_LOOKUP_OWN:
        on_lookup(lis, c, kind, r);
        return;
    case FERRY__FRAME_OFFER:
        on_offer(lis, c, r);
        return;
    case FERRY__FRAME_WITHDRAW:
        on_withdraw(lis, c, r);
        return;
    case FERRY__FRAME_PING:
        ferry__oob_reply(c, FERRY__FRAME_PONG, NULL, NULL, 0);
        return;
    case FERRY__FRAME_OLD_HELLO:
    case FERRY__FRAME_AUTH_HELLO:
    case FERRY__FRAME_AUTH_PROOF:
        /* A second handshake could rewrite the address that
         * ferry__oob_accept reads without the lock. */
        ferry__oob_drop(c, FERRY_EPROTO, "a client says hello only once");
        return;
    default:
        ferry__oob_drop(c, FERRY_EPROTO,
                        "unexpected frame kind %u from a client", kind);
    }
}

/* One whole frame from c, in c->rx. */
void ferry__oob_handle_frame(struct ferry__oob *lis, struct ferry__oob_conn *c)
{
    struct ferry__blob_reader r;
    unsigned kind = ferry__oob_frame_kind(c->rx);

    c->heard_ns = ferry__now_ns();
    if (ferry__blob_open(&r, c->rx, c->rx_want, (enum ferry__blob_kind)kind,
                         "bootstrap frame") != 0) {
        ferry__oob_drop(c, FERRY_EPROTO, "%s", ferry_last_error());
        return;
    }
    if (kind == FERRY__FRAME_ERROR) {
        char why[FERRY__FRAME_MAX / 2];
        ferry__blob_get_str(&r, why, sizeof(why));
        ferry__oob_note_drop(c, r.bad ? "it hung up, giving no reason" : why);
        ferry__oob_shut(c);
        return;
    }
    if (c->state == FERRY__OOB_HELLO)
        on_hello(lis, c, kind, &r);
    else if (c->state == FERRY__OOB_PROOF)
        on_proof(lis, c, kind, &r);
    else
        on_request(lis, c, kind, &r);
}
