/*
 * Sizes in words a person reads: "12.5 GiB", "64 MiB", "512 B".
 */
#ifndef FERRY_BASE_UNITS_H
#define FERRY_BASE_UNITS_H

#include <stddef.h>
#include <stdint.h>

/* bytes in binary units with one decimal where it matters, into buf. */
const char *ferry__bytes_words(uint64_t bytes, char *buf, size_t len);

#endif /* FERRY_BASE_UNITS_H */
