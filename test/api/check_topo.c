/*
 * topo module through the API: distance classes and NIC choices on
 * hwloc's saved topologies (test/fixtures/topology) and on synthetic ones
 * this file writes, the NIC map and its errors, XML errors, and a domain
 * name that is no PCI device.  (The live machine and the sysfs lookup of
 * domain names in a fake sysfs: test/unit/check_topo.c.)
 */
#include "testutil.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PIX FERRY_TOPO_PIX
#define PXB FERRY_TOPO_PXB
#define PHB FERRY_TOPO_PHB
#define NODE FERRY_TOPO_NODE
#define SYS FERRY_TOPO_SYS
#define UNKNOWN FERRY_TOPO_UNKNOWN

/* An address no topology here has. */
#define ABSENT "0000:fe:1f.7"

/* ---- helpers ------------------------------------------------------------ */

static char *fixture(const char *name)
{
    const char *dir = getenv("FERRY_TEST_TOPOLOGY_DIR");
    static char path[PATH_MAX];

    ck_assert_msg(dir != NULL, "FERRY_TEST_TOPOLOGY_DIR is not set: run the "
                               "suite with make check");
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return path;
}

static ferry_topo_t *load(const char *xml, const char *const *gpus,
                          size_t ngpus, const char *const *nics, size_t nnics,
                          const char *map)
{
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    ferry_topo_t *topo = NULL;
    int ret;

    cfg.xml = xml;
    cfg.gpus = gpus;
    cfg.ngpus = ngpus;
    cfg.nics = nics;
    cfg.nnics = nnics;
    cfg.nic_map = map ? map : "";
    ret = ferry_topo_load(&cfg, &topo);
    ck_assert_msg(ret == 0, "loading %s: %s", xml, ferry_last_error());
    return topo;
}

/* Loading must fail with err and a sentence containing `words`. */
static void load_fails(const struct ferry_topo_config *cfg, int err,
                       const char *words)
{
    ferry_topo_t *topo = NULL;
    int ret = ferry_topo_load(cfg, &topo);

    ck_assert_msg(ret == err, "expected %s, got %d (%s)", ferry_strerror(err),
                  ret, ferry_last_error());
    ck_assert_ptr_null(topo);
    ck_assert_msg(strstr(ferry_last_error(), words) != NULL,
                  "\"%s\" not in \"%s\"", words, ferry_last_error());
}

static struct ferry_topo_info info_of(const ferry_topo_t *topo)
{
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;

    ck_assert_int_eq(ferry_topo_info(topo, &info), 0);
    return info;
}

static struct ferry_topo_choice gpu_nics(const ferry_topo_t *topo, size_t g)
{
    struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
    int ret = ferry_topo_gpu_nics(topo, g, &c);

    ck_assert_msg(ret == 0, "GPU %zu: %s", g, ferry_last_error());
    ck_assert_ptr_nonnull(c.reason);
    return c;
}

static struct ferry_topo_device nic_dev(const ferry_topo_t *topo, size_t n)
{
    struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;

    ck_assert_int_eq(ferry_topo_nic(topo, n, &d), 0);
    return d;
}

static struct ferry_topo_device gpu_dev(const ferry_topo_t *topo, size_t g)
{
    struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;

    ck_assert_int_eq(ferry_topo_gpu(topo, g, &d), 0);
    return d;
}

static void expect_class(const ferry_topo_t *topo, size_t g, size_t n,
                         int cls)
{
    int got = ferry_topo_distance(topo, g, n);

    ck_assert_msg(got == cls, "GPU %zu - NIC %zu: %s, expected %s", g, n,
                  ferry_topo_class_name(got), ferry_topo_class_name(cls));
}

/* GPU g's NICs are exactly want[0..n), in that order. */
static void expect_nics(const ferry_topo_t *topo, size_t g,
                        const size_t *want, size_t n)
{
    struct ferry_topo_choice c = gpu_nics(topo, g);

    ck_assert_msg(c.nnics == n, "GPU %zu has %zu NICs, expected %zu: %s", g,
                  c.nnics, n, c.reason);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(c.nics[i] == want[i],
                      "GPU %zu rail %zu is NIC %zu, expected NIC %zu: %s", g,
                      i, c.nics[i], want[i], c.reason);
}

#define EXPECT_NICS(topo, g, ...)                                             \
    do {                                                                      \
        const size_t want_[] = {__VA_ARGS__};                                 \
        expect_nics(topo, g, want_, sizeof(want_) / sizeof(want_[0]));        \
    } while (0)

static void expect_reason(const ferry_topo_t *topo, size_t g,
                          const char *words)
{
    struct ferry_topo_choice c = gpu_nics(topo, g);

    ck_assert_msg(strstr(c.reason, words) != NULL,
                  "GPU %zu: \"%s\" not in \"%s\"", g, words, c.reason);
}

/*
 * Every NIC is the primary of a fair share of the GPUs: the most and the
 * least loaded NICs differ by at most one GPU.
 */
static void expect_balanced(const ferry_topo_t *topo)
{
    struct ferry_topo_info info = info_of(topo);
    size_t load[64] = {0}, lo = SIZE_MAX, hi = 0;

    ck_assert_uint_le(info.nnics, 64);
    for (size_t g = 0; g < info.ngpus; g++) {
        struct ferry_topo_choice c = gpu_nics(topo, g);
        ck_assert_uint_ge(c.nnics, 1);
        load[c.nics[0]]++;
    }
    for (size_t n = 0; n < info.nnics; n++) {
        lo = load[n] < lo ? load[n] : lo;
        hi = load[n] > hi ? load[n] : hi;
    }
    ck_assert_msg(hi - lo <= 1, "primary loads range from %zu to %zu GPUs",
                  lo, hi);
}

/* ---- synthetic topologies --------------------------------------------------
 *
 * A spec describes a machine in one letter per object, children in [...]:
 *   P  a package (socket) with its own NUMA node and 4 PUs; holds H
 *   H  a PCIe host bridge; holds S and functions
 *   S  a PCI-to-PCI bridge (a root port, or a switch port); the same
 *   G  an NVIDIA GPU function (10de, class 0302)
 *   C  an Intel display function (8086, class 0380) with OpenCL device
 *   V  a BMC's VGA function (ASPEED 1a03, class 0300), not a GPU
 *   X  an NVMe drive (144d, class 0108)
 * and NICs, NIC k (counted from 0 in spec order) with devices named by k:
 *   N  a ConnectX (15b3, InfiniBand class 0207) with OS device mlx5_<k>
 *   E  an Intel I350 (8086:1521, ethernet 0200) with eth<k>: plain
 *   R  a ConnectX-5 in ethernet mode (15b3:1017) with only ens<k>
 *   W  a Broadcom BCM57414 (14e4:16d7, not in ferry's table) with eth<k>
 *      and the OpenFabrics device bnxt_re<k>
 *   U  a Cisco VIC (1137:0043) with eth<k> and usnic_<k>: plain
 *   F  an Amazon EFA (1d0f:efa1) with no OS device
 *   A  an Amazon ENA (1d0f:ec20) with eth<k>: plain
 *   B  a Broadcom BCM57508 (14e4:1750) with eth<k>
 *   T  a Broadcom BCM5720 (14e4:165f, tg3) with eth<k>: plain
 *   I  an Intel E810 (8086:1592) with eth<k>
 *   Y  an HPE Slingshot Cassini 2 (1590:0371) with hsn<k>
 *   O  an Omni-Path HFI (8086:24f0, fabric class 0208), no OS device
 *   K  a serial-bus InfiniBand HCA (15b3:6746, class 0c06), no OS device
 *   Q  an "other network" function (1af4:1041, class 0280) with eth<k>
 * Bus numbers follow the nesting, as firmware assigns them, so the
 * functions come out in PCI address order.
 */
