/*
 * gpu_write: GPU memory to GPU memory, as two processes on this host.
 *
 *   gpu_write [--size BYTES] [--iterations N]
 *
 * The target registers a buffer on GPU 0 for remote writes and publishes
 * it; the initiator writes from its own GPU buffer into it, each write
 * with a notification, and the target checks every byte on the device
 * once the notifications are in.  Both print how ferry registered their
 * device memory (dmabuf, FI_HMEM by virtual address, or staged through
 * host buffers when the provider cannot register GPU memory) and why.
 *
 * The two meet through ferry's metadata calls over the embedded
 * bootstrap: the initiator opens bootstrap://127.0.0.1:0 (a free port),
 * then starts the target as a second process of this program,
 *
 *   gpu_write --target URL [--size BYTES] [--iterations N]
 *
 * which joins there as "gpu-target" and publishes its buffer as "gpu".
 *
 * With a GPU (CUDA's driver, libcuda.so.1) it uses it.  Without one it
 * says so and runs on ferry's simulated device (FERRY_SIM_DEVICES=1),
 * whose memory the CPU cannot touch, so the same code paths run.
 * FERRY_PROVIDER / FI_PROVIDER pick the provider (default: shared
 * memory, both processes being on this host).
 */
#include "example.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NOTIFY_ID 7
#define TIMEOUT_MS 60000

static size_t opt_size = 16u << 20;
static unsigned opt_iterations = 4;

static uint8_t pattern(size_t i, unsigned it)
{
    return (uint8_t)(((uint64_t)i * 0x9e3779b97f4a7c15ull + it) >> 56);
}

static int open_context(const char *who, bool target, ferry_context_t **ctx)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    int ret;

    ex_config(&cfg, target, "127.0.0.1"); /* both sides on this host */
    cfg.cuda_device = 0;
    if ((ret = ferry_context_create(&cfg, ctx)))
        return ex_fail(who, "ferry_context_create", ret);
    ferry_context_info(*ctx, &info);
    printf("%s: provider %s; device memory: %s\n", who, info.provider,
           info.device_path);
    return 0;
}

/* A device buffer and its registration. */
static int device_region(const char *who, ferry_context_t *ctx,
                         unsigned access, void **dev, ferry_mem_t **mem)
{
    int ret;

    if ((ret = ferry_device_alloc(0, opt_size, dev)))
        return ex_fail(who, "ferry_device_alloc", ret);
    if ((ret = ferry_mem_register(ctx, *dev, opt_size, FERRY_MEM_CUDA, 0,
                                  access, mem)))
        return ex_fail(who, "ferry_mem_register", ret);
    printf("%s: %zu bytes on device 0 registered as \"%s\"\n", who, opt_size,
           ferry_mem_path(*mem));
    return 0;
}

static int run_target(const char *url)
{
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_mem_t *mem;
    uint8_t *check;
    void *dev;
    size_t bad = 0;
    int ret;

    if (open_context("target", true, &ctx) ||
        device_region("target", ctx, FERRY_ACCESS_REMOTE_WRITE, &dev, &mem))
        return 1;
    if ((ret = ferry_meta_open(ctx, url, "gpu-target", &meta)) ||
        (ret = ferry_meta_publish(meta, "gpu", mem)))
        return ex_fail("target", "publishing the region", ret);
    if ((ret = ferry_counter_wait(ctx, NOTIFY_ID, opt_iterations,
                                  TIMEOUT_MS)))
        return ex_fail("target", "waiting for the notifications", ret);
    /* The device holds the last iteration's bytes: copy them back to see. */
    if ((check = malloc(opt_size)) == NULL)
        return ex_fail("target", "allocating the check buffer", FERRY_ENOMEM);
    if ((ret = ferry_device_copy(check, dev, opt_size)))
        return ex_fail("target", "copying the device buffer back", ret);
    for (size_t i = 0; i < opt_size; i++)
        bad += check[i] != pattern(i, opt_iterations - 1);
    printf("target: %u notifications; %zu bytes verified on the device: %s\n",
           opt_iterations, opt_size, bad == 0 ? "OK" : "CORRUPT");
    free(check);
    /* Closing the context closes the metadata handle and the region. */
    ferry_context_close(ctx);
    ferry_device_free(dev);
    return bad == 0 ? 0 : 1;
}

/* The initiator, which starts the target (*target: its pid) once it has
 * opened the bootstrap. */
