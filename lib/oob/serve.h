/*
 * The listener's service thread: one poll loop over the listening socket
 * and every client, which never blocks on any one of them.
 */
#ifndef FERRY_OOB_SERVE_H
#define FERRY_OOB_SERVE_H

#include "oob/conn.h"

/* The thread's main; arg is the listener.  Returns when lis->wake[0]
 * becomes readable. */
void *ferry__oob_serve(void *arg);

/*
 * Asks the kernel to hand the listening socket fd's connections over
 * only once their first bytes arrive, or about handshake_ms after they
 * connected (Linux; elsewhere a no-op).
 */
void ferry__oob_defer_accept(int fd, int handshake_ms);

#endif /* FERRY_OOB_SERVE_H */