struct synth {
    char dir[PATH_MAX];
    char path[PATH_MAX + 16];
    unsigned next_bus, nsockets, ngpus, nnics;
    char gpus[64][FERRY_TOPO_PCI_LEN];
    char nics[64][FERRY_TOPO_PCI_LEN];
    const char *gpu_list[64];
    const char *nic_list[64];
};

/* OS device types in hwloc XML: network, OpenFabrics, co-processor. */
#define NET 2
#define OFED 3
#define COPROC 5

static const struct {
    char kind;
    const char *type;
    bool nic;
    const char *dev[2]; /* its OS devices: names, then k but for COPROC */
    int dev_type[2];
} kinds[] = {
    {'G', "0302 [10de:20b0] [10de:1450] a1", false, {NULL, NULL}, {0, 0}},
    {'C', "0380 [8086:0bd5] [8086:0000] 2f", false, {"opencl0d0", NULL},
     {COPROC, 0}},
    {'V', "0300 [1a03:2000] [1a03:2000] 41", false, {NULL, NULL}, {0, 0}},
    {'X', "0108 [144d:a80a] [144d:a801] 00", false, {NULL, NULL}, {0, 0}},
    {'N', "0207 [15b3:101b] [15b3:0007] 00", true, {"mlx5_", NULL},
     {OFED, 0}},
    {'E', "0200 [8086:1521] [8086:0001] 01", true, {"eth", NULL},
     {NET, 0}},
    {'R', "0200 [15b3:1017] [15b3:0007] 00", true, {"ens", NULL},
     {NET, 0}},
    {'W', "0200 [14e4:16d7] [14e4:1402] 01", true, {"eth", "bnxt_re"},
     {NET, OFED}},
    {'U', "0200 [1137:0043] [1137:0085] a2", true, {"eth", "usnic_"},
     {NET, OFED}},
    {'F', "0200 [1d0f:efa1] [1d0f:0000] 00", true, {NULL, NULL}, {0, 0}},
    {'A', "0200 [1d0f:ec20] [1d0f:0000] 00", true, {"eth", NULL},
     {NET, 0}},
    {'B', "0200 [14e4:1750] [14e4:d751] 11", true, {"eth", NULL},
     {NET, 0}},
    {'T', "0200 [14e4:165f] [1028:1f5b] 00", true, {"eth", NULL},
     {NET, 0}},
    {'I', "0200 [8086:1592] [8086:0002] 02", true, {"eth", NULL},
     {NET, 0}},
    {'Y', "0200 [1590:0371] [1590:0001] 02", true, {"hsn", NULL},
     {NET, 0}},
    {'O', "0208 [8086:24f0] [8086:2628] 11", true, {NULL, NULL}, {0, 0}},
    {'K', "0c06 [15b3:6746] [103c:1781] b0", true, {NULL, NULL}, {0, 0}},
    {'Q', "0280 [1af4:1041] [1af4:1100] 01", true, {"eth", NULL},
     {NET, 0}},
};

static void put_function(struct synth *s, FILE *f, char kind, unsigned bus,
                         unsigned dev)
{
    char pci[FERRY_TOPO_PCI_LEN], name[32];
    size_t i = 0;

    while (kinds[i].kind != kind) {
        i++;
        ck_assert_msg(i < TU_ARRAY_LEN(kinds), "spec: no kind '%c'", kind);
    }
    snprintf(pci, sizeof(pci), "0000:%02x:%02x.0", bus, dev);
    fprintf(f,
            "<object type=\"PCIDev\" pci_busid=\"%s\" pci_type=\"%s\">\n",
            pci, kinds[i].type);
    for (size_t d = 0; d < 2 && kinds[i].dev[d] != NULL; d++) {
        bool coproc = kinds[i].dev_type[d] == COPROC;

        snprintf(name, sizeof(name), "%s", kinds[i].dev[d]);
        if (!coproc)
            snprintf(name + strlen(name), sizeof(name) - strlen(name), "%u",
                     s->nnics);
        fprintf(f,
                "<object type=\"OSDev\" name=\"%s\" osdev_type=\"%d\"%s/>\n",
                name, kinds[i].dev_type[d],
                coproc ? " subtype=\"OpenCL\"" : "");
    }
    if (kind == 'G')
        memcpy(s->gpus[s->ngpus++], pci, sizeof(pci));
    if (kinds[i].nic)
        memcpy(s->nics[s->nnics++], pci, sizeof(pci));
    fprintf(f, "</object>\n");
}

/*
 * Writes the children of a bridge on bus `bus`, up to the ']' that closes
 * them; returns the highest bus number below it (its subordinate bus).
 */
static unsigned put_bus(struct synth *s, const char **spec, FILE *f,
                        unsigned bus, unsigned depth)
{
    unsigned dev = 0, last = bus;

    for (char c = *(*spec)++; c != ']'; c = *(*spec)++) {
        ck_assert_msg(c != '\0', "spec: missing ']'");
        if (c == ' ')
            continue;
        if (c != 'S') {
            put_function(s, f, c, bus, dev++);
            continue;
        }
        unsigned sec = s->next_bus++, sub;
        char *kids = NULL;
        size_t len;
        FILE *k = open_memstream(&kids, &len);

        ck_assert_int_eq(*(*spec)++, '[');
        sub = put_bus(s, spec, k, sec, depth + 1);
        fclose(k);
        fprintf(f,
                "<object type=\"Bridge\" bridge_type=\"1-1\" depth=\"%u\" "
                "bridge_pci=\"0000:[%02x-%02x]\" "
                "pci_busid=\"0000:%02x:%02x.0\" "
                "pci_type=\"0604 [10b5:c010] [0000:0000] 00\">\n%s</object>\n",
                depth, sec, sub, bus, dev++, kids);
        free(kids);
        last = sub > last ? sub : last;
    }
    return last;
}

static void put_package(struct synth *s, const char **spec, FILE *f)
{
    unsigned p = s->nsockets++;
    unsigned cpus = 0xfu << (4 * p), node = 1u << p;

    fprintf(f,
            "<object type=\"Package\" os_index=\"%u\" cpuset=\"0x%08x\" "
            "complete_cpuset=\"0x%08x\" nodeset=\"0x%08x\" "
            "complete_nodeset=\"0x%08x\">\n"
            "<object type=\"NUMANode\" os_index=\"%u\" cpuset=\"0x%08x\" "
            "complete_cpuset=\"0x%08x\" nodeset=\"0x%08x\" "
            "complete_nodeset=\"0x%08x\" local_memory=\"68719476736\"/>\n",
            p, cpus, cpus, node, node, p, cpus, cpus, node, node);
    for (unsigned pu = 4 * p; pu < 4 * p + 4; pu++)
        fprintf(f,
                "<object type=\"PU\" os_index=\"%u\" cpuset=\"0x%08x\" "
                "complete_cpuset=\"0x%08x\" nodeset=\"0x%08x\" "
                "complete_nodeset=\"0x%08x\"/>\n",
                pu, 1u << pu, 1u << pu, node, node);
    ck_assert_int_eq(*(*spec)++, '[');
    for (char c = *(*spec)++; c != ']'; c = *(*spec)++) {
        unsigned bus = s->next_bus++, sub;
        char *kids = NULL;
        size_t len;
        FILE *k;

        if (c == ' ')
            continue;
        ck_assert_msg(c == 'H', "spec: a package holds host bridges (H)");
        ck_assert_int_eq(*(*spec)++, '[');
        k = open_memstream(&kids, &len);
        sub = put_bus(s, spec, k, bus, 1);
        fclose(k);
        fprintf(f,
                "<object type=\"Bridge\" bridge_type=\"0-1\" depth=\"0\" "
                "bridge_pci=\"0000:[%02x-%02x]\">\n%s</object>\n",
                bus, sub, kids);
        free(kids);
    }
    fprintf(f, "</object>\n");
}

