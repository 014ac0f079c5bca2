/*
 * Device memory on domains that cannot register it, through the API, on
 * the simulated device (whose memory crashes any CPU access by ferry):
 * staged writes and reads in both directions over tcp and shm, byte for
 * byte; a peer's writes into staged device memory reaching the device
 * before their notification; prepared blocks from one GPU into another's;
 * cancel and destruction with staged copies in flight; and every refusal
 * of a pointer of the wrong kind.  (The pipeline counted on the simulated
 * engine, cached device registrations validated by buffer id, and the
 * choice of the device path from the facts: test/unit/check_stage.c.)
 */
#include "stageutil.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the initiator's device memory ------------------------------------- */

static const size_t sizes[] = {1, 4097, CHUNK, 3 * MiB + 123};

/* Device -> remote host, then remote host -> device, at odd offsets. */
START_TEST(test_staged_write_read)
{
    const char *prov = tu_providers[_i % tu_nproviders];
    size_t len = sizes[_i / tu_nproviders];
    size_t span = len + 8192;
    struct tu_pair p;
    void *dev, *dev2 = NULL;
    uint8_t *host = tu_alloc_buf(span);
    ferry_mem_t *dmem, *dmem2, *hmem;
    ferry_rmem_t *rmem;

    use_sim();
    pair_open(&p, prov);
    dev = dev_filled(0, span, 1);
    ck_assert_int_eq(ferry_device_alloc(1, span, &dev2), 0);
    ck_assert_msg(ferry_mem_register(p.init, dev, span, FERRY_MEM_CUDA, 0, 0,
                                     &dmem) == 0,
                  "register: %s", ferry_last_error());
    ck_assert_str_eq(ferry_mem_path(dmem), "cuda staged");
    ck_assert_int_eq(ferry_mem_register(p.init, dev2, span, FERRY_MEM_AUTO, -1,
                                        0, &dmem2),
                     0);
    ck_assert_str_eq(ferry_mem_path(dmem2), "cuda staged");
    ck_assert_int_eq(ferry_mem_register(p.target, host, span, FERRY_MEM_HOST,
                                        -1, RW, &hmem),
                     0);
    rmem = tu_share(hmem, p.peer);

    /* Bytes [3, 3 + len) of the device pattern land at offset 5. */
    ck_assert_msg(move(p.peer, true, (uint8_t *)dev + 3, dmem, rmem, 5, len,
                       NULL) == 0,
                  "staged write of %zu on %s: %s", len, prov,
                  ferry_last_error());
    {
        uint8_t *want = malloc(span);
        tu_fill(want, span, 1);
        ck_assert_msg(memcmp(host + 5, want + 3, len) == 0,
                      "staged write of %zu bytes on %s: data differs", len,
                      prov);
        free(want);
    }
    /* And back, into device 1 at offset 7. */
    ck_assert_msg(move(p.peer, false, (uint8_t *)dev2 + 7, dmem2, rmem, 5, len,
                       NULL) == 0,
                  "staged read of %zu on %s: %s", len, prov,
                  ferry_last_error());
    {
        uint8_t *got = malloc(span);
        ck_assert_int_eq(ferry_device_copy(got, dev2, span), 0);
        ck_assert_msg(memcmp(got + 7, host + 5, len) == 0,
                      "staged read of %zu bytes on %s: data differs", len,
                      prov);
        free(got);
    }
    ck_assert_uint_ge(tu_stats(p.init).staged_bytes, 2 * len);
    ck_assert_int_eq(ferry_rmem_close(rmem), 0);
    ck_assert_int_eq(ferry_mem_close(dmem), 0);
    ck_assert_int_eq(ferry_mem_close(dmem2), 0);
    ck_assert_int_eq(ferry_mem_close(hmem), 0);
    tu_pair_close(&p);
    ck_assert_int_eq(ferry_device_free(dev), 0);
    ck_assert_int_eq(ferry_device_free(dev2), 0);
    tu_free_buf(host, span);
}
END_TEST

/* ---- the target's device memory ---------------------------------------- */

