/*
 * ferry_bench: --memcpy: the single-thread memcpy reference for shared memory.
 */
#include "memcpy.h"

#include "options.h"
#include "pattern.h"
#include "report.h"
#include "stats.h"
#include "util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int run_memcpy(const struct options *o, uint64_t block, uint8_t *src,
                      uint8_t *dst, uint64_t len, struct result *res)
{
    uint64_t nblocks = len / block, copies = 0, measured = 0, lat_sum = 0;
    size_t cap = o->iterations != 0 && o->iterations < RESERVOIR_TOTAL
                     ? (size_t)o->iterations
                     : RESERVOIR_TOTAL;
    uint64_t t = now_ns(), t_prev = t;
    struct timed_loop lp;
    struct reservoir lat;
    struct ticker tk;

    res->block = block;
    if (reservoir_init(&lat, cap, t))
        return 1;
    pattern_fill(dst, 0, len, PAT_B);
    ticker_start(&tk, t);
    timed_loop_start(&lp, o, t);
    t_prev = now_ns();
    for (;;) {
        uint64_t off = (copies % nblocks) * block;

        memcpy(dst + off, src + off, block);
        __asm__ __volatile__("" ::: "memory"); /* the copy must happen */
        copies++;
        t = now_ns();
        if (lp.measuring) {
            measured++;
            lat_sum += t - t_prev;
            reservoir_add(&lat, t - t_prev);
        }
        if (timed_loop_step(&lp, o, t, measured))
            break;
        ticker_tick(&tk, t, copies * block, copies, 1, !lp.measuring);
        t_prev = t;
    }
    if (o->validate) {
        uint64_t n = copies < nblocks ? copies : nblocks;
        res->first_bad = pattern_mismatch(dst, 0, n * block, PAT_A);
        if (res->first_bad == UINT64_MAX)
            res->first_bad = pattern_mismatch(dst, n * block,
                                              len - n * block, PAT_B);
        res->local_check = res->first_bad != UINT64_MAX;
    }
    res->seconds = (double)(lp.win.t_end - lp.win.t_start) / 1e9;
    res->cpu_here_s = (double)(lp.win.cpu_end - lp.win.cpu_start) / 1e9;
    res->bytes = measured * block;
    res->ops = res->reqs = res->measured = measured;
    res->mean_us = (double)lat_sum / (double)measured / 1e3;
    latency_summary(&lat, 1, 1.0, res);
    free(lat.v);
    return 0;
}

int memcpy_main(const struct options *o, FILE *csv)
{
    size_t nruns = sweep_count(o);
    struct result *rs = calloc(nruns, sizeof(*rs));
    uint8_t *src = NULL, *dst = NULL;
    bool ok = true;
    char b1[32];

    if (rs == NULL || o->buffer > SIZE_MAX ||
        posix_memalign((void **)&src, 4096, o->buffer) != 0 ||
        posix_memalign((void **)&dst, 4096, o->buffer) != 0) {
        free(rs);
        free(src);
        return complain("cannot allocate two %s buffers",
                        fmt_iec(b1, sizeof(b1), o->buffer));
    }
    pattern_fill(src, 0, o->buffer, PAT_A);
    print_header(o, NULL);
    for (size_t i = 0; i < nruns; i++) {
        result_init(&rs[i]);
        report_start_run(o, i);
        run_memcpy(o, block_of_run(o, i), src, dst, o->buffer, &rs[i]);
        rs[i].ok = rs[i].local_check != 1;
        ok &= rs[i].ok;
        report_run(o, csv, i, &rs[i]);
    }
    if (o->json)
        print_json(o, NULL, rs, nruns, ok);
    if (report_sweep_done(o, NULL, rs, nruns))
        ok = false;
    free(src);
    free(dst);
    free(rs);
    return !ok;
}
