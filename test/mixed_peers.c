/*
 * One target, several writers, each told by the test where it runs
 * (test/mixed.sh puts one writer on the target's host and one on
 * another): the target registers one region per writer and receives
 * from all of them at once; each writer says which transport it reached
 * the target over and at what rate, and the target checks every byte
 * and which transport it reaches each writer over.
 *
 *   mixed_peers target DIR WRITERS SIZE
 *   mixed_peers writer DIR INDEX SIZE ROUNDS
 *
 * Blobs go through files in DIR (the rig's hosts share the file system):
 * target.addr, target.rkey, writerI.addr.  Default configuration on both
 * sides, as a user's program would have it.
 */
#include <ferry.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "example.h"

#define WAIT_MS 60000
#define MAX_WRITERS 8

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The byte writer w puts at offset i of its part. */
static uint8_t pattern(unsigned w, size_t i)
{
    return (uint8_t)(w * 31u + i * 7u + (i >> 12));
}

static int put_file(const char *dir, const char *name, const void *buf,
                    size_t len)
{
    char path[512], tmp[520];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if ((f = fopen(tmp, "wb")) == NULL ||
        fwrite(buf, 1, len, f) != len || fclose(f) != 0)
        return -1;
    return rename(tmp, path); /* whole or absent for the reader */
}

/* Waits up to WAIT_MS for DIR/NAME and reads it into buf. */
static int get_file(const char *dir, const char *name, void *buf,
                    size_t cap, size_t *len)
{
    char path[512];
    double until = now_s() + WAIT_MS / 1e3;
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    while ((f = fopen(path, "rb")) == NULL) {
        if (errno != ENOENT || now_s() > until)
            return -1;
        usleep(10000);
    }
    *len = fread(buf, 1, cap, f);
    fclose(f);
    return 0;
}

/* Says which transport the context reaches peer over, as who. */
static void say_transport(const char *who, ferry_peer_t *peer)
{
    struct ferry_peer_info info = FERRY_PEER_INFO_INIT;

    if (ferry_peer_info(peer, &info) == 0)
        printf("%s: peer %s over %s, %u rail%s (%s)\n", who, info.label,
               info.provider, info.nrails, info.nrails == 1 ? "" : "s",
               info.why);
}

static int target(const char *dir, unsigned writers, size_t size)
{
    struct ferry_config cfg;
    ferry_context_t *ctx;
    ferry_mem_t *mem;
    ferry_peer_t *peers[MAX_WRITERS];
    uint8_t blob[4096], *buf;
    size_t len;
    int ret, bad = 0;

    ferry_config_init(&cfg);
    cfg.progress_thread = 1;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        return ex_fail("target", "ferry_context_create", ret);
    if ((buf = calloc(writers, size)) == NULL)
        return 1;
    if ((ret = ferry_mem_register(ctx, buf, writers * size, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE, &mem)))
        return ex_fail("target", "ferry_mem_register", ret);
    len = sizeof(blob);
    if ((ret = ferry_context_address(ctx, blob, &len)) ||
        put_file(dir, "target.addr", blob, len))
        return ex_fail("target", "publishing its address", ret);
    len = sizeof(blob);
    if ((ret = ferry_mem_export(mem, blob, &len)) ||
        put_file(dir, "target.rkey", blob, len))
        return ex_fail("target", "publishing its region", ret);
    printf("target: ready, %u regions of %zu bytes\n", writers, size);
    fflush(stdout);
    for (unsigned w = 0; w < writers; w++) {
        char name[32];

        snprintf(name, sizeof(name), "writer%u.addr", w);
        if (get_file(dir, name, blob, sizeof(blob), &len))
            return ex_fail("target", name, FERRY_ETIMEDOUT);
        if ((ret = ferry_peer_add(ctx, blob, len, &peers[w])))
            return ex_fail("target", "ferry_peer_add", ret);
        say_transport("target", peers[w]);
    }
    /* Each writer's last write notifies with its index as id. */
    for (unsigned w = 0; w < writers; w++)
        if ((ret = ferry_counter_wait(ctx, w + 1, 1, WAIT_MS)))
            return ex_fail("target", "ferry_counter_wait", ret);
    for (unsigned w = 0; w < writers; w++) {
        size_t wrong = 0;

        for (size_t i = 0; i < size; i++)
            wrong += buf[w * size + i] != pattern(w, i);
        printf("target: writer %u: %zu bytes %s\n", w, size,
               wrong == 0 ? "verified" : "WRONG");
        bad |= wrong != 0;
    }
    for (unsigned w = 0; w < writers; w++)
        ferry_peer_close(peers[w]);
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    free(buf);
    return bad;
}