/* Host -> remote device: there when the notification is. */
START_TEST(test_remote_device_write_notified)
{
    const char *prov = tu_providers[_i];
    size_t len = 3 * MiB + 5;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    struct rig r;

    rig_open(&r, prov, len, true, 1, 2);
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 42;
    opts.notify_value = 1;
    for (int round = 0; round < 3; round++) {
        tu_fill(r.host, len, 3 + round);
        ck_assert_msg(move(r.p.peer, true, r.host, r.hmem, r.rmem, 0, len,
                           &opts) == 0,
                      "%s", ferry_last_error());
        ck_assert_int_eq(ferry_counter_wait(r.p.target, 42, round + 1, 20000),
                         0);
        ck_assert_msg(dev_check(r.dev, len, 3 + round) == SIZE_MAX,
                      "round %d on %s: the device misses data its "
                      "notification announced",
                      round, prov);
    }
    ck_assert_uint_ge(tu_stats(r.p.target).mirror_syncs, 3);
    rig_close(&r);
}
END_TEST

/* Remote device -> host (the mirror, refreshed), and device -> device. */
START_TEST(test_remote_device_read_and_dev_to_dev)
{
    const char *prov = tu_providers[_i];
    size_t len = MiB + 17;
    struct tu_pair p;
    uint8_t *host = tu_alloc_buf(len);
    void *tdev, *idev;
    ferry_mem_t *tmem, *imem, *hmem;
    ferry_rmem_t *rmem;
    uint64_t syncs;

    use_sim();
    pair_open(&p, prov);
    tdev = dev_filled(0, len, 4);
    idev = dev_filled(1, len, 5);
    ck_assert_int_eq(ferry_mem_register(p.target, tdev, len, FERRY_MEM_AUTO,
                                        -1, RW, &tmem),
                     0);
    ck_assert_int_eq(ferry_mem_register(p.init, host, len, FERRY_MEM_HOST, -1,
                                        0, &hmem),
                     0);
    ck_assert_int_eq(ferry_mem_register(p.init, idev, len, FERRY_MEM_CUDA, 1,
                                        0, &imem),
                     0);
    rmem = tu_share(tmem, p.peer);
    ck_assert_int_eq(move(p.peer, false, host, hmem, rmem, 0, len, NULL), 0);
    ck_assert_uint_eq(tu_check(host, len, 4), SIZE_MAX);
    /* The device changes: peers see it after ferry_mem_refresh. */
    {
        void *fresh = dev_filled(0, len, 6);
        ck_assert_int_eq(ferry_device_copy(tdev, fresh, len), 0);
        ferry_device_free(fresh);
    }
    /* The target's progress thread sent the mirror's bytes under its
     * context's lock; taking that lock orders the refresh after it (the
     * initiator's completion came through a socket, which ThreadSanitizer
     * cannot follow). */
    ck_assert_int_eq(ferry_progress(p.target) >= 0, 1);
    ck_assert_int_eq(ferry_mem_refresh(tmem), 0);
    ck_assert_int_eq(move(p.peer, false, host, hmem, rmem, 0, len, NULL), 0);
    ck_assert_uint_eq(tu_check(host, len, 6), SIZE_MAX);
    /* Device 1 here -> device 0 there, without a notification: the sync
     * still reaches the device.  A lone notification sent after it is
     * delivered only once the copy is done: then the device is checked. */
    syncs = tu_stats(p.target).mirror_syncs;
    ck_assert_int_eq(move(p.peer, true, idev, imem, rmem, 0, len, NULL), 0);
    {
        ferry_req_t *req;

        ck_assert_int_eq(ferry_notify_send(p.peer, 77, 1, NULL, &req), 0);
        ck_assert_int_eq(ferry_req_wait(req, 20000), 0);
        ferry_req_close(req);
    }
    ck_assert_int_eq(ferry_counter_wait(p.target, 77, 1, 20000), 0);
    ck_assert_msg(dev_check(tdev, len, 5) == SIZE_MAX,
                  "device-to-device write on %s did not reach the device",
                  prov);
    ck_assert_uint_gt(tu_stats(p.target).mirror_syncs, syncs);
    ferry_rmem_close(rmem);
    ferry_mem_close(tmem);
    ferry_mem_close(imem);
    ferry_mem_close(hmem);
    tu_pair_close(&p);
    ferry_device_free(tdev);
    ferry_device_free(idev);
    tu_free_buf(host, len);
}
END_TEST

