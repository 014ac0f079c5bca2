/*
 * A fake etcd on loopback for the tests of hostile answers
 * (check_etcd_hostile.c): just enough of etcd v3's HTTP/JSON gateway for
 * ferry's etcd backend, answering each request with what the test set
 * for its route, by default what a healthy etcd of one empty cluster
 * says.  It parses no JSON: a route is told by the request's path (and,
 * for the two ranges, by whether the request names a range_end).
 *
 * One request per connection (Connection: close), answered by the
 * server's thread in turn; the watch stream's connection gets a thread of
 * its own that holds it open, after the frames, until the client goes or
 * fe_stop.  No Check calls: a failure returns -1 with errno.
 */
#ifndef FERRY_FAKEETCD_H
#define FERRY_FAKEETCD_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

enum fe_route {
    FE_GRANT,     /* /v3/lease/grant */
    FE_KEEPALIVE, /* /v3/lease/keepalive */
    FE_REVOKE,    /* /v3/lease/revoke */
    FE_TXN,       /* /v3/kv/txn (the join's create) */
    FE_PUT,       /* /v3/kv/put */
    FE_DELETE,    /* /v3/kv/deleterange */
    FE_RANGE,     /* /v3/kv/range of one key (a lookup) */
    FE_LIST,      /* /v3/kv/range with range_end (the peer listing) */
    FE_WATCH,     /* /v3/watch: a stream of newline-ended frames */
    FE_UNKNOWN,   /* any other path: 404 */
    FE_ROUTES
};

/* What a route answers. */
struct fe_answer {
    int status;  /* HTTP status */
    char *body;  /* the server's copy */
    size_t len;
    bool cut;    /* FE_WATCH: closed after the body instead of held open */
};

/* Watch streams held open at once, at most; past that a stream is closed
 * after its frames. */
#define FE_MAX_STREAMS 32

struct fe_server {
    int port;          /* 127.0.0.1:port */
    char endpoint[40]; /* "http://127.0.0.1:port", as ferry names it */
    int fd;
    int wake[2];       /* written once by fe_stop: every thread ends */
    pthread_t thread;
    pthread_mutex_t lock;
    struct fe_answer answer[FE_ROUTES]; /* from now on */
    struct fe_answer next[FE_ROUTES];   /* once, before answer (body NULL:
                                           none) */
    unsigned count[FE_ROUTES];          /* requests seen */
    pthread_t stream[FE_MAX_STREAMS];
    unsigned n_streams;
};

/* Starts the server on a free loopback port; 0 or -1 with errno. */
int fe_start(struct fe_server *s);
/* Stops every thread, closes every connection and frees the answers. */
void fe_stop(struct fe_server *s);

/* Every later request of route gets status and body (len bytes; a copy
 * is kept); cut as in fe_answer.  0, or -1 when out of memory. */
int fe_set(struct fe_server *s, enum fe_route route, int status,
           const char *body, size_t len, bool cut);
/* The next request of route alone gets this, then fe_set's again. */
int fe_set_next(struct fe_server *s, enum fe_route route, int status,
                const char *body, size_t len, bool cut);
/* How many requests of route came so far. */
unsigned fe_count(struct fe_server *s, enum fe_route route);

/* Base64 of len bytes at p, as etcd writes keys and values (free it);
 * NULL when out of memory. */
char *fe_b64(const void *p, size_t len);

#endif /* FERRY_FAKEETCD_H */