/* Writes the machine of `spec` as an hwloc v2 XML file in a fresh directory. */
static void synth_write(struct synth *s, const char *spec)
{
    char *body = NULL;
    size_t len;
    FILE *f;
    unsigned cpus, nodes;

    memset(s, 0, sizeof(*s));
    tu_tmp_dir(s->dir, sizeof(s->dir), "ferry-topo");
    snprintf(s->path, sizeof(s->path), "%s/machine.xml", s->dir);
    f = open_memstream(&body, &len);
    for (char c = *spec++; c != '\0'; c = *spec++) {
        if (c == ' ')
            continue;
        ck_assert_msg(c == 'P', "spec: the machine holds packages (P)");
        put_package(s, &spec, f);
    }
    fclose(f);
    cpus = (1u << (4 * s->nsockets)) - 1;
    nodes = (1u << s->nsockets) - 1;
    f = fopen(s->path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
            "<topology version=\"2.0\">\n"
            "<object type=\"Machine\" os_index=\"0\" cpuset=\"0x%08x\" "
            "complete_cpuset=\"0x%08x\" allowed_cpuset=\"0x%08x\" "
            "nodeset=\"0x%08x\" complete_nodeset=\"0x%08x\" "
            "allowed_nodeset=\"0x%08x\">\n%s</object>\n</topology>\n",
            cpus, cpus, cpus, nodes, nodes, nodes, body);
    ck_assert_int_eq(fclose(f), 0);
    free(body);
    for (unsigned i = 0; i < s->ngpus; i++)
        s->gpu_list[i] = s->gpus[i];
    for (unsigned i = 0; i < s->nnics; i++)
        s->nic_list[i] = s->nics[i];
}

static void synth_remove(struct synth *s)
{
    tu_remove_tree(s->dir);
}

/* The topology of spec with the GPUs and NICs it holds, given explicitly. */
static ferry_topo_t *synth_load(struct synth *s, const char *spec,
                                const char *map)
{
    synth_write(s, spec);
    return load(s->path, s->gpu_list, s->ngpus, s->nic_list, s->nnics, map);
}

/* A host bridge with a root port holding x. */
#define ROOT(x) "H[S[" x "]]"
/* A switch whose downstream ports hold a GPU and a NIC. */
#define PAIR "S[S[G]S[N]]"
/* A switch whose two downstream ports lead to PAIR switches. */
#define TWO_PAIRS "S[S[" PAIR "]S[" PAIR "]]"
/* 8 GPUs and 8 NICs in pairs, behind 4 switches, on 2 sockets (a DGX
 * A100's layout): GPU i and NIC i share a switch. */
#define PAIRS_MACHINE                                                         \
    "P[" ROOT(TWO_PAIRS) ROOT(TWO_PAIRS) "] P[" ROOT(TWO_PAIRS)               \
        ROOT(TWO_PAIRS) "]"

/* ---- fixtures: hwloc's saved topologies --------------------------------- */