/* Prepared lists over staged memory on both sides: scattered KV blocks
 * from one GPU into another's, announced by one notification. */
START_TEST(test_prepared_blocks_gpu_to_gpu)
{
    const char *prov = tu_providers[_i];
    enum { BLOCK = 64 * 1024, NBLOCKS = 48, N = 5 };
    size_t len = (size_t)BLOCK * NBLOCKS;
    struct ferry_xfer_opts opts = FERRY_XFER_OPTS_INIT;
    const uint32_t lidx[N] = {0, 7, 8, 30, 47}, ridx[N] = {47, 3, 4, 0, 20};
    struct ferry_dlist_segment seg = {.block_size = BLOCK, .count = NBLOCKS,
                                      .stride = BLOCK};
    struct rig r;
    void *idev;
    ferry_mem_t *imem;
    ferry_dlist_t *ldl, *rdl;
    ferry_prep_t *prep;
    ferry_req_t *req;
    uint8_t *want, *got;

    rig_open(&r, prov, len, true, 0, 11);
    idev = dev_filled(1, len, 12);
    ck_assert_int_eq(ferry_mem_register(r.p.init, idev, len, FERRY_MEM_CUDA,
                                        1, 0, &imem),
                     0);
    ck_assert_int_eq(ferry_dlist_create(r.p.init, FERRY_DLIST_LOCAL, "gpu kv",
                                        &ldl),
                     0);
    ck_assert_int_eq(ferry_dlist_create(r.p.init, FERRY_DLIST_REMOTE,
                                        "peer gpu kv", &rdl),
                     0);
    seg.mem = imem;
    ck_assert_int_eq(ferry_dlist_add(ldl, &seg, NULL), 0);
    seg.mem = NULL;
    seg.rmem = r.rmem;
    ck_assert_int_eq(ferry_dlist_add(rdl, &seg, NULL), 0);
    ck_assert_int_eq(ferry_xfer_prepare(r.p.peer, FERRY_OP_WRITE, ldl, rdl,
                                        &prep),
                     0);
    opts.flags = FERRY_XFER_NOTIFY;
    opts.notify_id = 9;
    opts.notify_value = 1;
    ck_assert_int_eq(ferry_xfer_post(prep, lidx, ridx, N, &opts, &req), 0);
    ck_assert_msg(ferry_req_wait(req, 20000) == 0, "%s", ferry_last_error());
    ferry_req_close(req);
    ck_assert_int_eq(ferry_counter_wait(r.p.target, 9, 1, 20000), 0);
    /* The target's GPU: the five blocks moved, the rest as it was. */
    want = malloc(len);
    got = malloc(len);
    tu_fill(want, len, 11);
    {
        uint8_t *src = malloc(len);
        tu_fill(src, len, 12);
        for (int i = 0; i < N; i++)
            memcpy(want + (size_t)ridx[i] * BLOCK,
                   src + (size_t)lidx[i] * BLOCK, BLOCK);
        free(src);
    }
    ck_assert_int_eq(ferry_device_copy(got, r.dev, len), 0);
    ck_assert_msg(memcmp(got, want, len) == 0,
                  "prepared blocks on %s: the target GPU differs", prov);
    free(want);
    free(got);
    ck_assert_int_eq(ferry_xfer_close(prep), 0);
    ck_assert_int_eq(ferry_dlist_close(ldl), 0);
    ck_assert_int_eq(ferry_dlist_close(rdl), 0);
    ck_assert_int_eq(ferry_mem_close(imem), 0);
    ck_assert_int_eq(ferry_device_free(idev), 0);
    rig_close(&r);
}
END_TEST

