/*
 * Self-describing, checked blobs: the address and remote-key blobs peers
 * exchange.  Layout, all little-endian:
 *
 *   u32 magic "FRRY" | u16 version | u16 kind | u32 total length |
 *   u32 FNV-1a of the bytes after the header | fields...
 *
 * The writer measures when it has no room, so one code path both sizes and
 * fills a blob.  The reader is bounded: reading past the end marks the
 * reader bad instead of touching memory, and callers check `bad` once.
 */
#include "base/blob.h"

#include "base/ferry-internal.h"

#include <string.h>

uint32_t ferry__fnv1a_more(uint32_t h, const void *p, size_t n)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 16777619u;
    }
    return h;
}

uint32_t ferry__fnv1a(const void *p, size_t n)
{
    return ferry__fnv1a_more(2166136261u, p, n);
}

static void put_le(uint8_t *dst, uint64_t v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *src, size_t n)
{
    uint64_t v = 0;

    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)src[i] << (8 * i);
    return v;
}

static void put(struct ferry__blob_writer *w, uint64_t v, size_t n)
{
    if (w->buf != NULL && w->len + n <= w->cap)
        put_le(w->buf + w->len, v, n);
    w->len += n;
}

void ferry__blob_begin(struct ferry__blob_writer *w, void *buf, size_t cap,
                       enum ferry__blob_kind kind)
{
    w->buf = buf;
    w->cap = buf != NULL ? cap : 0;
    w->len = 0;
    w->long_string = 0;
    put(w, FERRY__BLOB_MAGIC, 4);
    put(w, FERRY__BLOB_VERSION, 2);
    put(w, kind, 2);
    put(w, 0, 4); /* total length, sealed by ferry__blob_end */
    put(w, 0, 4); /* checksum, likewise */
}

void ferry__blob_put_u16(struct ferry__blob_writer *w, uint16_t v)
{
    put(w, v, 2);
}

void ferry__blob_put_u32(struct ferry__blob_writer *w, uint32_t v)
{
    put(w, v, 4);
}

void ferry__blob_put_u64(struct ferry__blob_writer *w, uint64_t v)
{
    put(w, v, 8);
}

void ferry__blob_put_bytes(struct ferry__blob_writer *w, const void *p,
                           size_t n)
{
    if (w->buf != NULL && w->len + n <= w->cap && n > 0)
        memcpy(w->buf + w->len, p, n);
    w->len += n;
}

void ferry__blob_put_str(struct ferry__blob_writer *w, const char *s)
{
    size_t n = strlen(s);

    /* The length would be cut to 16 bits and the bytes after the string
     * read as fields: the blob is refused whole instead. */
    if (n > UINT16_MAX && w->long_string == 0)
        w->long_string = n;
    put(w, n, 2);
    ferry__blob_put_bytes(w, s, n);
}

int ferry__blob_end(struct ferry__blob_writer *w, size_t *len)
{
    size_t cap = w->cap;

    *len = w->len;
    if (w->long_string != 0)
        return ferry__error(FERRY_EINVAL,
                            "blob: a string of %zu bytes; a string in a blob "
                            "holds at most %u bytes",
                            w->long_string, (unsigned)UINT16_MAX);
    if (w->buf == NULL || w->len > cap)
        return ferry__error(FERRY_ENOSPC,
                            "blob needs %zu bytes but the buffer holds %zu; "
                            "pass a buffer of at least %zu bytes",
                            w->len, cap, w->len);
    put_le(w->buf + 8, w->len, 4);
    put_le(w->buf + 12,
           ferry__fnv1a(w->buf + FERRY__BLOB_HEADER_LEN,
                        w->len - FERRY__BLOB_HEADER_LEN),
           4);
    return 0;
}

/* With its article, for "X is an address blob, expected a remote-key
 * blob" (the sentence used to read "expected a address blob"). */
static const char *kind_name(unsigned kind)
{
    switch (kind) {
    case FERRY__BLOB_ADDR:
        return "an address blob";
    case FERRY__BLOB_RKEY:
        return "a remote-key blob";
    case FERRY__BLOB_PLAN:
        return "a fan-out plan";
    default:
        return "a blob of unknown kind";
    }
}

int ferry__blob_open(struct ferry__blob_reader *r, const void *buf,
                     size_t len, enum ferry__blob_kind kind, const char *what)
{
    const uint8_t *b = buf;
    uint32_t magic, total, sum;
    unsigned version, got_kind;

    r->buf = b;
    r->len = len;
    r->pos = FERRY__BLOB_HEADER_LEN;
    r->bad = false;
    if (buf == NULL)
        return ferry__error(FERRY_EINVAL, "%s is NULL", what);
    if (len < FERRY__BLOB_HEADER_LEN)
        return ferry__error(FERRY_EBLOB,
                            "%s is %zu bytes, shorter than the %u-byte "
                            "header: it was truncated",
                            what, len, FERRY__BLOB_HEADER_LEN);
    magic = (uint32_t)get_le(b, 4);
    version = (unsigned)get_le(b + 4, 2);
    got_kind = (unsigned)get_le(b + 6, 2);
    total = (uint32_t)get_le(b + 8, 4);
    sum = (uint32_t)get_le(b + 12, 4);
    if (magic != FERRY__BLOB_MAGIC)
        return ferry__error(FERRY_EBLOB,
                            "%s does not start with ferry's magic number: "
                            "it is not a ferry blob",
                            what);
    if (version != FERRY__BLOB_VERSION)
        return ferry__error(FERRY_EINCOMPAT,
                            "%s has format version %u, this ferry reads "
                            "version %u: use the same ferry release on both "
                            "sides",
                            what, version, FERRY__BLOB_VERSION);
    if (got_kind != kind)
        return ferry__error(FERRY_EBLOB, "%s is %s, expected %s", what,
                            kind_name(got_kind), kind_name(kind));
    if (total != len)
        return ferry__error(FERRY_EBLOB,
                            "%s says it is %u bytes but %zu were given: it "
                            "was truncated or padded in transit",
                            what, total, len);
    if (sum != ferry__fnv1a(b + FERRY__BLOB_HEADER_LEN,
                            len - FERRY__BLOB_HEADER_LEN))
        return ferry__error(FERRY_EBLOB,
                            "%s fails its checksum: it was corrupted in "
                            "transit",
                            what);
    return 0;
}

static uint64_t get(struct ferry__blob_reader *r, size_t n)
{
    uint64_t v;

    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        return 0;
    }
    v = get_le(r->buf + r->pos, n);
    r->pos += n;
    return v;
}

uint16_t ferry__blob_get_u16(struct ferry__blob_reader *r)
{
    return (uint16_t)get(r, 2);
}

uint32_t ferry__blob_get_u32(struct ferry__blob_reader *r)
{
    return (uint32_t)get(r, 4);
}

uint64_t ferry__blob_get_u64(struct ferry__blob_reader *r)
{
    return get(r, 8);
}

void ferry__blob_get_bytes(struct ferry__blob_reader *r, void *p, size_t n)
{
    if (r->bad || r->len - r->pos < n) {
        r->bad = true;
        memset(p, 0, n);
        return;
    }
    memcpy(p, r->buf + r->pos, n);
    r->pos += n;
}

void ferry__blob_get_str(struct ferry__blob_reader *r, char *buf, size_t cap)
{
    size_t n = ferry__blob_get_u16(r);

    if (r->bad || n >= cap) {
        r->bad = true;
        buf[0] = '\0';
        return;
    }
    ferry__blob_get_bytes(r, buf, n);
    buf[r->bad ? 0 : n] = '\0';
}
