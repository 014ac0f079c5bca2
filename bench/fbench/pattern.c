/*
 * ferry_bench: the data patterns A and B and their checkers.
 */
#include "pattern.h"

#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAT_SEED UINT64_C(0x6665727279626e63) /* "ferrybnc" */
#define PAT_B_XOR UINT64_C(0x5a5a5a5a5a5a5a5a)

static uint64_t pattern_word(enum pattern p, uint64_t word)
{
    uint64_t x = word * UINT64_C(0x9e3779b97f4a7c15) + PAT_SEED;

    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return p == PAT_B ? x ^ PAT_B_XOR : x;
}

uint8_t pattern_byte(enum pattern p, uint64_t off)
{
    return (uint8_t)(pattern_word(p, off / 8) >> (8 * (off % 8)));
}

/* The word in memory order: byte i of the buffer is byte i % 8 of it. */
static uint64_t le_word(uint64_t w)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    return __builtin_bswap64(w);
#else
    return w;
#endif
}

/* Writes pattern p into buf[off, off + len); buf is the buffer's start. */
void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len,
                  enum pattern p)
{
    uint64_t end = off + len;

    for (; off < end && off % 8 != 0; off++)
        buf[off] = pattern_byte(p, off);
    for (; off + 8 <= end; off += 8) {
        uint64_t w = le_word(pattern_word(p, off / 8));
        memcpy(buf + off, &w, 8);
    }
    for (; off < end; off++)
        buf[off] = pattern_byte(p, off);
}

/*
 * Self-test of the checkers: FERRY_BENCH_CORRUPT=OFFSET flips the byte at
 * OFFSET of the checked buffer (the target's for write, the initiator's
 * for read, each receiver's in a fan-out) just before it is checked, so
 * the run must fail.
 */
void corrupt_for_self_test(uint8_t *buf, uint64_t len)
{
    const char *v = getenv("FERRY_BENCH_CORRUPT");
    char *end;
    unsigned long long off;

    if (v == NULL || *v == '\0')
        return;
    off = strtoull(v, &end, 0);
    if (*end == '\0' && off < len) {
        buf[off] ^= 0x01;
        fprintf(stderr, "%s: FERRY_BENCH_CORRUPT: flipped bit 0 of byte "
                "%llu before checking\n", g_role, off);
    }
}

/* Offset of the first byte of buf[off, off + len) that is not pattern p,
 * or UINT64_MAX when all match. */
uint64_t pattern_mismatch(const uint8_t *buf, uint64_t off,
                          uint64_t len, enum pattern p)
{
    uint64_t end = off + len;

    for (; off < end && off % 8 != 0; off++)
        if (buf[off] != pattern_byte(p, off))
            return off;
    for (; off + 8 <= end; off += 8) {
        uint64_t w;
        memcpy(&w, buf + off, 8);
        if (w != le_word(pattern_word(p, off / 8)))
            break; /* the byte loop below finds which byte */
    }
    for (; off < end; off++)
        if (buf[off] != pattern_byte(p, off))
            return off;
    return UINT64_MAX;
}
