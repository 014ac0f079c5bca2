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
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ferry__route {
    char host[256];             /* the peer's name or address, as given */
    /* Where the route leads, for sentences: "peer host 10.0.0.2", "the
     * metadata service at etcd0", "peers of unknown whereabouts (the
     * default route)". */
    char to[300];
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

/*
 * Whether an address of format fmt (FI_SOCKADDR_IN/_IN6; others are not)
 * is a loopback address, which leads only to this host; when it is and
 * text is not NULL, its printable form ("127.0.0.1:40123").
 */
bool ferry__addr_is_loopback(uint32_t fmt, const void *addr, size_t len,
                             char *text, size_t text_len);

/*
 * The interface of the default route (IPv4, /proc/net/route) into
 * route, as where peers of unknown whereabouts reach this host; false,
 * with route untouched, when there is none.
 */
bool ferry__route_default(struct ferry__route *route);

/*
 * The first host a metadata URL names ("etcd://h1:2379,h2/prefix",
 * "bootstrap://HOST:PORT"), into host: the meeting point whose route the
 * context takes when no peer host is set.  False when url names none.
 */
bool ferry__route_meeting_host(const char *url, char *host, size_t len);

#endif /* FERRY_FABRIC_ROUTE_H */
