/*
 * hello_write: the smallest complete ferry program.
 *
 *   hello_write server [HOST:PORT]   owns a buffer, publishes it as "hello",
 *                                    waits for the client's notification,
 *                                    verifies every byte
 *   hello_write client HOST:PORT     looks "hello" up, writes a pattern into
 *                                    it with a notification, reports GB/s
 *   hello_write demo                 both, as two processes on this host
 *
 * The two meet through ferry's metadata calls (ferry.h "Metadata"):
 * HOST:PORT is the embedded bootstrap there, bootstrap://HOST:PORT, where
 * the server joins as "hello-server"; whichever side comes first listens
 * there, the other connects.  Through a metadata service such as etcd
 * instead (FERRY_METADATA in the environment works the same):
 *
 *   hello_write server --metadata URL --name NAME
 *   hello_write client NAME --metadata URL
 *
 * Options: --size BYTES (default 64M; K/M/G suffixes), --iterations N
 * (default 8).  FERRY_PROVIDER / FI_PROVIDER pick the provider (default:
 * shared memory for the demo and for a server on loopback, else a network
 * provider on the interface that routes to the other side).  The server
 * meets at 127.0.0.1:18515 by default; to be reached from other hosts
 * give it :PORT and set the same FERRY_OOB_TOKEN on both sides (without
 * one the bootstrap listens on loopback only, unless FERRY_OOB_INSECURE=1).
 */
#include "example.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NOTIFY_ID 1
#define TIMEOUT_MS 30000

static size_t opt_size = 64u << 20;
static unsigned opt_iterations = 8;
/* Where the two meet: --metadata URL, else FERRY_METADATA, else the
 * bootstrap at the HOST:PORT given. */
static const char *opt_url;
static char boot_url[300];
static const char *opt_name = "hello-server"; /* the server's name there */

/* The byte at position i of iteration it: both sides compute it. */
static uint8_t pattern(size_t i, unsigned it)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + it;
    return (uint8_t)(x >> 56);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A context for meeting the other side at opt_url. */
static int open_context(const char *who, bool target, ferry_context_t **ctx)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    int ret;

    ex_config(&cfg, target, opt_url);
    if ((ret = ferry_context_create(&cfg, ctx)))
        return ex_fail(who, "ferry_context_create", ret);
    ferry_context_info(*ctx, &info);
    printf("%s: %s\n", who, info.why);
    return 0;
}

static int run_server(void)
{
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_mem_t *mem;
    uint8_t *buf;
    size_t bad = 0;
    int ret;

    if (open_context("server", true, &ctx))
        return 1;
    buf = malloc(opt_size);
    if (buf == NULL)
        return ex_fail("server", "malloc", FERRY_ENOMEM);
    /* Written once, so its pages exist before the client writes, as a
     * serving process's KV cache does: otherwise the first write pays for
     * faulting them in (docs/performance.md, "The first write"). */
    memset(buf, 0, opt_size);
    if ((ret = ferry_mem_register(ctx, buf, opt_size, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE, &mem)))
        return ex_fail("server", "ferry_mem_register", ret);
    if ((ret = ferry_meta_open(ctx, opt_url, opt_name, &meta)))
        return ex_fail("server", "ferry_meta_open", ret);
    if ((ret = ferry_meta_publish(meta, "hello", mem)))
        return ex_fail("server", "ferry_meta_publish", ret);
    printf("server: joined %s as \"%s\"; %zu-byte region published as "
           "\"hello\"\n",
           ferry_meta_url(meta), opt_name, opt_size);
    fflush(stdout);
    /* Each iteration's notification carries its iteration number + 1. */
    if ((ret = ferry_counter_wait(ctx, NOTIFY_ID, opt_iterations, 120000)))
        return ex_fail("server", "waiting for the client's notifications", ret);
    for (size_t i = 0; i < opt_size; i++)
        bad += buf[i] != pattern(i, opt_iterations - 1);
    printf("server: received %u notifications; %zu bytes verified: %s\n",
           opt_iterations, opt_size, bad == 0 ? "OK" : "CORRUPT");
    /* Closing the context closes the metadata handle and the region. */
    ferry_context_close(ctx);
    free(buf);
    return bad == 0 ? 0 : 1;
}