START_TEST(test_fixture_discovery_and_classes)
{
    /* 32em64t: package 0 holds GPU 03:00.0; package 1 holds the Ethernet
     * pair 81:00.x on one root port, GPU 83:00.0 on another, and on a
     * third GPU 84:00.0 (cuda0), an AMD function 84:00.1 (opencl0d1) and
     * the InfiniBand NIC 04:00.0 (ib0, mlx5_0). */
    ferry_topo_t *topo = load(fixture("32em64t-2n8c2t-pci-normalio.xml"),
                              NULL, 0, NULL, 0, NULL);
    struct ferry_topo_info info = info_of(topo);
    const char *gpus[] = {"0000:03:00.0", "0000:83:00.0", "0000:84:00.0",
                          "0000:84:00.1"};
    const char *nics[] = {"0000:04:00.0", "0000:81:00.0", "0000:81:00.1"};

    /* The Matrox BMC VGA (102b) is no GPU; the SAS controller that shares
     * 0000:04:00.0 with the NIC is no NIC. */
    ck_assert_uint_eq(info.ngpus, 4);
    ck_assert_uint_eq(info.nnics, 3);
    for (size_t g = 0; g < 4; g++)
        ck_assert_str_eq(gpu_dev(topo, g).pci, gpus[g]);
    for (size_t n = 0; n < 3; n++)
        ck_assert_str_eq(nic_dev(topo, n).pci, nics[n]);
    ck_assert_str_eq(nic_dev(topo, 0).names, "ib0, mlx5_0");
    ck_assert_str_eq(gpu_dev(topo, 2).names, "cuda0, card0");
    ck_assert_ptr_nonnull(strstr(info.summary, "4 GPUs found"));
    ck_assert_ptr_nonnull(strstr(info.summary, "3 NICs found"));

    for (size_t n = 0; n < 3; n++)
        expect_class(topo, 0, n, SYS);
    for (size_t n = 0; n < 3; n++)
        expect_class(topo, 1, n, PHB);
    expect_class(topo, 2, 0, PIX);
    expect_class(topo, 2, 1, PHB);
    expect_class(topo, 3, 0, PIX);

    /* The InfiniBand NIC is RDMA-capable (its OpenFabrics device says
     * so), the Ethernet pair (Intel I350) is not. */
    ck_assert_int_eq(nic_dev(topo, 0).rdma, 1);
    ck_assert_str_eq(nic_dev(topo, 0).rdma_why, "OpenFabrics device");
    ck_assert_int_eq(nic_dev(topo, 1).rdma, 0);
    ck_assert_str_eq(nic_dev(topo, 1).rdma_why, "plain ethernet");
    ck_assert_int_eq(gpu_dev(topo, 0).rdma, 0);
    ck_assert_str_eq(gpu_dev(topo, 0).rdma_why, "");

    /* The two GPUs with one PIX NIC have it.  The others see all three
     * NICs at one distance: the RDMA-capable one first, though it is
     * loaded, then the Ethernet pair as further rails. */
    EXPECT_NICS(topo, 2, 0);
    EXPECT_NICS(topo, 3, 0);
    EXPECT_NICS(topo, 0, 0, 1, 2);
    EXPECT_NICS(topo, 1, 0, 1, 2);
    expect_reason(topo, 2, "GPU 0000:84:00.0: NIC 0000:04:00.0 (ib0, mlx5_0) "
                           "behind the same PCIe switch (PIX), shared with "
                           "GPUs 0, 1 and 3");
    expect_reason(topo, 1, "GPU 0000:83:00.0: NIC 0000:04:00.0 (ib0, mlx5_0) "
                           "under the same PCIe host bridge (PHB)");
    expect_reason(topo, 1, "; mlx5_0 (RDMA-capable: OpenFabrics device) "
                           "before eth0 and eth1 (plain ethernet) at the "
                           "same distance");
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_fixture_cpus_and_numa)
{
    /* 24em64t: two sockets, PUs interleaved (even ones on package 0). */
    const char *gpus[] = {"0000:06:00.0", "0000:14:00.0", "0000:11:00.0"};
    const char *nics[] = {"0000:05:00.0", "0000:04:00.0"};
    ferry_topo_t *topo = load(fixture("24em64t-2n6c2t-pci.xml"), gpus, 3,
                              nics, 2, NULL);
    struct ferry_topo_device ib = nic_dev(topo, 0), gpu = gpu_dev(topo, 1);

    ck_assert_str_eq(ib.names, "eth2, ib0, mlx4_0");
    ck_assert_str_eq(ib.cpuset, "0x00555555");
    ck_assert_str_eq(ib.cpus, "0,2,4,6,8,10,12,14,16,18,20,22");
    ck_assert_int_eq(ib.numa_node, 0);
    ck_assert_int_eq(ib.in_topology, 1);
    ck_assert_str_eq(gpu.cpuset, "0x00aaaaaa");
    ck_assert_int_eq(gpu.numa_node, 1);
    expect_class(topo, 0, 0, PHB);
    expect_class(topo, 0, 1, PHB);
    expect_class(topo, 1, 0, SYS);
    expect_class(topo, 2, 1, SYS);
    /* Both NICs are on socket 0, at one distance from each GPU: every GPU
     * takes the InfiniBand one (mlx4_0) first, not eth0. */
    EXPECT_NICS(topo, 0, 0, 1);
    EXPECT_NICS(topo, 1, 0, 1);
    EXPECT_NICS(topo, 2, 0, 1);
    expect_reason(topo, 1, "GPU 0000:14:00.0: NIC 0000:05:00.0 (eth2, ib0, "
                           "mlx4_0) attached to another NUMA node, across "
                           "sockets (SYS), shared with GPUs 0 and 2; NIC "
                           "0000:04:00.0 (eth0) as second rail; mlx4_0 "
                           "(RDMA-capable: OpenFabrics device) before eth0 "
                           "(plain ethernet) at the same distance");
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_fixture_two_gpus_one_switch)
{
    /* 16intel64: a Cisco VIC switch (upstream 09:00.0) with a NIC and its
     * virtual functions on two downstream ports.  The VFs stand in for
     * GPUs: two "GPUs" behind one switch with two NICs get one primary
     * each and the other as second rail. */
    const char *gpus[] = {"0000:0b:00.1", "0000:0c:00.1"};
    const char *nics[] = {"0000:0b:00.0", "0000:0c:00.0", "0000:02:00.0",
                          "0000:88:00.0"};
    ferry_topo_t *topo = load(fixture("16intel64-manyVFs.xml"), gpus, 2, nics,
                              4, NULL);
    struct ferry_topo_choice c = gpu_nics(topo, 0);

    expect_class(topo, 0, 0, PIX);
    expect_class(topo, 0, 1, PIX);
    expect_class(topo, 0, 2, PHB);
    expect_class(topo, 0, 3, SYS);
    EXPECT_NICS(topo, 0, 0, 1);
    EXPECT_NICS(topo, 1, 1, 0);
    ck_assert_int_eq(c.distance, PIX);
    ck_assert_str_eq(c.reason,
                     "GPU 0000:0b:00.1: NIC 0000:0b:00.0 (eth4, usnic_0) "
                     "behind the same PCIe switch (PIX); NIC 0000:0c:00.0 "
                     "(eth5, usnic_1) as second rail, shared with GPU 1");
    expect_balanced(topo);
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_fixture_no_gpu)
{
    /* 16intel64 has no GPU: the NICs with a driver are still found. */
    ferry_topo_t *topo = load(fixture("16intel64-manyVFs.xml"), NULL, 0,
                              NULL, 0, NULL);
    struct ferry_topo_info info = info_of(topo);
    struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;

    ck_assert_uint_eq(info.ngpus, 0);
    /* eth0, eth1, eth4, eth5, eth6, eth7: not the 12 idle VFs. */
    ck_assert_uint_eq(info.nnics, 6);
    ck_assert_ptr_nonnull(strstr(info.summary, "no GPU found (looked for "));
    ck_assert_int_eq(ferry_topo_gpu_nics(topo, 0, &c), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "GPU 0 does not exist"));
    ck_assert_int_eq(ferry_topo_distance(topo, 0, 0), FERRY_EINVAL);
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_fixture_duplicate_address)
{
    /* 32em64t lists 0000:04:00.0 twice: a SAS controller on package 0 and
     * the InfiniBand NIC on package 1.  As a NIC it is the NIC; as a GPU
     * it is neither, and refused. */
    const char *nic[] = {"0000:04:00.0"};
    const char *gpu[] = {"0000:84:00.0"};
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    ferry_topo_t *topo =
        load(fixture("32em64t-2n8c2t-pci-normalio.xml"), gpu, 1, nic, 1, NULL);

    ck_assert_str_eq(nic_dev(topo, 0).names, "ib0, mlx5_0");
    expect_class(topo, 0, 0, PIX);
    ferry_topo_close(topo);

    cfg.xml = fixture("32em64t-2n8c2t-pci-normalio.xml");
    cfg.gpus = nic;
    cfg.ngpus = 1;
    load_fails(&cfg, FERRY_EINVAL,
               "config.gpus[0] 0000:04:00.0: the topology has 2 PCI "
               "functions at that address and 0 of them look like a GPU");
}
END_TEST

START_TEST(test_fixture_host_memory)
{
    ferry_topo_t *topo = load(fixture("32em64t-2n8c2t-pci-normalio.xml"),
                              NULL, 0, NULL, 0, NULL);
    struct ferry_topo_info info = info_of(topo);
    struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;

    ck_assert_uint_eq(info.nnuma, 2);
    ck_assert_int_eq(info.numa_nodes[0], 0);
    ck_assert_int_eq(info.numa_nodes[1], 1);
    /* Every NIC hangs below package 1. */
    ck_assert_int_eq(ferry_topo_host_nics(topo, 1, &c), 0);
    ck_assert_uint_eq(c.nnics, 3);
    ck_assert_int_eq(c.distance, NODE);
    ck_assert_int_eq(ferry_topo_host_nics(topo, 0, &c), 0);
    ck_assert_uint_eq(c.nnics, 3);
    ck_assert_int_eq(c.distance, SYS);
    ck_assert_str_eq(c.reason,
                     "NUMA node 0: NICs 0000:04:00.0 (ib0, mlx5_0), "
                     "0000:81:00.0 (eth0) and 0000:81:00.1 (eth1) attached "
                     "to another NUMA node, across sockets (SYS); mlx5_0 "
                     "(RDMA-capable: OpenFabrics device) before eth0 and "
                     "eth1 (plain ethernet) at the same distance");
    ck_assert_int_eq(ferry_topo_host_nics(topo, 7, &c), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "NUMA node 7 is not"));
    /* The calling thread runs on this machine, not on that one. */
    ck_assert_int_eq(ferry_topo_host_nics(topo, FERRY_TOPO_CURRENT_NODE, &c),
                     FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "read from a file"));
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_env_names_the_xml)
{
    ferry_topo_t *topo = NULL;
    struct ferry_topo_info info;

    ck_assert_int_eq(
        setenv("FERRY_TOPOLOGY_XML", fixture("24em64t-2n6c2t-pci.xml"), 1), 0);
    ck_assert_int_eq(ferry_topo_load(NULL, &topo), 0);
    info = info_of(topo);
    ck_assert_ptr_nonnull(strstr(info.summary, "(FERRY_TOPOLOGY_XML)"));
    ck_assert_uint_eq(info.nnics, 3);
    ferry_topo_close(topo);
    unsetenv("FERRY_TOPOLOGY_XML");
}
END_TEST

/* ---- synthetic machines ------------------------------------------------- */

