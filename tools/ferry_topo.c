/*
 * ferry_topo: which NICs ferry gives each GPU, and why.
 *
 *   ferry_topo [--xml FILE] [--gpus PCI,...] [--nics NIC,...] [--map MAP]
 *              [--rdma NIC,...] [--json]
 *
 * Prints the GPU x NIC matrix of distance classes (like `nvidia-smi topo
 * -m`), the GPUs and NICs with the CPUs near them, the NICs chosen for
 * each GPU with the reason, and the NICs nearest each NUMA node's memory.
 * Without --xml it reads this machine (or FERRY_TOPOLOGY_XML); without
 * --gpus/--nics it finds them in the topology.  A NIC may also be given
 * by its libfabric domain or interface name (mlx5_0, eth0), looked up in
 * sysfs.  --map pins NICs to GPUs, as FERRY_NIC_MAP does.  --rdma says
 * which NICs libfabric offers RDMA on (fi_info lists them); without it the
 * topology tells RDMA-capable NICs from plain ethernet.
 *
 * Uses only the public API (include/ferry.h).
 */
#include <ferry.h>

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_USAGE 2

static const char usage[] =
    "usage: ferry_topo [--xml FILE] [--gpus PCI,...] [--nics NIC,...]\n"
    "                  [--map MAP] [--rdma NIC,...] [--json]\n"
    "  --xml FILE   read an hwloc XML topology (lstopo --whole-io FILE.xml)\n"
    "               instead of this machine\n"
    "  --gpus LIST  GPUs by PCI address (0000:17:00.0); default: the GPUs\n"
    "               found in the topology\n"
    "  --nics LIST  NICs by PCI address, or by libfabric domain or interface\n"
    "               name (mlx5_0, eth0: looked up in sysfs, so on this\n"
    "               machine only); default: the NICs found in the topology\n"
    "  --map MAP    pin NICs to GPUs: \"0:mlx5_0,mlx5_1;1:mlx5_2\" (see\n"
    "               FERRY_NIC_MAP in ferry/topo.h)\n"
    "  --rdma LIST  the NICs libfabric offers RDMA on (PCI addresses, device\n"
    "               or domain names: mlx5_0, rdmap16s27-rdm); they and no\n"
    "               others count as RDMA-capable.  Default: judged from the\n"
    "               topology (OpenFabrics devices, InfiniBand, RDMA NICs'\n"
    "               PCI IDs)\n"
    "  --json       print JSON instead of text\n";

/* A comma-separated list, split in place. */
struct list {
    char *buf;
    const char **items;
    size_t n;
};

static bool split(const char *arg, struct list *l)
{
    size_t cap = 1;
    char *save = NULL;

    for (const char *p = arg; *p != '\0'; p++)
        cap += *p == ',';
    l->buf = strdup(arg);
    l->items = calloc(cap, sizeof(*l->items));
    if (l->buf == NULL || l->items == NULL)
        return false;
    for (char *tok = strtok_r(l->buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save))
        l->items[l->n++] = tok;
    return true;
}

static void list_free(struct list *l)
{
    free(l->buf);
    free(l->items);
}

/*
 * NICs named without a ':' are domain or interface names: replace them by
 * the PCI address sysfs gives.  addrs[i] holds the new strings.
 */
static int resolve_names(struct list *nics,
                         char (*addrs)[FERRY_TOPO_PCI_LEN])
{
    for (size_t i = 0; i < nics->n; i++) {
        int ret;

        if (strchr(nics->items[i], ':') != NULL)
            continue;
        ret = ferry_topo_domain_pci(nics->items[i], addrs[i],
                                    FERRY_TOPO_PCI_LEN);
        if (ret != 0)
            return ret;
        nics->items[i] = addrs[i];
    }
    return 0;
}

/* ---- text --------------------------------------------------------------- */

static void print_matrix(const ferry_topo_t *topo,
                         const struct ferry_topo_info *info)
{
    printf("\nGPU x NIC distance classes:\n");
    if (info->ngpus == 0 || info->nnics == 0) {
        printf("  none: there is no %s\n", info->ngpus == 0 ? "GPU" : "NIC");
        return;
    }
    printf("%-8s", "");
    for (size_t n = 0; n < info->nnics; n++)
        printf("NIC%-5zu", n);
    printf("CPU affinity\n");
    for (size_t g = 0; g < info->ngpus; g++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;

        ferry_topo_gpu(topo, g, &d);
        printf("GPU%-5zu", g);
        for (size_t n = 0; n < info->nnics; n++)
            printf("%-8s",
                   ferry_topo_class_name(ferry_topo_distance(topo, g, n)));
        printf("%s\n", d.in_topology ? d.cpus : "-");
    }
}