/* ---- staged requests in flight ----------------------------------------- */

/* A cancelled staged request gives its buffers back only when done. */
START_TEST(test_cancel_in_flight)
{
    size_t len = 16 * MiB;
    struct rig r;
    struct ferry_iov iov;
    ferry_req_t *req;
    int ret;

    rig_open(&r, tu_tcp(), len, false, 0, 10);
    iov = (struct ferry_iov){.local = r.dev, .lmem = r.dmem, .rmem = r.rmem,
                             .len = len};
    ck_assert_int_eq(ferry_write(r.p.peer, &iov, 1, NULL, &req), 0);
    ck_assert_int_eq(ferry_req_cancel(req), 0);
    ret = ferry_req_wait(req, 20000);
    ck_assert_msg(ret == FERRY_ECANCELED, "wait: %d (%s)", ret,
                  ferry_last_error());
    ferry_req_close(req);
    /* The slots come back: deregistration and a full transfer work. */
    for (int ms = 0; ms < 20000 && (ret = ferry_mem_close(r.dmem)) ==
                                       FERRY_EBUSY;
         ms++) {
        ferry_progress(r.p.init);
        usleep(1000);
    }
    ck_assert_int_eq(ret, 0);
    ck_assert_int_eq(ferry_mem_register(r.p.init, r.dev, len, FERRY_MEM_CUDA,
                                        0, 0, &r.dmem),
                     0);
    ck_assert_int_eq(move(r.p.peer, true, r.dev, r.dmem, r.rmem, 0, len, NULL),
                     0);
    ck_assert_uint_eq(tu_check(r.host, len, 10), SIZE_MAX);
    rig_close(&r);
}
END_TEST

/* Contexts destroyed with staged copies queued: the buffers outlive the
 * copies (the simulated engine writing into a freed buffer would crash,
 * and ASan would see it). */
START_TEST(test_destroy_in_flight)
{
    size_t len = 16 * MiB;
    struct rig r;
    struct ferry_iov iov;
    ferry_req_t *req;

    rig_open(&r, tu_providers[_i], len, false, 0, 13);
    iov = (struct ferry_iov){.local = r.dev, .lmem = r.dmem, .rmem = r.rmem,
                             .len = len};
    ck_assert_int_eq(ferry_write(r.p.peer, &iov, 1, NULL, &req), 0);
    ck_assert_uint_gt(tu_stats(r.p.init).staged_chunks, 0);
    ferry_req_close(req);
    tu_pair_close(&r.p); /* regions, requests and staging go with it */
    ck_assert_int_eq(ferry_device_free(r.dev), 0);
    tu_free_buf(r.host, r.len);
}
END_TEST

/* ---- refusals ---------------------------------------------------------- */

START_TEST(test_wrong_kinds_refused)
{
    ferry_context_t *ctx;
    ferry_mem_t *mem = NULL;
    uint8_t *host = tu_alloc_buf(4096);
    void *dev;

    use_sim();
    ctx = tu_context(tu_tcp());
    dev = dev_filled(0, 8192, 1);
    ck_assert_int_eq(ferry_mem_register(ctx, host, 4096, FERRY_MEM_CUDA, 0, 0,
                                        &mem),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "is host memory"));
    ck_assert_int_eq(ferry_mem_register(ctx, dev, 8192, FERRY_MEM_HOST, -1, 0,
                                        &mem),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "not host memory"));
    ck_assert_int_eq(ferry_mem_register(ctx, dev, 8192, FERRY_MEM_CUDA, 1, 0,
                                        &mem),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "belongs to device 0"));
    ck_assert_int_eq(ferry_mem_register(ctx, (uint8_t *)dev + 4096, 8192,
                                        FERRY_MEM_CUDA, 0, 0, &mem),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "past the end"));
    ck_assert_ptr_null(mem);
    ck_assert_int_eq(ferry_device_alloc(2, 4096, &dev), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "device 2"));
    ferry_context_close(ctx);
    tu_free_buf(host, 4096);
}
END_TEST

