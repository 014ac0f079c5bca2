/*
 * Topology: where GPUs and NICs sit in the machine (hwloc), how far apart
 * they are in NCCL's distance classes, which NICs each GPU and each NUMA
 * node should use and why, and the CPUs near each device.
 *
 * How a class is computed (class_between).  Take the common ancestor C of
 * the two objects in the hwloc tree (hwloc 2 hangs host bridges below the
 * CPU-side object whose CPUs are local to them, PCI bridges below host
 * bridges, PCI functions below bridges):
 *   C is a PCI function (both are the same function)           PIX
 *   C is a PCI-to-PCI bridge, and on each side at most one
 *     more bridge lies between C and the device: both sit on
 *     C itself or on downstream ports of the switch whose
 *     upstream port is C                                        PIX
 *   C is a PCI-to-PCI bridge otherwise (nested switches)        PXB
 *   C is a host bridge                                          PHB
 *   C is a CPU-side object (package, group, machine) whose
 *     nodeset holds at most one NUMA node                       NODE
 *   C spans several NUMA nodes                                  SYS
 *   either object is missing from the topology                  UNKNOWN
 * A NUMA node and a NIC go through the same function: their ancestor is
 * always CPU-side, so the answer is NODE or SYS.  A topology that attaches
 * I/O to the whole machine (locality unknown) thus gives SYS across host
 * bridges on a machine with several NUMA nodes: ferry does not claim
 * nearness it cannot see.
 *
 * Which NICs can do RDMA (classify_nics).  At the same distance a NIC that
 * does RDMA (InfiniBand, RoCE, iWARP, EFA, Slingshot) is worth more than
 * plain ethernet, which libfabric drives only through the host's TCP/IP
 * stack.  The evidence, strongest first:
 *   what libfabric reports, when the caller passes it (config.rdma_nics):
 *     it alone decides then, for it knows which provider opens which NIC
 *     (tcp over a ConnectX is still TCP; a ConnectX without its RDMA
 *     driver has no verbs domain)
 *   an OpenFabrics OS device below the function (mlx5_0, bnxt_re0, irdma0,
 *     rdmap16s27 of EFA, hfi1_0): the kernel's RDMA stack drives it (not
 *     Cisco's usnic_0, which hwloc files there too but which does no RMA)
 *   the PCI class: InfiniBand (0207; 0c06 on old HCAs), fabric controller
 *     (0208: Omni-Path)
 *   the IDs of a network function (class 02xx) from an RDMA vendor
 *     (rdma_ids): every Mellanox/NVIDIA one (15b3: ConnectX does RoCE in
 *     ethernet mode), Amazon EFA (1d0f:efa*, not the ENA ethernet
 *     1d0f:ec2*), Broadcom BCM575xx/576xx (RoCE), Intel E810 and X722
 *     (irdma), HPE Slingshot's Cassini (17db:0501, 1590:0371: cxi)
 * Anything else is plain: "plain ethernet" for an ethernet function, "no
 * sign of RDMA" for others and for a NIC the topology lacks.  The older
 * RDMA NICs the table leaves out (Broadcom 573xx/574xx, whose IDs mix with
 * tg3's plain ones, Marvell qedr, Chelsio) count once their driver shows
 * an OpenFabrics device, as it does on any machine where they can be used.
 *
 * How NICs are chosen for GPUs (assign_gpus).  A GPU's candidates are the
 * NICs at its nearest class and, when some of those can do RDMA, only
 * those.  Distance comes first: a plain NIC nearer than every RDMA-capable
 * one is still chosen, and the reason then names the nearest RDMA-capable
 * NIC, which the NIC map can pin.  GPUs pinned by the NIC map take their
 * NICs first.  Then, fewest candidates first (a GPU with one choice must
 * not lose it to one with many), each GPU takes as primary its candidate
 * with the fewest primary users so far, the lowest index on a tie.  Its
 * other candidates follow as further rails in round-robin order after the
 * primary, so that second rails spread as evenly as primaries, and then
 * the plain NICs of its class in the same order.  A GPU missing from the
 * topology is UNKNOWN to every NIC: all are candidates, and it gets the
 * least loaded.  A NUMA node's NICs are those at its nearest class,
 * RDMA-capable ones first.
 */
#include "dev/topo.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- strings ------------------------------------------------------------ */

/* A string built with stdio (open_memstream); a failed write shows at close. */
struct text {
    FILE *f;
    char *buf;
    size_t len;
};

static int out_of_memory(void)
{
    return ferry__error(FERRY_ENOMEM, "out of memory building the topology");
}

static int text_open(struct text *t)
{
    t->buf = NULL;
    t->f = open_memstream(&t->buf, &t->len);
    return t->f != NULL ? 0 : out_of_memory();
}

/* Closes t and hands its string to *out (the caller frees it). */
static int text_finish(struct text *t, char **out)
{
    if (fclose(t->f) != 0) {
        free(t->buf);
        return out_of_memory();
    }
    *out = t->buf;
    return 0;
}

/* The separator before item i of count: "", ", " or " and ". */
static const char *list_sep(size_t i, size_t count)
{
    if (i == 0)
        return "";
    return i + 1 == count ? " and " : ", ";
}

/* ---- PCI addresses ------------------------------------------------------ */

struct pci_addr {
    unsigned domain, bus, dev, func;
};

/* 1 to max_digits hex digits into *v; the character after them, or NULL. */
static const char *hex_field(const char *s, unsigned max_digits, unsigned *v)
{
    unsigned n = 0, val = 0;

    while (n < max_digits && isxdigit((unsigned char)s[n])) {
        int c = tolower((unsigned char)s[n]);
        val = val * 16 + (unsigned)(c <= '9' ? c - '0' : c - 'a' + 10);
        n++;
    }
    if (n == 0 || isxdigit((unsigned char)s[n]))
        return NULL;
    *v = val;
    return s + n;
}

/* "dddd:bb:dd.f", or "bb:dd.f" for domain 0; hex digits of either case. */
static bool parse_pci(const char *s, struct pci_addr *a)
{
    const char *p = s;

    a->domain = 0;
    if (strchr(s, ':') != strrchr(s, ':')) { /* two colons: a domain first */
        p = hex_field(p, 8, &a->domain);
        if (p == NULL || *p++ != ':')
            return false;
    }
    p = hex_field(p, 2, &a->bus);
    if (p == NULL || *p++ != ':')
        return false;
    p = hex_field(p, 2, &a->dev);
    if (p == NULL || *p++ != '.')
        return false;
    p = hex_field(p, 1, &a->func);
    return p != NULL && *p == '\0' && a->dev <= 0x1f && a->func <= 7;
}

static void format_pci(const struct pci_addr *a, char out[FERRY_TOPO_PCI_LEN])
{
    snprintf(out, FERRY_TOPO_PCI_LEN, "%04x:%02x:%02x.%x", a->domain, a->bus,
             a->dev, a->func);
}

static bool obj_at(hwloc_obj_t o, const struct pci_addr *a)
{
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;

    return p->domain == a->domain && p->bus == a->bus && p->dev == a->dev &&
           p->func == a->func;
}

static void obj_pci(hwloc_obj_t o, char out[FERRY_TOPO_PCI_LEN])
{
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;
    struct pci_addr a = {p->domain, p->bus, p->dev, p->func};

    format_pci(&a, out);
}

/* ---- what a PCI function is --------------------------------------------- */

static bool has_osdev(hwloc_obj_t pcidev, bool (*match)(hwloc_obj_t osdev))
{
    for (hwloc_obj_t c = pcidev->io_first_child; c != NULL;
         c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && match(c))
            return true;
    return false;
}