START_TEST(test_synth_pairs)
{
    struct synth s;
    ferry_topo_t *topo = synth_load(&s, PAIRS_MACHINE, NULL);

    ck_assert_uint_eq(s.ngpus, 8);
    ck_assert_uint_eq(s.nnics, 8);
    for (size_t g = 0; g < 8; g++) {
        /* Its pair, the other pair of its switch, the other switch of its
         * socket, then the other socket. */
        size_t mate = g ^ 1, near_switch = (g ^ 2) & ~1u, far = (g + 4) % 8;
        expect_class(topo, g, g, PIX);
        expect_class(topo, g, mate, PXB);
        expect_class(topo, g, near_switch, NODE);
        expect_class(topo, g, far, SYS);
        EXPECT_NICS(topo, g, g);
        ck_assert_str_eq(nic_dev(topo, g).cpus, g < 4 ? "0-3" : "4-7");
    }
    expect_reason(topo, 5, "NIC 0000:");
    expect_reason(topo, 5, "(mlx5_5) behind the same PCIe switch (PIX)");
    expect_balanced(topo);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_gpu_subset)
{
    /* Only some of the GPUs: each still gets its own pair NIC. */
    struct synth s;
    const char *some[2];
    ferry_topo_t *topo;

    synth_write(&s, PAIRS_MACHINE);
    some[0] = s.gpus[1];
    some[1] = s.gpus[6];
    topo = load(s.path, some, 2, NULL, 0, NULL);
    EXPECT_NICS(topo, 0, 1);
    EXPECT_NICS(topo, 1, 6);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_four_nics_per_gpu)
{
    /* 8 GPUs and 32 NICs: each GPU's switch holds 4 NICs, all its rails. */
    struct synth s;
    ferry_topo_t *topo;
#define QUAD ROOT("S[S[G]S[N]S[N]S[N]S[N]]")
    topo = synth_load(&s, "P[" QUAD QUAD QUAD QUAD "] P[" QUAD QUAD QUAD QUAD
                          "]", NULL);
#undef QUAD

    ck_assert_uint_eq(s.nnics, 32);
    for (size_t g = 0; g < 8; g++) {
        EXPECT_NICS(topo, g, 4 * g, 4 * g + 1, 4 * g + 2, 4 * g + 3);
        expect_class(topo, g, (4 * g + 4) % 32, g % 4 == 3 ? SYS : NODE);
    }
    expect_reason(topo, 7, "as fourth rail");
    expect_balanced(topo);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_one_nic_for_all)
{
    /* One NIC, in GPU 0's switch: every GPU shares it, and those on the
     * other socket say SYS. */
    struct synth s;
    ferry_topo_t *topo;
#define ONE ROOT("S[S[G]]")
    topo = synth_load(&s, "P[" ROOT("S[S[G]S[N]]") ONE ONE ONE "] P[" ONE ONE
                          ONE ONE "]", NULL);
#undef ONE

    ck_assert_uint_eq(s.ngpus, 8);
    expect_class(topo, 0, 0, PIX);
    for (size_t g = 0; g < 8; g++) {
        struct ferry_topo_choice c = gpu_nics(topo, g);
        EXPECT_NICS(topo, g, 0);
        ck_assert_int_eq(c.distance, g == 0 ? PIX : g < 4 ? NODE : SYS);
    }
    expect_reason(topo, 7,
                  "across sockets (SYS), shared with GPUs 0, 1, 2, 3, 4, 5 "
                  "and 6");
    expect_balanced(topo);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_nics_on_other_socket)
{
    /* The GPUs on socket 0, both NICs on socket 1: SYS for all, four GPUs
     * per NIC, the other NIC as second rail. */
    struct synth s;
    ferry_topo_t *topo;
#define TWO_GPUS ROOT("S[S[G]S[G]]")
    topo = synth_load(&s, "P[" TWO_GPUS TWO_GPUS TWO_GPUS TWO_GPUS "] P["
                          ROOT("S[S[N]S[N]]") "]", NULL);
#undef TWO_GPUS

    for (size_t g = 0; g < 8; g++) {
        expect_class(topo, g, 0, SYS);
        expect_class(topo, g, 1, SYS);
        EXPECT_NICS(topo, g, g % 2, (g + 1) % 2);
    }
    expect_balanced(topo);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_no_nic)
{
    struct synth s;
    ferry_topo_t *topo;
    struct ferry_topo_choice c;

    synth_write(&s, "P[" ROOT("S[S[G]S[G]]") "] P[" ROOT("S[S[G]S[X]]") "]");
    topo = load(s.path, NULL, 0, NULL, 0, NULL);
    ck_assert_uint_eq(info_of(topo).ngpus, 3);
    ck_assert_uint_eq(info_of(topo).nnics, 0);
    for (size_t g = 0; g < 3; g++) {
        c = gpu_nics(topo, g);
        ck_assert_uint_eq(c.nnics, 0);
        ck_assert_int_eq(c.distance, UNKNOWN);
        ck_assert_ptr_nonnull(strstr(c.reason, "no NIC to use: the topology "
                                               "has none"));
    }
    c = (struct ferry_topo_choice)FERRY_TOPO_CHOICE_INIT;
    ck_assert_int_eq(ferry_topo_host_nics(topo, 1, &c), 0);
    ck_assert_uint_eq(c.nnics, 0);
    ck_assert_ptr_nonnull(strstr(c.reason, "NUMA node 1: no NIC"));
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_discovery_rules)
{
    /* An Intel accelerator known only by its OpenCL device is a GPU; a
     * BMC's VGA and an NVMe drive are neither GPU nor NIC. */
    struct synth s;
    ferry_topo_t *topo;

    synth_write(&s, "P[" ROOT("S[S[C]S[N]]") ROOT("S[V X]") "]");
    topo = load(s.path, NULL, 0, NULL, 0, NULL);
    ck_assert_uint_eq(info_of(topo).ngpus, 1);
    ck_assert_uint_eq(info_of(topo).nnics, 1);
    ck_assert_str_eq(gpu_dev(topo, 0).names, "opencl0d0");
    expect_class(topo, 0, 0, PIX);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_missing_gpu)
{
    /* A GPU the topology lacks is UNKNOWN to every NIC, and still gets
     * the least loaded one, with a reason. */
    struct synth s;
    ferry_topo_t *topo;

    synth_write(&s, PAIRS_MACHINE);
    s.gpu_list[s.ngpus] = ABSENT;
    topo = load(s.path, s.gpu_list, s.ngpus + 1, NULL, 0, NULL);
    for (size_t n = 0; n < 8; n++)
        expect_class(topo, 8, n, UNKNOWN);
    ck_assert_int_eq(gpu_dev(topo, 8).in_topology, 0);
    ck_assert_str_eq(gpu_dev(topo, 8).cpus, "");
    ck_assert_int_eq(gpu_dev(topo, 8).numa_node, -1);
    ck_assert_uint_eq(gpu_nics(topo, 8).nnics, 8);
    expect_reason(topo, 8, "GPU " ABSENT ": NIC 0000:");
    expect_reason(topo, 8, "at an unknown distance (UNKNOWN: the GPU is not "
                           "in the topology), shared with GPU 0");
    for (size_t g = 0; g < 8; g++)
        EXPECT_NICS(topo, g, g);
    expect_balanced(topo);
    ck_assert_ptr_nonnull(
        strstr(info_of(topo).summary, "1 of them not in the topology"));
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_synth_missing_nic)
{
    /* A NIC the topology lacks is never preferred to one it has. */
    struct synth s;
    ferry_topo_t *topo;

    synth_write(&s, "P[" ROOT(PAIR) "] P[" ROOT(PAIR) "]");
    s.nic_list[s.nnics] = ABSENT;
    topo = load(s.path, s.gpu_list, s.ngpus, s.nic_list, s.nnics + 1, NULL);
    expect_class(topo, 0, 2, UNKNOWN);
    EXPECT_NICS(topo, 0, 0);
    EXPECT_NICS(topo, 1, 1);
    ck_assert_int_eq(nic_dev(topo, 2).in_topology, 0);
    ck_assert_int_eq(nic_dev(topo, 2).rdma, 0);
    ck_assert_str_eq(nic_dev(topo, 2).rdma_why,
                     "no sign of RDMA: not in the topology");
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

/* ---- RDMA-capable NICs before plain ethernet ---------------------------- */

static const struct {
    char kind; /* of synth's spec */
    int rdma;
    const char *why;
} nic_kinds[] = {
    {'N', 1, "OpenFabrics device"},
    {'E', 0, "plain ethernet"},
    {'R', 1, "RoCE on Mellanox/NVIDIA ethernet"},
    {'W', 1, "OpenFabrics device"},
    {'U', 0, "plain ethernet"},
    {'F', 1, "Amazon EFA"},
    {'A', 0, "plain ethernet"},
    {'B', 1, "RoCE on Broadcom BCM575xx"},
    {'T', 0, "plain ethernet"},
    {'I', 1, "irdma on Intel E810"},
    {'Y', 1, "cxi on HPE Slingshot"},
    {'O', 1, "fabric controller PCI class"},
    {'K', 1, "InfiniBand PCI class"},
    {'Q', 0, "no sign of RDMA"},
};

START_TEST(test_rdma_evidence)
{
    struct synth s;
    struct ferry_topo_device d;
    char spec[64];
    ferry_topo_t *topo;

    snprintf(spec, sizeof(spec), "P[" ROOT("S[S[G]S[%c]]") "]",
             nic_kinds[_i].kind);
    topo = synth_load(&s, spec, NULL);
    d = nic_dev(topo, 0);
    ck_assert_msg(d.rdma == nic_kinds[_i].rdma &&
                      strcmp(d.rdma_why, nic_kinds[_i].why) == 0,
                  "NIC '%c': rdma %d (%s), expected %d (%s)",
                  nic_kinds[_i].kind, d.rdma, d.rdma_why, nic_kinds[_i].rdma,
                  nic_kinds[_i].why);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_rdma_first_at_same_distance)
{
    /* Two GPUs behind a switch with a plain NIC (eth0) and an InfiniBand
     * one (mlx5_1): both take mlx5_1 first, though its index is higher
     * and one of them would have had eth0 to itself. */
    struct synth s;
    struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
    char want[512];
    ferry_topo_t *topo =
        synth_load(&s, "P[" ROOT("S[S[G]S[G]S[E]S[N]]") "]", NULL);

    expect_class(topo, 0, 0, PIX);
    expect_class(topo, 0, 1, PIX);
    EXPECT_NICS(topo, 0, 1, 0);
    EXPECT_NICS(topo, 1, 1, 0);
    snprintf(want, sizeof(want),
             "GPU %s: NIC %s (mlx5_1) behind the same PCIe switch (PIX), "
             "shared with GPU 1; NIC %s (eth0) as second rail; mlx5_1 "
             "(RDMA-capable: OpenFabrics device) before eth0 (plain "
             "ethernet) at the same distance",
             s.gpus[0], s.nics[1], s.nics[0]);
    ck_assert_str_eq(gpu_nics(topo, 0).reason, want);
    /* Host memory too. */
    ck_assert_int_eq(ferry_topo_host_nics(topo, 0, &c), 0);
    ck_assert_uint_eq(c.nnics, 2);
    ck_assert_uint_eq(c.nics[0], 1);
    ck_assert_ptr_nonnull(strstr(c.reason, "; mlx5_1 (RDMA-capable: "
                                           "OpenFabrics device) before eth0 "
                                           "(plain ethernet) at the same "
                                           "distance"));
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_rdma_nics_share_the_gpus)
{
    /* Two RDMA-capable NICs and a plain one behind the GPUs' switch: the
     * RDMA ones take one GPU each, the plain one follows as last rail. */
    struct synth s;
    ferry_topo_t *topo =
        synth_load(&s, "P[" ROOT("S[S[G]S[G]S[N]S[E]S[R]]") "]", NULL);

    EXPECT_NICS(topo, 0, 0, 2, 1);
    EXPECT_NICS(topo, 1, 2, 0, 1);
    expect_reason(topo, 0, "; mlx5_0 (RDMA-capable: OpenFabrics device) and "
                           "ens2 (RDMA-capable: RoCE on Mellanox/NVIDIA "
                           "ethernet) before eth1 (plain ethernet) at the "
                           "same distance");
    expect_balanced(topo);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_nearer_plain_nic_wins)
{
    /* A plain NIC behind the GPU's switch, an InfiniBand one under
     * another host bridge of the socket: distance comes first, and the
     * reason names the RDMA-capable NIC farther away.  The NIC map can
     * pin it, and then says nothing of the plain one. */
    struct synth s;
    struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
    ferry_topo_t *topo =
        synth_load(&s, "P[" ROOT("S[S[G]S[E]]") ROOT("S[N]") "]", NULL);

    expect_class(topo, 0, 0, PIX);
    expect_class(topo, 0, 1, NODE);
    EXPECT_NICS(topo, 0, 0);
    expect_reason(topo, 0, "(eth0) behind the same PCIe switch (PIX); eth0 "
                           "(plain ethernet) is nearer than any RDMA-capable "
                           "NIC, and distance comes first: the nearest of "
                           "those is mlx5_1 (RDMA-capable: OpenFabrics "
                           "device; NODE), which the NIC map can pin");
    /* The NUMA node sees both at NODE: mlx5_1 first. */
    ck_assert_int_eq(ferry_topo_host_nics(topo, 0, &c), 0);
    ck_assert_uint_eq(c.nics[0], 1);
    ferry_topo_close(topo);

    topo = load(s.path, s.gpu_list, 1, s.nic_list, 2, "0:mlx5_1,eth0");
    EXPECT_NICS(topo, 0, 1, 0);
    ck_assert_ptr_null(strstr(gpu_nics(topo, 0).reason, "nearer than"));
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_rdma_nics_from_libfabric)
{
    /* What libfabric reports decides alone: here it says RDMA on eth0
     * (say, soft-RoCE) and not on the ConnectX. */
    struct synth s;
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    const char *eth[] = {"eth0"}, *domains[] = {"mlx5_9", "mlx5_1-xrc"};
    const char *null[] = {NULL};
    ferry_topo_t *topo;

    synth_write(&s, "P[" ROOT("S[S[G]S[E]S[N]]") "]");
    cfg.xml = s.path;
    cfg.nic_map = "";
    cfg.rdma_nics = eth;
    cfg.nrdma_nics = 1;
    ck_assert_msg(ferry_topo_load(&cfg, &topo) == 0, "%s", ferry_last_error());
    EXPECT_NICS(topo, 0, 0, 1);
    ck_assert_int_eq(nic_dev(topo, 0).rdma, 1);
    ck_assert_str_eq(nic_dev(topo, 0).rdma_why, "libfabric reports RDMA");
    ck_assert_int_eq(nic_dev(topo, 1).rdma, 0);
    ck_assert_str_eq(nic_dev(topo, 1).rdma_why, "libfabric reports no RDMA");
    expect_reason(topo, 0, "; eth0 (RDMA-capable: libfabric reports RDMA) "
                           "before mlx5_1 (libfabric reports no RDMA) at the "
                           "same distance");
    ferry_topo_close(topo);

    /* An empty list: no NIC is RDMA-capable, the ranking is by load
     * alone, and the reason says nothing of RDMA. */
    cfg.nrdma_nics = 0;
    ck_assert_int_eq(ferry_topo_load(&cfg, &topo), 0);
    EXPECT_NICS(topo, 0, 0, 1);
    ck_assert_int_eq(nic_dev(topo, 1).rdma, 0);
    ck_assert_ptr_null(strstr(gpu_nics(topo, 0).reason, "RDMA"));
    ferry_topo_close(topo);

    /* A libfabric domain name with its suffix, or the PCI address; a name
     * of no NIC is ignored. */
    cfg.rdma_nics = domains;
    cfg.nrdma_nics = 2;
    ck_assert_int_eq(ferry_topo_load(&cfg, &topo), 0);
    EXPECT_NICS(topo, 0, 1, 0);
    ferry_topo_close(topo);
    cfg.rdma_nics = &s.nic_list[1];
    cfg.nrdma_nics = 1;
    ck_assert_int_eq(ferry_topo_load(&cfg, &topo), 0);
    EXPECT_NICS(topo, 0, 1, 0);
    ck_assert_int_eq(nic_dev(topo, 0).rdma, 0);
    ferry_topo_close(topo);

    cfg.rdma_nics = null;
    load_fails(&cfg, FERRY_EINVAL, "config.rdma_nics[0] is NULL");
    cfg.rdma_nics = NULL;
    load_fails(&cfg, FERRY_EINVAL, "config.rdma_nics[0] is NULL");
    synth_remove(&s);
}
END_TEST

/* ---- the NIC map -------------------------------------------------------- */

START_TEST(test_map_pins_and_others_follow)
{
    /* Two GPUs and two NICs behind one switch.  GPU 1 pinned to NIC 0
     * (by name) with NIC 1 (by address) as second rail: GPU 0 then takes
     * NIC 1, the one nobody has as primary yet. */
    struct synth s;
    char map[128];
    ferry_topo_t *topo;

    synth_write(&s, "P[" ROOT("S[S[G]S[G]S[N]S[N]]") "]");
    snprintf(map, sizeof(map), " 1 : mlx5_0 , %s ; ", s.nics[1]);
    topo = load(s.path, s.gpu_list, 2, s.nic_list, 2, map);
    EXPECT_NICS(topo, 1, 0, 1);
    EXPECT_NICS(topo, 0, 1, 0);
    expect_reason(topo, 1, "behind the same PCIe switch (PIX), as "
                           "config.nic_map says");
    ferry_topo_close(topo);

    /* FERRY_NIC_MAP when the config has none; "" in the config wins. */
    ck_assert_int_eq(setenv("FERRY_NIC_MAP", "0:mlx5_0", 1), 0);
    {
        struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
        cfg.xml = s.path;
        ck_assert_int_eq(ferry_topo_load(&cfg, &topo), 0);
        EXPECT_NICS(topo, 0, 0);
        expect_reason(topo, 0, "as FERRY_NIC_MAP says");
        EXPECT_NICS(topo, 1, 1, 0);
        ferry_topo_close(topo);
    }
    unsetenv("FERRY_NIC_MAP");
    topo = load(s.path, NULL, 0, NULL, 0, "");
    EXPECT_NICS(topo, 0, 0, 1);
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

START_TEST(test_map_to_far_nic_shows_class)
{
    /* Pinning a GPU to a NIC across sockets is obeyed, and said. */
    struct synth s;
    ferry_topo_t *topo = synth_load(&s, "P[" ROOT(PAIR) "] P[" ROOT(PAIR) "]",
                                    "0:mlx5_1,mlx5_0");

    EXPECT_NICS(topo, 0, 1, 0);
    ck_assert_int_eq(gpu_nics(topo, 0).distance, SYS);
    expect_reason(topo, 0, "across sockets (SYS), as config.nic_map says, "
                           "shared with GPU 1; NIC ");
    expect_reason(topo, 0, "(mlx5_0) as second rail (PIX)");
    ferry_topo_close(topo);
    synth_remove(&s);
}
END_TEST

static const struct {
    const char *map;
    long offset;
    const char *expected;
} bad_maps[] = {
    {"x", 0, "expected a GPU index (decimal digits)"},
    {"0", 1, "expected ':' after GPU index 0"},
    {"0:", 2, "expected a NIC of GPU 0"},
    {"0:mlx5_0;1", 10, "expected ':' after GPU index 1"},
    {"0:mlx5_0;;", 9, "expected a GPU index"},
    {"0:mlx5_0,", 9, "expected a NIC of GPU 0"},
    {"0:mlx5_0 mlx5_1", 9, "expected ',' and another NIC, or ';' and the "
                           "next GPU, not 'm'"},
    {"0:mlx5_0:1", 2, "\"mlx5_0:1\" is neither the PCI address nor a device "
                      "name of one of the 2 NICs"},
    {"0:mlx5_7", 2, "\"mlx5_7\" is neither"},
    {"0:0000:99:00.0", 2, "\"0000:99:00.0\" is neither"},
    {"2:mlx5_0", 0, "GPU 2 does not exist: there are 2 GPUs"},
    {"99999999999999999999999:mlx5_0", 0, "does not exist"},
    {"-1:mlx5_0", 0, "expected a GPU index"},
    {"0:mlx5_0;0:mlx5_1", 9, "GPU 0 appears a second time"},
    {"1:mlx5_1, mlx5_1", 10, "NIC mlx5_1 is given twice for GPU 1"},
};

START_TEST(test_map_errors_say_where)
{
    struct synth s;
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    const char *map = bad_maps[_i].map;
    char where[64];

    synth_write(&s, "P[" ROOT(PAIR) "] P[" ROOT(PAIR) "]");
    cfg.xml = s.path;
    cfg.nic_map = map;
    snprintf(where, sizeof(where), "config.nic_map=\"%s\": at offset %ld, ",
             map, bad_maps[_i].offset);
    load_fails(&cfg, FERRY_EINVAL, where);
    load_fails(&cfg, FERRY_EINVAL, bad_maps[_i].expected);
    synth_remove(&s);
}
END_TEST

START_TEST(test_map_error_from_env_names_it)
{
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;

    cfg.xml = fixture("24em64t-2n6c2t-pci.xml");
    ck_assert_int_eq(setenv("FERRY_NIC_MAP", "0:mlx4_0;1;", 1), 0);
    load_fails(&cfg, FERRY_EINVAL,
               "FERRY_NIC_MAP=\"0:mlx4_0;1;\": at offset 10, expected ':'");
    unsetenv("FERRY_NIC_MAP");
}
END_TEST

/* ---- refusals ----------------------------------------------------------- */

START_TEST(test_missing_xml_named)
{
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;

    cfg.xml = "/nonexistent/ferry/machine.xml";
    load_fails(&cfg, FERRY_ENOENT,
               "cannot read the topology XML file "
               "/nonexistent/ferry/machine.xml (from config.xml): No such "
               "file or directory");
    ck_assert_int_eq(setenv("FERRY_TOPOLOGY_XML", cfg.xml, 1), 0);
    load_fails(NULL, FERRY_ENOENT, "(from FERRY_TOPOLOGY_XML)");
    unsetenv("FERRY_TOPOLOGY_XML");
}
END_TEST

START_TEST(test_corrupt_xml_named)
{
    char dir[PATH_MAX], path[PATH_MAX + 16];
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    FILE *f;

    tu_tmp_dir(dir, sizeof(dir), "ferry-topo");
    snprintf(path, sizeof(path), "%s/broken.xml", dir);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object "
          "type=\"Machine\"",
          f);
    fclose(f);
    cfg.xml = path;
    load_fails(&cfg, FERRY_EINVAL, "the topology XML file ");
    load_fails(&cfg, FERRY_EINVAL, "broken.xml (from config.xml) is not an "
                                   "hwloc XML topology");
    tu_remove_tree(dir);
}
END_TEST

START_TEST(test_bad_addresses_refused)
{
    static const char *const bad[] = {"",        "17:00",       "0000:17:00",
                                      "17:20.0", "17:00.8",     "017:00.0",
                                      "0x17:00.0", "0000:17:00.0x",
                                      "g0:00.0", "0000:17:00.0:1"};
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    const char *two[] = {"0000:04:00.0", "04:00.0"};

    cfg.xml = fixture("24em64t-2n6c2t-pci.xml");
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char words[64];
        cfg.nics = &bad[i];
        cfg.nnics = 1;
        snprintf(words, sizeof(words), "config.nics[0] is \"%s\", not a PCI",
                 bad[i]);
        load_fails(&cfg, FERRY_EINVAL, words);
    }
    /* The short form is domain 0, so this is the same NIC twice. */
    cfg.nics = two;
    cfg.nnics = 2;
    load_fails(&cfg, FERRY_EINVAL,
               "config.nics[1] (0000:04:00.0) repeats config.nics[0]");
    cfg.nics = NULL;
    load_fails(&cfg, FERRY_EINVAL, "config.nics[0] is NULL");
    cfg.size = 0;
    load_fails(&cfg, FERRY_EINVAL, "FERRY_TOPO_CONFIG_INIT");
}
END_TEST

