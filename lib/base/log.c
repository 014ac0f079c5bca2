/*
 * FERRY_LOG=warn|info|debug: diagnostics on stderr, one line each.
 */
#include "base/log.h"

#include "base/defs.h"
#include "base/text.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static int level = FERRY__LOG_WARN;

static void read_level(void)
{
    const char *v = getenv("FERRY_LOG");

    if (v == NULL || *v == '\0' || strcmp(v, "warn") == 0)
        return;
    if (strcmp(v, "info") == 0)
        level = FERRY__LOG_INFO;
    else if (strcmp(v, "debug") == 0)
        level = FERRY__LOG_DEBUG;
    else if (strcmp(v, "off") == 0 || strcmp(v, "none") == 0)
        level = 0;
    else
        fprintf(stderr,
                "ferry: FERRY_LOG=%s is not a level; use warn, info, debug "
                "or off (keeping warn)\n",
                v);
}

int ferry__log_level(void)
{
    pthread_once(&level_once, read_level);
    return level;
}

void ferry__log(int lvl, const char *fmt, ...)
{
    static const char *const names[] = {"", "warn", "info", "debug"};
    char line[1024];
    va_list ap;

    if (lvl > ferry__log_level())
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ferry__text_printable(line);
    /* One fprintf per line so lines from several threads do not mix. */
    fprintf(stderr, "ferry[%d] %s: %s\n", (int)getpid(), names[lvl], line);
}
