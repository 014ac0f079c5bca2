/*
 * Self-describing, checksummed blobs (addresses, remote keys).
 */
#ifndef FERRY_BASE_BLOB_H
#define FERRY_BASE_BLOB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Blobs are self-describing: a header with magic, version, kind, total
 * length and a checksum, then fields read and written through bounded
 * cursors.  A reader never reads past the end; any overrun sets `bad`.
 */
enum ferry__blob_kind {
    FERRY__BLOB_ADDR = 1,
    FERRY__BLOB_RKEY = 2,
    FERRY__BLOB_PLAN = 3, /* a fan-out's plan (fan.c) */
};
#define FERRY__BLOB_MAGIC 0x59525246u /* "FRRY" little-endian */
#define FERRY__BLOB_VERSION 3u
#define FERRY__BLOB_HEADER_LEN 16u

struct ferry__blob_writer {
    uint8_t *buf; /* may be NULL to measure */
    size_t cap;
    size_t len;
    size_t long_string; /* a string's length its u16 cannot hold; 0: none */
};
struct ferry__blob_reader {
    const uint8_t *buf;
    size_t len;
    size_t pos;
    bool bad;
};

void ferry__blob_begin(struct ferry__blob_writer *w, void *buf, size_t cap,
                       enum ferry__blob_kind kind);
void ferry__blob_put_u16(struct ferry__blob_writer *w, uint16_t v);
void ferry__blob_put_u32(struct ferry__blob_writer *w, uint32_t v);
void ferry__blob_put_u64(struct ferry__blob_writer *w, uint64_t v);
void ferry__blob_put_bytes(struct ferry__blob_writer *w, const void *p,
                           size_t n);
/* A string as u16 length + bytes (no NUL); one of more than 65535 bytes
 * makes ferry__blob_end refuse the blob. */
void ferry__blob_put_str(struct ferry__blob_writer *w, const char *s);
/*
 * Seals the header (length, checksum).  Returns FERRY_ENOSPC with *len set
 * to the size needed when the buffer was too small or NULL; FERRY_EINVAL
 * when a string was too long for a blob.
 */
int ferry__blob_end(struct ferry__blob_writer *w, size_t *len);

/* Validates the header; `what` names the blob in error sentences. */
int ferry__blob_open(struct ferry__blob_reader *r, const void *buf,
                     size_t len, enum ferry__blob_kind kind,
                     const char *what);
uint16_t ferry__blob_get_u16(struct ferry__blob_reader *r);
uint32_t ferry__blob_get_u32(struct ferry__blob_reader *r);
uint64_t ferry__blob_get_u64(struct ferry__blob_reader *r);
void ferry__blob_get_bytes(struct ferry__blob_reader *r, void *p, size_t n);
/* Reads a string into buf (NUL-terminated); too long sets bad. */
void ferry__blob_get_str(struct ferry__blob_reader *r, char *buf, size_t cap);
/* 32-bit FNV-1a, the blob checksum. */
uint32_t ferry__fnv1a(const void *p, size_t n);
/* The same hash carried on over n more bytes from h. */
uint32_t ferry__fnv1a_more(uint32_t h, const void *p, size_t n);

#endif /* FERRY_BASE_BLOB_H */