/* Without a backend a CUDA registration says why, and host memory works. */
START_TEST(test_no_backend)
{
    ferry_context_t *ctx;
    ferry_mem_t *mem = NULL;
    uint8_t *host = tu_alloc_buf(4096);
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;

    unsetenv("FERRY_SIM_DEVICES");
    ctx = tu_context(tu_tcp());
    if (ferry_device_backend() != NULL) {
        /* A real GPU here: host memory named CUDA is refused instead. */
        ck_assert_str_eq(ferry_device_backend(), "cuda");
        ck_assert_int_eq(ferry_mem_register(ctx, host, 4096, FERRY_MEM_CUDA,
                                            0, 0, &mem),
                         FERRY_EINVAL);
        ferry_context_close(ctx);
        tu_free_buf(host, 4096);
        return;
    }
    ck_assert_int_eq(ferry_mem_register(ctx, host, 4096, FERRY_MEM_CUDA, 0, 0,
                                        &mem),
                     FERRY_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "not available"));
    ck_assert_int_eq(ferry_mem_register(ctx, host, 4096, FERRY_MEM_AUTO, -1,
                                        0, &mem),
                     0);
    ck_assert_str_eq(ferry_mem_path(mem), "host");
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    ck_assert_ptr_nonnull(strstr(info.device_path, "none"));
    ferry_mem_close(mem);
    ferry_context_close(ctx);
    tu_free_buf(host, 4096);
}
END_TEST

/* Staging settings out of range are named, in the config and the
 * environment. */
START_TEST(test_staging_config_refused)
{
    struct ferry_config cfg;
    ferry_context_t *ctx = NULL;

    tu_config(&cfg, tu_tcp());
    cfg.staging_buffers = 0;
    ck_assert_int_eq(ferry_context_create(&cfg, &ctx), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "config.staging_buffers is 0"));
    ck_assert_ptr_null(ctx);
    setenv("FERRY_STAGING_CHUNK", "12", 1);
    ck_assert_int_eq(ferry_config_init(&cfg), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(),
                                 "FERRY_STAGING_CHUNK=12 is not a whole "
                                 "number between 4096"));
    unsetenv("FERRY_STAGING_CHUNK");
}
END_TEST

START_TEST(test_context_says_staged)
{
    ferry_context_t *ctx;
    struct ferry_context_info info = FERRY_CONTEXT_INFO_INIT;

    use_sim();
    ctx = tu_context(tu_tcp());
    ck_assert_int_eq(ferry_context_info(ctx, &info), 0);
    /* Staged because the device is simulated, whatever tcp offers (the
     * other reasons: test/unit/check_stage's test_path_choice). */
    ck_assert_msg(strstr(info.device_path, "staged") != NULL &&
                      strstr(info.device_path, "simulated device") != NULL,
                  "device_path: %s", info.device_path);
    ck_assert_str_eq(ferry_device_backend(), "simulated");
    ferry_context_close(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stage");
    TCase *tc;

    tc = tu_tcase(s, "staged", 120);
    tcase_add_loop_test(tc, test_staged_write_read, 0,
                        (int)(TU_ARRAY_LEN(sizes) * tu_nproviders));
    tc = tu_tcase(s, "remote device", 120);
    tcase_add_loop_test(tc, test_remote_device_write_notified, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_remote_device_read_and_dev_to_dev, 0,
                        (int)tu_nproviders);
    tcase_add_loop_test(tc, test_prepared_blocks_gpu_to_gpu, 0,
                        (int)tu_nproviders);
    tc = tu_tcase(s, "cache", 120);
    tcase_add_test(tc, test_cancel_in_flight);
    tcase_add_loop_test(tc, test_destroy_in_flight, 0, (int)tu_nproviders);
    tc = tu_tcase(s, "refusals", 60);
    tcase_add_test(tc, test_wrong_kinds_refused);
    tcase_add_test(tc, test_no_backend);
    tcase_add_test(tc, test_context_says_staged);
    tcase_add_test(tc, test_staging_config_refused);
    return tu_run(s);
}