static void print_device(const char *role, size_t i,
                         const struct ferry_topo_device *d)
{
    printf("  %s%-4zu %s", role, i, d->pci);
    if (!d->in_topology) {
        printf("  not in the topology\n");
        return;
    }
    printf("  CPUs %s (cpuset %s)", d->cpus, d->cpuset);
    if (d->numa_node >= 0)
        printf("  NUMA %d", d->numa_node);
    if (d->names[0] != '\0')
        printf("  %s", d->names);
    if (d->rdma_why[0] != '\0')
        printf("  %s%s", d->rdma ? "RDMA-capable: " : "", d->rdma_why);
    printf("\n");
}

static void print_devices(const ferry_topo_t *topo,
                          const struct ferry_topo_info *info)
{
    printf("\nGPUs:%s\n", info->ngpus ? "" : " none");
    for (size_t g = 0; g < info->ngpus; g++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;
        ferry_topo_gpu(topo, g, &d);
        print_device("GPU", g, &d);
    }
    printf("NICs:%s\n", info->nnics ? "" : " none");
    for (size_t n = 0; n < info->nnics; n++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;
        ferry_topo_nic(topo, n, &d);
        print_device("NIC", n, &d);
    }
}

static void print_choice(const char *label, const struct ferry_topo_choice *c)
{
    printf("  %-12s", label);
    for (size_t i = 0; i < c->nnics; i++)
        printf("%sNIC%zu", i ? ", " : "", c->nics[i]);
    printf("%s\n      %s\n", c->nnics ? "" : "no NIC", c->reason);
}

static void print_choices(const ferry_topo_t *topo,
                          const struct ferry_topo_info *info)
{
    char label[32];

    if (info->ngpus > 0)
        printf("\nNICs per GPU, primary first:\n");
    for (size_t g = 0; g < info->ngpus; g++) {
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
        ferry_topo_gpu_nics(topo, g, &c);
        snprintf(label, sizeof(label), "GPU%zu", g);
        print_choice(label, &c);
    }
    printf("\nNICs for host memory, per NUMA node:\n");
    for (size_t i = 0; i < info->nnuma; i++) {
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
        ferry_topo_host_nics(topo, info->numa_nodes[i], &c);
        snprintf(label, sizeof(label), "node %d", info->numa_nodes[i]);
        print_choice(label, &c);
    }
}

static void print_text(const ferry_topo_t *topo)
{
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;

    ferry_topo_info(topo, &info);
    printf("ferry_topo: %s\n", info.summary);
    print_matrix(topo, &info);
    print_devices(topo, &info);
    print_choices(topo, &info);
    printf("\nPIX  behind the same PCIe switch    PXB  through several PCIe "
           "switches\n"
           "PHB  under the same host bridge     NODE same NUMA node, "
           "across host bridges\n"
           "SYS  across NUMA nodes (sockets)    UNKNOWN  not in the "
           "topology\n");
}

/* ---- JSON --------------------------------------------------------------- */

