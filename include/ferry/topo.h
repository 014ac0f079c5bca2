/*
 * ferry/topo.h: the topology of NICs, GPUs, CPUs and memory.
 * Part of ferry's public API: include <ferry.h>, or this and
 * <ferry/core.h>, which it includes.
 */
#ifndef FERRY_API_TOPO_H
#define FERRY_API_TOPO_H

#include <ferry/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ==== Topology ============================================================
 *
 * Which NICs each GPU should use, and which CPUs and NICs are near which
 * memory, from the hwloc topology of this machine or of a saved hwloc XML
 * file (`lstopo --whole-io FILE.xml`), so that any machine can be studied
 * offline.  GPUs and NICs are named by PCI address, "dddd:bb:dd.f" (or
 * "bb:dd.f" in domain 0).  A libfabric provider reports a NIC's address in
 * fi_info->nic->bus_attr; ferry_topo_domain_pci() finds it from a domain
 * name.  tools/ferry_topo prints all of it.
 *
 * Distance classes, nearest first, as NCCL and `nvidia-smi topo -m` name
 * them.  The order is meaningful: a smaller value is nearer.
 */
enum ferry_topo_class {
    FERRY_TOPO_PIX = 0,     /* behind the same PCIe switch */
    FERRY_TOPO_PXB = 1,     /* through several PCIe switches, one host bridge */
    FERRY_TOPO_PHB = 2,     /* under the same PCIe host bridge */
    FERRY_TOPO_NODE = 3,    /* attached to the same NUMA node */
    FERRY_TOPO_SYS = 4,     /* across NUMA nodes (the inter-socket link) */
    FERRY_TOPO_UNKNOWN = 5, /* one of the two is not in the topology */
};

typedef struct ferry_topo ferry_topo_t;

struct ferry_topo_config {
    size_t size; /* sizeof(struct ferry_topo_config): FERRY_TOPO_CONFIG_INIT */
    /*
     * hwloc XML file to read.  NULL: the file FERRY_TOPOLOGY_XML names, or
     * the live machine when that is unset or empty.
     */
    const char *xml;
    /*
     * PCI addresses of the GPUs; "GPU i" below is gpus[i].  ngpus 0: every
     * GPU in the topology (CUDA, NVML, RSMI or OpenCL devices, NVIDIA or
     * AMD display, 3D or accelerator functions), in PCI address order,
     * which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID.
     */
    const char *const *gpus;
    size_t ngpus;
    /*
     * PCI addresses of the NICs.  nnics 0: every PCI function with a
     * network or InfiniBand device in the topology, in address order.
     */
    const char *const *nics;
    size_t nnics;
    /*
     * NICs pinned to GPUs, overriding ferry's choice.  NULL: the value of
     * FERRY_NIC_MAP; NULL or "": none.  The format:
     *
     *     "0:mlx5_0,mlx5_1; 1:0000:19:00.0"
     *
     * entries separated by ';' (one may also end the map); each is a GPU
     * index, ':', then its NICs separated by ',', primary first.  A NIC is
     * the PCI address of one of the NICs, or the name of one of its devices
     * in the topology (mlx5_0, ib0, eth2).  Spaces around tokens are
     * ignored; a GPU appears at most once, a NIC at most once per GPU.
     * GPUs left out keep ferry's choice, which counts the pinned NICs'
     * load.  A malformed map is refused with FERRY_EINVAL and a sentence
     * giving the offset (from 0) of the error and what was expected there.
     */
    const char *nic_map;
    /*
     * What libfabric reports: the NICs on which a provider offers RDMA
     * (verbs, efa, cxi, psm3...), named as in nic_map or by a libfabric
     * domain named after a device ("mlx5_0-xrc", "rdmap16s27-rdm").  NULL
     * and 0: ferry judges each NIC by the topology (an InfiniBand or
     * OpenFabrics device, or the PCI IDs of an RDMA NIC: see
     * lib/dev/topo.c).  Otherwise these NICs and no others count as
     * RDMA-capable, whatever the topology shows (tcp over a ConnectX is
     * still TCP; 0 entries: none is); entries that name none of the NICs
     * are ignored, so every domain libfabric lists may be passed.  A NULL
     * entry is refused with FERRY_EINVAL.  At the same distance, GPUs and
     * NUMA nodes take RDMA-capable NICs before the others.
     */
    const char *const *rdma_nics;
    size_t nrdma_nics;
};
#define FERRY_TOPO_CONFIG_INIT FERRY__SIZED_INIT(struct ferry_topo_config)

/*
 * Loads the topology and decides the NICs of every GPU and NUMA node.
 * cfg may be NULL (defaults).  *topo is set on success only.  Returns 0,
 * FERRY_ENOENT (the XML file does not exist), FERRY_EINVAL (unreadable or
 * corrupt XML, a malformed PCI address or NIC map, an address the topology
 * lists twice: the sentence names the culprit), FERRY_ENOTSUP (hwloc
 * cannot discover this machine) or FERRY_ENOMEM.  A GPU or NIC the
 * topology lacks is not an error: its distances are FERRY_TOPO_UNKNOWN.
 */
FERRY_API int ferry_topo_load(const struct ferry_topo_config *cfg,
                              ferry_topo_t **topo);
/* Frees the topology and every string it handed out.  Returns 0 (also
 * for NULL) or FERRY_EHANDLE (not a live topology: closed already).  Every
 * ferry_topo_ call given a topology that is not live returns
 * FERRY_EHANDLE. */