/* The client's side: its context and buffer, and where it met the server. */
struct client {
    ferry_context_t *ctx;
    ferry_meta_t *meta;
    ferry_mem_t *mem;
    uint8_t *buf;
};

/* Joins opt_url under a name of this process's own, so that any number
 * of clients can write to one server. */
static int client_open(struct client *c)
{
    char name[64];
    int ret;

    if (open_context("client", false, &c->ctx))
        return 1;
    c->buf = malloc(opt_size);
    if (c->buf == NULL)
        return ex_fail("client", "malloc", FERRY_ENOMEM);
    if ((ret = ferry_mem_register(c->ctx, c->buf, opt_size, FERRY_MEM_HOST,
                                  0, 0, &c->mem)))
        return ex_fail("client", "ferry_mem_register", ret);
    snprintf(name, sizeof(name), "hello-client-%d", (int)getpid());
    if ((ret = ferry_meta_open(c->ctx, opt_url, name, &c->meta)))
        return ex_fail("client", "ferry_meta_open", ret);
    return 0;
}

/* Finds the server's "hello" (waiting for the server to publish it),
 * writes into it and reports. */
static int client_write(struct client *c)
{
    struct ferry_peer_info info = FERRY_PEER_INFO_INIT;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_req_t *req;
    struct ex_progress pg;
    double t0, first = 0, warm = 0;
    double total = (double)opt_iterations * (double)opt_size;
    char what[64];
    int ret;

    t0 = now_s();
    if ((ret = ferry_meta_lookup(c->meta, opt_name, "hello", TIMEOUT_MS,
                                 &rmem)))
        return ex_fail("client", "ferry_meta_lookup", ret);
    /* There already: the lookup waited for its address. */
    if ((ret = ferry_meta_peer(c->meta, opt_name, 0, &peer)))
        return ex_fail("client", "ferry_meta_peer", ret);
    printf("client: found %s at %s in %.1f ms; region \"hello\" is %zu "
           "bytes\n",
           opt_name, ferry_meta_url(c->meta), (now_s() - t0) * 1e3,
           ferry_rmem_length(rmem));
    /* A server on this host is reached over shared memory, one elsewhere
     * over the network: which one, and why. */
    ferry_peer_info(peer, &info);
    printf("client: reaching the server over %s\n", info.why);
    if (ferry_rmem_length(rmem) < opt_size) {
        fprintf(stderr, "client: the server's region is smaller than "
                "--size %zu; use the same --size on both sides\n", opt_size);
        return 1;
    }
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = NOTIFY_ID;
    opts.notify_value = 1;
    opts.timeout_ms = TIMEOUT_MS;
    ex_progress_start(&pg);
    for (unsigned it = 0; it < opt_iterations; it++) {
        struct ferry_iov iov = {c->buf, c->mem, rmem, 0, opt_size};
        double done = (double)it * (double)opt_size;

        snprintf(what, sizeof(what), "client: write %u of %u", it + 1,
                 opt_iterations);
        ex_progress(&pg, what, done, total);
        for (size_t i = 0; i < opt_size; i++)
            c->buf[i] = pattern(i, it);
        t0 = now_s();
        if ((ret = ferry_write(peer, &iov, 1, &opts, &req)) ||
            (ret = ex_req_wait(req, &pg, what, done, total))) {
            ex_progress_end(&pg);
            return ex_fail("client", "ferry_write", ret);
        }
        if (it == 0)
            first = now_s() - t0;
        else
            warm += now_s() - t0;
        ferry_req_close(req);
    }
    ex_progress_end(&pg);
    /* The first write pays for whatever is cold on both sides (the
     * connection, the provider's buffers); the others show the rate. */
    printf("client: provider %s: first write of %.1f MiB in %.3f s: %.2f "
           "GB/s",
           info.provider, (double)opt_size / (1 << 20), first,
           (double)opt_size / first / 1e9);
    if (opt_iterations > 1)
        printf("; then %u x %.1f MiB in %.3f s: %.2f GB/s warm",
               opt_iterations - 1, (double)opt_size / (1 << 20), warm,
               (double)(opt_iterations - 1) * (double)opt_size / warm / 1e9);
    printf(" (each write acknowledged after delivery)\n");
    return 0;
}