/* The OS devices that hwloc's CUDA, NVML, RSMI and OpenCL backends add. */
static bool is_gpu_osdev(hwloc_obj_t osdev)
{
    static const char *const prefixes[] = {"cuda", "nvml", "rsmi", "opencl"};

    if (osdev->name == NULL)
        return false;
    for (size_t i = 0; i < FERRY__ARRAY_LEN(prefixes); i++)
        if (strncmp(osdev->name, prefixes[i], strlen(prefixes[i])) == 0)
            return true;
    return false;
}

static bool is_gpu(hwloc_obj_t pcidev)
{
    unsigned cls = pcidev->attr->pcidev.class_id;
    unsigned vendor = pcidev->attr->pcidev.vendor_id;
    /* display VGA, display 3D, processing accelerator; NVIDIA, AMD */
    bool gpu_class = cls == 0x0300 || cls == 0x0302 || cls == 0x1200;
    bool gpu_vendor = vendor == 0x10de || vendor == 0x1002;

    return has_osdev(pcidev, is_gpu_osdev) || (gpu_class && gpu_vendor);
}

static bool is_network_osdev(hwloc_obj_t osdev)
{
    return osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_NETWORK ||
           osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

/*
 * A NIC is a function with a network or InfiniBand device: one without
 * has no driver bound (an unused virtual function, say), and no libfabric
 * provider can open it.
 */
static bool is_nic(hwloc_obj_t pcidev)
{
    return has_osdev(pcidev, is_network_osdev);
}

static bool is_openfabrics_osdev(hwloc_obj_t osdev)
{
    return osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS;
}

/* hwloc files Cisco's usNIC (usnic_0) as OpenFabrics too: it does no RMA. */
static bool is_rdma_osdev(hwloc_obj_t osdev)
{
    return is_openfabrics_osdev(osdev) &&
           (osdev->name == NULL || strncmp(osdev->name, "usnic", 5) != 0);
}

/* Network functions of RDMA vendors, by PCI IDs (see the top of the file). */
static const struct {
    unsigned vendor, first, last; /* device IDs first..last */
    const char *what;
} rdma_ids[] = {
    {0x15b3, 0x0000, 0xffff, "RoCE on Mellanox/NVIDIA ethernet"},
    {0x1d0f, 0xefa0, 0xefaf, "Amazon EFA"},
    {0x14e4, 0x1750, 0x1752, "RoCE on Broadcom BCM575xx"},
    {0x14e4, 0x1760, 0x1763, "RoCE on Broadcom BCM576xx"},
    {0x14e4, 0x1800, 0x1807, "RoCE on Broadcom BCM575xx"},
    {0x8086, 0x1591, 0x1593, "irdma on Intel E810"},
    {0x8086, 0x1599, 0x159b, "irdma on Intel E810"},
    {0x8086, 0x37ce, 0x37d3, "irdma on Intel X722"},
    {0x17db, 0x0501, 0x0501, "cxi on HPE Slingshot"},
    {0x1590, 0x0371, 0x0371, "cxi on HPE Slingshot"},
};

/* Why the topology says NIC function o does RDMA, or NULL if it does not. */
static const char *rdma_evidence(hwloc_obj_t o)
{
    const struct hwloc_pcidev_attr_s *p = &o->attr->pcidev;

    if (has_osdev(o, is_rdma_osdev))
        return "OpenFabrics device";
    if (p->class_id == 0x0207 || p->class_id == 0x0c06)
        return "InfiniBand PCI class";
    if (p->class_id == 0x0208)
        return "fabric controller PCI class";
    if (p->class_id >> 8 != 0x02) /* not a network controller */
        return NULL;
    for (size_t i = 0; i < FERRY__ARRAY_LEN(rdma_ids); i++)
        if (p->vendor_id == rdma_ids[i].vendor &&
            p->device_id >= rdma_ids[i].first &&
            p->device_id <= rdma_ids[i].last)
            return rdma_ids[i].what;
    return NULL;
}

/* GPUs and NICs are found, named and explained the same way. */
struct role {
    const char *name;       /* "GPU" */
    const char *config_key; /* "config.gpus" */
    bool (*matches)(hwloc_obj_t pcidev);
    const char *rule; /* what discovery looks for */
};

static const struct role gpu_role = {
    "GPU", "config.gpus", is_gpu,
    "CUDA, NVML, RSMI or OpenCL devices, or NVIDIA or AMD display, 3D or "
    "accelerator PCI functions"};
static const struct role nic_role = {
    "NIC", "config.nics", is_nic,
    "PCI functions with a network or InfiniBand device"};

/*
 * The PCI function at address a, or NULL when the topology has none.  Some
 * XML files list an address twice (hwloc's 32em64t-2n8c2t-pci-normalio.xml
 * has two 0000:04:00.0): the one that looks like a `role` then wins, and
 * if that does not settle it the address is refused.
 */
static int find_function(hwloc_topology_t hw, const struct pci_addr *a,
                         const struct role *role, size_t index,
                         hwloc_obj_t *out)
{
    hwloc_obj_t o = NULL, first = NULL, fitting = NULL;
    unsigned matches = 0, fits = 0;
    char pci[FERRY_TOPO_PCI_LEN];

    while ((o = hwloc_get_next_pcidev(hw, o)) != NULL) {
        if (!obj_at(o, a))
            continue;
        if (matches++ == 0)
            first = o;
        if (role->matches(o) && fits++ == 0)
            fitting = o;
    }
    *out = matches <= 1 ? first : fitting;
    if (matches <= 1 || fits == 1)
        return 0;
    format_pci(a, pci);
    return ferry__error(
        FERRY_EINVAL,
        "%s[%zu] %s: the topology has %u PCI functions at that address and "
        "%u of them look like a %s, so it is ambiguous; fix the XML file or "
        "give another device",
        role->config_key, index, pci, matches, fits, role->name);
}

/* ---- devices ------------------------------------------------------------ */

/* The names of the function's OS devices, ", "-separated; NULL if none. */
static int osdev_names(hwloc_obj_t pcidev, char **out)
{
    struct text t;
    size_t n = 0;
    int ret = text_open(&t);

    if (ret != 0)
        return ret;
    for (hwloc_obj_t c = pcidev->io_first_child; c != NULL;
         c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->name != NULL)
            fprintf(t.f, "%s%s", n++ ? ", " : "", c->name);
    ret = text_finish(&t, out);
    if (ret == 0 && n == 0) {
        free(*out);
        *out = NULL;
    }
    return ret;
}

/* Records where d sits: names, nearby CPUs, NUMA node.  o may be NULL. */
static int place_dev(hwloc_topology_t hw, struct ferry__topo_dev *d,
                     hwloc_obj_t o)
{
    hwloc_obj_t local;
    int ret;

    d->obj = o;
    d->numa_node = -1;
    if (o == NULL)
        return 0;
    ret = osdev_names(o, &d->names);
    if (ret != 0)
        return ret;
    /* The CPU-side object the device hangs below holds the CPUs that are
     * local to it: where its progress thread belongs. */
    local = hwloc_get_non_io_ancestor_obj(hw, o);
    if (hwloc_bitmap_asprintf(&d->cpuset, local->cpuset) < 0 ||
        hwloc_bitmap_list_asprintf(&d->cpus, local->cpuset) < 0)
        return out_of_memory();
    if (hwloc_bitmap_weight(local->nodeset) == 1)
        d->numa_node = hwloc_bitmap_first(local->nodeset);
    return 0;
}

static void free_devs(struct ferry__topo_dev *devs, size_t n)
{
    for (size_t i = 0; devs != NULL && i < n; i++) {
        free(devs[i].names);
        free(devs[i].cpuset);
        free(devs[i].cpus);
    }
    free(devs);
}

/* The devices the caller named, in the caller's order. */
static int devs_given(hwloc_topology_t hw, const struct role *role,
                      const char *const *addrs, size_t n,
                      struct ferry__topo_dev *devs)
{
    for (size_t i = 0; i < n; i++) {
        struct pci_addr a;
        hwloc_obj_t o;
        int ret;

        if (addrs == NULL || addrs[i] == NULL)
            return ferry__error(FERRY_EINVAL,
                                "%s[%zu] is NULL; give a PCI address such as "
                                "0000:17:00.0",
                                role->config_key, i);
        if (!parse_pci(addrs[i], &a))
            return ferry__error(FERRY_EINVAL,
                                "%s[%zu] is \"%s\", not a PCI address: "
                                "expected dddd:bb:dd.f in hex, such as "
                                "0000:17:00.0",
                                role->config_key, i, addrs[i]);
        format_pci(&a, devs[i].pci);
        for (size_t j = 0; j < i; j++)
            if (strcmp(devs[j].pci, devs[i].pci) == 0)
                return ferry__error(FERRY_EINVAL,
                                    "%s[%zu] (%s) repeats %s[%zu]; give "
                                    "each %s once",
                                    role->config_key, i, devs[i].pci,
                                    role->config_key, j, role->name);
        ret = find_function(hw, &a, role, i, &o);
        if (ret == 0)
            ret = place_dev(hw, &devs[i], o);
        if (ret != 0)
            return ret;
    }
    return 0;
}

static int by_pci(const void *x, const void *y)
{
    const struct ferry__topo_dev *a = x, *b = y;

    return strcmp(a->pci, b->pci);
}

/* Every function of the topology that fits the role, in address order. */
static int devs_found(hwloc_topology_t hw, const struct role *role,
                      struct ferry__topo_dev *devs)
{
    hwloc_obj_t o = NULL;
    size_t n = 0;

    while ((o = hwloc_get_next_pcidev(hw, o)) != NULL) {
        int ret;

        if (!role->matches(o))
            continue;
        obj_pci(o, devs[n].pci);
        ret = place_dev(hw, &devs[n++], o);
        if (ret != 0)
            return ret;
    }
    qsort(devs, n, sizeof(*devs), by_pci);
    return 0;
}

static size_t count_found(hwloc_topology_t hw, const struct role *role)
{
    hwloc_obj_t o = NULL;
    size_t n = 0;

    while ((o = hwloc_get_next_pcidev(hw, o)) != NULL)
        n += role->matches(o);
    return n;
}

/* The caller's devices, or every one in the topology when n is 0. */
static int load_devs(hwloc_topology_t hw, const struct role *role,
                     const char *const *addrs, size_t n,
                     struct ferry__topo_dev **out, size_t *nout)
{
    size_t count = n != 0 ? n : count_found(hw, role);

    *out = NULL;
    *nout = 0;
    if (count == 0)
        return 0;
    *out = calloc(count, sizeof(**out));
    if (*out == NULL)
        return out_of_memory();
    *nout = count;
    return n != 0 ? devs_given(hw, role, addrs, n, *out)
                  : devs_found(hw, role, *out);
}

/* ---- distance classes (see the top of the file) ------------------------- */

static unsigned height(hwloc_obj_t o)
{
    unsigned h = 0;

    for (; o->parent != NULL; o = o->parent)
        h++;
    return h;
}

/*
 * By parent pointers: hwloc_get_common_ancestor_obj() compares depths,
 * which are negative for I/O objects, and walks off the root for them.
 */
static hwloc_obj_t common_ancestor(hwloc_obj_t a, hwloc_obj_t b)
{
    unsigned ha = height(a), hb = height(b);

    for (; ha > hb; ha--)
        a = a->parent;
    for (; hb > ha; hb--)
        b = b->parent;
    while (a != b) {
        a = a->parent;
        b = b->parent;
    }
    return a;
}

/* Bridges strictly between o and its ancestor anc. */
static unsigned bridges_between(hwloc_obj_t o, hwloc_obj_t anc)
{
    unsigned n = 0;

    for (o = o->parent; o != anc; o = o->parent)
        n += o->type == HWLOC_OBJ_BRIDGE;
    return n;
}

static enum ferry_topo_class class_between(hwloc_obj_t a, hwloc_obj_t b)
{
    hwloc_obj_t c;

    if (a == NULL || b == NULL)
        return FERRY_TOPO_UNKNOWN;
    c = common_ancestor(a, b);
    if (c->type == HWLOC_OBJ_PCI_DEVICE)
        return FERRY_TOPO_PIX;
    if (c->type == HWLOC_OBJ_BRIDGE) {
        if (c->attr->bridge.upstream_type == HWLOC_OBJ_BRIDGE_HOST)
            return FERRY_TOPO_PHB;
        return bridges_between(a, c) <= 1 && bridges_between(b, c) <= 1
                   ? FERRY_TOPO_PIX
                   : FERRY_TOPO_PXB;
    }
    return hwloc_bitmap_weight(c->nodeset) <= 1 ? FERRY_TOPO_NODE
                                                : FERRY_TOPO_SYS;
}

static const char *const class_names[] = {"PIX",  "PXB", "PHB",
                                          "NODE", "SYS", "UNKNOWN"};

/* What a class means, completing "NIC x ..." in the reasons. */
static const char *const class_phrases[] = {
    "behind the same PCIe switch",
    "through several PCIe switches below one host bridge",
    "under the same PCIe host bridge",
    "attached to the same NUMA node",
    "attached to another NUMA node, across sockets",
    "at an unknown distance",
};

static int compute_distances(struct ferry_topo *t)
{
    if (t->ngpus == 0 || t->nnics == 0)
        return 0;
    t->distance = calloc(t->ngpus * t->nnics, sizeof(*t->distance));
    if (t->distance == NULL)
        return out_of_memory();
    for (size_t g = 0; g < t->ngpus; g++)
        for (size_t n = 0; n < t->nnics; n++)
            t->distance[g * t->nnics + n] =
                class_between(t->gpus[g].obj, t->nics[n].obj);
    return 0;
}

static const enum ferry_topo_class *gpu_row(const struct ferry_topo *t,
                                            size_t g)
{
    return &t->distance[g * t->nnics];
}

static enum ferry_topo_class nearest(const enum ferry_topo_class *row,
                                     size_t nnics)
{
    enum ferry_topo_class best = FERRY_TOPO_UNKNOWN;

    for (size_t n = 0; n < nnics; n++)
        if (row[n] < best)
            best = row[n];
    return best;
}

static size_t count_at(const enum ferry_topo_class *row, size_t nnics,
                       enum ferry_topo_class cls)
{
    size_t k = 0;

    for (size_t n = 0; n < nnics; n++)
        k += row[n] == cls;
    return k;
}

/* Whether some NIC at class cls can do RDMA: then only those compete. */
static bool rdma_at(const struct ferry_topo *t,
                    const enum ferry_topo_class *row, enum ferry_topo_class cls)
{
    for (size_t n = 0; n < t->nnics; n++)
        if (row[n] == cls && t->nics[n].rdma)
            return true;
    return false;
}

/* Whether NIC n is a candidate: at class cls, and RDMA-capable if rdma. */
static bool candidate(const struct ferry_topo *t,
                      const enum ferry_topo_class *row, size_t n,
                      enum ferry_topo_class cls, bool rdma)
{
    return row[n] == cls && (!rdma || t->nics[n].rdma);
}

/*
 * The NICs at class cls, the RDMA-capable ones first, each kind in index
 * order from `first` round to first - 1.
 */
static int choose_at(const struct ferry_topo *t,
                     const enum ferry_topo_class *row,
                     enum ferry_topo_class cls, size_t first,
                     struct ferry__topo_choice *c)
{
    size_t nnics = t->nnics;

    c->distance = cls;
    c->nics = malloc(count_at(row, nnics, cls) * sizeof(*c->nics));
    if (c->nics == NULL)
        return out_of_memory();
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < nnics; i++) {
            size_t n = (first + i) % nnics;
            if (row[n] == cls && t->nics[n].rdma == (pass == 0))
                c->nics[c->n++] = n;
        }
    }
    return 0;
}

