/*
 * Shared memory beside a network provider, for the peers of this host
 * (local.h).
 */
#include "fabric/local.h"

#include "fabric/mr_mode.h"
#include "fabric/provider.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* FERRY_MR_* bits shm may use that change nothing transport 0 relies on:
 * addressing is per transport (each key blob rail says), and FI_HMEM
 * only where device memory is asked for. */
#define HARMLESS_MODES (FERRY_MR_VIRT_ADDR | FERRY_MR_HMEM | FERRY_MR_PROV_KEY)

/* Why the peers of this host use transport 0 too, or NULL when shm
 * should stand beside it. */
static const char *reason_against(const struct ferry_config *cfg,
                                  const struct fi_info *net,
                                  unsigned net_modes)
{
    if (net->ep_attr->protocol == FI_PROTO_SHM)
        return "it is shared memory already";
    if (cfg->shm_peers == 0)
        return "config.shm_peers is 0 (FERRY_SHM_PEERS=0)";
    if (cfg->shm_peers < 0 && cfg->provider != NULL)
        return "the provider was named (config.provider or FERRY_PROVIDER), "
               "so it serves every peer; FERRY_SHM_PEERS=1 adds shared "
               "memory for the peers of this host";
    if (cfg->shm_peers < 0 && getenv("FI_PROVIDER") != NULL)
        return "FI_PROVIDER names the providers; FERRY_SHM_PEERS=1 adds "
               "shared memory for the peers of this host";
    if (net_modes & FERRY_MR_RAW)
        return "its keys are raw (FI_MR_RAW), and peers map them on "
               "transport 0 only";
    if (cfg->mr_mode_force != 0)
        return "config.mr_mode_force forces bits meant for the named "
               "provider";
    return NULL;
}

bool ferry__local_select(const struct ferry_config *cfg,
                         const struct fi_info *net_info, unsigned net_modes,
                         struct ferry__selection *sel, char *why, size_t len)
{
    const char *net = net_info->fabric_attr->prov_name;
    const char *against = reason_against(cfg, net_info, net_modes);
    struct ferry_config shm = *cfg;
    unsigned modes;

    if (against != NULL) {
        snprintf(why, len, "peers on this host use %s too: %s", net, against);
        return false;
    }
    shm.provider = "shm";
    shm.domain = NULL;
    shm.peer_host = NULL;
    shm.local_only = 1;
    if (ferry__provider_select(&shm, sel) != 0) {
        snprintf(why, len,
                 "peers on this host use %s too: shared memory is not "
                 "available (%s)",
                 net, ferry_last_error());
        ferry__error_clear();
        return false;
    }
    modes = ferry__mr_mode_from_fi(sel->cand[0].info->domain_attr->mr_mode);
    if (modes & ~HARMLESS_MODES) {
        snprintf(why, len,
                 "peers on this host use %s too: %s asks for memory "
                 "registration modes 0x%x that %s does not",
                 net, sel->cand[0].info->fabric_attr->prov_name,
                 modes & ~HARMLESS_MODES, net);
        ferry__selection_free(sel);
        return false;
    }
    snprintf(why, len,
             "peers on this host use %s (shared memory: one copy between "
             "the processes' memories, no network stack), peers on other "
             "hosts %s",
             sel->cand[0].info->fabric_attr->prov_name, net);
    return true;
}
