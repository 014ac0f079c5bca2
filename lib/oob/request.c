/*
 * The connecting side's requests (ferry__oob_offer, and the blob-level
 * calls of oob.h): argument checks, then one exchange each (client.c).
 */
#include "oob/oob.h"

#include "oob/client.h"

#include <string.h>

/* The client-side calls' common checks. */
static int check_client_call(const struct ferry__oob_conn *conn,
                             const char *name, const char *call)
{
    if (conn == NULL)
        return ferry__error(FERRY_EINVAL, "%s: conn is NULL", call);
    if (ferry__oob_served(conn))
        return ferry__error(FERRY_EINVAL,
                            "%s: this is a connection the listener accepted; "
                            "only the connecting side makes requests",
                            call);
    return name != NULL ? ferry__oob_check_name(name, FERRY__OOB_NAME_MAX, call)
                        : 0;
}

/* An answer of the wrong kind or shape. */
static int malformed(const struct ferry__oob_conn *c, const char *what,
                     unsigned kind)
{
    return ferry__error(FERRY_EPROTO,
                        "bootstrap: %s sent a malformed %s answer (frame "
                        "kind %u)",
                        c->where, what, kind);
}

/* The blob field of a FOUND answer into blob (room *len). */
static int take_found(const struct ferry__oob_conn *c,
                      struct ferry__blob_reader *r, void *blob, size_t *len)
{
    size_t n = ferry__blob_get_u32(r);

    if (r->bad || n > r->len - r->pos || r->pos + n != r->len)
        return malformed(c, "lookup", FERRY__FRAME_FOUND);
    if (n > *len) {
        size_t room = *len;
        *len = n;
        return ferry__error(FERRY_ENOSPC,
                            "bootstrap: the blob %s found is %zu bytes; %zu "
                            "given",
                            c->where, n, room);
    }
    ferry__blob_get_bytes(r, blob, n);
    *len = n;
    return 0;
}

/* A lookup of `kind` (LOOKUP or LOOKUP_OWN, wire.h). */
static int lookup(ferry__oob_conn_t *conn, unsigned kind, const char *name,
                  int timeout_ms, void *blob, size_t *len)
{
    uint8_t buf[FERRY__FRAME_MAX];
    struct ferry__blob_reader r;
    unsigned answer;
    int ret;

    if ((ret = check_client_call(conn, name, "looking up")))
        return ret;
    if (blob == NULL || len == NULL)
        return ferry__error(FERRY_EINVAL,
                            "looking up \"%s\": blob or len is NULL", name);
    ret = ferry__oob_client_call(conn, kind, name, NULL, 0, timeout_ms, buf, &r,
                                 &answer);
    if (ret != 0)
        return ret;
    if (answer == FERRY__FRAME_NOTFOUND && r.pos == r.len)
        return ferry__error(FERRY_ENOENT,
                            "bootstrap: %s has no region named \"%s\" (%s)",
                            conn->where, name,
                            kind == FERRY__FRAME_LOOKUP_OWN
                                ? "it published none under that name"
                                : "neither published nor offered by a "
                                  "client");
    if (answer != FERRY__FRAME_FOUND)
        return malformed(conn, "lookup", answer);
    return take_found(conn, &r, blob, len);
}

int ferry__oob_lookup_blob(ferry__oob_conn_t *conn, const char *name,
                           int timeout_ms, void *blob, size_t *len)
{
    return lookup(conn, FERRY__FRAME_LOOKUP, name, timeout_ms, blob, len);
}

int ferry__oob_lookup_published(ferry__oob_conn_t *conn, const char *name,
                                int timeout_ms, void *blob, size_t *len)
{
    return lookup(conn, FERRY__FRAME_LOOKUP_OWN, name, timeout_ms, blob, len);
}

/* A request whose answer is `ok` with nothing in it. */
static int simple_call(ferry__oob_conn_t *conn, unsigned kind, const char *name,
                       const void *blob, size_t len, int timeout_ms,
                       unsigned ok, const char *what)
{
    uint8_t buf[FERRY__FRAME_MAX];
    struct ferry__blob_reader r;
    unsigned answer;
    int ret = ferry__oob_client_call(conn, kind, name, blob, len, timeout_ms,
                                     buf, &r, &answer);

    if (ret == 0 && answer == FERRY__FRAME_NOTFOUND &&
        kind == FERRY__FRAME_WITHDRAW)
        return ferry__error(FERRY_ENOENT,
                            "bootstrap: this connection offered nothing "
                            "named \"%s\" to %s",
                            name, conn->where);
    if (ret == 0 && (answer != ok || r.pos != r.len))
        return malformed(conn, what, answer);
    return ret;
}

int ferry__oob_offer_blob(ferry__oob_conn_t *conn, const char *name,
                          const void *blob, size_t len, int timeout_ms)
{
    int ret;

    if ((ret = check_client_call(conn, name, "offering")))
        return ret;
    if (blob == NULL || len > FERRY__OOB_BLOB_MAX)
        return ferry__error(FERRY_EINVAL,
                            "offering \"%s\": the blob is %s; give 0 to %u "
                            "bytes",
                            name, blob == NULL ? "NULL" : "too long",
                            FERRY__OOB_BLOB_MAX);
    return simple_call(conn, FERRY__FRAME_OFFER, name, blob, len, timeout_ms,
                       FERRY__FRAME_OFFER_OK, "offer");
}

int ferry__oob_withdraw_offer(ferry__oob_conn_t *conn, const char *name,
                              int timeout_ms)
{
    int ret;

    if ((ret = check_client_call(conn, name, "withdrawing an offer")))
        return ret;
    return simple_call(conn, FERRY__FRAME_WITHDRAW, name, NULL, 0, timeout_ms,
                       FERRY__FRAME_WITHDRAW_OK, "withdraw");
}

int ferry__oob_ping(ferry__oob_conn_t *conn, int timeout_ms)
{
    int ret;

    if ((ret = check_client_call(conn, NULL, "pinging")))
        return ret;
    return simple_call(conn, FERRY__FRAME_PING, NULL, NULL, 0, timeout_ms,
                       FERRY__FRAME_PONG, "ping");
}

int ferry__oob_offer(ferry__oob_conn_t *conn, const char *name,
                    const ferry_mem_t *mem, int timeout_ms)
{
    uint8_t blob[FERRY__OOB_BLOB_MAX];
    size_t len = sizeof(blob);
    int ret;

    ferry__error_clear();
    if (conn == NULL)
        return ferry__error(FERRY_EINVAL, "bootstrap offer: conn is NULL");
    if (ferry__oob_served(conn))
        return ferry__error(FERRY_EINVAL,
                            "bootstrap offer: only the connecting side offers "
                            "regions; the listening side publishes them with "
                            "bootstrap publish");
    if ((ret = ferry__oob_check_name(name, FERRY__OOB_PUBLIC_NAME_MAX,
                                     "bootstrap offer")) ||
        (ret = ferry_mem_export(mem, blob, &len)))
        return ret;
    return ferry__oob_offer_blob(conn, name, blob, len, timeout_ms);
}

bool ferry__oob_conn_lost(ferry__oob_conn_t *conn)
{
    bool lost;

    /* Under the lock the requests hold: one may be hanging up now. */
    pthread_mutex_lock(&conn->lock);
    lost = conn->fd < 0;
    pthread_mutex_unlock(&conn->lock);
    return lost;
}
