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
 * Through a metadata service instead of the bootstrap (ferry.h
 * "Metadata"; FERRY_METADATA in the environment works the same):
 *
 *   hello_write server --metadata URL --name NAME
 *   hello_write client NAME --metadata URL
 *
 * Options: --size BYTES (default 64M; K/M/G suffixes), --iterations N
 * (default 8).  FERRY_PROVIDER / FI_PROVIDER pick the provider (default:
 * shared memory for the demo and for a server on loopback, else a network
 * provider on the interface that routes to the other side).  The server
 * listens on 127.0.0.1:18515 by default; to be reached from other hosts
 * give it :PORT and set the same FERRY_OOB_TOKEN on both sides.
 */
#include "example.h"

#include <inttypes.h>
#include <stdbool.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOTIFY_ID 1
#define TIMEOUT_MS 30000

static size_t opt_size = 64u << 20;
static unsigned opt_iterations = 8;
static const char *opt_metadata; /* --metadata, else FERRY_METADATA */
static const char *opt_name = "hello-server"; /* --name (server) */

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

/* A context for meeting peers at where (HOST:PORT), or through the
 * metadata service when one is given. */
static int open_context(const char *who, bool target, const char *where,
                        ferry_context_t **ctx)
{
    struct ferry_config cfg;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;
    int ret;

    ex_config(&cfg, target, opt_metadata != NULL ? opt_metadata : where);
    if ((ret = ferry_context_create(&cfg, ctx)))
        return ex_fail(who, "ferry_context_create", ret);
    ferry_context_info(*ctx, &info);
    printf("%s: %s\n", who, info.why);
    return 0;
}

/* Makes mem findable as "hello": through the metadata service when one
 * is given, else on a bootstrap listener at where.  report_fd >= 0: the
 * listener's port is written there. */
static int publish_hello(ferry_context_t *ctx, ferry_mem_t *mem,
                         const char *where, int report_fd, ferry_oob_t **lis,
                         ferry_meta_t **meta)
{
    int ret;

    if (opt_metadata != NULL) {
        if ((ret = ferry_meta_open(ctx, opt_metadata, opt_name, meta)))
            return ex_fail("server", "ferry_meta_open", ret);
        if ((ret = ferry_meta_publish(*meta, "hello", mem)))
            return ex_fail("server", "ferry_meta_publish", ret);
        printf("server: joined %s as \"%s\"; %zu-byte region published as "
               "\"hello\"\n",
               opt_metadata, opt_name, opt_size);
        fflush(stdout);
        return 0;
    }
    if ((ret = ferry_oob_listen(ctx, where, lis)))
        return ex_fail("server", "ferry_oob_listen", ret);
    if ((ret = ferry_oob_publish(*lis, "hello", mem)))
        return ex_fail("server", "ferry_oob_publish", ret);
    printf("server: listening on port %d, %zu-byte region published as "
           "\"hello\"\n",
           ferry_oob_port(*lis), opt_size);
    fflush(stdout);
    if (report_fd >= 0) {
        int port = ferry_oob_port(*lis);
        if (write(report_fd, &port, sizeof(port)) != sizeof(port))
            return ex_fail("server", "reporting the port", FERRY_EIO);
    }
    return 0;
}

static int run_server(const char *where, int report_fd)
{
    ferry_context_t *ctx;
    ferry_oob_t *lis = NULL;
    ferry_meta_t *meta = NULL;
    ferry_mem_t *mem;
    uint8_t *buf;
    size_t bad = 0;
    int ret;

    if (open_context("server", true, where, &ctx))
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
    if (publish_hello(ctx, mem, where, report_fd, &lis, &meta))
        return 1;
    /* Each iteration's notification carries its iteration number + 1. */
    if ((ret = ferry_counter_wait(ctx, NOTIFY_ID, opt_iterations, 120000)))
        return ex_fail("server", "waiting for the client's notifications", ret);
    for (size_t i = 0; i < opt_size; i++)
        bad += buf[i] != pattern(i, opt_iterations - 1);
    printf("server: received %u notifications; %zu bytes verified: %s\n",
           opt_iterations, opt_size, bad == 0 ? "OK" : "CORRUPT");
    ferry_meta_close(meta);
    ferry_oob_close(lis);
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    free(buf);
    return bad == 0 ? 0 : 1;
}

/* Finds the server's "hello": by name through the metadata service when
 * one is given, else through the bootstrap listener at where. */
