/*
 * Device memory backends (hmem.c chooses one; private to libferry).
 *
 * Two backends sit behind one ops table:
 *   cuda       hmem_cuda.c: libcuda.so.1 loaded with dlopen at run time,
 *              driver API only; libferry never links libcuda or libcudart
 *   simulated  sim/hmem_sim.c, for tests, never on by default and not in
 *              libferry: the module libferry-sim.so, loaded with dlopen
 *              when asked for.  "Device" memory is a PROT_NONE view of a
 *              memfd that only the simulated copy engine (a worker thread,
 *              through a second, read-write view) touches, so a CPU access
 *              by ferry crashes
 *
 * Every function returns 0 or a FERRY_E* code after recording its
 * sentence with ferry__error(), unless it says otherwise.
 */
#ifndef FERRY_HMEM_H
#define FERRY_HMEM_H

#include "base/ferry-internal.h"

/* What a pointer is, as the backend sees it. */
struct ferry__hmem_ptr {
    bool device;        /* device memory of this backend; else host */
    /* Managed (unified) memory, whose pages the driver moves between host
     * and device: device memory, but not device-only (FI_HMEM_DEVICE_ONLY). */
    bool managed;
    int ordinal;        /* its device */
    uint64_t buffer_id; /* unique per allocation, never reused */
    uintptr_t base;     /* the allocation holding the pointer */
    size_t size;
};

/* A queue of copies run in order, and a marker recorded in one. */
struct ferry__hmem_stream;
struct ferry__hmem_event;

struct ferry__hmem_ops {
    const char *name; /* "cuda", "simulated" */
    /* Its device memory is host memory in disguise (the simulated device):
     * libfabric's FI_HMEM_CUDA would hand it to the real CUDA driver. */
    bool simulated;
    int (*device_count)(int *count);
    /* Host memory is not an error: info->device is false. */
    int (*ptr_info)(const void *ptr, struct ferry__hmem_ptr *info);
    /* "0000:3b:00.0" (domain:bus:device.function, lower case). */
    int (*pci_bus_id)(int ordinal, char *buf, size_t len);
    /*
     * A dmabuf file descriptor for [ptr, ptr + len) and the offset of ptr
     * in it; the caller closes it.  FERRY_ENOTSUP (with why) when the
     * device or driver cannot export one.  May be NULL.
     */
    int (*dmabuf_fd)(const void *ptr, size_t len, int *fd, uint64_t *offset);
    /* Page-locked host memory the device copies to and from at full speed. */
    int (*host_alloc)(size_t len, void **ptr);
    void (*host_free)(void *ptr);
    int (*dev_alloc)(int ordinal, size_t len, void **ptr);
    int (*dev_free)(void *ptr);
    int (*stream_create)(int ordinal, struct ferry__hmem_stream **stream);
    void (*stream_destroy)(struct ferry__hmem_stream *stream);
    int (*event_create)(int ordinal, struct ferry__hmem_event **event);
    void (*event_destroy)(struct ferry__hmem_event *event);
    /*
     * Queues a copy of len bytes (either side host or device) on stream,
     * then records event after it.  Returns at once.
     */
    int (*copy_async)(struct ferry__hmem_stream *stream, void *dst,
                      const void *src, size_t len,
                      struct ferry__hmem_event *event);
    /* 1 when every copy before the event has finished, 0 while not, or an
     * error code (the copy failed). */
    int (*event_done)(struct ferry__hmem_event *event);
    /* A blocking copy, for small or rare copies. */
    int (*copy)(void *dst, const void *src, size_t len);
    /*
     * Makes RDMA writes the NIC has completed into device memory visible
     * to the device's later work (cuFlushGPUDirectRDMAWrites).  May be
     * NULL when the driver has no such call.
     */
    void (*flush_rdma_writes)(int ordinal);
};

/*
 * The backend in use: the simulated device when FERRY_SIM_DEVICES=N (N in
 * 1..8) is set or ferry__hmem_use_sim() was called, else CUDA when
 * libcuda.so.1 loads and initialises, else NULL.  Decided once.
 */
const struct ferry__hmem_ops *ferry__hmem(void);
/* Why there is no backend, or which one runs and why: one sentence. */
const char *ferry__hmem_status(void);
/*
 * Makes peers' GPUDirect writes into the devices whose bits are set in
 * `devices` visible to them (before a notification is delivered).
 */
void ferry__hmem_flush_rdma(unsigned devices);
/* Tests: the simulated backend with n devices (before any ferry__hmem()). */
void ferry__hmem_use_sim(int ndevices);

/* The CUDA backend's table; it answers its own failure to initialise. */
const struct ferry__hmem_ops *ferry__hmem_cuda_load(char *why, size_t len);

/* ---- the simulated device module (sim/, libferry-sim.so) ------------------ */

/* What the module calls back: libferry's functions are hidden from it. */
struct ferry__sim_host {
    int (*error)(int err, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
    void (*log)(int level, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));
};

/* The module's one exported symbol. */
#define FERRY__SIM_LOAD "ferry_sim_load"
#define FERRY__SIM_EXPORT __attribute__((visibility("default")))
/*
 * Makes ndevices (1 to 16) simulated devices and returns their table, or
 * NULL with why said.  Loading again (tests) changes the number of
 * devices; buffers stay.
 */
FERRY__SIM_EXPORT const struct ferry__hmem_ops *
ferry_sim_load(const struct ferry__sim_host *host, int ndevices, char *why,
               size_t len);

/* Allocates device memory at exactly addr (MAP_FIXED_NOREPLACE), so a test
 * can reallocate at a freed address; FERRY_EBUSY when addr is taken. */
int ferry__hmem_sim_alloc_at(int ordinal, void *addr, size_t len);
/* Copies the simulated engine has finished since the backend loaded. */
uint64_t ferry__hmem_sim_copies(void);

#endif /* FERRY_HMEM_H */
