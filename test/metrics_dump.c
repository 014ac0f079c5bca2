/*
 * Real traffic's metrics, printed: a context writes, reads and notifies
 * to itself (and one write fails, through the key of a region it closed),
 * then prints ferry_metrics_text on stdout, for test/metrics.sh to give
 * to `promtool check metrics`.
 *
 *   metrics_dump [PROVIDER]
 */
#include <ferry.h>

#include <stdio.h>
#include <stdlib.h>

#define LEN (1u << 20)

static int fail(const char *what, int ret)
{
    fprintf(stderr, "metrics_dump: %s: %s (%s)\n", what, ferry_strerror(ret),
            ferry_last_error());
    return 1;
}

/* One request, waited for; its code. */
static int one(ferry_peer_t *peer, int op, struct ferry_iov *iov)
{
    ferry_req_t *req = NULL;
    int ret = op == 'w'   ? ferry_write(peer, iov, 1, NULL, &req)
              : op == 'r' ? ferry_read(peer, iov, 1, NULL, &req)
                          : ferry_notify_send(peer, 7, 1, NULL, &req);

    if (ret == 0)
        ret = ferry_req_wait(req, 10000);
    ferry_req_close(req);
    return ret;
}

int main(int argc, char **argv)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem, *gone;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem, *stale;
    uint8_t addr[512], blob[512];
    size_t alen = sizeof(addr), blen;
    char *buf = calloc(2, LEN), *text;
    size_t need = 0;
    int ret;

    if (buf == NULL || ferry_config_init(&cfg) != 0)
        return 1;
    cfg.provider = argc > 1 ? argv[1] : "shm";
    cfg.progress_thread = 1;
    if ((ret = ferry_context_create(&cfg, &ctx)) ||
        (ret = ferry_mem_register(ctx, buf, LEN, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_READ |
                                      FERRY_ACCESS_REMOTE_WRITE,
                                  &mem)) ||
        (ret = ferry_mem_register(ctx, buf + LEN, LEN, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE, &gone)) ||
        (ret = ferry_context_address(ctx, addr, &alen)) ||
        (ret = ferry_peer_add(ctx, addr, alen, &peer)))
        return fail("setting up", ret);
    blen = sizeof(blob);
    if ((ret = ferry_mem_export(mem, blob, &blen)) ||
        (ret = ferry_rmem_import(peer, blob, blen, &rmem)))
        return fail("sharing", ret);
    blen = sizeof(blob);
    if ((ret = ferry_mem_export(gone, blob, &blen)) ||
        (ret = ferry_rmem_import(peer, blob, blen, &stale)) ||
        (ret = ferry_mem_close(gone)))
        return fail("sharing the region that goes", ret);
    for (size_t len = 4096; len <= LEN / 2; len *= 4) {
        struct ferry_iov iov = {buf, mem, rmem, LEN / 2, len};

        if ((ret = one(peer, 'w', &iov)) || (ret = one(peer, 'r', &iov)))
            return fail("a transfer", ret);
    }
    if ((ret = one(peer, 'n', NULL)))
        return fail("a notification", ret);
    struct ferry_iov iov = {buf, mem, stale, 0, 4096};
    if ((ret = one(peer, 'w', &iov)) != FERRY_ESTALE)
        return fail("the write that should have been refused as stale", ret);
    if ((ret = ferry_metrics_text(ctx, NULL, 0, &need)) != FERRY_ENOSPC ||
        (text = malloc(need + 4096)) == NULL ||
        (ret = ferry_metrics_text(ctx, text, need + 4096, NULL)) != 0)
        return fail("ferry_metrics_text", ret);
    fputs(text, stdout);
    free(text);
    ferry_context_close(ctx);
    free(buf);
    return 0;
}
