/*
 * The mr_mode bits in ferry's terms (FERRY_MR_*) and libfabric's (FI_MR_*).
 */
#include "fabric/mr_mode.h"

#include <stdio.h>
#include <string.h>

static const struct {
    unsigned ferry;
    uint64_t fi;
    const char *name;
} mr_bits[] = {
    {FERRY_MR_LOCAL, FI_MR_LOCAL, "LOCAL"},
    {FERRY_MR_VIRT_ADDR, FI_MR_VIRT_ADDR, "VIRT_ADDR"},
    {FERRY_MR_ALLOCATED, FI_MR_ALLOCATED, "ALLOCATED"},
    {FERRY_MR_PROV_KEY, FI_MR_PROV_KEY, "PROV_KEY"},
    {FERRY_MR_ENDPOINT, FI_MR_ENDPOINT, "ENDPOINT"},
    {FERRY_MR_RAW, FI_MR_RAW, "RAW"},
    {FERRY_MR_HMEM, FI_MR_HMEM, "HMEM"},
};

unsigned ferry__mr_mode_from_fi(uint64_t fi_mr_mode)
{
    unsigned m = 0;

    /* No FI_MR_BASIC here: libfabric reports it only to applications that
     * ask for an API older than 1.5, and 2.0 deprecates the name. */
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++)
        if (fi_mr_mode & mr_bits[i].fi)
            m |= mr_bits[i].ferry;
    return m;
}

uint64_t ferry__mr_mode_to_fi(unsigned ferry_mr_mode)
{
    uint64_t m = 0;

    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++)
        if (ferry_mr_mode & mr_bits[i].ferry)
            m |= mr_bits[i].fi;
    return m;
}

const char *ferry__mr_mode_str(unsigned mr_mode, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (size_t i = 0; i < FERRY__ARRAY_LEN(mr_bits); i++) {
        size_t need = strlen(mr_bits[i].name) + (used ? 1 : 0);

        if (!(mr_mode & mr_bits[i].ferry))
            continue;
        if (used + need >= len)
            break; /* whole names only */
        snprintf(buf + used, len - used, "%s%s", used ? "|" : "",
                 mr_bits[i].name);
        used += need;
    }
    if (used == 0)
        snprintf(buf, len, "none");
    return buf;
}

