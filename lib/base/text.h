/*
 * Text a person reads: sizes in words ("12.5 GiB"), sentences built piece
 * by piece in a fixed buffer, and what others sent made printable.
 * ferry_stat compiles this file in as well: it needs nothing else.
 */
#ifndef FERRY_BASE_TEXT_H
#define FERRY_BASE_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* bytes in binary units with one decimal where it matters, into buf. */
const char *ferry__bytes_words(uint64_t bytes, char *buf, size_t len);

/* Appends to the NUL-terminated text in buf[cap], cutting what does not
 * fit; a full buffer is left as it is. */
void ferry__appendf(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/*
 * Makes s safe to print on a terminal or in a log line: a tab, newline
 * or other white-space control becomes a space, any other control byte
 * (ESC among them) a '?'.  Sentences and log lines quote what peers,
 * etcd and the bootstrap sent (host names, providers, their own errors),
 * which must not move a reader's cursor or forge a line of its own.
 * Returns s.
 */
char *ferry__text_printable(char *s);

#endif /* FERRY_BASE_TEXT_H */