FERRY_API int ferry_topo_close(ferry_topo_t *topo);

struct ferry_topo_info {
    size_t size; /* set by the caller: FERRY_TOPO_INFO_INIT */
    size_t ngpus;
    size_t nnics;
    const int *numa_nodes; /* OS indexes of the NUMA nodes */
    size_t nnuma;
    /* Where the topology came from and how GPUs and NICs were found. */
    const char *summary;
};
#define FERRY_TOPO_INFO_INIT FERRY__SIZED_INIT(struct ferry_topo_info)

/* Strings stay valid while topo lives.  Returns 0 or FERRY_EINVAL. */
FERRY_API int ferry_topo_info(const ferry_topo_t *topo,
                              struct ferry_topo_info *info);

struct ferry_topo_device {
    size_t size;     /* set by the caller: FERRY_TOPO_DEVICE_INIT */
    const char *pci; /* canonical: "0000:17:00.0" */
    /* Its devices in the topology ("ib0, mlx5_0", "cuda0"), or "". */
    const char *names;
    int in_topology; /* 0: hwloc has no such PCI function */
    int numa_node;   /* OS index of its NUMA node; -1: unknown or several */
    /* CPUs near it, for a progress thread: hwloc bitmap ("0x00ff00ff") and
     * list of PU OS indexes ("0-7,16-23"); "" when not in the topology. */
    const char *cpuset;
    const char *cpus;
    /* NICs: 1 if ferry counts it RDMA-capable, and the evidence either way
     * ("OpenFabrics device", "InfiniBand PCI class", "plain ethernet",
     * "libfabric reports RDMA"...); GPUs: 0 and "". */
    int rdma;
    const char *rdma_why;
};
#define FERRY_TOPO_DEVICE_INIT FERRY__SIZED_INIT(struct ferry_topo_device)

/* GPU or NIC i.  Strings stay valid while topo lives.  Returns 0 or
 * FERRY_EINVAL (index out of range: the sentence gives the count). */
FERRY_API int ferry_topo_gpu(const ferry_topo_t *topo, size_t gpu,
                             struct ferry_topo_device *dev);
FERRY_API int ferry_topo_nic(const ferry_topo_t *topo, size_t nic,
                             struct ferry_topo_device *dev);

/* The class between GPU gpu and NIC nic (>= 0), or FERRY_EINVAL. */
FERRY_API int ferry_topo_distance(const ferry_topo_t *topo, size_t gpu,
                                  size_t nic);
/* "PIX", "PXB", "PHB", "NODE", "SYS", "UNKNOWN"; "?" for other values. */
FERRY_API const char *ferry_topo_class_name(int distance);

struct ferry_topo_choice {
    size_t size;       /* set by the caller: FERRY_TOPO_CHOICE_INIT */
    const size_t *nics; /* NIC indices, primary first, then further rails */
    size_t nnics;       /* 0: there is no NIC at all */
    int distance;       /* FERRY_TOPO_* of the primary */
    const char *reason; /* one sentence saying why */
};
#define FERRY_TOPO_CHOICE_INIT FERRY__SIZED_INIT(struct ferry_topo_choice)

/*
 * The NICs for GPU gpu: those at its nearest class, every one carrying a
 * fair share of the GPUs that compete for it (one primary each where
 * possible; the others follow as further rails), unless the NIC map pins
 * them.  Among them the RDMA-capable ones (see config.rdma_nics) compete
 * for the primary and come first; plain ones follow.  A nearer plain NIC still
 * wins over a farther RDMA-capable one, and the reason says so.  A GPU not
 * in the topology gets the least loaded NICs.  Valid while topo lives.
 * Returns 0 or FERRY_EINVAL.
 */
FERRY_API int ferry_topo_gpu_nics(const ferry_topo_t *topo, size_t gpu,
                                  struct ferry_topo_choice *choice);

/* numa_node for the NUMA node the calling thread is bound to. */
#define FERRY_TOPO_CURRENT_NODE (-1)
/*
 * The NICs nearest host memory on NUMA node numa_node (an OS index, or
 * FERRY_TOPO_CURRENT_NODE), RDMA-capable ones first.  Valid while topo
 * lives.  Returns 0 or FERRY_EINVAL (no such node; or, for the current
 * node, a topology read from a file, or a thread free to run on several
 * nodes).
 */
FERRY_API int ferry_topo_host_nics(const ferry_topo_t *topo, int numa_node,
                                   struct ferry_topo_choice *choice);

/* Room for any PCI address ferry writes, NUL included. */
#define FERRY_TOPO_PCI_LEN 20
/*
 * The PCI address of the device behind a libfabric domain name ("mlx5_0",
 * "eth0", efa's "rdmap16s27-rdm"), from /sys/class/infiniband or
 * /sys/class/net.  Returns 0, FERRY_ENOENT (no such device), FERRY_ENOTSUP
 * (not a PCI device: loopback, veth and other virtual interfaces),
 * FERRY_ENOSPC (pci NULL or len < FERRY_TOPO_PCI_LEN) or FERRY_EINVAL.
 */
FERRY_API int ferry_topo_domain_pci(const char *domain, char *pci,
                                    size_t len);

/* ==== end of Topology ==================================================== */

#ifdef __cplusplus
}
#endif

#endif /* FERRY_API_TOPO_H */
