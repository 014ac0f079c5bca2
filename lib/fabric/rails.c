/*
 * Which domains become rails: the candidates of the chosen provider,
 * reordered by the hwloc topology so that the first rails are the NICs
 * nearest the memory the context will move: the GPU config.cuda_device
 * names, or else the NUMA node the calling thread is bound to.
 *
 * A domain's NIC is found from fi_info->nic (PCI bus attributes) or, for
 * providers that do not fill it (tcp), through sysfs; FERRY_SYSFS_ROOT
 * points that lookup at another tree (tests, offline study).  Domains with
 * no PCI device (lo) keep their place after the NICs.  When the topology
 * cannot say (no NIC, an unbound thread), the ranking stays as it was and
 * the reason says why.  Which NICs count as RDMA-capable, first among
 * equals, is the provider ranking's verdict (candidate.nic), not the
 * topology's guess from PCI IDs.  The CPUs near the first rail's NIC are
 * where the progress thread runs.
 *
 * CUDA numbers devices fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID,
 * so a CUDA ordinal is not the topology's GPU index: with a device backend
 * the GPU is found by the PCI address the driver gives for the ordinal.
 */
#include "fabric/rails.h"

#include "dev/hmem.h"
#include "dev/topo.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The PCI address of a candidate's NIC into pci; false if it has none. */
static bool candidate_pci(const struct fi_info *info, char *pci, size_t len)
{
    const char *sysfs = getenv("FERRY_SYSFS_ROOT");

    if (info->nic != NULL && info->nic->bus_attr != NULL &&
        info->nic->bus_attr->bus_type == FI_BUS_PCI) {
        const struct fi_pci_attr *a = &info->nic->bus_attr->attr.pci;
        snprintf(pci, len, "%04x:%02x:%02x.%x", a->domain_id, a->bus_id,
                 a->device_id, a->function_id);
        return true;
    }
    return ferry__topo_domain_pci_at(sysfs ? sysfs : "/sys",
                                     info->domain_attr->name, pci, len) == 0;
}

/* Candidates that could be rails together with cand[0], in rank order. */
static size_t rail_group(const struct ferry__selection *sel, size_t *idx)
{
    size_t n = 0;

    for (size_t i = 0; i < sel->ncand && n < FERRY__RAIL_CANDIDATES; i++) {
        const struct fi_info *c = sel->cand[i].info;
        bool dup = false;

        for (size_t k = 0; k < n && !dup; k++)
            dup = strcmp(sel->cand[idx[k]].info->domain_attr->name,
                         c->domain_attr->name) == 0;
        if (!dup && ferry__rail_mates(&sel->cand[0], &sel->cand[i]))
            idx[n++] = i;
    }
    return n;
}

/* Moves the group members listed in `order` (group positions) to the
 * front of the candidate list, keeping everything else in rank order. */
static void move_to_front(struct ferry__selection *sel, const size_t *idx,
                          const size_t *order, size_t norder)
{
    struct ferry__candidate *sorted = malloc(sel->ncand * sizeof(*sorted));
    bool *used = calloc(sel->ncand, sizeof(*used));
    size_t k = 0;

    if (sorted == NULL || used == NULL) {
        free(sorted);
        free(used);
        return; /* keep the rank order: a worse choice, not a failure */
    }
    for (size_t i = 0; i < norder; i++) {
        sorted[k++] = sel->cand[idx[order[i]]];
        used[idx[order[i]]] = true;
    }
    for (size_t i = 0; i < sel->ncand; i++)
        if (!used[i])
            sorted[k++] = sel->cand[i];
    memcpy(sel->cand, sorted, sel->ncand * sizeof(*sorted));
    free(sorted);
    free(used);
}

/*
 * The topology's index of CUDA device `ordinal`, found by its PCI address
 * when a device backend can tell it; else the ordinal itself (the
 * topology lists GPUs in PCI order, CUDA's under
 * CUDA_DEVICE_ORDER=PCI_BUS_ID).  note says which.
 */
static size_t topo_gpu_of(const ferry_topo_t *topo, int ordinal, char *note,
                          size_t len)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;
    char pci[FERRY_TOPO_PCI_LEN];

    note[0] = '\0';
    if (ops == NULL || ops->pci_bus_id(ordinal, pci, sizeof(pci)) != 0 ||
        ferry_topo_info(topo, &info) != 0)
        return (size_t)ordinal;
    for (size_t g = 0; g < info.ngpus; g++) {
        struct ferry_topo_device dev = FERRY_TOPO_DEVICE_INIT;

        if (ferry_topo_gpu(topo, g, &dev) == 0 && strcmp(dev.pci, pci) == 0) {
            snprintf(note, len, "CUDA device %d is %s; ", ordinal, pci);
            return g;
        }
    }
    snprintf(note, len, "CUDA device %d is %s, which the topology lacks, so "
             "GPU %d of the topology is taken; ",
             ordinal, pci, ordinal);
    return (size_t)ordinal;
}

