/*
 * topo module from inside: the live machine's topology keeps every I/O
 * object (hwloc's type filters), a thread bound to a PU is on that PU's
 * node, every choice on the saved topologies puts RDMA-capable NICs first,
 * and the sysfs lookup of libfabric domain names in a fake sysfs
 * (ferry__topo_domain_pci_at).  (Everything seen through the API:
 * test/api/check_topo.c.)
 */
#include "testutil.h"

#include "dev/topo.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- this machine ------------------------------------------------------- */

START_TEST(test_live_machine)
{
    ferry_topo_t *topo = NULL;
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;
    static const hwloc_obj_type_t io_types[] = {
        HWLOC_OBJ_BRIDGE, HWLOC_OBJ_PCI_DEVICE, HWLOC_OBJ_OS_DEVICE};

    unsetenv("FERRY_TOPOLOGY_XML");
    ck_assert_msg(ferry_topo_load(NULL, &topo) == 0, "%s", ferry_last_error());
    ck_assert_int_eq(ferry_topo_info(topo, &info), 0);
    ck_assert_ptr_nonnull(strstr(info.summary, "live topology of this "
                                               "machine"));
    /* Every bridge, function and OS device is kept (white box). */
    for (size_t i = 0; i < TU_ARRAY_LEN(io_types); i++) {
        enum hwloc_type_filter_e filter;
        ck_assert_int_eq(
            hwloc_topology_get_type_filter(topo->hw, io_types[i], &filter), 0);
        ck_assert_int_eq(filter, HWLOC_TYPE_FILTER_KEEP_ALL);
    }
    for (size_t g = 0; g < info.ngpus; g++) {
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;

        ck_assert_msg(ferry_topo_gpu_nics(topo, g, &c) == 0, "GPU %zu: %s", g,
                      ferry_last_error());
        ck_assert_ptr_nonnull(c.reason);
        ck_assert_ptr_nonnull(strstr(c.reason, "GPU "));
    }
    for (size_t n = 0; n < info.nnics; n++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;

        ck_assert_int_eq(ferry_topo_nic(topo, n, &d), 0);
        ck_assert_str_ne(d.cpus, "");
        /* Every NIC is judged, RDMA-capable or not, with the evidence. */
        ck_assert_str_ne(d.rdma_why, "");
        ck_assert_int_eq(d.rdma, topo->nics[n].rdma);
    }
    ck_assert_uint_ge(info.nnuma, 1);
    ferry_topo_close(topo);
}
END_TEST

START_TEST(test_live_current_node)
{
    /* Bound to one PU, the thread is on that PU's NUMA node. */
    ferry_topo_t *topo = NULL;
    struct ferry_topo_choice mine = FERRY_TOPO_CHOICE_INIT;
    struct ferry_topo_choice node = FERRY_TOPO_CHOICE_INIT;
    hwloc_obj_t pu;

    unsetenv("FERRY_TOPOLOGY_XML");
    ck_assert_int_eq(ferry_topo_load(NULL, &topo), 0);
    pu = hwloc_get_obj_by_type(topo->hw, HWLOC_OBJ_PU, 0);
    ck_assert_int_eq(
        hwloc_set_cpubind(topo->hw, pu->cpuset, HWLOC_CPUBIND_THREAD), 0);
    ck_assert_msg(ferry_topo_host_nics(topo, FERRY_TOPO_CURRENT_NODE, &mine) ==
                      0,
                  "%s", ferry_last_error());
    ck_assert_int_eq(
        ferry_topo_host_nics(topo, hwloc_bitmap_first(pu->nodeset), &node), 0);
    ck_assert_ptr_eq(mine.reason, node.reason);
    ferry_topo_close(topo);
}
END_TEST

/* ---- RDMA-capable NICs first -------------------------------------------- */

/*
 * Choice c, for a GPU whose classes are row (NULL for a NUMA node), keeps
 * the rule: one class, RDMA-capable NICs before plain ones, and a plain
 * primary only when no NIC at its class can do RDMA.  Returns whether it
 * holds both kinds.
 */
static bool check_choice(const struct ferry_topo *t,
                         const enum ferry_topo_class *row,
                         const struct ferry__topo_choice *c)
{
    bool plain = false, rdma_near = false;

    for (size_t n = 0; row != NULL && n < t->nnics; n++)
        rdma_near |= row[n] == c->distance && t->nics[n].rdma;
    for (size_t i = 0; i < c->n; i++) {
        const struct ferry__topo_dev *d = &t->nics[c->nics[i]];

        if (row != NULL)
            ck_assert_int_eq(row[c->nics[i]], c->distance);
        ck_assert_msg(!(plain && d->rdma),
                      "RDMA-capable NIC %zu after a plain one: %s",
                      c->nics[i], c->reason);
        plain |= !d->rdma;
    }
    ck_assert_msg(c->n == 0 || t->nics[c->nics[0]].rdma || !rdma_near,
                  "a plain primary beside an RDMA-capable NIC: %s",
                  c->reason);
    return c->n > 0 && t->nics[c->nics[0]].rdma && plain;
}

static const struct {
    const char *xml;
    bool mixed; /* some choice holds both kinds */
} saved[] = {
    {"16intel64-manyVFs.xml", false},
    {"24em64t-2n6c2t-pci.xml", true},
    {"32em64t-2n8c2t-pci-normalio.xml", true},
};