START_TEST(test_addresses_are_canonical)
{
    /* Upper case, short form and long domains all name the same function. */
    const char *gpus[] = {"0000:06:00.0"};
    const char *nics[] = {"5:0.0", "00000000:04:00.1"};
    const char *upper[] = {"0000:0B:00.1"};
    ferry_topo_t *topo =
        load(fixture("24em64t-2n6c2t-pci.xml"), gpus, 1, nics, 2, NULL);

    ck_assert_str_eq(nic_dev(topo, 0).pci, "0000:05:00.0");
    ck_assert_str_eq(nic_dev(topo, 1).pci, "0000:04:00.1");
    ck_assert_int_eq(nic_dev(topo, 0).in_topology, 1);
    ferry_topo_close(topo);
    topo = load(fixture("16intel64-manyVFs.xml"), upper, 1, NULL, 0, NULL);
    ck_assert_str_eq(gpu_dev(topo, 0).pci, "0000:0b:00.1");
    ck_assert_int_eq(gpu_dev(topo, 0).in_topology, 1);
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_api_arguments)
{
    ferry_topo_t *topo = load(fixture("24em64t-2n6c2t-pci.xml"), NULL, 0,
                              NULL, 0, NULL);
    struct ferry_topo_info info = {.size = 0};
    struct ferry_topo_device dev = FERRY_TOPO_DEVICE_INIT;
    /* A caller built against an older, shorter struct gets only its part. */
    struct {
        size_t size;
        const char *pci;
        const char *canary;
    } old = {offsetof(struct ferry_topo_device, names), NULL, "untouched"};

    ck_assert_int_eq(ferry_topo_load(NULL, NULL), FERRY_EINVAL);
    ck_assert_int_eq(ferry_topo_info(NULL, &info), FERRY_EINVAL);
    ck_assert_int_eq(ferry_topo_info(topo, &info), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "_INIT"));
    ck_assert_int_eq(ferry_topo_info(topo, NULL), FERRY_EINVAL);
    ck_assert_int_eq(ferry_topo_nic(topo, 3, &dev), FERRY_EINVAL);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "NIC 3 does not exist: "
                                                     "the topology has 3 "
                                                     "NICs"));
    ck_assert_int_eq(ferry_topo_distance(topo, 0, 3), FERRY_EINVAL);
    ck_assert_int_eq(ferry_topo_nic(topo, 2, (struct ferry_topo_device *)&old),
                     0);
    ck_assert_str_eq(old.pci, "0000:05:00.0");
    ck_assert_str_eq(old.canary, "untouched");
    ck_assert_str_eq(ferry_topo_class_name(PXB), "PXB");
    ck_assert_str_eq(ferry_topo_class_name(UNKNOWN), "UNKNOWN");
    ck_assert_str_eq(ferry_topo_class_name(FERRY_EINVAL), "?");
    ck_assert_str_eq(ferry_topo_class_name(6), "?");
    ferry_topo_close(topo);
    ferry_topo_close(NULL);
}
END_TEST

