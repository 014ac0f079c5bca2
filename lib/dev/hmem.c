/*
 * Chooses the device memory backend once per process, and the public
 * ferry_device_* helpers that let programs without a CUDA runtime of
 * their own (examples, benches, tests) allocate and copy device memory
 * through it.
 */
#include "dev/hmem.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MAX_DEVICES 8

static pthread_once_t hmem_once = PTHREAD_ONCE_INIT;
static const struct ferry__hmem_ops *hmem_ops;
static char hmem_why[512];
static int sim_forced; /* ferry__hmem_use_sim() before the first use */

/* FERRY_SIM_DEVICES: 0 or unset (off), or 1..SIM_MAX_DEVICES. */
static int sim_devices_from_env(void)
{
    const char *s = getenv("FERRY_SIM_DEVICES");
    char *end;
    long n;

    if (s == NULL || *s == '\0')
        return 0;
    n = strtol(s, &end, 10);
    if (*end != '\0' || n < 0 || n > SIM_MAX_DEVICES) {
        FERRY_LOG_WARN("FERRY_SIM_DEVICES='%s' is not a number of simulated "
                       "devices from 0 to %d; the simulated device stays off",
                       s, SIM_MAX_DEVICES);
        return 0;
    }
    return (int)n;
}

/*
 * The white-box tests link the simulated device into the program; then
 * this weak reference finds it.  Everywhere else it is NULL and the
 * module is loaded.
 */
extern __typeof__(ferry_sim_load) ferry_sim_load __attribute__((weak));

/*
 * The module: FERRY_SIM_LIBRARY, else libferry-sim.so beside this
 * library (a build tree: both in lib/.libs), else in ferry/ beside it
 * (installed: $libdir/ferry, the package's pkglibdir).
 */
static void *sim_module_open(char *why, size_t len)
{
    const char *env = getenv("FERRY_SIM_LIBRARY");
    char beside[4096], installed[4096];
    Dl_info self;
    void *lib;
    int dir;

    if (env != NULL && *env != '\0') {
        if ((lib = dlopen(env, RTLD_NOW | RTLD_LOCAL)) == NULL)
            snprintf(why, len, "simulated device: FERRY_SIM_LIBRARY=%s "
                     "does not load: %s", env, dlerror());
        return lib;
    }
    if (dladdr((void *)sim_module_open, &self) == 0 ||
        self.dli_fname == NULL || strrchr(self.dli_fname, '/') == NULL) {
        snprintf(why, len, "simulated device: cannot tell where libferry "
                 "is, so not where libferry-sim.so is; set "
                 "FERRY_SIM_LIBRARY to its path");
        return NULL;
    }
    dir = (int)(strrchr(self.dli_fname, '/') - self.dli_fname);
    snprintf(beside, sizeof(beside), "%.*s/libferry-sim.so", dir,
             self.dli_fname);
    snprintf(installed, sizeof(installed), "%.*s/ferry/libferry-sim.so", dir,
             self.dli_fname);
    if ((lib = dlopen(beside, RTLD_NOW | RTLD_LOCAL)) != NULL ||
        (lib = dlopen(installed, RTLD_NOW | RTLD_LOCAL)) != NULL)
        return lib;
    snprintf(why, len, "simulated device: libferry-sim.so is not installed "
             "(tried %.200s and %.200s; it comes with libferry-dev, or set "
             "FERRY_SIM_LIBRARY to its path)", beside, installed);
    return NULL;
}

static const struct ferry__hmem_ops *sim_load(int ndevices, char *why,
                                              size_t len)
{
    static const struct ferry__sim_host host = {
        .error = ferry__error,
        .log = ferry__log,
    };
    __typeof__(ferry_sim_load) *load = ferry_sim_load;
    void *lib;

    if (load == NULL) {
        if ((lib = sim_module_open(why, len)) == NULL)
            return NULL;
        /* The module stays loaded for the process: its table is in use. */
        *(void **)&load = dlsym(lib, FERRY__SIM_LOAD);
        if (load == NULL) {
            snprintf(why, len, "simulated device: the module has no %s: "
                     "not a libferry-sim.so of this ferry", FERRY__SIM_LOAD);
            dlclose(lib);
            return NULL;
        }
    }
    return load(&host, ndevices, why, len);
}

static void hmem_choose(void)
{
    int sim = sim_forced ? sim_forced : sim_devices_from_env();

    if (sim > 0) {
        hmem_ops = sim_load(sim, hmem_why, sizeof(hmem_why));
        return;
    }
    hmem_ops = ferry__hmem_cuda_load(hmem_why, sizeof(hmem_why));
}

const struct ferry__hmem_ops *ferry__hmem(void)
{
    pthread_once(&hmem_once, hmem_choose);
    return hmem_ops;
}

const char *ferry__hmem_status(void)
{
    pthread_once(&hmem_once, hmem_choose);
    return hmem_why;
}

void ferry__hmem_use_sim(int ndevices)
{
    sim_forced = ndevices;
}

/* ---- public helpers --------------------------------------------------------- */

static int no_backend(const char *call)
{
    return ferry__error(FERRY_ENOTSUP, "%s: no device memory backend: %s",
                        call, ferry__hmem_status());
}

const char *ferry_device_backend(void)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    return ops != NULL ? ops->name : NULL;
}

const char *ferry_device_status(void)
{
    return ferry__hmem_status();
}

int ferry_device_count(int *count)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (count == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_count: count is NULL");
    *count = 0;
    if (ops == NULL)
        return no_backend("ferry_device_count");
    return ops->device_count(count);
}

int ferry_device_alloc(int device, size_t len, void **ptr)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();
    int count = 0;
    int ret;

    ferry__error_clear();
    if (ptr == NULL || len == 0)
        return ferry__error(FERRY_EINVAL, "ferry_device_alloc: %s",
                            ptr == NULL ? "ptr is NULL" : "len is 0");
    if (ops == NULL)
        return no_backend("ferry_device_alloc");
    if ((ret = ops->device_count(&count)) != 0)
        return ret;
    if (device < 0 || device >= count)
        return ferry__error(FERRY_EINVAL,
                            "ferry_device_alloc: device %d does not exist; "
                            "the %s backend has devices 0 to %d",
                            device, ops->name, count - 1);
    return ops->dev_alloc(device, len, ptr);
}

int ferry_device_free(void *ptr)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (ptr == NULL)
        return 0;
    if (ops == NULL)
        return no_backend("ferry_device_free");
    return ops->dev_free(ptr);
}

int ferry_device_copy(void *dst, const void *src, size_t len)
{
    const struct ferry__hmem_ops *ops = ferry__hmem();

    ferry__error_clear();
    if (dst == NULL || src == NULL)
        return ferry__error(FERRY_EINVAL, "ferry_device_copy: %s is NULL",
                            dst == NULL ? "dst" : "src");
    if (len == 0)
        return 0;
    if (ops == NULL)
        return no_backend("ferry_device_copy");
    return ops->copy(dst, src, len);
}

void ferry__hmem_flush_rdma(unsigned devices)
{
    const struct ferry__hmem_ops *ops;

    if (devices == 0 || (ops = ferry__hmem()) == NULL ||
        ops->flush_rdma_writes == NULL)
        return;
    for (int d = 0; devices != 0; d++, devices >>= 1)
        if (devices & 1u)
            ops->flush_rdma_writes(d);
}
