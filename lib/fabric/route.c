/*
 * The route to a peer: getaddrinfo for its address, a connected UDP
 * socket (connect on a datagram socket sends nothing; it only asks the
 * kernel to choose the route) for the local address, getifaddrs for the
 * interface that address belongs to.
 */
#include "fabric/route.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <rdma/fabric.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Whether a and b hold the same IP address (ports are ignored). */
static bool same_ip(const struct sockaddr *a, const struct sockaddr *b)
{
    if (a->sa_family != b->sa_family)
        return false;
    if (a->sa_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    if (a->sa_family == AF_INET6)
        return memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                      &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr,
                      sizeof(struct in6_addr)) == 0;
    return false;
}

static void find_interface(struct ferry__route *route)
{
    struct ifaddrs *all, *i;

    route->ifname[0] = '\0';
    if (getifaddrs(&all) != 0)
        return;
    for (i = all; i != NULL; i = i->ifa_next)
        if (i->ifa_addr != NULL &&
            same_ip(i->ifa_addr, (const struct sockaddr *)&route->local)) {
            snprintf(route->ifname, sizeof(route->ifname), "%s", i->ifa_name);
            break;
        }
    freeifaddrs(all);
}

/* Connects a UDP socket to peer and reads back the local address. */
static int local_address(const struct addrinfo *peer, struct ferry__route *route)
{
    socklen_t len = sizeof(route->local);
    int fd = socket(peer->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int ret = 0;

    if (fd < 0)
        return errno;
    if (connect(fd, peer->ai_addr, peer->ai_addrlen) != 0 ||
        getsockname(fd, (struct sockaddr *)&route->local, &len) != 0)
        ret = errno;
    close(fd);
    return ret;
}

int ferry__route_to(const char *host, struct ferry__route *route)
{
    struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *res = NULL;
    int ret, err;

    memset(route, 0, sizeof(*route));
    snprintf(route->host, sizeof(route->host), "%s", host);
    snprintf(route->to, sizeof(route->to), "peer host %s", host);
    ret = getaddrinfo(host, "9", &hints, &res);
    if (ret != 0)
        return ferry__error(FERRY_EINVAL,
                            "peer host '%s' does not resolve (%s): give the "
                            "name or address the peer is reached at",
                            host, gai_strerror(ret));
    err = local_address(res, route);
    freeaddrinfo(res);
    if (err != 0)
        return ferry__error(FERRY_EINVAL,
                            "no route from this host to peer host '%s' (%s)",
                            host, strerror(err));
    if (route->local.ss_family == AF_INET)
        inet_ntop(AF_INET,
                  &((struct sockaddr_in *)(void *)&route->local)->sin_addr,
                  route->local_text, sizeof(route->local_text));
    else
        inet_ntop(AF_INET6,
                  &((struct sockaddr_in6 *)(void *)&route->local)->sin6_addr,
                  route->local_text, sizeof(route->local_text));
    find_interface(route);
    return 0;
}

enum ferry__route_match ferry__route_match(const struct ferry__route *route,
                                           const struct fi_info *info)
{
    if (info->src_addr == NULL || (info->addr_format != FI_SOCKADDR_IN &&
                                   info->addr_format != FI_SOCKADDR_IN6))
        return FERRY__ROUTE_UNKNOWN;
    if (same_ip(info->src_addr, (const struct sockaddr *)&route->local) ||
        (route->ifname[0] != '\0' &&
         strcmp(info->domain_attr->name, route->ifname) == 0))
        return FERRY__ROUTE_ON;
    return FERRY__ROUTE_OFF;
}

bool ferry__addr_is_loopback(uint32_t fmt, const void *addr, size_t len,
                             char *text, size_t text_len)
{
    char ip[INET6_ADDRSTRLEN];
    unsigned port;

    if (fmt == FI_SOCKADDR_IN && len >= sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *sin = addr;

        if ((ntohl(sin->sin_addr.s_addr) >> 24) != 127)
            return false;
        inet_ntop(AF_INET, &sin->sin_addr, ip, sizeof(ip));
        port = ntohs(sin->sin_port);
    } else if (fmt == FI_SOCKADDR_IN6 &&
               len >= sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *s6 = addr;

        if (!IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
            return false;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        port = ntohs(s6->sin6_port);
    } else {
        return false;
    }
    if (text != NULL)
        snprintf(text, text_len, fmt == FI_SOCKADDR_IN6 ? "[%s]:%u" : "%s:%u",
                 ip, port);
    return true;
}

bool ferry__route_default(struct ferry__route *route)
{
    FILE *f = fopen("/proc/net/route", "re");
    char line[256], ifname[IF_NAMESIZE];
    unsigned long dest, mask;
    bool found = false;

    if (f == NULL)
        return false;
    /* Columns: Iface Destination Gateway Flags RefCnt Use Metric Mask...;
     * the default route has destination and mask 0. */
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = sscanf(line, "%15s %lx %*x %*x %*d %*d %*d %lx", ifname,
                       &dest, &mask) == 3 &&
                dest == 0 && mask == 0;
    fclose(f);
    if (!found)
        return false;
    memset(route, 0, sizeof(*route));
    snprintf(route->to, sizeof(route->to),
             "peers of unknown whereabouts (the default route)");
    snprintf(route->ifname, sizeof(route->ifname), "%s", ifname);
    snprintf(route->local_text, sizeof(route->local_text), "interface %s",
             ifname);
    return true;
}

bool ferry__route_meeting_host(const char *url, char *host, size_t len)
{
    const char *p = url != NULL ? strstr(url, "://") : NULL;
    size_t n;

    if (p == NULL)
        return false;
    p += 3;
    if (*p == '[') { /* [IPv6]:port */
        const char *end = strchr(p, ']');

        if (end == NULL)
            return false;
        n = (size_t)(end - p - 1);
        p++;
    } else {
        n = strcspn(p, ":,/");
    }
    if (n == 0 || n >= len)
        return false;
    memcpy(host, p, n);
    host[n] = '\0';
    return true;
}
