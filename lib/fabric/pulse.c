/*
 * The pulse word peers read as a heartbeat (pulse.h).
 */
#include "fabric/pulse.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* A value no earlier process at this address is likely to have had. */
static uint64_t new_incarnation(void)
{
    struct timespec ts;
    uint64_t v;

    if (getrandom(&v, sizeof(v), GRND_NONBLOCK) == (ssize_t)sizeof(v))
        return v;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^
           (uint64_t)getpid() << 40;
}

/* Reads the registration's key into the pulse. */
static int read_key(struct ferry__fabric *fab)
{
    uint64_t key;

    if (fab->mr_mode & FERRY_MR_RAW) {
        size_t len = sizeof(fab->pulse.key);
        int ret = fi_mr_raw_attr(fab->pulse.mr, &fab->pulse.raw_base,
                                 fab->pulse.key, &len, 0);

        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_raw_attr (raw keys, FI_MR_RAW): %s",
                                fi_strerror(-ret));
        fab->pulse.key_len = len;
        return 0;
    }
    key = fi_mr_key(fab->pulse.mr);
    for (unsigned i = 0; i < 8; i++)
        fab->pulse.key[i] = (uint8_t)(key >> (8 * i));
    fab->pulse.key_len = 8;
    return 0;
}

void ferry__pulse_open(struct ferry__fabric *fab)
{
    struct iovec iov;
    struct fi_mr_attr attr = {.mr_iov = &iov,
                              .iov_count = 1,
                              .access = FI_REMOTE_READ,
                              .iface = FI_HMEM_SYSTEM};
    int ret;

    FERRY__ASSERT_LOCKED(&fab->lock);
    /* A cache line of its own: nothing else is exposed with it. */
    fab->pulse.word = aligned_alloc(64, 64);
    if (fab->pulse.word == NULL)
        return;
    *fab->pulse.word = new_incarnation();
    iov.iov_base = fab->pulse.word;
    iov.iov_len = sizeof(*fab->pulse.word);
    ret = ferry__mr_open(fab, &fab->rails[0], &attr, 0, &fab->pulse.mr);
    if (ret == 0 && (ret = read_key(fab)) != 0) {
        fi_close(&fab->pulse.mr->fid);
        fab->pulse.mr = NULL;
    }
    if (ret != 0) {
        /* Said, not fatal: liveness still learns from the operations. */
        FERRY_LOG_WARN("no heartbeat word on domain %s (%s): peers waiting "
                       "on this context will see no answer to their "
                       "heartbeats",
                       fab->rails[0].info->domain_attr->name,
                       ferry_last_error());
        ferry__error_clear();
        fab->pulse.key_len = 0;
    }
}

void ferry__pulse_close(struct ferry__fabric *fab)
{
    if (fab->pulse.mr != NULL)
        fi_close(&fab->pulse.mr->fid);
    free(fab->pulse.word);
    memset(&fab->pulse, 0, sizeof(fab->pulse));
}

void ferry__pulse_put(struct ferry__blob_writer *w,
                      const struct ferry__fabric *fab)
{
    bool virt = fab->mr_mode & FERRY_MR_VIRT_ADDR;
    size_t len = fab->pulse.key_len; /* 0: none was made */

    ferry__blob_put_u64(w, len != 0 ? *fab->pulse.word : 0);
    ferry__blob_put_u64(w, virt ? (uint64_t)(uintptr_t)fab->pulse.word : 0);
    ferry__blob_put_u64(w, fab->pulse.raw_base);
    ferry__blob_put_u16(w, (uint16_t)len);
    ferry__blob_put_bytes(w, fab->pulse.key, len);
}

int ferry__pulse_get(struct ferry__fabric *fab, struct ferry__blob_reader *r,
                     struct ferry__pulse_remote *out)
{
    const struct ferry__rail *rail = &fab->rails[0];
    uint8_t key[FERRY__KEY_MAX];
    uint64_t raw_base;
    size_t len;
    int ret;

    memset(out, 0, sizeof(*out));
    out->incarnation = ferry__blob_get_u64(r);
    out->addr = ferry__blob_get_u64(r);
    raw_base = ferry__blob_get_u64(r);
    len = ferry__blob_get_u16(r);
    if (!r->bad && len <= sizeof(key))
        ferry__blob_get_bytes(r, key, len);
    if (r->bad || len > sizeof(key))
        return ferry__error(FERRY_EBLOB,
                            "address blob: the heartbeat word's key of %zu "
                            "bytes is cut short or longer than %d",
                            len, FERRY__KEY_MAX);
    if (len == 0)
        return 0; /* the peer has none: its heartbeats go unanswered */
    if (!(fab->mr_mode & FERRY_MR_RAW)) {
        if (len > 8)
            return ferry__error(FERRY_EBLOB,
                                "address blob: the heartbeat word has a "
                                "%zu-byte key but this context does not use "
                                "raw keys (FI_MR_RAW): both sides must use "
                                "the same provider and mr_mode",
                                len);
        out->key = ferry__key_to_u64(key, len);
    } else {
        ret = fi_mr_map_raw(rail->domain, raw_base, key, len, &out->key, 0);
        if (ret != 0)
            return ferry__error(ferry__error_from_fi(ret),
                                "fi_mr_map_raw of the peer's heartbeat key "
                                "on domain %s failed (raw keys, FI_MR_RAW): "
                                "%s",
                                rail->info->domain_attr->name,
                                fi_strerror(-ret));
        out->key_mapped = true;
    }
    out->present = true;
    return 0;
}

void ferry__pulse_release(struct ferry__fabric *fab,
                          struct ferry__pulse_remote *p)
{
    if (p->key_mapped)
        fi_mr_unmap_key(fab->rails[0].domain, p->key);
    p->key_mapped = false;
    p->present = false;
}
