/*
 * Helpers of the stage suites (see stageutil.h).
 */
#include "stageutil.h"

#include <stdlib.h>
#include <string.h>

void use_sim(void)
{
    setenv("FERRY_SIM_DEVICES", "2", 1);
    ck_assert_ptr_nonnull(ferry_device_backend());
}

size_t pair_max_op;

static void stage_config(struct ferry_config *cfg, const char *prov)
{
    tu_config(cfg, prov);
    cfg->staging_chunk = CHUNK;
    cfg->staging_buffers = SLOTS;
    cfg->max_msg_size = pair_max_op;
}

void pair_open(struct tu_pair *p, const char *prov)
{
    struct ferry_config cfg;

    stage_config(&cfg, prov);
    tu_pair_open(p, prov, &cfg);
}

void *dev_filled(int device, size_t len, uint64_t seed)
{
    void *dev = NULL, *host = malloc(len);
    int ret = ferry_device_alloc(device, len, &dev);

    ck_assert_msg(ret == 0, "device alloc: %s", ferry_last_error());
    ck_assert_ptr_nonnull(host);
    tu_fill(host, len, seed);
    ck_assert_int_eq(ferry_device_copy(dev, host, len), 0);
    free(host);
    return dev;
}

size_t dev_check(const void *dev, size_t len, uint64_t seed)
{
    void *host = malloc(len);
    size_t bad;

    ck_assert_ptr_nonnull(host);
    ck_assert_msg(ferry_device_copy(host, dev, len) == 0, "copy back: %s",
                  ferry_last_error());
    bad = tu_check(host, len, seed);
    free(host);
    return bad;
}

int move(ferry_peer_t *peer, bool write, void *local, ferry_mem_t *lmem,
         ferry_rmem_t *rmem, uint64_t roff, size_t len,
         const struct ferry_xfer_opts *opts)
{
    struct ferry_iov iov = {.local = local, .lmem = lmem, .rmem = rmem,
                            .roffset = roff, .len = len};
    ferry_req_t *req = NULL;
    int ret = write ? ferry_write(peer, &iov, 1, opts, &req)
                    : ferry_read(peer, &iov, 1, opts, &req);

    ck_assert_msg(ret == 0, "post: %s", ferry_last_error());
    ret = ferry_req_wait(req, 20000);
    ferry_req_close(req);
    return ret;
}

void rig_open(struct rig *r, const char *prov, size_t len,
              bool dev_on_target, int device, uint64_t seed)
{
    ferry_context_t *dside, *hside;

    use_sim();
    memset(r, 0, sizeof(*r));
    pair_open(&r->p, prov);
    r->len = len;
    r->host = tu_alloc_buf(len);
    r->dev = dev_filled(device, len, seed);
    dside = dev_on_target ? r->p.target : r->p.init;
    hside = dev_on_target ? r->p.init : r->p.target;
    ck_assert_msg(ferry_mem_register(dside, r->dev, len, FERRY_MEM_CUDA,
                                     device, dev_on_target ? RW : 0,
                                     &r->dmem) == 0,
                  "device register: %s", ferry_last_error());
    ck_assert_str_eq(ferry_mem_path(r->dmem), "cuda staged");
    ck_assert_int_eq(ferry_mem_register(hside, r->host, len, FERRY_MEM_HOST,
                                        -1, dev_on_target ? 0 : RW, &r->hmem),
                     0);
    r->rmem = tu_share(dev_on_target ? r->dmem : r->hmem, r->p.peer);
}

void rig_close(struct rig *r)
{
    ck_assert_int_eq(ferry_rmem_close(r->rmem), 0);
    ck_assert_int_eq(ferry_mem_close(r->dmem), 0);
    ck_assert_int_eq(ferry_mem_close(r->hmem), 0);
    tu_pair_close(&r->p);
    ck_assert_int_eq(ferry_device_free(r->dev), 0);
    tu_free_buf(r->host, r->len);
}
