/*
 * Raw loopback sockets, for the tests and benches that play a bootstrap
 * client or server by hand (hostile clients, relays, fake servers).
 * Header-only: benches include it without linking the test library.
 */
#ifndef FERRY_TEST_SOCKUTIL_H
#define FERRY_TEST_SOCKUTIL_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

/* A TCP socket connected to 127.0.0.1:port, or -1 (errno says why). */
static inline int su_dial(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A TCP socket listening on 127.0.0.1 at a free port (*port), or -1. */
static inline int su_listen(int *port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t sl = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
                    listen(fd, 4) != 0 ||
                    getsockname(fd, (struct sockaddr *)&sa, &sl) != 0)) {
        close(fd);
        return -1;
    }
    if (fd >= 0)
        *port = ntohs(sa.sin_port);
    return fd;
}

#endif /* FERRY_TEST_SOCKUTIL_H */