void ferry__rails_order(const struct ferry_config *cfg,
                        struct ferry__selection *sel, char *why, size_t len,
                        char *cpus, size_t cpus_len)
{
    struct ferry_topo_config tc = FERRY_TOPO_CONFIG_INIT;
    struct ferry_topo_choice choice = FERRY_TOPO_CHOICE_INIT;
    size_t idx[FERRY__RAIL_CANDIDATES], at[FERRY__RAIL_CANDIDATES];
    size_t order[FERRY__RAIL_CANDIDATES], norder = 0;
    char pcis[FERRY__RAIL_CANDIDATES][FERRY_TOPO_PCI_LEN];
    const char *nics[FERRY__RAIL_CANDIDATES], *rdma[FERRY__RAIL_CANDIDATES];
    char note[128];
    size_t n = rail_group(sel, idx), nnics = 0, nrdma = 0;
    ferry_topo_t *topo;
    int ret;

    why[0] = '\0';
    cpus[0] = '\0';
    if (n < 2 && cfg->cuda_device < 0)
        return; /* one domain: nothing to order */
    for (size_t i = 0; i < n; i++)
        if (candidate_pci(sel->cand[idx[i]].info, pcis[nnics],
                          sizeof(pcis[0]))) {
            nics[nnics] = pcis[nnics];
            if (sel->cand[idx[i]].nic)
                rdma[nrdma++] = pcis[nnics];
            at[nnics++] = i;
        }
    if (nnics == 0) {
        snprintf(why, len, "; rails in rank order: no candidate domain is a "
                 "PCI device");
        return;
    }
    tc.xml = cfg->topology_xml;
    tc.nics = nics;
    tc.nnics = nnics;
    /* RDMA-capable is what the provider ranking said of each domain, not
     * what the PCI IDs say: tcp over a ConnectX is still TCP. */
    tc.rdma_nics = rdma;
    tc.nrdma_nics = nrdma;
    if ((ret = ferry_topo_load(&tc, &topo)) != 0) {
        snprintf(why, len, "; rails in rank order: the topology is "
                 "unavailable (%s)", ferry_last_error());
        return;
    }
    note[0] = '\0';
    ret = cfg->cuda_device >= 0
              ? ferry_topo_gpu_nics(topo,
                                    topo_gpu_of(topo, cfg->cuda_device, note,
                                                sizeof(note)),
                                    &choice)
              : ferry_topo_host_nics(topo, FERRY_TOPO_CURRENT_NODE, &choice);
    if (ret != 0) {
        snprintf(why, len, "; rails in rank order: %s", ferry_last_error());
    } else {
        for (size_t i = 0; i < choice.nnics; i++)
            order[norder++] = at[choice.nics[i]];
        move_to_front(sel, idx, order, norder);
        snprintf(why, len, "; rails nearest %s: %s%s",
                 cfg->cuda_device >= 0 ? "the GPU" : "this thread's memory",
                 note, choice.reason);
        if (choice.nnics > 0) {
            struct ferry_topo_device nic = FERRY_TOPO_DEVICE_INIT;

            if (ferry_topo_nic(topo, choice.nics[0], &nic) == 0)
                snprintf(cpus, cpus_len, "%s", nic.cpus);
        }
    }
    ferry_topo_close(topo);
}

bool ferry__bind_to_cpus(const char *cpus)
{
    cpu_set_t set;
    const char *p = cpus;

    CPU_ZERO(&set);
    for (;;) {
        char *end;
        unsigned long lo = strtoul(p, &end, 10), hi = lo;

        if (end == p)
            return false; /* a number must start each item */
        if (*end == '-') {
            p = end + 1;
            hi = strtoul(p, &end, 10);
            if (end == p || hi < lo)
                return false;
        }
        for (unsigned long c = lo; c <= hi && c < CPU_SETSIZE; c++)
            CPU_SET(c, &set);
        if (*end == '\0')
            break;
        if (*end != ',')
            return false;
        p = end + 1;
    }
    return CPU_COUNT(&set) > 0 &&
           pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}
