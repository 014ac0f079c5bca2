/*
 * The provider report behind tools/ferry_info: every candidate ferry would
 * consider for a config, ranked, with its limits, and the one-line reasons
 * of the providers it refused.
 */
#include "fabric/provider.h"

#include "fabric/about.h"

#include <stdlib.h>
#include <string.h>

struct ferry_probe {
    struct ferry__selection sel;
    char (*about)[256]; /* one per candidate */
};

int ferry_probe_providers(const struct ferry_config *cfg,
                          ferry_probe_t **out)
{
    struct ferry_config defaults;
    struct ferry_probe *probe;
    int ret;

    ferry__error_clear();
    if (out == NULL)
        return ferry__error(FERRY_EINVAL,
                            "ferry_probe_providers: out is NULL");
    if (cfg == NULL) {
        if ((ret = ferry_config_init(&defaults)))
            return ret;
        cfg = &defaults;
    }
    probe = calloc(1, sizeof(*probe));
    if (probe == NULL)
        return ferry__error(FERRY_ENOMEM, "out of memory for a probe");
    ret = ferry__provider_select(cfg, &probe->sel);
    /* No candidate is an answer here, not a failure: the report says why. */
    if (ret != 0 && ret != FERRY_ENOPROVIDER) {
        free(probe);
        return ret;
    }
    probe->about = calloc(probe->sel.ncand + 1, sizeof(*probe->about));
    if (probe->about == NULL) {
        ferry_probe_close(probe);
        return ferry__error(FERRY_ENOMEM, "out of memory for a probe");
    }
    for (size_t i = 0; i < probe->sel.ncand; i++)
        ferry__provider_about(probe->sel.cand[i].info->fabric_attr->prov_name,
                              fi_version(), probe->about[i],
                              sizeof(probe->about[i]));
    *out = probe;
    return 0;
}

size_t ferry_probe_count(const ferry_probe_t *probe)
{
    return probe != NULL ? probe->sel.ncand : 0;
}

int ferry_probe_entry(const ferry_probe_t *probe, size_t i,
                      struct ferry_provider_report *report)
{
    struct ferry_provider_report out;
    const struct fi_info *info;

    ferry__error_clear();
    if (probe == NULL || report == NULL || report->size == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_probe_entry: probe or report is NULL, or "
                            "report->size is 0 (use "
                            "FERRY_PROVIDER_REPORT_INIT)");
    if (i >= probe->sel.ncand)
        return ferry__error(FERRY_EINVAL,
                            "ferry_probe_entry: entry %zu of %zu", i,
                            probe->sel.ncand);
    info = probe->sel.cand[i].info;
    memset(&out, 0, sizeof(out));
    out.provider = info->fabric_attr->prov_name;
    out.fabric = info->fabric_attr->name;
    out.domain = info->domain_attr->name;
    out.verdict = probe->sel.cand[i].verdict;
    out.chosen = i == 0;
    out.mr_mode = ferry__mr_mode_from_fi((uint64_t)info->domain_attr->mr_mode);
    out.mr_key_size = info->domain_attr->mr_key_size;
    out.max_msg_size = info->ep_attr->max_msg_size;
    out.tx_depth = info->tx_attr->size;
    out.about = probe->about[i];
    ferry__hand_back(report, &out, sizeof(out));
    return 0;
}

const char *ferry_probe_refused(const ferry_probe_t *probe)
{
    return probe != NULL ? probe->sel.refused : "";
}

size_t ferry_probe_refusal_count(const ferry_probe_t *probe)
{
    return probe != NULL ? probe->sel.nrefusals : 0;
}

int ferry_probe_refusal(const ferry_probe_t *probe, size_t i,
                        const char **provider, const char **reason)
{
    ferry__error_clear();
    if (probe == NULL || provider == NULL || reason == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_probe_refusal: probe, "
                                          "provider or reason is NULL");
    if (i >= probe->sel.nrefusals)
        return ferry__error(FERRY_EINVAL,
                            "ferry_probe_refusal: refusal %zu of %zu", i,
                            probe->sel.nrefusals);
    *provider = probe->sel.refusals[i].provider;
    *reason = probe->sel.refusals[i].reason;
    return 0;
}

int ferry_probe_close(ferry_probe_t *probe)
{
    if (probe == NULL)
        return 0;
    ferry__selection_free(&probe->sel);
    free(probe->about);
    free(probe);
    return 0;
}
