/*
 * Two Open MPI ranks move data with ferry every iteration from buffers
 * malloc'ed and freed each time (iovs without lmem: ferry's registration
 * cache), while an allocator preloaded by test/rcache_mpi.sh (mimalloc,
 * purging eagerly) gives freed memory back to the OS and Open MPI's own
 * memory hooks run beside ferry's userfaultfd monitor.  MPI carries the
 * address and remote-key blobs and the barriers; every byte is verified.
 *
 * Usage: rcache_mpi [ITERATIONS]   (exactly 2 ranks; exit 0 on success)
 * Uses only the public API; FERRY_PROVIDER / FERRY_DOMAIN choose the
 * provider (default tcp;ofi_rxm on lo).
 */
#include <mpi.h>

#include "ferry.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define REGION (1u << 20)

static int rank = -1;

static void die(const char *what, int ret)
{
    fprintf(stderr, "rcache_mpi rank %d: %s: %s: %s\n", rank, what,
            ferry_strerror(ret), ferry_last_error());
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* splitmix64, as test/testutil.c's patterns. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint8_t pattern(size_t i, uint64_t seed)
{
    return (uint8_t)(mix(seed ^ (i / 8)) >> (8 * (i % 8)));
}

/* Whether a library whose path contains `name` is mapped here. */
static int mapped(const char *name)
{
    char line[512];
    int found = 0;
    FILE *f = fopen("/proc/self/maps", "r");

    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, name) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* Sends a blob to the other rank and receives its blob. */
static size_t swap_blob(const void *mine, size_t len, void *theirs,
                        size_t cap)
{
    int other = 1 - rank, n = (int)len, m = 0;

    MPI_Sendrecv(&n, 1, MPI_INT, other, 1, &m, 1, MPI_INT, other, 1,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (m < 0 || (size_t)m > cap) {
        fprintf(stderr, "rcache_mpi rank %d: blob of %d bytes\n", rank, m);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    MPI_Sendrecv(mine, n, MPI_BYTE, other, 2, theirs, m, MPI_BYTE, other, 2,
                 MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return (size_t)m;
}

int main(int argc, char **argv)
{
    static const size_t sizes[] = {1,         100,        4096,
                                   5000,      64 << 10,   200 << 10,
                                   300 << 10, REGION / 2, REGION};
    struct ferry_config cfg;
    struct ferry_stats st = FERRY_STATS_INIT;
    ferry_context_t *ctx;
    ferry_peer_t *peer;
    ferry_mem_t *mem;
    ferry_rmem_t *rmem;
    uint8_t mine[1024], theirs[1024];
    size_t len, tlen;
    uint8_t *region;
    long iterations = argc > 1 ? atol(argv[1]) : 300;
    long errors = 0, total = 0, checked = 0;
    int nranks, ret;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (getenv("RCACHE_MPI_EXPECT_PRELOAD") != NULL &&
        !mapped(getenv("RCACHE_MPI_EXPECT_PRELOAD"))) {
        fprintf(stderr, "rcache_mpi rank %d: %s is not loaded: LD_PRELOAD "
                "did not reach the ranks\n",
                rank, getenv("RCACHE_MPI_EXPECT_PRELOAD"));
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (nranks != 2) {
        if (rank == 0)
            fprintf(stderr, "rcache_mpi: run with exactly 2 ranks\n");
        MPI_Finalize();
        return 2;
    }

    if ((ret = ferry_config_init(&cfg)))
        die("ferry_config_init", ret);
    if (getenv("FERRY_PROVIDER") == NULL) {
        cfg.provider = "tcp;ofi_rxm";
        cfg.domain = "lo";
    }
    cfg.local_only = 1;
    cfg.progress_thread = 1; /* the peer writes into this rank */
    cfg.timeout_ms = 30000;
    if ((ret = ferry_context_create(&cfg, &ctx)))
        die("ferry_context_create", ret);
    len = sizeof(mine);
    if ((ret = ferry_context_address(ctx, mine, &len)))
        die("ferry_context_address", ret);
    tlen = swap_blob(mine, len, theirs, sizeof(theirs));
    if ((ret = ferry_peer_add(ctx, theirs, tlen, &peer)))
        die("ferry_peer_add", ret);

    region = mmap(NULL, REGION, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (region == MAP_FAILED)
        die("mmap", FERRY_ENOMEM);
    if ((ret = ferry_mem_register(ctx, region, REGION, FERRY_MEM_HOST, 0,
                                  FERRY_ACCESS_REMOTE_WRITE, &mem)))
        die("ferry_mem_register", ret);
    len = sizeof(mine);
    if ((ret = ferry_mem_export(mem, mine, &len)))
        die("ferry_mem_export", ret);
    tlen = swap_blob(mine, len, theirs, sizeof(theirs));
    if ((ret = ferry_rmem_import(peer, theirs, tlen, &rmem)))
        die("ferry_rmem_import", ret);

    for (long it = 0; it < iterations; it++) {
        size_t size = sizes[(size_t)(it * 7 + rank) % (sizeof(sizes) /
                                                       sizeof(sizes[0]))];
        size_t peer_size = sizes[(size_t)(it * 7 + 1 - rank) %
                                 (sizeof(sizes) / sizeof(sizes[0]))];
        uint64_t seed = (uint64_t)it * 2 + (uint64_t)rank;
        uint64_t peer_seed = (uint64_t)it * 2 + (uint64_t)(1 - rank);
        uint8_t *buf = malloc(size), *churn[4];
        struct ferry_iov iov = {buf, NULL, rmem, 0, size};
        ferry_req_t *req;

        if (buf == NULL)
            die("malloc", FERRY_ENOMEM);
        for (size_t i = 0; i < size; i++)
            buf[i] = pattern(i, seed);
        if ((ret = ferry_write(peer, &iov, 1, NULL, &req)))
            die("ferry_write", ret);
        if ((ret = ferry_req_wait(req, -1)))
            die("ferry_req_wait", ret);
        ferry_req_close(req);
        total += (long)size;
        /* Churn: allocations the allocator can purge and reuse, some of
         * them at addresses the cache has registered. */
        for (int k = 0; k < 4; k++)
            churn[k] = malloc((size_t)(1 + (it + k) % 9) * 37 * 1024);
        free(buf);
        for (int k = 0; k < 4; k++)
            free(churn[k]);

        /* The peer's write has landed here (delivery complete). */
        MPI_Barrier(MPI_COMM_WORLD);
        for (size_t i = 0; i < peer_size; i++)
            if (region[i] != pattern(i, peer_seed)) {
                if (errors < 5)
                    fprintf(stderr,
                            "rcache_mpi rank %d: iteration %ld: byte %zu of "
                            "%zu is 0x%02x, expected 0x%02x\n",
                            rank, it, i, peer_size, region[i],
                            pattern(i, peer_seed));
                errors++;
                break;
            }
        checked += (long)peer_size;
        /* Verified before the peer overwrites it. */
        MPI_Barrier(MPI_COMM_WORLD);
    }

    ferry_context_stats(ctx, &st);
    printf("rcache_mpi rank %d: %ld iterations, %ld bytes written, %ld "
           "verified, %ld bad iterations; cache %llu hits, %llu misses, "
           "%llu invalidations, %llu one-shots\n",
           rank, iterations, total, checked, errors,
           (unsigned long long)st.rcache_hits,
           (unsigned long long)st.rcache_misses,
           (unsigned long long)st.rcache_invalidations,
           (unsigned long long)st.oneshot_registrations);
    fflush(stdout);
    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_LONG, MPI_SUM,
                  MPI_COMM_WORLD);
    ferry_rmem_close(rmem);
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    munmap(region, REGION);
    MPI_Finalize();
    return errors == 0 ? 0 : 1;
}
