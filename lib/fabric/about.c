/*
 * What a provider is, in words (about.h).
 */
#include "fabric/about.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    const char *words;
} cores[] = {
    {"net", "libfabric 1.17's own reliable-datagram tcp provider (called "
            "tcp from 1.18)"},
    {"udp", "UDP datagrams"},
    {"shm", "shared memory between processes of one host"},
    {"sockets", "the legacy sockets provider"},
    {"verbs", "InfiniBand/RoCE verbs"},
    {"efa", "AWS Elastic Fabric Adapter"},
    {"cxi", "HPE Slingshot (cxi)"},
    {"psm3", "Intel PSM3"},
    {"opx", "Cornelis Omni-Path Express"},
    {"ucx", "UCX"},
    {"lnx", "linked providers (lnx)"},
};

/* The words of one core provider name, or the name itself. */
static const char *core_words(const char *core, size_t n, bool stacked,
                              uint32_t fi_runtime)
{
    if (n == 3 && strncmp(core, "tcp", 3) == 0 && stacked)
        return fi_runtime < FI_VERSION(1, 18)
                   ? "tcp's connected endpoints (on libfabric 1.17 the "
                     "reliable-datagram tcp provider is called net)"
                   : "tcp's connected endpoints";
    if (n == 3 && strncmp(core, "tcp", 3) == 0)
        return "libfabric's reliable-datagram tcp provider (1.17 called it "
               "net)";
    for (size_t i = 0; i < FERRY__ARRAY_LEN(cores); i++)
        if (strlen(cores[i].name) == n && strncmp(cores[i].name, core, n) == 0)
            return cores[i].words;
    return NULL;
}

const char *ferry__provider_about(const char *prov_name, uint32_t fi_runtime,
                                  char *buf, size_t len)
{
    size_t n = strcspn(prov_name, ";");
    const char *util = prov_name[n] == ';' ? prov_name + n + 1 : NULL;
    const char *core = core_words(prov_name, n, util != NULL, fi_runtime);
    char named[FERRY__NAME_MAX + 16];

    if (core == NULL) {
        snprintf(named, sizeof(named), "the %.*s provider", (int)n, prov_name);
        core = named;
    }
    if (util != NULL && strcmp(util, "ofi_rxm") == 0)
        snprintf(buf, len, "rxm (reliable datagrams) over %s", core);
    else if (util != NULL && strcmp(util, "ofi_rxd") == 0)
        snprintf(buf, len, "rxd (reliability added) over %s", core);
    else if (util != NULL)
        snprintf(buf, len, "%s over %s", util, core);
    else
        snprintf(buf, len, "%s", core);
    return buf;
}
