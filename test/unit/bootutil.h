/*
 * Helpers of the bootstrap suites (check_bootstrap.c,
 * check_bootstrap_hostile.c, check_oob.c): contexts, transfers and a
 * listener with one region, which a normal client can be shown to reach.
 */
#ifndef FERRY_BOOTUTIL_H
#define FERRY_BOOTUTIL_H

#include "oob/oob.h"
#include "testutil.h"

#define PROV "tcp;ofi_rxm"

#define SRV_LEN (64u * 1024u)
#define SRV_SEED 0x5e4e5e4eu

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);

ferry_context_t *ctx_open(const char *prov, int progress_thread,
                          const char *token);
/* One write or read of len bytes, waited for; 0 or the error, whose
 * sentence goes to err (threads cannot assert). */
int xfer(ferry_peer_t *peer, int write, void *local, ferry_mem_t *lmem,
         ferry_rmem_t *rmem, uint64_t off, size_t len, char *err,
         size_t errcap);
void xfer_ok(ferry_peer_t *peer, int write, void *local, ferry_mem_t *lmem,
             ferry_rmem_t *rmem, uint64_t off, size_t len);

/* A server context (progress thread) listening on 127.0.0.1:0, with a
 * SRV_LEN region filled with SRV_SEED published as "reg". */
struct srv {
    ferry_context_t *ctx;
    ferry__oob_t *lis;
    int port;
    char hostport[32];
    uint8_t *buf;
    ferry_mem_t *mem;
};
void srv_open(struct srv *s, const char *token);
void srv_close(struct srv *s);
/*
 * Proves the listener still serves: a fresh client connects, finds "reg"
 * and reads it back with the right contents.
 */
void client_ok(struct srv *s, const char *token);

#endif /* FERRY_BOOTUTIL_H */
