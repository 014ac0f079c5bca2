/*
 * The bootstrap's objects, shared by the API (oob.c), the client side
 * (client.c) and the service thread (serve.c): the listener and a
 * connection, which is either a client's (lis == NULL) or one the
 * listener serves.
 */
#ifndef FERRY_OOB_CONN_H
#define FERRY_OOB_CONN_H

#include "oob/auth.h"
#include "oob/limits.h"
#include "oob/names.h"
#include "oob/wire.h"

#include <poll.h>
#include <pthread.h>
#include <stdbool.h>

/*
 * How far a connection in the handshake got, which decides who goes when
 * too many are in it: the silent first, then those that sent part of a
 * frame, then those waiting for our challenge to be answered; the oldest
 * of the first class that has any.  A client that answers spends a round
 * trip in the last class, so a crowd of sockets that stall earlier can
 * never push it out.
 */
enum ferry__oob_hs_class {
    FERRY__OOB_HS_SILENT,     /* has sent nothing */
    FERRY__OOB_HS_TALKING,    /* has sent part of its hello */
    FERRY__OOB_HS_CHALLENGED, /* sent its hello, has our challenge */
    FERRY__OOB_HS_CLASSES
};

struct ferry__oob_hs_queue {
    struct ferry__oob_conn *head, *tail; /* oldest first */
};

/* Where a served connection is in its life. */
enum ferry__oob_state {
    FERRY__OOB_HELLO, /* accepted; nothing proven yet */
    FERRY__OOB_PROOF, /* challenge sent; waiting for the client's proof */
    FERRY__OOB_READY, /* authenticated: lookups, offers */
};

struct ferry__oob_conn {
    struct ferry_context *ctx;
    struct ferry__oob *lis;       /* server side: the listener; client: NULL */
    struct ferry__oob_conn *next; /* listener's list, newest first */
    int fd;         /* server side: closed by the service thread only */
    char where[96]; /* "client host:port" / "server host:port" */
    ferry_peer_t *peer;
    pthread_mutex_t lock; /* client side: one request at a time */

    /* Server side, under lis->lock. */
    enum ferry__oob_state state;
    /* The handshake queue of its class (HELLO and PROOF connections). */
    enum ferry__oob_hs_class hs_class;
    struct ferry__oob_conn *hs_prev, *hs_next;
    bool closing;         /* a last frame is queued; closed once it is out */
    bool closed;          /* done: offers gone, fd to be closed */
    bool accepted;        /* handed to the application, which frees it */
    uint64_t born_ns;     /* accepted: the handshake's deadline counts */
    uint64_t heard_ns;    /* last whole frame: the idle deadline counts */
    uint64_t rx_since_ns; /* the first byte of a partial frame */
    uint64_t tx_since_ns; /* output pending and no byte taken since */
    uint8_t cnonce[FERRY__OOB_NONCE_LEN]; /* the handshake's nonces */
    uint8_t snonce[FERRY__OOB_NONCE_LEN];
    uint8_t peer_addr[FERRY__OOB_BLOB_MAX]; /* set once, before READY */
    size_t peer_addr_len;
    struct ferry__oob_entry *offers; /* in lis->names, owner: this conn */
    size_t noffers, offer_bytes;
    size_t rx_len, rx_want; /* the frame being received */
    size_t tx_pos, tx_len;  /* output not yet taken by the socket */
    uint8_t rx[FERRY__FRAME_MAX];
    uint8_t tx[2 * FERRY__FRAME_MAX]; /* an answer and a last ERROR */
};

struct ferry__oob {
    struct ferry_context *ctx;
    int fd;
    int wake[2]; /* pipe: wakes the service thread to stop */
    int port;
    char secret[FERRY__OOB_SECRET_MAX];
    uint8_t addr[FERRY__OOB_BLOB_MAX]; /* the context's address blob */
    size_t addr_len;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t changed; /* a client authenticated, offered or left */

    /* Under lock. */
    struct ferry__oob_limits limits;
    struct ferry__oob_conn *conns;
    struct ferry__oob_hs_queue hs[FERRY__OOB_HS_CLASSES];
    unsigned n_handshake;          /* on the handshake queues */
    unsigned n_ready;              /* READY and not closed */
    struct ferry__oob_names names; /* published (owner NULL) and offered */

    /* The service thread's alone. */
    struct pollfd *pfd;
    struct ferry__oob_conn **who; /* the connection of pfd[i] */
    size_t pcap;
    uint64_t accept_again_ns; /* accepting paused (no fd) until then */
};

/* A connection the listener serves (or served, before it closed), on
 * which only the listener's calls make sense. */
static inline bool ferry__oob_served(const struct ferry__oob_conn *c)
{
    return c->lis != NULL || c->accepted;
}

/* A connection with no socket yet (fd -1); NULL when out of memory. */
struct ferry__oob_conn *ferry__oob_conn_new(struct ferry_context *ctx);
/* Closes its socket and frees it.  A served connection must be closed
 * (ferry__oob_conn_close, serve.h) first: its offers are gone then. */
void ferry__oob_conn_free(struct ferry__oob_conn *c);

/* The listener's handshake queues: a connection joins the silent one when
 * accepted, moves on as it talks, and leaves when authenticated or
 * closed.  Under lis->lock. */
void ferry__oob_hs_push(struct ferry__oob *lis, struct ferry__oob_conn *c,
                        enum ferry__oob_hs_class cls);
void ferry__oob_hs_remove(struct ferry__oob *lis, struct ferry__oob_conn *c);
/* Moves c to the back of the queue of class cls. */
void ferry__oob_hs_move(struct ferry__oob *lis, struct ferry__oob_conn *c,
                        enum ferry__oob_hs_class cls);
/* The one to drop for a newcomer (see enum ferry__oob_hs_class); NULL
 * when no connection is in the handshake. */
struct ferry__oob_conn *ferry__oob_hs_victim(struct ferry__oob *lis);

/*
 * Ends a served connection: its offers go, waiters wake, and the service
 * thread closes its socket at its next pass (and frees it unless the
 * application holds it).  Under lis->lock; any thread.  Idempotent.
 */
void ferry__oob_conn_close(struct ferry__oob_conn *c);

#endif /* FERRY_OOB_CONN_H */
