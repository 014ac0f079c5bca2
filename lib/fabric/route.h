/*
 * Where a peer is reached from here: the local address and interface the
 * kernel's routing table picks for the peer's address, so that the
 * context opens the domain on that interface (loopback for a loopback
 * address) rather than the first NIC.
 */
#ifndef FERRY_FABRIC_ROUTE_H
#define FERRY_FABRIC_ROUTE_H

#include "base/ferry-internal.h"

#include <net/if.h>
#include <sys/socket.h>

struct ferry__route {
    char host[256];             /* the peer's name or address, as given */
    char local_text[64];        /* the local address, printable */
    char ifname[IF_NAMESIZE];   /* its interface; "" if none was found */
    struct sockaddr_storage local;
};

/* Resolves host and asks the kernel for the route to it.  Returns 0, or
 * FERRY_EINVAL with a sentence naming host and what failed. */
int ferry__route_to(const char *host, struct ferry__route *route);

enum ferry__route_match {
    FERRY__ROUTE_UNKNOWN, /* the domain has no IP address (shm, efa, cxi) */
    FERRY__ROUTE_OFF,     /* its address is on another interface */
    FERRY__ROUTE_ON,      /* its address or interface is the route's */
};

enum ferry__route_match ferry__route_match(const struct ferry__route *route,
                                           const struct fi_info *info);

#endif /* FERRY_FABRIC_ROUTE_H */