static int find_hello(ferry_context_t *ctx, const char *where,
                      ferry_oob_conn_t **conn, ferry_meta_t **meta,
                      ferry_peer_t **peer, ferry_rmem_t **rmem)
{
    int ret;

    if (opt_metadata != NULL) {
        char name[64];

        snprintf(name, sizeof(name), "hello-client-%d", (int)getpid());
        if ((ret = ferry_meta_open(ctx, opt_metadata, name, meta)))
            return ex_fail("client", "ferry_meta_open", ret);
        if ((ret = ferry_meta_lookup(*meta, where, "hello", TIMEOUT_MS, rmem)))
            return ex_fail("client", "ferry_meta_lookup", ret);
        if ((ret = ferry_meta_peer(*meta, where, 0, peer)))
            return ex_fail("client", "ferry_meta_peer", ret);
        return 0;
    }
    if ((ret = ferry_oob_connect(ctx, where, TIMEOUT_MS, conn)))
        return ex_fail("client", "ferry_oob_connect", ret);
    if ((ret = ferry_oob_lookup(*conn, "hello", TIMEOUT_MS, rmem)))
        return ex_fail("client", "ferry_oob_lookup", ret);
    *peer = ferry_oob_conn_peer(*conn);
    return 0;
}

static int run_client(const char *where)
{
    struct ferry_peer_info info = FERRY_PEER_INFO_INIT;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    ferry_context_t *ctx;
    ferry_oob_conn_t *conn = NULL;
    ferry_meta_t *meta = NULL;
    ferry_peer_t *peer;
    ferry_rmem_t *rmem;
    ferry_mem_t *mem;
    ferry_req_t *req;
    uint8_t *buf;
    double t0, first = 0, warm = 0;
    int ret;

    if (open_context("client", false, where, &ctx))
        return 1;
    buf = malloc(opt_size);
    if (buf == NULL)
        return ex_fail("client", "malloc", FERRY_ENOMEM);
    if ((ret = ferry_mem_register(ctx, buf, opt_size, FERRY_MEM_HOST, 0, 0,
                                  &mem)))
        return ex_fail("client", "ferry_mem_register", ret);
    t0 = now_s();
    if (find_hello(ctx, where, &conn, &meta, &peer, &rmem))
        return 1;
    printf("client: found %s in %.1f ms; region \"hello\" is %zu bytes\n",
           where, (now_s() - t0) * 1e3, ferry_rmem_length(rmem));
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
    for (unsigned it = 0; it < opt_iterations; it++) {
        struct ferry_iov iov = {buf, mem, rmem, 0, opt_size};

        for (size_t i = 0; i < opt_size; i++)
            buf[i] = pattern(i, it);
        t0 = now_s();
        if ((ret = ferry_write(peer, &iov, 1, &opts, &req)) ||
            (ret = ferry_req_wait(req, -1)))
            return ex_fail("client", "ferry_write", ret);
        if (it == 0)
            first = now_s() - t0;
        else
            warm += now_s() - t0;
        ferry_req_close(req);
    }
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
    ferry_rmem_close(rmem);
    ferry_oob_disconnect(conn);
    ferry_meta_close(meta);
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    free(buf);
    return 0;
}

/* Server and client as two processes: a free port chosen by the server,
 * or the server's name in the metadata service. */
static int run_demo(void)
{
    char where[64];
    int port_pipe[2], status = 0, client_ret;
    pid_t server;

    if (pipe(port_pipe) != 0)
        return 1;
    fflush(stdout);
    server = fork();
    if (server == 0) {
        int code = run_server("127.0.0.1:0",
                              opt_metadata != NULL ? -1 : port_pipe[1]);
        fflush(stdout);
        _exit(code);
    }
    close(port_pipe[1]);
    int port = 0;
    if (opt_metadata != NULL) {
        snprintf(where, sizeof(where), "%s", opt_name);
    } else if (read(port_pipe[0], &port, sizeof(port)) != sizeof(port)) {
        waitpid(server, &status, 0);
        printf("demo: FAILED (the server did not start)\n");
        return 1;
    } else {
        snprintf(where, sizeof(where), "127.0.0.1:%d", port);
    }
    client_ret = run_client(where);
    if (client_ret != 0)
        kill(server, SIGTERM);
    waitpid(server, &status, 0);
    if (client_ret == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        printf("demo: OK\n");
        return 0;
    }
    printf("demo: FAILED\n");
    return 1;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: hello_write demo|server [HOST:PORT]|client HOST:PORT\n"
            "                   [--size BYTES] [--iterations N]\n"
            "       hello_write server --metadata URL --name NAME\n"
            "       hello_write client NAME --metadata URL\n");
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
            opt_metadata = argv[++i];
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
    if (opt_metadata == NULL)
        opt_metadata = getenv("FERRY_METADATA");
    if (mode == NULL || strcmp(mode, "demo") == 0)
        return run_demo();
    if (strcmp(mode, "server") == 0)
        return run_server(where != NULL ? where : "127.0.0.1:18515", -1);
    if (strcmp(mode, "client") == 0 && where != NULL)
        return run_client(where);
    return usage();
}
