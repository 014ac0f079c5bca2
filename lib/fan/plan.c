/*
 * The fan-out's plan as it travels: a blob (base/blob.h) a parent writes
 * into its child's inbox (fan.c), read back and checked by the child.
 */
#include "fan/plan.h"

#include <stdlib.h>
#include <string.h>

#include "base/blob.h"
#include "reg/mem.h"

void ferry__fan_plan_free(struct ferry__fan_plan *p)
{
    for (uint32_t i = 0; p->addr != NULL && i <= p->n; i++) {
        free(p->addr[i]);
        free(p->rkey[i]);
    }
    free(p->parent);
    free(p->addr);
    free(p->rkey);
    free(p->addr_len);
    free(p->rkey_len);
    memset(p, 0, sizeof(*p));
}

int ferry__fan_plan_alloc(struct ferry__fan_plan *p, uint32_t n)
{
    p->n = n;
    p->parent = calloc(n + 1, sizeof(*p->parent));
    p->addr = calloc(n + 1, sizeof(*p->addr));
    p->rkey = calloc(n + 1, sizeof(*p->rkey));
    p->addr_len = calloc(n + 1, sizeof(*p->addr_len));
    p->rkey_len = calloc(n + 1, sizeof(*p->rkey_len));
    if (p->parent && p->addr && p->rkey && p->addr_len && p->rkey_len)
        return 0;
    ferry__fan_plan_free(p);
    return ferry__error(FERRY_ENOMEM, "out of memory for a fan-out plan");
}

bool ferry__fan_plan_forwards(const struct ferry__fan_plan *p, uint32_t x)
{
    for (uint32_t c = x + 1; c <= p->n; c++)
        if (p->parent[c] == x)
            return true;
    return false;
}

/* The plan as receiver `you` gets it: a blob of kind FERRY__BLOB_PLAN,
 *   u64 tag | u64 len | u64 chunk | u64 notify id | u32 n | u32 you |
 *   n + 1 x (u32 parent | u16 addr len | addr | u16 rkey len | rkey).
 * buf NULL measures (*len). */
int ferry__fan_plan_encode(const struct ferry__fan_plan *p, uint32_t you,
                           uint8_t *buf, size_t cap, size_t *len)
{
    struct ferry__blob_writer w;

    ferry__blob_begin(&w, buf, cap, FERRY__BLOB_PLAN);
    ferry__blob_put_u64(&w, p->tag);
    ferry__blob_put_u64(&w, p->len);
    ferry__blob_put_u64(&w, p->chunk);
    ferry__blob_put_u64(&w, p->notify_id);
    ferry__blob_put_u32(&w, p->n);
    ferry__blob_put_u32(&w, you);
    for (uint32_t i = 0; i <= p->n; i++) {
        ferry__blob_put_u32(&w, p->parent[i]);
        ferry__blob_put_u16(&w, (uint16_t)p->addr_len[i]);
        ferry__blob_put_bytes(&w, p->addr[i], p->addr_len[i]);
        ferry__blob_put_u16(&w, (uint16_t)p->rkey_len[i]);
        ferry__blob_put_bytes(&w, p->rkey[i], p->rkey_len[i]);
    }
    return ferry__blob_end(&w, len);
}

/* Reads one entry's variable part: u16 length | bytes. */
static uint8_t *get_field(struct ferry__blob_reader *r, size_t *len)
{
    uint8_t *p;

    *len = ferry__blob_get_u16(r);
    if (r->bad || r->len - r->pos < *len) {
        r->bad = true;
        return NULL;
    }
    if ((p = malloc(*len > 0 ? *len : 1)) != NULL)
        ferry__blob_get_bytes(r, p, *len);
    return p;
}

int ferry__fan_plan_decode(const uint8_t *buf, size_t len,
                           struct ferry__fan_plan *p, uint32_t *you)
{
    struct ferry__blob_reader r;
    uint32_t n;
    int ret;

    if ((ret = ferry__blob_open(&r, buf, len, FERRY__BLOB_PLAN,
                                "fan-out plan")))
        return ret;
    p->tag = ferry__blob_get_u64(&r);
    p->len = ferry__blob_get_u64(&r);
    p->chunk = ferry__blob_get_u64(&r);
    p->notify_id = ferry__blob_get_u64(&r);
    n = ferry__blob_get_u32(&r);
    *you = ferry__blob_get_u32(&r);
    if (r.bad || n == 0 || n > FERRY__INBOX_SIZE / 8 || *you == 0 ||
        *you > n || p->len == 0 || p->chunk == 0 ||
        (p->len - 1) / p->chunk >= UINT32_MAX)
        return ferry__error(FERRY_EBLOB, "fan-out plan: bad header");
    p->nchunks = (uint32_t)((p->len - 1) / p->chunk + 1);
    if ((ret = ferry__fan_plan_alloc(p, n)) != 0)
        return ret;
    for (uint32_t i = 0; i <= n && !r.bad; i++) {
        p->parent[i] = ferry__blob_get_u32(&r);
        p->addr[i] = get_field(&r, &p->addr_len[i]);
        p->rkey[i] = get_field(&r, &p->rkey_len[i]);
        /* Parents come first: the plan is a tree rooted at the source. */
        if (i == 0 ? p->parent[0] != FERRY__FAN_NO_PARENT : p->parent[i] >= i)
            r.bad = true;
        if (p->addr[i] == NULL || p->rkey[i] == NULL)
            r.bad = true;
    }
    if (r.bad || r.pos != r.len) {
        ferry__fan_plan_free(p);
        return ferry__error(FERRY_EBLOB, "fan-out plan: bad node entries");
    }
    return 0;
}
