/*
 * ferry_bench: the data patterns A and B and their checkers (pattern.c).
 */
#ifndef FERRY_BENCH_PATTERN_H
#define FERRY_BENCH_PATTERN_H

#include <stdint.h>

enum pattern { PAT_A = 0, PAT_B = 1 };

uint8_t pattern_byte(enum pattern p, uint64_t off);
void pattern_fill(uint8_t *buf, uint64_t off, uint64_t len,
                  enum pattern p);
void corrupt_for_self_test(uint8_t *buf, uint64_t len);
uint64_t pattern_mismatch(const uint8_t *buf, uint64_t off,
                          uint64_t len, enum pattern p);

#endif /* FERRY_BENCH_PATTERN_H */
