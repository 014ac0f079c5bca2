/*
 * An event loop that waits on ferry with epoll: the initiator's requests
 * end while the loop sleeps in epoll_wait on the context's descriptor
 * (ferry_context_fd), beside whatever else the loop watches (here, a
 * timer that would report a stall).  One process, two contexts on shared
 * memory: a target, and an initiator that writes into it.
 *
 *   epoll_wait [--writes N] [--size SIZE]
 */
#include "example.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#define MAX_WRITES 64

static int open_context(ferry_context_t **ctx)
{
    struct ferry_config cfg;
    int ret;

    ferry_config_init(&cfg);
    cfg.local_only = 1;
    /* The thread moves the data and writes the descriptor. */
    cfg.progress_thread = 1;
    if ((ret = ferry_context_create(&cfg, ctx)))
        return ex_fail("epoll_wait", "ferry_context_create", ret);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned writes = 16, left, wakeups = 0;
    size_t size = 1 << 20;
    ferry_context_t *target, *init;
    ferry_mem_t *tmem, *lmem;
    ferry_rmem_t *rmem;
    ferry_peer_t *peer;
    ferry_req_t *req[MAX_WRITES];
    uint8_t addr[1024], blob[1024], *tbuf, *lbuf;
    size_t alen = sizeof(addr), blen = sizeof(blob);
    struct itimerspec stall = {.it_value = {10, 0}};
    struct epoll_event ev = {.events = EPOLLIN};
    int fd, timer, ep, ret;

    for (int i = 1; i < argc; i += 2) {
        if (i + 1 < argc && strcmp(argv[i], "--writes") == 0)
            writes = (unsigned)atoi(argv[i + 1]);
        else if (i + 1 < argc && strcmp(argv[i], "--size") == 0)
            size = ex_parse_size(argv[i + 1]);
        else
            writes = 0; /* --help, or what it does not know */
    }
    if (writes == 0 || writes > MAX_WRITES || size == 0) {
        fprintf(stderr, "usage: epoll_wait [--writes 1..%d] [--size SIZE (K, M, G)]\n",
                MAX_WRITES);
        return 2;
    }
    if (open_context(&target) || open_context(&init))
        return 1;
    tbuf = calloc(writes, size);
    lbuf = malloc(size);
    if (tbuf == NULL || lbuf == NULL)
        return ex_fail("epoll_wait", "malloc", FERRY_ENOMEM);
    memset(lbuf, 0x5a, size);
    if ((ret = ferry_mem_register(target, tbuf, writes * size, FERRY_MEM_HOST,
                                  0, FERRY_ACCESS_REMOTE_WRITE, &tmem)) ||
        (ret = ferry_mem_export(tmem, blob, &blen)) ||
        (ret = ferry_context_address(target, addr, &alen)) ||
        (ret = ferry_peer_add(init, addr, alen, &peer)) ||
        (ret = ferry_rmem_import(peer, blob, blen, &rmem)) ||
        (ret = ferry_mem_register(init, lbuf, size, FERRY_MEM_HOST, 0, 0,
                                  &lmem)))
        return ex_fail("epoll_wait", "setting up", ret);

    /* The loop watches ferry's descriptor and a stall timer. */
    if ((ret = ferry_context_fd(init, &fd)))
        return ex_fail("epoll_wait", "ferry_context_fd", ret);
    timer = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
    ep = epoll_create1(EPOLL_CLOEXEC);
    ev.data.fd = fd;
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    ev.data.fd = timer;
    epoll_ctl(ep, EPOLL_CTL_ADD, timer, &ev);
    timerfd_settime(timer, 0, &stall, NULL);

    for (unsigned i = 0; i < writes; i++) {
        struct ferry_iov iov = {lbuf, lmem, rmem, i * size, size};

        if ((ret = ferry_write(peer, &iov, 1, NULL, &req[i])))
            return ex_fail("epoll_wait", "ferry_write", ret);
    }
    for (left = writes; left > 0;) {
        /* Look at everything, then arm; sleep only once armed. */
        for (unsigned i = 0; i < writes; i++) {
            if (req[i] == NULL || (ret = ferry_req_test(req[i])) ==
                                      FERRY_EINPROGRESS)
                continue;
            if (ret != 0)
                return ex_fail("epoll_wait", "a write", ret);
            ferry_req_close(req[i]);
            req[i] = NULL;
            left--;
        }
        if (left == 0 || ferry_context_arm(init) == FERRY_EAGAIN)
            continue;
        if (epoll_wait(ep, &ev, 1, -1) != 1 || ev.data.fd == timer) {
            fprintf(stderr, "epoll_wait: no request ended within 10 s\n");
            return 1;
        }
        wakeups++;
    }
    for (size_t i = 0; i < writes * size; i++)
        if (tbuf[i] != 0x5a) {
            fprintf(stderr, "epoll_wait: byte %zu is wrong\n", i);
            return 1;
        }
    printf("epoll_wait: %u writes of %zu bytes ended while the loop slept "
           "in epoll_wait: %u wake-ups; bytes verified: OK\n",
           writes, size, wakeups);
    close(ep);
    close(timer);
    ferry_rmem_close(rmem);
    ferry_peer_close(peer);
    ferry_mem_close(lmem);
    ferry_mem_close(tmem);
    ferry_context_close(init);
    ferry_context_close(target);
    free(tbuf);
    free(lbuf);
    return 0;
}