/* ---- the NIC map -------------------------------------------------------- */

struct map_parser {
    struct ferry_topo *t;
    const char *text;
    const char *origin; /* "FERRY_NIC_MAP" or "config.nic_map" */
    const char *p;
};

static int map_error(const struct map_parser *m, const char *at,
                     const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int map_error(const struct map_parser *m, const char *at,
                     const char *fmt, ...)
{
    char what[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    return ferry__error(FERRY_EINVAL, "%s=\"%s\": at offset %td, %s",
                        m->origin, m->text, at - m->text, what);
}

static void skip_space(struct map_parser *m)
{
    while (isspace((unsigned char)*m->p))
        m->p++;
}

static int parse_gpu_index(struct map_parser *m, size_t *g)
{
    const char *start;
    unsigned long v;
    char *end;

    skip_space(m);
    start = m->p;
    if (!isdigit((unsigned char)*start))
        return map_error(m, start, "expected a GPU index (decimal digits)");
    errno = 0;
    v = strtoul(start, &end, 10);
    if (errno != 0 || v >= m->t->ngpus)
        return map_error(m, start,
                         "GPU %.*s does not exist: there %s %zu GPU%s",
                         (int)(end - start), start,
                         m->t->ngpus == 1 ? "is" : "are", m->t->ngpus,
                         m->t->ngpus == 1 ? "" : "s");
    if (m->t->gpu_choice[v].pinned)
        return map_error(m, start,
                         "GPU %lu appears a second time; give all its NICs "
                         "in one entry",
                         v);
    m->p = end;
    *g = v;
    return 0;
}

/* Whether the token names NIC d: its PCI address or one of its devices. */
static bool names_nic(const struct ferry__topo_dev *d, const char *tok,
                      size_t len)
{
    char buf[64], pci[FERRY_TOPO_PCI_LEN];
    struct pci_addr a;

    if (len >= sizeof(buf))
        return false;
    memcpy(buf, tok, len);
    buf[len] = '\0';
    if (parse_pci(buf, &a)) {
        format_pci(&a, pci);
        return strcmp(pci, d->pci) == 0;
    }
    for (hwloc_obj_t c = d->obj ? d->obj->io_first_child : NULL; c != NULL;
         c = c->next_sibling)
        if (c->type == HWLOC_OBJ_OS_DEVICE && c->name != NULL &&
            strcmp(c->name, buf) == 0)
            return true;
    return false;
}

static int parse_nic(struct map_parser *m, size_t g,
                     struct ferry__topo_choice *c)
{
    const char *start;
    size_t len, n;

    skip_space(m);
    start = m->p;
    len = strcspn(start, ",; \t\n\r\f\v");
    if (len == 0)
        return map_error(m, start,
                         "expected a NIC of GPU %zu: a PCI address or a "
                         "device name such as mlx5_0",
                         g);
    for (n = 0; n < m->t->nnics; n++)
        if (names_nic(&m->t->nics[n], start, len))
            break;
    if (n == m->t->nnics)
        return map_error(m, start,
                         "\"%.*s\" is neither the PCI address nor a device "
                         "name of one of the %zu NICs (ferry_topo lists "
                         "them)",
                         (int)len, start, m->t->nnics);
    for (size_t i = 0; i < c->n; i++)
        if (c->nics[i] == n)
            return map_error(m, start, "NIC %.*s is given twice for GPU %zu",
                             (int)len, start, g);
    c->nics[c->n++] = n;
    m->p = start + len;
    return 0;
}

/* One "gpu:nic,nic" entry, up to the ';' or the end that follows it. */
static int parse_entry(struct map_parser *m)
{
    struct ferry__topo_choice *c;
    size_t g = 0;
    int ret = parse_gpu_index(m, &g);

    if (ret != 0)
        return ret;
    skip_space(m);
    if (*m->p != ':')
        return map_error(m, m->p, "expected ':' after GPU index %zu", g);
    m->p++;
    c = &m->t->gpu_choice[g];
    /* A GPU lists each NIC at most once: nnics slots are enough (+ 1:
     * there may be no NIC, which parse_nic then reports). */
    c->nics = calloc(m->t->nnics + 1, sizeof(*c->nics));
    if (c->nics == NULL)
        return out_of_memory();
    c->pinned = true;
    for (;;) {
        ret = parse_nic(m, g, c);
        if (ret != 0)
            return ret;
        skip_space(m);
        if (*m->p == ';' || *m->p == '\0')
            break;
        if (*m->p != ',')
            return map_error(m, m->p,
                             "expected ',' and another NIC, or ';' and the "
                             "next GPU, not '%c'",
                             *m->p);
        m->p++;
    }
    c->distance = gpu_row(m->t, g)[c->nics[0]];
    return 0;
}

static int parse_nic_map(struct ferry_topo *t, const char *text,
                         const char *origin)
{
    struct map_parser m = {t, text, origin, text};

    skip_space(&m);
    while (*m.p != '\0') {
        int ret = parse_entry(&m);
        if (ret != 0)
            return ret;
        if (*m.p == ';')
            m.p++;
        skip_space(&m); /* so that a ';' may end the map */
    }
    return 0;
}

/* ---- RDMA-capable NICs (see the top of the file) ------------------------ */

/*
 * Whether `name`, from config.rdma_nics, names NIC d: as the NIC map does,
 * or as a libfabric domain named after one of its devices with a suffix
 * (verbs' "mlx5_0-xrc", efa's "rdmap16s27-rdm").
 */
static bool names_rdma_nic(const struct ferry__topo_dev *d, const char *name)
{
    const char *dash = strrchr(name, '-');

    return names_nic(d, name, strlen(name)) ||
           (dash != NULL && names_nic(d, name, (size_t)(dash - name)));
}

static const char *plain_evidence(const struct ferry__topo_dev *d)
{
    if (d->obj == NULL)
        return "no sign of RDMA: not in the topology";
    return d->obj->attr->pcidev.class_id == 0x0200 ? "plain ethernet"
                                                   : "no sign of RDMA";
}

static int classify_nics(struct ferry_topo *t,
                         const struct ferry_topo_config *cfg)
{
    bool told = cfg->rdma_nics != NULL || cfg->nrdma_nics > 0;

    for (size_t i = 0; i < cfg->nrdma_nics; i++)
        if (cfg->rdma_nics == NULL || cfg->rdma_nics[i] == NULL)
            return ferry__error(FERRY_EINVAL,
                                "config.rdma_nics[%zu] is NULL; give a PCI "
                                "address or a device name such as mlx5_0",
                                i);
    for (size_t n = 0; n < t->nnics; n++) {
        struct ferry__topo_dev *d = &t->nics[n];

        if (told) {
            for (size_t i = 0; i < cfg->nrdma_nics && !d->rdma; i++)
                d->rdma = names_rdma_nic(d, cfg->rdma_nics[i]);
            d->rdma_why = d->rdma ? "libfabric reports RDMA"
                                  : "libfabric reports no RDMA";
        } else {
            d->rdma_why = d->obj != NULL ? rdma_evidence(d->obj) : NULL;
            d->rdma = d->rdma_why != NULL;
            if (!d->rdma)
                d->rdma_why = plain_evidence(d);
        }
    }
    return 0;
}

/* ---- choosing NICs for GPUs (see the top of the file) ------------------- */

struct pending {
    size_t gpu;
    size_t ncand;
};

static int fewest_candidates_first(const void *x, const void *y)
{
    const struct pending *a = x, *b = y;

    if (a->ncand != b->ncand)
        return a->ncand < b->ncand ? -1 : 1;
    return a->gpu < b->gpu ? -1 : a->gpu > b->gpu;
}

static size_t count_candidates(const struct ferry_topo *t,
                               const enum ferry_topo_class *row,
                               enum ferry_topo_class cls, bool rdma)
{
    size_t k = 0;

    for (size_t n = 0; n < t->nnics; n++)
        k += candidate(t, row, n, cls, rdma);
    return k;
}

static size_t least_loaded(const struct ferry_topo *t,
                           const enum ferry_topo_class *row,
                           enum ferry_topo_class cls, bool rdma,
                           const unsigned *load)
{
    size_t pick = SIZE_MAX;

    for (size_t n = 0; n < t->nnics; n++)
        if (candidate(t, row, n, cls, rdma) &&
            (pick == SIZE_MAX || load[n] < load[pick]))
            pick = n;
    return pick;
}

static int assign_free_gpus(struct ferry_topo *t, unsigned *load,
                            struct pending *order)
{
    size_t nfree = 0;

    for (size_t g = 0; g < t->ngpus; g++) {
        if (t->gpu_choice[g].pinned)
            continue;
        const enum ferry_topo_class *row = gpu_row(t, g);
        enum ferry_topo_class best = nearest(row, t->nnics);
        order[nfree].gpu = g;
        order[nfree++].ncand =
            count_candidates(t, row, best, rdma_at(t, row, best));
    }
    qsort(order, nfree, sizeof(*order), fewest_candidates_first);
    for (size_t i = 0; i < nfree; i++) {
        size_t g = order[i].gpu;
        const enum ferry_topo_class *row = gpu_row(t, g);
        enum ferry_topo_class best = nearest(row, t->nnics);
        size_t primary =
            least_loaded(t, row, best, rdma_at(t, row, best), load);
        int ret = choose_at(t, row, best, primary, &t->gpu_choice[g]);

        if (ret != 0)
            return ret;
        load[primary]++;
    }
    return 0;
}

static int assign_gpus(struct ferry_topo *t)
{
    unsigned *load;
    struct pending *order;
    int ret;

    load = calloc(t->nnics, sizeof(*load));
    order = calloc(t->ngpus, sizeof(*order));
    if (load == NULL || order == NULL) {
        free(load);
        free(order);
        return out_of_memory();
    }
    for (size_t g = 0; g < t->ngpus; g++)
        if (t->gpu_choice[g].pinned)
            load[t->gpu_choice[g].nics[0]]++;
    ret = assign_free_gpus(t, load, order);
    free(load);
    free(order);
    return ret;
}

/* ---- reasons ------------------------------------------------------------ */

static void put_nic(FILE *f, const struct ferry__topo_dev *nic)
{
    fprintf(f, "%s", nic->pci);
    if (nic->names != NULL)
        fprintf(f, " (%s)", nic->names);
}

/* "behind the same PCIe switch (PIX)"; for UNKNOWN, which end is missing. */
static void put_distance(FILE *f, enum ferry_topo_class cls, bool gpu_missing)
{
    fprintf(f, "%s (%s", class_phrases[cls], class_names[cls]);
    if (cls == FERRY_TOPO_UNKNOWN)
        fprintf(f, ": the %s is not in the topology",
                gpu_missing ? "GPU" : "NIC");
    fputc(')', f);
}

/*
 * A NIC's short name: its RDMA device (mlx5_0), else its first OS device
 * (eth0), else its PCI address.
 */
static void put_label(FILE *f, const struct ferry__topo_dev *nic)
{
    const char *first = NULL;

    for (hwloc_obj_t c = nic->obj ? nic->obj->io_first_child : NULL;
         c != NULL; c = c->next_sibling) {
        if (c->type != HWLOC_OBJ_OS_DEVICE || c->name == NULL)
            continue;
        if (is_rdma_osdev(c)) {
            fprintf(f, "%s", c->name);
            return;
        }
        if (first == NULL)
            first = c->name;
    }
    fprintf(f, "%s", first != NULL ? first : nic->pci);
}

static void put_why(FILE *f, bool rdma, const char *why)
{
    fprintf(f, " (%s%s)", rdma ? "RDMA-capable: " : "", why);
}

/* "mlx5_0 and mlx5_1 (RDMA-capable: OpenFabrics device)": c's NICs of one
 * kind, each run of the same evidence followed by it. */
static void put_kind(FILE *f, const struct ferry_topo *t,
                     const struct ferry__topo_choice *c, bool rdma)
{
    const char *why = NULL;
    size_t count = 0, k = 0;

    for (size_t i = 0; i < c->n; i++)
        count += t->nics[c->nics[i]].rdma == rdma;
    for (size_t i = 0; i < c->n; i++) {
        const struct ferry__topo_dev *d = &t->nics[c->nics[i]];

        if (d->rdma != rdma)
            continue;
        if (why != NULL && strcmp(why, d->rdma_why) != 0)
            put_why(f, rdma, why);
        fprintf(f, "%s", list_sep(k++, count));
        put_label(f, d);
        why = d->rdma_why;
    }
    if (why != NULL)
        put_why(f, rdma, why);
}

/*
 * "; mlx5_0 (RDMA-capable: OpenFabrics device) before eth0 (plain
 * ethernet) at the same distance", when ferry's choice c holds both kinds.
 */
static void put_rdma_first(FILE *f, const struct ferry_topo *t,
                           const struct ferry__topo_choice *c)
{
    if (c->pinned || c->n == 0 || !t->nics[c->nics[0]].rdma ||
        t->nics[c->nics[c->n - 1]].rdma)
        return;
    fprintf(f, "; ");
    put_kind(f, t, c, true);
    fprintf(f, " before ");
    put_kind(f, t, c, false);
    fprintf(f, " at the same distance");
}

/*
 * When distance made a plain NIC ferry's first choice while an RDMA-capable
 * one exists farther away: says so, and names the nearest such NIC.  pin
 * ends the sentence (how to choose that one instead), or is "".
 */
static void put_rdma_farther(FILE *f, const struct ferry_topo *t,
                             const enum ferry_topo_class *row,
                             const struct ferry__topo_choice *c,
                             const char *pin)
{
    const struct ferry__topo_dev *first;
    size_t best = SIZE_MAX;

    if (c->pinned || c->n == 0 || t->nics[c->nics[0]].rdma)
        return;
    for (size_t n = 0; n < t->nnics; n++)
        if (t->nics[n].rdma && (best == SIZE_MAX || row[n] < row[best]))
            best = n;
    if (best == SIZE_MAX)
        return;
    first = &t->nics[c->nics[0]];
    fprintf(f, "; ");
    put_label(f, first);
    fprintf(f,
            " (%s) is nearer than any RDMA-capable NIC, and distance comes "
            "first: the nearest of those is ",
            first->rdma_why);
    put_label(f, &t->nics[best]);
    fprintf(f, " (RDMA-capable: %s; %s)%s", t->nics[best].rdma_why,
            class_names[row[best]], pin);
}

static size_t primary_of(const struct ferry_topo *t, size_t g)
{
    return t->gpu_choice[g].n > 0 ? t->gpu_choice[g].nics[0] : SIZE_MAX;
}

/* ", shared with GPUs 1 and 3": the other GPUs whose primary is nic. */
static void put_sharers(FILE *f, const struct ferry_topo *t, size_t g,
                        size_t nic)
{
    size_t count = 0, i = 0;

    for (size_t h = 0; h < t->ngpus; h++)
        count += h != g && primary_of(t, h) == nic;
    if (count == 0)
        return;
    fprintf(f, ", shared with GPU%s ", count > 1 ? "s" : "");
    for (size_t h = 0; h < t->ngpus; h++)
        if (h != g && primary_of(t, h) == nic)
            fprintf(f, "%s%zu", list_sep(i++, count), h);
}

/* " as second rail" for rails[i], rails[0] being the primary. */
static void put_rail(FILE *f, size_t i)
{
    static const char *const ordinals[] = {
        "primary", "second",  "third",  "fourth", "fifth",
        "sixth",   "seventh", "eighth", "ninth",  "tenth"};

    if (i < FERRY__ARRAY_LEN(ordinals))
        fprintf(f, " as %s rail", ordinals[i]);
    else
        fprintf(f, " as rail %zu", i + 1);
}

/* Nothing to choose from: no NIC was given and the topology has none. */
static void put_no_nic(FILE *f)
{
    fprintf(f,
            "no NIC to use: the topology has none (ferry looks for %s; pass "
            "the NICs' PCI addresses if it misses them)",
            nic_role.rule);
}

static void put_gpu_reason(FILE *f, const struct ferry_topo *t, size_t g,
                           const char *map_origin)
{
    const struct ferry__topo_choice *c = &t->gpu_choice[g];
    const struct ferry__topo_dev *gpu = &t->gpus[g];
    const enum ferry_topo_class *row;

    fprintf(f, "GPU %s: ", gpu->pci);
    if (c->n == 0) {
        put_no_nic(f);
        return;
    }
    row = gpu_row(t, g);
    fprintf(f, "NIC ");
    put_nic(f, &t->nics[c->nics[0]]);
    fputc(' ', f);
    put_distance(f, c->distance, gpu->obj == NULL);
    if (c->pinned)
        fprintf(f, ", as %s says", map_origin);
    put_sharers(f, t, g, c->nics[0]);
    for (size_t i = 1; i < c->n; i++) {
        fprintf(f, "; NIC ");
        put_nic(f, &t->nics[c->nics[i]]);
        put_rail(f, i);
        /* Only a pinned rail can sit at another class than the primary. */
        if (row[c->nics[i]] != c->distance)
            fprintf(f, " (%s)", class_names[row[c->nics[i]]]);
        put_sharers(f, t, g, c->nics[i]);
    }
    put_rdma_first(f, t, c);
    put_rdma_farther(f, t, row, c, ", which the NIC map can pin");
}

static int explain_gpus(struct ferry_topo *t, const char *map_origin)
{
    int ret = 0;

    for (size_t g = 0; g < t->ngpus && ret == 0; g++) {
        struct text txt;

        ret = text_open(&txt);
        if (ret != 0)
            return ret;
        put_gpu_reason(txt.f, t, g, map_origin);
        ret = text_finish(&txt, &t->gpu_choice[g].reason);
    }
    return ret;
}

/* ---- host memory: NICs per NUMA node ------------------------------------ */

static void put_numa_reason(FILE *f, const struct ferry_topo *t, int node,
                            const enum ferry_topo_class *row,
                            const struct ferry__topo_choice *c)
{
    fprintf(f, "NUMA node %d: ", node);
    if (c->n == 0) {
        put_no_nic(f);
        return;
    }
    fprintf(f, "NIC%s ", c->n > 1 ? "s" : "");
    for (size_t i = 0; i < c->n; i++) {
        fprintf(f, "%s", list_sep(i, c->n));
        put_nic(f, &t->nics[c->nics[i]]);
    }
    fputc(' ', f);
    put_distance(f, c->distance, false);
    put_rdma_first(f, t, c);
    put_rdma_farther(f, t, row, c, "");
}

static int choose_for_node(struct ferry_topo *t, hwloc_obj_t node,
                           enum ferry_topo_class *row,
                           struct ferry__topo_choice *c)
{
    struct text txt;
    int ret = 0;

    for (size_t n = 0; n < t->nnics; n++)
        row[n] = class_between(node, t->nics[n].obj);
    if (t->nnics > 0)
        ret = choose_at(t, row, nearest(row, t->nnics), 0, c);
    if (ret == 0)
        ret = text_open(&txt);
    if (ret != 0)
        return ret;
    put_numa_reason(txt.f, t, (int)node->os_index, row, c);
    return text_finish(&txt, &c->reason);
}

static int map_numa_nodes(struct ferry_topo *t)
{
    int count = hwloc_get_nbobjs_by_type(t->hw, HWLOC_OBJ_NUMANODE);
    enum ferry_topo_class *row;
    int ret = 0;

    if (count <= 0)
        return 0;
    t->numa_ids = calloc((size_t)count, sizeof(*t->numa_ids));
    t->numa_choice = calloc((size_t)count, sizeof(*t->numa_choice));
    row = calloc(t->nnics + 1, sizeof(*row)); /* + 1: there may be no NIC */
    if (t->numa_ids == NULL || t->numa_choice == NULL || row == NULL) {
        free(row);
        return out_of_memory();
    }
    t->nnuma = (size_t)count;
    for (unsigned i = 0; i < t->nnuma && ret == 0; i++) {
        hwloc_obj_t node = hwloc_get_obj_by_type(t->hw, HWLOC_OBJ_NUMANODE, i);
        t->numa_ids[i] = (int)node->os_index;
        ret = choose_for_node(t, node, row, &t->numa_choice[i]);
    }
    free(row);
    return ret;
}

/* ---- loading ------------------------------------------------------------ */

static int open_hwloc(struct ferry_topo *t, const char *xml,
                      const char *xml_origin)
{
    hwloc_topology_t hw;

    if (hwloc_topology_init(&hw) != 0)
        return out_of_memory();
    t->hw = hw;
    /* Keep every bridge, PCI function and OS device: classes count the
     * switches, and GPUs and NICs are recognised by their OS devices. */
    hwloc_topology_set_io_types_filter(hw, HWLOC_TYPE_FILTER_KEEP_ALL);
    if (xml != NULL) {
        if (access(xml, R_OK) != 0)
            return ferry__error(
                errno == ENOENT ? FERRY_ENOENT : FERRY_EINVAL,
                "cannot read the topology XML file %s (from %s): %s; save "
                "one with `lstopo --whole-io FILE.xml` on the machine to "
                "study",
                xml, xml_origin, strerror(errno));
        if (hwloc_topology_set_xml(hw, xml) != 0)
            return ferry__error(
                FERRY_EINVAL,
                "the topology XML file %s (from %s) is not an hwloc XML "
                "topology that hwloc can read (%s); save one with "
                "`lstopo --whole-io FILE.xml`",
                xml, xml_origin, strerror(errno));
    }
    if (hwloc_topology_load(hw) != 0)
        return ferry__error(xml ? FERRY_EINVAL : FERRY_ENOTSUP,
                            "hwloc could not load the topology of %s: %s",
                            xml ? xml : "this machine", strerror(errno));
    return 0;
}

/* "3 GPUs given, 2 of them in the topology" or "no GPU found (...)". */
static void put_census(FILE *f, const struct role *role,
                       const struct ferry__topo_dev *devs, size_t n,
                       bool given)
{
    size_t present = 0;

    for (size_t i = 0; i < n; i++)
        present += devs[i].obj != NULL;
    if (given) {
        fprintf(f, "%zu %s%s given, ", n, role->name, n == 1 ? "" : "s");
        if (present == n)
            fprintf(f, "all in the topology");
        else
            fprintf(f, "%zu of them not in the topology", n - present);
    } else if (n == 0) {
        fprintf(f, "no %s found (looked for %s)", role->name, role->rule);
    } else {
        fprintf(f, "%zu %s%s found (%s)", n, role->name, n == 1 ? "" : "s",
                role->rule);
    }
}

static int summarise(struct ferry_topo *t, const struct ferry_topo_config *cfg,
                     const char *xml, const char *xml_origin)
{
    struct text txt;
    int ret = text_open(&txt);

    if (ret != 0)
        return ret;
    if (xml != NULL)
        fprintf(txt.f, "topology from %s (%s); ", xml, xml_origin);
    else
        fprintf(txt.f, "live topology of this machine; ");
    put_census(txt.f, &gpu_role, t->gpus, t->ngpus, cfg->ngpus != 0);
    fprintf(txt.f, "; ");
    put_census(txt.f, &nic_role, t->nics, t->nnics, cfg->nnics != 0);
    return text_finish(&txt, &t->summary);
}

static void free_choices(struct ferry__topo_choice *c, size_t n)
{
    for (size_t i = 0; c != NULL && i < n; i++) {
        free(c[i].nics);
        free(c[i].reason);
    }
    free(c);
}

/* Frees a topology (also a half-built one: ferry_topo_load's failures). */
static void topo_free(ferry_topo_t *t)
{
    free_choices(t->gpu_choice, t->ngpus);
    free_choices(t->numa_choice, t->nnuma);
    free(t->numa_ids);
    free(t->distance);
    free_devs(t->gpus, t->ngpus);
    free_devs(t->nics, t->nnics);
    free(t->summary);
    if (t->hw != NULL)
        hwloc_topology_destroy(t->hw);
    t->magic = FERRY__MAGIC_DEAD;
    free(t);
}

int ferry_topo_close(ferry_topo_t *t)
{
    int ret;

    ferry__error_clear();
    if (t == NULL)
        return 0;
    if ((ret = ferry__check_topo(t, "ferry_topo_close")))
        return ret;
    topo_free(t);
    return 0;
}

static int check_config(const struct ferry_topo_config *user,
                        struct ferry_topo_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->size = sizeof(*cfg);
    if (user == NULL)
        return 0;
    if (user->size == 0 || user->size > sizeof(*cfg))
        return ferry__error(FERRY_EINVAL,
                            "topo config.size is %zu; initialise the config "
                            "with FERRY_TOPO_CONFIG_INIT (this ferry expects "
                            "at most %zu)",
                            user->size, sizeof(*cfg));
    memcpy(cfg, user, user->size);
    return 0;
}

/* Everything after hwloc has loaded: devices, classes, choices, reasons. */
static int build(struct ferry_topo *t, const struct ferry_topo_config *cfg)
{
    const char *map = cfg->nic_map, *map_origin = "config.nic_map";
    int ret;

    if (map == NULL) {
        map = getenv("FERRY_NIC_MAP");
        map_origin = "FERRY_NIC_MAP";
    }
    ret = load_devs(t->hw, &gpu_role, cfg->gpus, cfg->ngpus, &t->gpus,
                    &t->ngpus);
    if (ret == 0)
        ret = load_devs(t->hw, &nic_role, cfg->nics, cfg->nnics, &t->nics,
                        &t->nnics);
    if (ret == 0)
        ret = classify_nics(t, cfg);
    if (ret == 0)
        ret = compute_distances(t);
    if (ret != 0)
        return ret;
    /* + 1: there may be no GPU, and a 0-byte calloc may return NULL. */
    t->gpu_choice = calloc(t->ngpus + 1, sizeof(*t->gpu_choice));
    if (t->gpu_choice == NULL)
        return out_of_memory();
    if (map != NULL)
        ret = parse_nic_map(t, map, map_origin);
    if (ret == 0 && t->ngpus > 0 && t->nnics > 0)
        ret = assign_gpus(t);
    if (ret == 0)
        ret = explain_gpus(t, map_origin);
    if (ret == 0)
        ret = map_numa_nodes(t);
    return ret;
}

int ferry_topo_load(const struct ferry_topo_config *user, ferry_topo_t **out)
{
    struct ferry_topo_config cfg;
    struct ferry_topo *t;
    const char *xml, *xml_origin = "config.xml";
    int ret;

    ferry__error_clear();
    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_topo_load: topo is NULL");
    ret = check_config(user, &cfg);
    if (ret != 0)
        return ret;
    xml = cfg.xml;
    if (xml == NULL) {
        xml = getenv("FERRY_TOPOLOGY_XML");
        xml_origin = "FERRY_TOPOLOGY_XML";
        if (xml != NULL && xml[0] == '\0')
            xml = NULL;
    }
    t = calloc(1, sizeof(*t));
    if (t == NULL)
        return out_of_memory();
    t->magic = FERRY__MAGIC_TOPO;
    ret = open_hwloc(t, xml, xml_origin);
    if (ret == 0)
        ret = build(t, &cfg);
    if (ret == 0)
        ret = summarise(t, &cfg, xml, xml_origin);
    if (ret != 0) {
        topo_free(t);
        return ret;
    }
    FERRY_LOG_INFO("%s", t->summary);
    for (size_t g = 0; g < t->ngpus; g++)
        FERRY_LOG_INFO("%s", t->gpu_choice[g].reason);
    *out = t;
    return 0;
}

/* ---- queries ------------------------------------------------------------ */


static int check_index(size_t i, size_t n, const char *role, const char *what)
{
    if (i < n)
        return 0;
    return ferry__error(FERRY_EINVAL,
                        "%s: %s %zu does not exist: the topology has %zu "
                        "%s%s",
                        what, role, i, n, role, n == 1 ? "" : "s");
}

/*
 * Copies a filled public struct into the caller's, which may be an older,
 * shorter version of it: every such struct starts with its size_t size.
 */
static int copy_sized(void *out, const void *full, size_t full_size,
                      const char *what)
{
    size_t size;

    if (out == NULL)
        return ferry__error(FERRY_EINVAL, "%s is NULL", what);
    memcpy(&size, out, sizeof(size));
    if (size < sizeof(size_t))
        return ferry__error(FERRY_EINVAL,
                            "%s->size is %zu; initialise it with its _INIT "
                            "macro",
                            what, size);
    if (size > full_size)
        size = full_size;
    memcpy((char *)out + sizeof(size_t), (const char *)full + sizeof(size_t),
           size - sizeof(size_t));
    return 0;
}

int ferry_topo_info(const ferry_topo_t *t, struct ferry_topo_info *info)
{
    struct ferry_topo_info full;
    int ret;

    ferry__error_clear();
    ret = ferry__check_topo(t, "ferry_topo_info");
    if (ret != 0)
        return ret;
    full = (struct ferry_topo_info){
        .ngpus = t->ngpus,
        .nnics = t->nnics,
        .numa_nodes = t->numa_ids,
        .nnuma = t->nnuma,
        .summary = t->summary,
    };
    return copy_sized(info, &full, sizeof(full), "ferry_topo_info: info");
}

static int get_dev(const ferry_topo_t *t, const struct ferry__topo_dev *devs,
                   size_t n, size_t i, const char *role, const char *what,
                   struct ferry_topo_device *out)
{
    struct ferry_topo_device full;
    const struct ferry__topo_dev *d;
    int ret;

    ferry__error_clear();
    ret = ferry__check_topo(t, what);
    if (ret == 0)
        ret = check_index(i, n, role, what);
    if (ret != 0)
        return ret;
    d = &devs[i];
    full = (struct ferry_topo_device){
        .pci = d->pci,
        .names = d->names ? d->names : "",
        .in_topology = d->obj != NULL,
        .numa_node = d->numa_node,
        .cpuset = d->cpuset ? d->cpuset : "",
        .cpus = d->cpus ? d->cpus : "",
        .rdma = d->rdma,
        .rdma_why = d->rdma_why ? d->rdma_why : "",
    };
    return copy_sized(out, &full, sizeof(full), "ferry_topo_device: dev");
}

int ferry_topo_gpu(const ferry_topo_t *t, size_t gpu,
                   struct ferry_topo_device *dev)
{
    return get_dev(t, t ? t->gpus : NULL, t ? t->ngpus : 0, gpu, "GPU",
                   "ferry_topo_gpu", dev);
}

int ferry_topo_nic(const ferry_topo_t *t, size_t nic,
                   struct ferry_topo_device *dev)
{
    return get_dev(t, t ? t->nics : NULL, t ? t->nnics : 0, nic, "NIC",
                   "ferry_topo_nic", dev);
}

int ferry_topo_distance(const ferry_topo_t *t, size_t gpu, size_t nic)
{
    int ret;

    ferry__error_clear();
    ret = ferry__check_topo(t, "ferry_topo_distance");
    if (ret == 0)
        ret = check_index(gpu, t->ngpus, "GPU", "ferry_topo_distance");
    if (ret == 0)
        ret = check_index(nic, t->nnics, "NIC", "ferry_topo_distance");
    return ret != 0 ? ret : (int)gpu_row(t, gpu)[nic];
}

const char *ferry_topo_class_name(int distance)
{
    if (distance < 0 || (size_t)distance >= FERRY__ARRAY_LEN(class_names))
        return "?";
    return class_names[distance];
}

static int get_choice(const struct ferry__topo_choice *c,
                      struct ferry_topo_choice *out)
{
    struct ferry_topo_choice full = {
        .nics = c->nics,
        .nnics = c->n,
        .distance = c->n ? (int)c->distance : FERRY_TOPO_UNKNOWN,
        .reason = c->reason,
    };

    return copy_sized(out, &full, sizeof(full), "ferry_topo_choice: choice");
}

int ferry_topo_gpu_nics(const ferry_topo_t *t, size_t gpu,
                        struct ferry_topo_choice *choice)
{
    int ret;

    ferry__error_clear();
    ret = ferry__check_topo(t, "ferry_topo_gpu_nics");
    if (ret == 0)
        ret = check_index(gpu, t->ngpus, "GPU", "ferry_topo_gpu_nics");
    return ret != 0 ? ret : get_choice(&t->gpu_choice[gpu], choice);
}

/* The one NUMA node the calling thread may run on. */
static int current_node(const struct ferry_topo *t, int *node)
{
    hwloc_bitmap_t cpus = hwloc_bitmap_alloc();
    hwloc_bitmap_t nodes = hwloc_bitmap_alloc();
    char *list = NULL;
    int ret = 0;

    if (cpus == NULL || nodes == NULL) {
        ret = out_of_memory();
    } else if (!hwloc_topology_is_thissystem(t->hw)) {
        ret = ferry__error(FERRY_EINVAL,
                           "the topology was read from a file, not from this "
                           "machine, so the calling thread's binding says "
                           "nothing about it; pass a NUMA node id");
    } else if (hwloc_get_cpubind(t->hw, cpus, HWLOC_CPUBIND_THREAD) != 0) {
        ret = ferry__error(FERRY_EINVAL,
                           "hwloc cannot read the calling thread's CPU "
                           "binding (%s); pass a NUMA node id",
                           strerror(errno));
    } else {
        hwloc_cpuset_to_nodeset(t->hw, cpus, nodes);
        if (hwloc_bitmap_weight(nodes) == 1)
            *node = hwloc_bitmap_first(nodes);
        else if (hwloc_bitmap_list_asprintf(&list, nodes) < 0)
            ret = out_of_memory();
        else
            ret = ferry__error(FERRY_EINVAL,
                               "the calling thread may run on NUMA nodes "
                               "%s, not on one; bind it to one node "
                               "(hwloc_set_cpubind, numactl, taskset) or "
                               "pass the node id",
                               list);
    }
    free(list);
    hwloc_bitmap_free(cpus);
    hwloc_bitmap_free(nodes);
    return ret;
}

int ferry_topo_host_nics(const ferry_topo_t *t, int numa_node,
                         struct ferry_topo_choice *choice)
{
    int ret;

    ferry__error_clear();
    ret = ferry__check_topo(t, "ferry_topo_host_nics");
    if (ret == 0 && numa_node == FERRY_TOPO_CURRENT_NODE)
        ret = current_node(t, &numa_node);
    if (ret != 0)
        return ret;
    for (size_t i = 0; i < t->nnuma; i++)
        if (t->numa_ids[i] == numa_node)
            return get_choice(&t->numa_choice[i], choice);
    return ferry__error(FERRY_EINVAL,
                        "ferry_topo_host_nics: NUMA node %d is not in the "
                        "topology, which has %zu NUMA node%s (ferry_topo "
                        "lists them)",
                        numa_node, t->nnuma, t->nnuma == 1 ? "" : "s");
}

/* ---- libfabric domain -> PCI address, through sysfs --------------------- */

/* The last component of path that is a PCI address, canonical, into pci. */
static bool last_pci_component(char *path, char pci[FERRY_TOPO_PCI_LEN])
{
    char *slash;
    struct pci_addr a;

    while ((slash = strrchr(path, '/')) != NULL) {
        if (parse_pci(slash + 1, &a)) {
            format_pci(&a, pci);
            return true;
        }
        *slash = '\0';
    }
    return false;
}

/*
 * The device of /sys/class/<cls>/<name>: 1 and its PCI address, 0 when
 * there is no such entry, or FERRY_ENOTSUP when it is not a PCI device.
 */
static int class_device_pci(const char *sysfs, const char *cls,
                            const char *name, char pci[FERRY_TOPO_PCI_LEN])
{
    char entry[PATH_MAX], link[PATH_MAX + 8], real[PATH_MAX];

    snprintf(entry, sizeof(entry), "%s/class/%s/%s", sysfs, cls, name);
    if (access(entry, F_OK) != 0)
        return 0;
    snprintf(link, sizeof(link), "%s/device", entry);
    /* Virtual interfaces (lo, veth, bridges) have no device link; a virtio
     * NIC's device is virtioN, whose parent is its PCI function. */
    if (realpath(link, real) != NULL && last_pci_component(real, pci))
        return 1;
    return ferry__error(FERRY_ENOTSUP,
                        "%s is not a PCI device: %s/device %s, so it has no "
                        "place in the PCI topology (loopback and virtual "
                        "interfaces have none)",
                        name, entry,
                        access(link, F_OK) == 0 ? "leads to no PCI function"
                                                : "does not exist");
}

static int lookup_name(const char *sysfs, const char *name,
                       char pci[FERRY_TOPO_PCI_LEN])
{
    static const char *const classes[] = {"infiniband", "net"};

    for (size_t i = 0; i < FERRY__ARRAY_LEN(classes); i++) {
        int ret = class_device_pci(sysfs, classes[i], name, pci);
        if (ret != 0)
            return ret;
    }
    return 0;
}

int ferry__topo_domain_pci_at(const char *sysfs, const char *domain,
                              char *pci, size_t len)
{
    char found[FERRY_TOPO_PCI_LEN], base[FERRY__NAME_MAX];
    const char *dash;
    int ret;

    ferry__error_clear();
    if (domain == NULL || domain[0] == '\0' || strchr(domain, '/') != NULL ||
        strcmp(domain, ".") == 0 || strcmp(domain, "..") == 0)
        return ferry__error(FERRY_EINVAL,
                            "ferry_topo_domain_pci: domain \"%s\" is not a "
                            "device name such as mlx5_0 or eth0",
                            domain ? domain : "(null)");
    if (pci == NULL || len < FERRY_TOPO_PCI_LEN)
        return ferry__error(FERRY_ENOSPC,
                            "ferry_topo_domain_pci: the buffer holds %zu "
                            "bytes; give FERRY_TOPO_PCI_LEN (%d)",
                            pci ? len : 0, FERRY_TOPO_PCI_LEN);
    ret = lookup_name(sysfs, domain, found);
    /* libfabric names some domains after the device plus a suffix: efa's
     * "rdmap16s27-rdm" and "-dgrm", verbs' "mlx5_0-xrc" and "-dgram". */
    dash = strrchr(domain, '-');
    if (ret == 0 && dash != NULL && (size_t)(dash - domain) < sizeof(base)) {
        snprintf(base, sizeof(base), "%.*s", (int)(dash - domain), domain);
        ret = lookup_name(sysfs, base, found);
    }
    if (ret < 0)
        return ret;
    if (ret == 0)
        return ferry__error(FERRY_ENOENT,
                            "no network or InfiniBand device is named %s "
                            "(looked in %s/class/infiniband and "
                            "%s/class/net)",
                            domain, sysfs, sysfs);
    memcpy(pci, found, sizeof(found));
    return 0;
}

int ferry_topo_domain_pci(const char *domain, char *pci, size_t len)
{
    return ferry__topo_domain_pci_at("/sys", domain, pci, len);
}