static int writer(const char *dir, unsigned index, size_t size,
                  unsigned rounds)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_peer_info pinfo = FERRY_PEER_INFO_INIT;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *mem;
    uint8_t blob[4096], *buf;
    char name[32];
    double t0, warm = 0;
    size_t len;
    int ret;

    if ((ret = ferry_context_create(NULL, &ctx)))
        return ex_fail("writer", "ferry_context_create", ret);
    len = sizeof(blob);
    snprintf(name, sizeof(name), "writer%u.addr", index);
    if ((ret = ferry_context_address(ctx, blob, &len)) ||
        put_file(dir, name, blob, len))
        return ex_fail("writer", "publishing its address", ret);
    if (get_file(dir, "target.addr", blob, sizeof(blob), &len))
        return ex_fail("writer", "target.addr", FERRY_ETIMEDOUT);
    if ((ret = ferry_peer_add(ctx, blob, len, &peer)))
        return ex_fail("writer", "ferry_peer_add", ret);
    if (get_file(dir, "target.rkey", blob, sizeof(blob), &len))
        return ex_fail("writer", "target.rkey", FERRY_ETIMEDOUT);
    if ((ret = ferry_rmem_import(peer, blob, len, &rmem)))
        return ex_fail("writer", "ferry_rmem_import", ret);
    if ((buf = malloc(size)) == NULL)
        return 1;
    for (size_t i = 0; i < size; i++)
        buf[i] = pattern(index, i);
    if ((ret = ferry_mem_register(ctx, buf, size, FERRY_MEM_HOST, 0, 0, &mem)))
        return ex_fail("writer", "ferry_mem_register", ret);
    ferry_peer_info(peer, &pinfo);
    say_transport("writer", peer);
    opts.timeout_ms = WAIT_MS;
    /* Round 0 warms the connection and the target's pages; the last one
     * notifies. */
    for (unsigned r = 0; r <= rounds; r++) {
        struct ferry_iov iov = {buf, mem, rmem, index * size, size};
        ferry_req_t *req;

        if (r == rounds) {
            opts.flags = FERRY_XFER_NOTIFY;
            opts.notify_id = index + 1;
            opts.notify_value = 1;
        }
        t0 = now_s();
        if ((ret = ferry_write(peer, &iov, 1, &opts, &req)) ||
            (ret = ferry_req_wait(req, -1)))
            return ex_fail("writer", "ferry_write", ret);
        if (r > 0)
            warm += now_s() - t0;
        ferry_req_close(req);
    }
    printf("writer %u: over %s: %u x %.1f MiB in %.3f s: %.2f GB/s warm\n",
           index, pinfo.provider, rounds, (double)size / (1 << 20), warm,
           (double)rounds * (double)size / warm / 1e9);
    ferry_rmem_close(rmem);
    ferry_peer_close(peer);
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "target") == 0 &&
        atoi(argv[3]) > 0 && atoi(argv[3]) <= MAX_WRITERS)
        return target(argv[2], (unsigned)atoi(argv[3]),
                      strtoull(argv[4], NULL, 0));
    if (argc == 6 && strcmp(argv[1], "writer") == 0 && atoi(argv[5]) > 0)
        return writer(argv[2], (unsigned)atoi(argv[3]),
                      strtoull(argv[4], NULL, 0), (unsigned)atoi(argv[5]));
    fprintf(stderr, "usage: %s target DIR WRITERS SIZE\n"
                    "       %s writer DIR INDEX SIZE ROUNDS\n",
            argv[0], argv[0]);
    return 2;
}