static int run_initiator(pid_t *target)
{
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct ferry_stats st = FERRY_STATS_INIT;
    char size[32], iterations[16];
    char *target_args[] = {"gpu_write", "--target", NULL, "--size", size,
                           "--iterations", iterations, NULL};
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *mem;
    ferry_req_t *req;
    uint8_t *host;
    void *dev;
    int ret;

    if (open_context("initiator", false, &ctx) ||
        device_region("initiator", ctx, 0, &dev, &mem))
        return 1;
    if ((ret = ferry_meta_open(ctx, "bootstrap://127.0.0.1:0",
                               "gpu-initiator", &meta)))
        return ex_fail("initiator", "ferry_meta_open", ret);
    snprintf(size, sizeof(size), "%zu", opt_size);
    snprintf(iterations, sizeof(iterations), "%u", opt_iterations);
    /* The port this process listens on. */
    target_args[2] = (char *)ferry_meta_url(meta);
    if ((*target = ex_spawn(target_args)) < 0)
        return 1;
    if ((ret = ferry_meta_lookup(meta, "gpu-target", "gpu", TIMEOUT_MS,
                                 &rmem)) ||
        (ret = ferry_meta_peer(meta, "gpu-target", 0, &peer)))
        return ex_fail("initiator", "finding the target's region", ret);
    host = malloc(opt_size);
    if (host == NULL)
        return ex_fail("initiator", "malloc", FERRY_ENOMEM);
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = NOTIFY_ID;
    opts.notify_value = 1;
    for (unsigned it = 0; it < opt_iterations; it++) {
        struct ferry_iov iov = {dev, mem, rmem, 0, opt_size};

        for (size_t i = 0; i < opt_size; i++)
            host[i] = pattern(i, it);
        if ((ret = ferry_device_copy(dev, host, opt_size)))
            return ex_fail("initiator", "filling the device buffer", ret);
        if ((ret = ferry_write(peer, &iov, 1, &opts, &req)) ||
            (ret = ferry_req_wait(req, TIMEOUT_MS)))
            return ex_fail("initiator", "ferry_write", ret);
        ferry_req_close(req);
    }
    ferry_context_stats(ctx, &st);
    printf("initiator: wrote %u x %zu bytes from GPU to GPU; staged %" PRIu64
           " bytes in %" PRIu64 " chunks, up to %" PRIu64 " in flight\n",
           opt_iterations, opt_size, st.staged_bytes, st.staged_chunks,
           st.staged_max_in_flight);
    free(host);
    /* Closing the context closes the metadata handle, the region and what
     * the lookup handed out. */
    ferry_context_close(ctx);
    ferry_device_free(dev);
    return 0;
}

/*
 * Whether ferry has a device backend, saying which.  It is chosen once per
 * process; the target, a process of its own, finds the same one.
 */
static bool device_found(void)
{
    bool found = ferry_device_backend() != NULL;

    if (found)
        printf("gpu_write: device backend: %s\n", ferry_device_status());
    else
        printf("gpu_write: no GPU here (%s)\n"
               "gpu_write: NOTICE: running on ferry's simulated device "
               "instead (FERRY_SIM_DEVICES=1)\n",
               ferry_device_status());
    fflush(stdout);
    return found;
}

int main(int argc, char **argv)
{
    const char *target_url = NULL;
    pid_t target = -1;
    bool ok;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc)
            opt_size = ex_parse_size(argv[++i]);
        else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc &&
                 atoi(argv[i + 1]) > 0)
            opt_iterations = (unsigned)atoi(argv[++i]);
        else if (strcmp(argv[i], "--target") == 0 && i + 1 < argc)
            target_url = argv[++i];
        else {
            fprintf(stderr, "usage: gpu_write [--size BYTES] "
                    "[--iterations N]\n");
            return 2;
        }
    }
    /* The initiator looked for a GPU (and set FERRY_SIM_DEVICES when there
     * is none); the target inherits its environment. */
    if (target_url != NULL)
        return run_target(target_url);
    if (!device_found() && getenv("FERRY_SIM_DEVICES") == NULL) {
        setenv("FERRY_SIM_DEVICES", "1", 1);
        /* The backend is chosen once per process: start afresh. */
        execv("/proc/self/exe", argv);
        perror("gpu_write: re-executing itself");
        return 1;
    }
    ok = run_initiator(&target) == 0;
    ok = ex_reap(target, !ok) && ok;
    printf("gpu_write: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}
