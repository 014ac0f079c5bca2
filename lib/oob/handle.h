/*
 * What the listener does with each whole frame a client sends.
 */
#ifndef FERRY_OOB_HANDLE_H
#define FERRY_OOB_HANDLE_H

#include "oob/conn.h"

/*
 * Serves the frame in c->rx (c->rx_want bytes): a step of the handshake
 * while c is in it, else a request.  Anything malformed or out of turn
 * ends c with a sentence.  Service thread, lis->lock held.
 */
void ferry__oob_handle_frame(struct ferry__oob *lis, struct ferry__oob_conn *c);

#endif /* FERRY_OOB_HANDLE_H */
