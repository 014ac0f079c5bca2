/*
 * gpu-copy-ref: the yardsticks scripts/gpu-check.sh sets beside
 * ferry_bench --mem cuda --target-mem cuda, on GPU 0, for each size given:
 *
 *   device  cudaMemcpy device to device (what the copy engine does alone)
 *   staged  device to pinned host, then pinned host to device, one after
 *           the other: the best a transfer staged through host memory
 *           can do in one process, without a network in between
 *
 *   nvcc -O2 -o gpu-copy-ref gpu-copy-ref.cu
 *   gpu-copy-ref 65536 1048576 67108864
 *
 * One line per size and way: "ref SIZE WAY GB/s MEAN_US", the bytes of one
 * copy (not read plus written) over the mean time of REPS copies, timed
 * with CUDA events after a warm-up.  Exits 1 with CUDA's sentence on an
 * error, 2 on bad arguments.
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 50

#define CHECK(call)                                                        \
    do {                                                                   \
        cudaError_t err_ = (call);                                         \
        if (err_ != cudaSuccess) {                                         \
            fprintf(stderr, "gpu-copy-ref: %s: %s\n", #call,               \
                    cudaGetErrorString(err_));                             \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

/* Mean milliseconds of one round of `hops` copies (src -> dst, then on). */
static float time_copies(void *const *dst, const void *const *src,
                         const cudaMemcpyKind *kind, int hops, size_t size)
{
    cudaEvent_t start, stop;
    float ms = 0;

    for (int h = 0; h < hops; h++) /* warm-up */
        CHECK(cudaMemcpy(dst[h], src[h], size, kind[h]));
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaEventRecord(start));
    for (int r = 0; r < REPS; r++)
        for (int h = 0; h < hops; h++)
            CHECK(cudaMemcpyAsync(dst[h], src[h], size, kind[h]));
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    return ms / REPS;
}

static void report(size_t size, const char *way, float ms)
{
    printf("ref %zu %s %.2f %.1f\n", size, way, size / (ms * 1e6),
           ms * 1000);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: gpu-copy-ref SIZE...\n");
        return 2;
    }
    CHECK(cudaSetDevice(0));
    for (int i = 1; i < argc; i++) {
        char *end;
        size_t size = strtoull(argv[i], &end, 10);
        void *a, *b, *host;

        if (size == 0 || *end != '\0') {
            fprintf(stderr, "gpu-copy-ref: %s: not a size in bytes\n",
                    argv[i]);
            return 2;
        }
        CHECK(cudaMalloc(&a, size));
        CHECK(cudaMalloc(&b, size));
        CHECK(cudaMallocHost(&host, size));
        CHECK(cudaMemset(a, 0x5a, size));
        {
            void *dst[] = {b};
            const void *src[] = {a};
            cudaMemcpyKind kind[] = {cudaMemcpyDeviceToDevice};

            report(size, "device", time_copies(dst, src, kind, 1, size));
        }
        {
            void *dst[] = {host, b};
            const void *src[] = {a, host};
            cudaMemcpyKind kind[] = {cudaMemcpyDeviceToHost,
                                     cudaMemcpyHostToDevice};

            report(size, "staged", time_copies(dst, src, kind, 2, size));
        }
        CHECK(cudaFreeHost(host));
        CHECK(cudaFree(a));
        CHECK(cudaFree(b));
    }
    return 0;
}