START_TEST(test_saved_choices_rdma_first)
{
    const char *dir = getenv("FERRY_TEST_TOPOLOGY_DIR");
    struct ferry_topo_config cfg = FERRY_TOPO_CONFIG_INIT;
    char path[PATH_MAX];
    ferry_topo_t *topo = NULL;
    bool mixed = false;

    ck_assert_msg(dir != NULL, "FERRY_TEST_TOPOLOGY_DIR is not set");
    snprintf(path, sizeof(path), "%s/%s", dir, saved[_i].xml);
    cfg.xml = path;
    cfg.nic_map = "";
    ck_assert_msg(ferry_topo_load(&cfg, &topo) == 0, "%s", ferry_last_error());
    for (size_t g = 0; g < topo->ngpus; g++)
        mixed |= check_choice(topo, &topo->distance[g * topo->nnics],
                              &topo->gpu_choice[g]);
    for (size_t i = 0; i < topo->nnuma; i++)
        mixed |= check_choice(topo, NULL, &topo->numa_choice[i]);
    ck_assert_msg(mixed == saved[_i].mixed, "%s: %s choice mixes kinds",
                  saved[_i].xml, mixed ? "a" : "no");
    ferry_topo_close(topo);
}
END_TEST

/* ---- libfabric domain -> PCI address ------------------------------------ */

static void make_path(const char *root, const char *rel)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof(path), "%s/%s", root, rel);

    ck_assert_msg(n > 0 && (size_t)n < sizeof(path), "%s/%s: too long a path",
                  root, rel);
    for (char *p = path + strlen(root) + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        mkdir(path, 0700);
        *p = '/';
    }
    mkdir(path, 0700);
}

/* /class/<cls>/<name>/device -> /devices/<target> (NULL: no link). */
static void fake_class_device(const char *root, const char *cls,
                              const char *name, const char *target)
{
    char rel[PATH_MAX], link[PATH_MAX], dest[PATH_MAX];

    snprintf(rel, sizeof(rel), "class/%s/%s", cls, name);
    make_path(root, rel);
    if (target == NULL)
        return;
    snprintf(rel, sizeof(rel), "devices/%s", target);
    make_path(root, rel);
    snprintf(link, sizeof(link), "%s/class/%s/%s/device", root, cls, name);
    snprintf(dest, sizeof(dest), "../../../devices/%s", target);
    ck_assert_int_eq(symlink(dest, link), 0);
}

/* A sysfs with a virtio NIC, lo, a veth, a ConnectX and an EFA device. */
static void fake_sysfs_make(char *root, size_t len)
{
    tu_tmp_dir(root, len, "ferry-topo");
    fake_class_device(root, "net", "eth0", "pci0000:00/0000:00:03.0/virtio2");
    fake_class_device(root, "net", "lo", NULL);
    fake_class_device(root, "net", "veth0", "virtual/net/veth0");
    fake_class_device(root, "infiniband", "mlx5_0",
                      "pci0000:17/0000:17:01.0/0000:18:00.0");
    fake_class_device(root, "infiniband", "rdmap16s27",
                      "pci0000:10/0000:10:1b.0");
}

START_TEST(test_domain_pci_from_sysfs)
{
    char root[PATH_MAX], pci[FERRY_TOPO_PCI_LEN];

    fake_sysfs_make(root, sizeof(root));
    ck_assert_int_eq(ferry__topo_domain_pci_at(root, "mlx5_0", pci,
                                               sizeof(pci)),
                     0);
    ck_assert_str_eq(pci, "0000:18:00.0");
    /* A virtio NIC: its device is virtioN, below the PCI function. */
    ck_assert_int_eq(
        ferry__topo_domain_pci_at(root, "eth0", pci, sizeof(pci)), 0);
    ck_assert_str_eq(pci, "0000:00:03.0");
    /* efa names its RDM domain after the device, plus "-rdm". */
    ck_assert_int_eq(ferry__topo_domain_pci_at(root, "rdmap16s27-rdm", pci,
                                               sizeof(pci)),
                     0);
    ck_assert_str_eq(pci, "0000:10:1b.0");

    ck_assert_int_eq(ferry__topo_domain_pci_at(root, "lo", pci, sizeof(pci)),
                     FERRY_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "lo is not a PCI "
                                                     "device"));
    ck_assert_int_eq(
        ferry__topo_domain_pci_at(root, "veth0", pci, sizeof(pci)),
        FERRY_ENOTSUP);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "leads to no PCI "
                                                     "function"));
    ck_assert_int_eq(
        ferry__topo_domain_pci_at(root, "mlx5_9", pci, sizeof(pci)),
        FERRY_ENOENT);
    ck_assert_ptr_nonnull(strstr(ferry_last_error(), "no network or "
                                                     "InfiniBand device is "
                                                     "named mlx5_9"));
    ck_assert_int_eq(
        ferry__topo_domain_pci_at(root, "../eth0", pci, sizeof(pci)),
        FERRY_EINVAL);
    ck_assert_int_eq(ferry__topo_domain_pci_at(root, "", pci, sizeof(pci)),
                     FERRY_EINVAL);
    ck_assert_int_eq(ferry__topo_domain_pci_at(root, "eth0", pci, 12),
                     FERRY_ENOSPC);
    tu_remove_tree(root);
}
END_TEST

static Suite *topo_suite(void)
{
    Suite *s = suite_create("topo");
    TCase *tc = tcase_create("live");

    tcase_add_test(tc, test_live_machine);
    tcase_add_test(tc, test_live_current_node);
    tcase_add_test(tc, test_domain_pci_from_sysfs);
    suite_add_tcase(s, tc);

    tc = tcase_create("saved");
    tcase_add_loop_test(tc, test_saved_choices_rdma_first, 0,
                        TU_ARRAY_LEN(saved));
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The live topology's NICs are ferry's choice, whatever map the
     * caller set (the live tests unset FERRY_TOPOLOGY_XML themselves). */
    unsetenv("FERRY_NIC_MAP");
    return tu_run(topo_suite());
}