/* Closing the context closes the metadata handle, the region, and the
 * peer and remote region it handed out. */
static void client_close(struct client *c)
{
    ferry_context_close(c->ctx);
    free(c->buf);
}

static int run_client(void)
{
    struct client c = {0};
    int ret = client_open(&c) || client_write(&c);

    client_close(&c);
    return ret;
}

/*
 * Server and client as two processes: the client (this process) opens the
 * bootstrap on a free port, or joins the metadata service, then starts
 * the server there, as `hello_write server --metadata URL`.
 */
static int run_demo(void)
{
    struct client c = {0};
    char size[32], iterations[16];
    char *server_args[] = {"hello_write", "server", "--metadata", NULL,
                           "--name", (char *)opt_name, "--size", size,
                           "--iterations", iterations, NULL};
    pid_t server = -1;
    bool ok;

    if (opt_url == NULL)
        opt_url = "bootstrap://127.0.0.1:0";
    snprintf(size, sizeof(size), "%zu", opt_size);
    snprintf(iterations, sizeof(iterations), "%u", opt_iterations);
    ok = client_open(&c) == 0;
    if (ok) {
        /* The port this process listens on, when it opened the hub. */
        server_args[3] = (char *)ferry_meta_url(c.meta);
        ok = (server = ex_spawn(server_args)) > 0 && client_write(&c) == 0;
    }
    client_close(&c);
    ok = ex_reap(server, !ok) && ok;
    printf("demo: %s\n", ok ? "OK" : "FAILED");
    return ok ? 0 : 1;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: hello_write demo|server [HOST:PORT]|client HOST:PORT\n"
            "                   [--size BYTES] [--iterations N]\n"
            "       hello_write server --metadata URL --name NAME\n"
            "       hello_write client NAME --metadata URL\n"
            "HOST:PORT is the bootstrap there (bootstrap://HOST:PORT);\n"
            "beyond loopback, set the same FERRY_OOB_TOKEN on both sides\n");
    return 2;
}

int main(int argc, char **argv)
{
    const char *mode = NULL, *where = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--size") == 0 && i + 1 < argc) {
            opt_size = ex_parse_size(argv[++i]);
        } else if (strcmp(argv[i], "--iterations") == 0 && i + 1 < argc) {
            opt_iterations = (unsigned)atoi(argv[++i]);
            if (opt_iterations == 0 || opt_iterations > 100000)
                return usage();
        } else if (strcmp(argv[i], "--metadata") == 0 && i + 1 < argc) {
            opt_url = argv[++i];
        } else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc) {
            opt_name = argv[++i];
        } else if (mode == NULL) {
            mode = argv[i];
        } else if (where == NULL) {
            where = argv[i];
        } else {
            return usage();
        }
    }
    if (opt_url == NULL)
        opt_url = getenv("FERRY_METADATA");
    if (mode == NULL || strcmp(mode, "demo") == 0)
        return where == NULL ? run_demo() : usage();
    if (opt_url == NULL) {
        /* No metadata service: both sides name the bootstrap's place. */
        if (where == NULL && strcmp(mode, "server") == 0)
            where = "127.0.0.1:18515";
        if (where == NULL)
            return usage();
        opt_url = ex_url(where, boot_url, sizeof(boot_url));
    } else if (strcmp(mode, "client") == 0 && where != NULL) {
        opt_name = where; /* the server's name in the service */
    } else if (where != NULL || strcmp(mode, "client") == 0) {
        return usage();
    }
    if (strcmp(mode, "server") == 0)
        return run_server();
    if (strcmp(mode, "client") == 0)
        return run_client();
    return usage();
}
