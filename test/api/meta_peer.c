/*
 * ferry_meta_util: a member of a metadata service, for check_meta, which
 * starts it by posix_spawn (a fork of the threaded test process could
 * deadlock in the child; see check_death.c).
 *
 *   ferry_meta_util URL NAME LEN SEED [TIMEOUT_MS]
 *
 * Opens a context (tcp over loopback, tu_tcp, with a progress thread),
 * registers LEN bytes filled with pattern SEED for remote read and write,
 * joins URL under NAME (ferry_meta_open; config.metadata_ttl_s comes from
 * FERRY_METADATA_TTL, config.metadata_timeout_ms from TIMEOUT_MS) and
 * publishes the region as "kv", then prints "ready".  Then it answers one
 * line per command read on stdin:
 *
 *   verify SEED   "ok", or "bad at I" (the first byte that differs)
 *   close         ferry_meta_close: "closed" (the process stays)
 *   quit, or end of input: closes everything and exits 0
 *
 * A failure prints "error STEP: CODE: SENTENCE" and exits 2.  No Check
 * calls here: this is not a test process.
 */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROV tu_tcp()

static void die(const char *step, int ret)
{
    printf("error %s: %s: %s\n", step, ferry_strerror(ret), ferry_last_error());
    fflush(stdout);
    exit(2);
}

int main(int argc, char **argv)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;
    ferry_meta_t *meta = NULL;
    ferry_mem_t *mem = NULL;
    uint8_t *buf;
    size_t len;
    uint64_t seed;
    char line[256];
    int ret;

    if (argc < 5 || argc > 6) {
        fprintf(stderr, "usage: %s URL NAME LEN SEED [TIMEOUT_MS]\n", argv[0]);
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    len = strtoull(argv[3], NULL, 0);
    seed = strtoull(argv[4], NULL, 0);
    if ((ret = ferry_config_init(&cfg)) != 0)
        die("ferry_config_init", ret);
    cfg.provider = PROV;
    cfg.domain = "lo";
    cfg.local_only = 1;
    cfg.timeout_ms = 30000;
    cfg.progress_thread = 1;
    if (argc == 6)
        cfg.metadata_timeout_ms = atoi(argv[5]);
    if ((ret = ferry_context_create(&cfg, &ctx)) != 0)
        die("ferry_context_create", ret);
    buf = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
    if (buf == NULL)
        die("aligned_alloc", FERRY_ENOMEM);
    tu_fill(buf, len, seed);
    if ((ret = ferry_mem_register(ctx, buf, len, FERRY_MEM_HOST, 0, RW, &mem)))
        die("ferry_mem_register", ret);
    if ((ret = ferry_meta_open(ctx, argv[1], argv[2], &meta)) != 0)
        die("ferry_meta_open", ret);
    if ((ret = ferry_meta_publish(meta, "kv", mem)) != 0)
        die("ferry_meta_publish", ret);
    printf("ready\n");

    while (fgets(line, sizeof(line), stdin) != NULL) {
        unsigned long long vseed;

        if (sscanf(line, "verify %llu", &vseed) == 1) {
            size_t bad = tu_check(buf, len, vseed);
            if (bad == SIZE_MAX)
                printf("ok\n");
            else
                printf("bad at %zu\n", bad);
        } else if (strncmp(line, "close", 5) == 0) {
            ferry_meta_close(meta);
            meta = NULL;
            printf("closed\n");
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            printf("error command: unknown: %s", line);
        }
    }
    ferry_meta_close(meta);
    if ((ret = ferry_mem_close(mem)) != 0)
        die("ferry_mem_close", ret);
    ferry_context_close(ctx);
    free(buf);
    return 0;
}