static void json_string(const char *s)
{
    putchar('"');
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_device(const struct ferry_topo_device *d, size_t i)
{
    printf("{\"index\": %zu, \"pci\": ", i);
    json_string(d->pci);
    printf(", \"names\": ");
    json_string(d->names);
    printf(", \"in_topology\": %s, \"numa_node\": %d, \"cpuset\": ",
           d->in_topology ? "true" : "false", d->numa_node);
    json_string(d->cpuset);
    printf(", \"cpus\": ");
    json_string(d->cpus);
}

static void json_nic(const struct ferry_topo_device *d, size_t i)
{
    json_device(d, i);
    printf(", \"rdma\": %s, \"rdma_why\": ", d->rdma ? "true" : "false");
    json_string(d->rdma_why);
    printf("}");
}

static void json_choice(const struct ferry_topo_choice *c)
{
    printf(", \"nics\": [");
    for (size_t i = 0; i < c->nnics; i++)
        printf("%s%zu", i ? ", " : "", c->nics[i]);
    printf("], \"distance\": ");
    json_string(ferry_topo_class_name(c->distance));
    printf(", \"reason\": ");
    json_string(c->reason);
    printf("}");
}

static void print_json(const ferry_topo_t *topo)
{
    struct ferry_topo_info info = FERRY_TOPO_INFO_INIT;

    ferry_topo_info(topo, &info);
    printf("{\n  \"summary\": ");
    json_string(info.summary);
    printf(",\n  \"gpus\": [");
    for (size_t g = 0; g < info.ngpus; g++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
        ferry_topo_gpu(topo, g, &d);
        ferry_topo_gpu_nics(topo, g, &c);
        printf("%s\n    ", g ? "," : "");
        json_device(&d, g);
        printf(", \"classes\": [");
        for (size_t n = 0; n < info.nnics; n++) {
            printf("%s", n ? ", " : "");
            json_string(ferry_topo_class_name(ferry_topo_distance(topo, g, n)));
        }
        printf("]");
        json_choice(&c);
    }
    printf("\n  ],\n  \"nics\": [");
    for (size_t n = 0; n < info.nnics; n++) {
        struct ferry_topo_device d = FERRY_TOPO_DEVICE_INIT;
        ferry_topo_nic(topo, n, &d);
        printf("%s\n    ", n ? "," : "");
        json_nic(&d, n);
    }
    printf("\n  ],\n  \"numa_nodes\": [");
    for (size_t i = 0; i < info.nnuma; i++) {
        struct ferry_topo_choice c = FERRY_TOPO_CHOICE_INIT;
        ferry_topo_host_nics(topo, info.numa_nodes[i], &c);
        printf("%s\n    {\"node\": %d", i ? "," : "", info.numa_nodes[i]);
        json_choice(&c);
    }
    printf("\n  ]\n}\n");
}

/* ---- main --------------------------------------------------------------- */

struct options {
    struct ferry_topo_config cfg;
    struct list gpus, nics, rdma;
    bool json;
};

/* 0, or the exit status when the arguments are wrong. */
static int parse_args(int argc, char **argv, struct options *o)
{
    static const struct option longopts[] = {
        {"xml", required_argument, NULL, 'x'},
        {"gpus", required_argument, NULL, 'g'},
        {"nics", required_argument, NULL, 'n'},
        {"map", required_argument, NULL, 'm'},
        {"rdma", required_argument, NULL, 'r'},
        {"json", no_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;

    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'x':
            o->cfg.xml = optarg;
            break;
        case 'g':
        case 'n':
        case 'r':
            if (!split(optarg, c == 'g'   ? &o->gpus
                               : c == 'n' ? &o->nics
                                          : &o->rdma)) {
                fprintf(stderr, "ferry_topo: out of memory\n");
                return EXIT_FAILURE;
            }
            break;
        case 'm':
            o->cfg.nic_map = optarg;
            break;
        case 'j':
            o->json = true;
            break;
        case 'h':
            fputs(usage, stdout);
            exit(EXIT_SUCCESS);
        default:
            fputs(usage, stderr);
            return EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "ferry_topo: unexpected argument '%s'\n%s",
                argv[optind], usage);
        return EXIT_USAGE;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct options o = {.cfg = FERRY_TOPO_CONFIG_INIT};
    char(*nic_addrs)[FERRY_TOPO_PCI_LEN] = NULL;
    ferry_topo_t *topo = NULL;
    int ret = parse_args(argc, argv, &o);

    if (ret == 0 && o.nics.n > 0) {
        nic_addrs = calloc(o.nics.n, sizeof(*nic_addrs));
        ret = nic_addrs == NULL ? FERRY_ENOMEM
                                : resolve_names(&o.nics, nic_addrs);
    }
    if (ret == 0) {
        o.cfg.gpus = o.gpus.items;
        o.cfg.ngpus = o.gpus.n;
        o.cfg.nics = o.nics.items;
        o.cfg.nnics = o.nics.n;
        o.cfg.rdma_nics = o.rdma.items;
        o.cfg.nrdma_nics = o.rdma.n;
        ret = ferry_topo_load(&o.cfg, &topo);
    }
    if (ret < 0)
        fprintf(stderr, "ferry_topo: %s: %s\n", ferry_strerror(ret),
                ferry_last_error());
    else if (ret == 0 && o.json)
        print_json(topo);
    else if (ret == 0)
        print_text(topo);
    ferry_topo_close(topo);
    free(nic_addrs);
    list_free(&o.gpus);
    list_free(&o.nics);
    list_free(&o.rdma);
    return ret < 0 ? EXIT_FAILURE : ret;
}
