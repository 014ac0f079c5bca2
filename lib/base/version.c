/*
 * Version of the library and of the libfabric it runs on.
 */
#include "base/defs.h"

#include <pthread.h>
#include <stdio.h>

static pthread_once_t version_once = PTHREAD_ONCE_INIT;
static char version_string[96];

static void format_version(void)
{
    uint32_t v = fi_version();

    snprintf(version_string, sizeof(version_string),
             "ferry %s (libfabric %u.%u)", PACKAGE_VERSION, FI_MAJOR(v),
             FI_MINOR(v));
}

unsigned ferry_get_api_version(void)
{
    return FERRY_API_VERSION;
}

const char *ferry_version_string(void)
{
    /* fi_version() only reports a compiled-in number; it does not read the
     * environment, so it may come before ferry__env_prepare(). */
    pthread_once(&version_once, format_version);
    return version_string;
}
