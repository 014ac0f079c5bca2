/*
 * topo module (topo.c): private structures.  hwloc types appear here and
 * never in ferry/topo.h, which only knows the opaque ferry_topo_t.
 *
 * A loaded topology never changes, so every query may run in several
 * threads at once.
 */
#ifndef FERRY_TOPO_H
#define FERRY_TOPO_H

#include "base/ferry-internal.h"

#include <hwloc.h>

/* A GPU or a NIC: the PCI address it was named by, and where hwloc has it. */
struct ferry__topo_dev {
    char pci[FERRY_TOPO_PCI_LEN]; /* canonical "dddd:bb:dd.f" */
    hwloc_obj_t obj; /* its PCI function; NULL: not in the topology */
    char *names;  /* its OS devices ("ib0, mlx5_0"); NULL: none; owned */
    char *cpuset; /* CPUs near it, hwloc bitmap string; NULL: unknown; owned */
    char *cpus;   /* the same as a list ("0-7,16-23"); NULL: unknown; owned */
    int numa_node; /* OS index of its one local NUMA node, or -1 */
    /* NICs only (topo.c, classify_nics): whether it can do RDMA, and the
     * evidence either way ("OpenFabrics device", "plain ethernet"). */
    bool rdma;
    const char *rdma_why; /* static */
};

/* The NICs chosen for a GPU or a NUMA node, and why. */
struct ferry__topo_choice {
    /* indices into ferry_topo.nics, primary first; those at the primary's
     * class RDMA-capable first, then plain ones; owned */
    size_t *nics;
    size_t n;
    enum ferry_topo_class distance; /* of the primary; UNKNOWN when n is 0 */
    bool pinned;  /* set by the NIC map, not chosen by ferry */
    char *reason; /* one sentence; owned */
};

struct ferry_topo {
    uint32_t magic;
    hwloc_topology_t hw;
    char *summary; /* owned */
    struct ferry__topo_dev *gpus;
    size_t ngpus;
    struct ferry__topo_dev *nics;
    size_t nnics;
    /* distance[g * nnics + n]: class between GPU g and NIC n. */
    enum ferry_topo_class *distance;
    struct ferry__topo_choice *gpu_choice; /* per GPU */
    int *numa_ids;                         /* OS index of each NUMA node */
    struct ferry__topo_choice *numa_choice; /* per NUMA node, same order */
    size_t nnuma;
};

/*
 * ferry_topo_domain_pci() reading sysfs below `sysfs` ("/sys" there; the
 * tests pass a tree of their own).
 */
int ferry__topo_domain_pci_at(const char *sysfs, const char *domain,
                              char *pci, size_t len);

#endif /* FERRY_TOPO_H */