/* ---- libfabric domain -> PCI address ------------------------------------ */

START_TEST(test_domain_pci_loopback)
{
    char pci[FERRY_TOPO_PCI_LEN];

    if (access("/sys/class/net/lo", F_OK) != 0)
        return; /* no sysfs here (a container without /sys) */
    ck_assert_int_eq(ferry_topo_domain_pci("lo", pci, sizeof(pci)),
                     FERRY_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "not a PCI device"));
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("fixtures");

    tcase_add_test(tc, test_fixture_discovery_and_classes);
    tcase_add_test(tc, test_fixture_cpus_and_numa);
    tcase_add_test(tc, test_fixture_two_gpus_one_switch);
    tcase_add_test(tc, test_fixture_no_gpu);
    tcase_add_test(tc, test_fixture_duplicate_address);
    tcase_add_test(tc, test_fixture_host_memory);
    tcase_add_test(tc, test_env_names_the_xml);
    suite_add_tcase(s, tc);

    tc = tcase_create("synthetic");
    tcase_add_test(tc, test_synth_pairs);
    tcase_add_test(tc, test_synth_gpu_subset);
    tcase_add_test(tc, test_synth_four_nics_per_gpu);
    tcase_add_test(tc, test_synth_one_nic_for_all);
    tcase_add_test(tc, test_synth_nics_on_other_socket);
    tcase_add_test(tc, test_synth_no_nic);
    tcase_add_test(tc, test_synth_discovery_rules);
    tcase_add_test(tc, test_synth_missing_gpu);
    tcase_add_test(tc, test_synth_missing_nic);
    suite_add_tcase(s, tc);

    tc = tcase_create("rdma");
    tcase_add_loop_test(tc, test_rdma_evidence, 0, TU_ARRAY_LEN(nic_kinds));
    tcase_add_test(tc, test_rdma_first_at_same_distance);
    tcase_add_test(tc, test_rdma_nics_share_the_gpus);
    tcase_add_test(tc, test_nearer_plain_nic_wins);
    tcase_add_test(tc, test_rdma_nics_from_libfabric);
    suite_add_tcase(s, tc);

    tc = tcase_create("nic_map");
    tcase_add_test(tc, test_map_pins_and_others_follow);
    tcase_add_test(tc, test_map_to_far_nic_shows_class);
    tcase_add_loop_test(tc, test_map_errors_say_where, 0,
                        sizeof(bad_maps) / sizeof(bad_maps[0]));
    tcase_add_test(tc, test_map_error_from_env_names_it);
    suite_add_tcase(s, tc);

    tc = tcase_create("refusals");
    tcase_add_test(tc, test_missing_xml_named);
    tcase_add_test(tc, test_corrupt_xml_named);
    tcase_add_test(tc, test_bad_addresses_refused);
    tcase_add_test(tc, test_addresses_are_canonical);
    tcase_add_test(tc, test_api_arguments);
    suite_add_tcase(s, tc);

    tc = tcase_create("live");
    tcase_add_test(tc, test_domain_pci_loopback);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The tests set these where they need them (and unset them after, for
     * CK_FORK=no); the caller's must not leak in. */
    unsetenv("FERRY_TOPOLOGY_XML");
    unsetenv("FERRY_NIC_MAP");
    return tu_run(topo_suite());
}
