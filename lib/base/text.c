/*
 * Text a person reads (text.h).
 */
#include "base/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ferry__bytes_words(uint64_t bytes, char *buf, size_t len)
{
    static const char *const unit[] = {"B",   "KiB", "MiB",
                                       "GiB", "TiB", "PiB", "EiB"};
    double v = (double)bytes;
    size_t u = 0;

    while (v >= 1024.0 && u + 1 < sizeof(unit) / sizeof(unit[0])) {
        v /= 1024.0;
        u++;
    }
    if (u == 0 || v >= 100.0 || v == (double)(uint64_t)v)
        snprintf(buf, len, "%.0f %s", v, unit[u]);
    else
        snprintf(buf, len, "%.1f %s", v, unit[u]);
    return buf;
}

void ferry__appendf(char *buf, size_t cap, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;

    if (used + 1 >= cap)
        return;
    va_start(ap, fmt);
    vsnprintf(buf + used, cap - used, fmt, ap);
    va_end(ap);
}

char *ferry__text_printable(char *s)
{
    for (unsigned char *c = (unsigned char *)s; *c != '\0'; c++)
        if (*c < 0x20 || *c == 0x7f)
            *c = (*c >= '\t' && *c <= '\r') ? ' ' : '?';
    return s;
}
