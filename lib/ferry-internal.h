/*
 * Private structures and helpers shared by ferry's modules.  Never
 * installed.  libfabric types appear only here, never in ferry.h.
 */
#ifndef FERRY_INTERNAL_H
#define FERRY_INTERNAL_H

#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "ferry.h"

#define ferry__container_of(ptr, type, member)                                \
    ((type *)((char *)(ptr) - offsetof(type, member)))

#define FERRY__ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define FERRY__MAX_RAILS 8
#define FERRY__KEY_MAX 64          /* longest raw key carried in a blob */
#define FERRY__ADDR_MAX 256        /* longest endpoint name carried in a blob */
#define FERRY__NAME_MAX 64         /* provider / fabric / domain names in blobs */
/* The API version ferry asks for: the one of the headers it was built with. */
#define FERRY__FI_VERSION FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION)

/* ---- error (error.c) --------------------------------------------------- */

/*
 * Records the sentence for ferry_last_error() and returns err, so that a
 * failure reads `return ferry__error(FERRY_EINVAL, "iov[%zu]: ...", i);`.
 */
int ferry__error(int err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears the thread's last error (called on entry of public calls). */
void ferry__error_clear(void);
/* Maps a negative libfabric error (-FI_E*) to a ferry code. */
int ferry__error_from_fi(int fi_err);
/*
 * Checks a public handle: FERRY_EINVAL for NULL, FERRY_EHANDLE when it is
 * dead or of another kind (every handle struct starts with its magic),
 * each with a sentence starting with `what`.
 */
int ferry__check_handle(const void *handle, uint32_t magic, const char *what);
#define ferry__check_ctx(h, what) ferry__check_handle((h), FERRY__MAGIC_CTX, (what))
#define ferry__check_peer(h, what) ferry__check_handle((h), FERRY__MAGIC_PEER, (what))
#define ferry__check_mem(h, what) ferry__check_handle((h), FERRY__MAGIC_MEM, (what))
#define ferry__check_rmem(h, what) ferry__check_handle((h), FERRY__MAGIC_RMEM, (what))
#define ferry__check_req(h, what) ferry__check_handle((h), FERRY__MAGIC_REQ, (what))
#define ferry__check_dlist(h, what) ferry__check_handle((h), FERRY__MAGIC_DLIST, (what))
#define ferry__check_prep(h, what) ferry__check_handle((h), FERRY__MAGIC_PREP, (what))

/* ---- log (log.c) ------------------------------------------------------- */

enum ferry__log_level { FERRY__LOG_WARN = 1, FERRY__LOG_INFO, FERRY__LOG_DEBUG };

/* Level from FERRY_LOG=warn|info|debug (default warn), read once. */
int ferry__log_level(void);
void ferry__log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
#define FERRY_LOG_WARN(...) ferry__log(FERRY__LOG_WARN, __VA_ARGS__)
#define FERRY_LOG_INFO(...)                                                       \
    do {                                                                      \
        if (ferry__log_level() >= FERRY__LOG_INFO)                            \
            ferry__log(FERRY__LOG_INFO, __VA_ARGS__);                         \
    } while (0)
#define FERRY_LOG_DEBUG(...)                                                      \
    do {                                                                      \
        if (ferry__log_level() >= FERRY__LOG_DEBUG)                           \
            ferry__log(FERRY__LOG_DEBUG, __VA_ARGS__);                        \
    } while (0)

/* ---- env (env.c) ------------------------------------------------------- */

/*
 * Turns libfabric's own MR caches off (unless the user set the variables)
 * before ferry's first libfabric call.  Idempotent and thread-safe.
 */
void ferry__env_prepare(void);
/* True when the user, not ferry, set the variable that controls the cache. */
bool ferry__env_user_set_mr_cache(void);

/* Monotonic clock in nanoseconds. */
uint64_t ferry__now_ns(void);
/*
 * The same clock at the kernel tick's resolution (a few ms behind at
 * most), read without a time source access: for deadlines, checked on
 * every progress call (perf: the precise clock was about 10 % of a shm
 * 4 KiB x 64 profile).
 */
uint64_t ferry__now_coarse_ns(void);

/* ---- provider (provider.c) --------------------------------------------- */

/* A provider/domain that fi_getinfo offered, with ferry's verdict on it. */
struct ferry__candidate {
    struct fi_info *info; /* owned */
    int rank;             /* lower is better */
    bool nic;             /* a hardware NIC, where registration matters */
    char verdict[160];    /* why it ranks where it does */
};

struct ferry__selection {
    struct ferry__candidate *cand; /* usable ones, best first */
    size_t ncand;
    char refused[1024]; /* "verbs: no device; sockets: ..." */
};

/* Probes fi_getinfo for cfg.  On FERRY_ENOPROVIDER the error says why. */
int ferry__provider_select(const struct ferry_config *cfg,
                           struct ferry__selection *sel);
void ferry__selection_free(struct ferry__selection *sel);

/* ---- rails (rails.c) ----------------------------------------------------- */

/* Domains of one provider considered as rails (more are never used). */
#define FERRY__RAIL_CANDIDATES 32
/*
 * Moves the chosen provider's domains nearest the context's memory (a GPU,
 * or the calling thread's NUMA node) to the front of sel; writes a clause
 * saying what it did ("; rails nearest ...") or "" into why, and the CPUs
 * near the first rail's NIC ("0-7,16-23") or "" into cpus.
 */
void ferry__rails_order(const struct ferry_config *cfg,
                        struct ferry__selection *sel, char *why, size_t len,
                        char *cpus, size_t cpus_len);
/* Binds the calling thread to a CPU list ("0-7,16-23"); false if it
 * cannot (malformed, or CPUs this process may not use). */
bool ferry__bind_to_cpus(const char *cpus);
/* libfabric mr_mode bits <-> FERRY_MR_* bits. */
unsigned ferry__mr_mode_from_fi(uint64_t fi_mr_mode);
uint64_t ferry__mr_mode_to_fi(unsigned ferry_mr_mode);
/* "LOCAL|VIRT_ADDR" (or "none") into buf. */
const char *ferry__mr_mode_str(unsigned mr_mode, char *buf, size_t len);

/* ---- keys (keys.c) ----------------------------------------------------- */

/*
 * Hands out requested keys for providers without FI_MR_PROV_KEY: a counter
 * wrapped to the usable key width.  A key the provider reports as taken
 * (-FI_ENOKEY) is skipped by the caller.
 */
struct ferry__keyalloc {
    _Atomic uint64_t next;
    uint64_t mask; /* all ones over the key width */
};
void ferry__keyalloc_init(struct ferry__keyalloc *ka, size_t key_bytes);
uint64_t ferry__keyalloc_next(struct ferry__keyalloc *ka);
/* Keys the allocator can hand out before it repeats itself. */
uint64_t ferry__keyalloc_space(const struct ferry__keyalloc *ka);

/* ---- context (context.c) ----------------------------------------------- */

enum ferry__magic {
    FERRY__MAGIC_CTX = 0x66637478,  /* "fctx" */
    FERRY__MAGIC_PEER = 0x66706572, /* "fper" */
    FERRY__MAGIC_MEM = 0x666d656d,  /* "fmem" */
    FERRY__MAGIC_RMEM = 0x66726d6d, /* "frmm" */
    FERRY__MAGIC_REQ = 0x66726571,  /* "freq" */
    FERRY__MAGIC_DLIST = 0x66646c73, /* "fdls" */
    FERRY__MAGIC_PREP = 0x66707270, /* "fprp" */
    FERRY__MAGIC_DEAD = 0x64656164, /* "dead": freed, for use-after-free hints */
};

struct ferry__op; /* one posted operation, see xfer.c */
struct ferry__rcache;   /* rcache.h */
struct ferry__stage;    /* stage.c */
struct ferry__stage_slot;
struct ferry__rc_entry; /* rcache.h */
enum ferry__op_kind {
    FERRY__OP_WRITE,
    FERRY__OP_READ,
    FERRY__OP_SEND, /* a notification */
    FERRY__OP_SYNC, /* a mirror sync message (stage.c) */
};

/* How a context registers device memory (ferry__dev_path_choose). */
enum ferry__dev_path {
    FERRY__DEV_NONE,   /* no device backend: device memory is refused */
    FERRY__DEV_DMABUF, /* FI_HMEM with a dmabuf fd (libfabric >= 1.20) */
    FERRY__DEV_VA,     /* FI_HMEM by virtual address (peer memory) */
    FERRY__DEV_STAGED, /* no FI_HMEM: copied through pinned host buffers */
};

/* Notification messages (notify.c). */
#define FERRY__MSG_SIZE 32
#define FERRY__RECV_DEPTH 64

struct ferry__recv {
    struct fi_context2 fi_ctx; /* first: libfabric hands it back */
    uint8_t buf[FERRY__MSG_SIZE];
};

struct ferry__notify_queue {
    struct ferry_notification *items; /* ring */
    size_t cap, head, count;
};

struct ferry__counter {
    uint64_t id;
    uint64_t sum;
    bool used;
};

/* id -> sum, open addressing, power-of-two capacity. */
struct ferry__counters {
    struct ferry__counter *slots;
    size_t cap, used;
};

struct ferry__rail {
    unsigned index;
    struct fi_info *info; /* owned */
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_av *av;
    struct fid_cq *cq;
    int wait_fd;      /* the CQ's file descriptor, if has_wait_fd */
    bool has_wait_fd;
    struct fid_ep *ep;
    struct ferry__keyalloc keys;
    int64_t weight; /* share of striped bytes: link speed in Mbit/s, or 1 */
    /* Operation slots: at most tx_depth operations are ever in flight. */
    struct ferry__op *ops;
    struct ferry__op *free_ops;
    size_t ops_in_flight;
    /* The provider refused an operation with -FI_EAGAIN: no request posts
     * on this rail until its CQ gives completions back (or a few progress
     * calls pass), so one full queue costs one refused call, not one per
     * active request per progress call.  Under the context lock. */
    bool post_blocked;
    unsigned blocked_polls;
    /* Receive buffers for notifications, and registrations of them and of
     * the op slots' message buffers where the provider wants FI_MR_LOCAL. */
    struct ferry__recv *recvs;
    struct fid_mr *recv_mr;
    struct fid_mr *send_mr;
    uint64_t bytes_posted; /* statistics */
};

struct ferry__req_list {
    struct ferry_req *head;
    struct ferry_req *tail;
};

struct ferry_context {
    uint32_t magic;
    struct ferry_config cfg; /* strings point into the copies below */
    char cfg_provider[FERRY__NAME_MAX];
    char cfg_domain[FERRY__NAME_MAX];
    unsigned mr_mode;   /* FERRY_MR_* in effect */
    size_t key_size;    /* bytes of key ferry uses */
    size_t max_msg;     /* largest single operation */
    size_t tx_depth;
    unsigned next_rail;    /* rail of the next unstriped request; lock */
    bool register_local; /* message buffers need registering (LOCAL, NIC) */
    /* One rail whose provider transmits and processes sends after the
     * writes posted before them (FI_ORDER_SAW in tx_attr and rx_attr): a
     * request's notification may follow its writes without waiting for
     * their completions (xfer.c). */
    bool notify_ordered;
    /* One rail whose provider places writes in order (FI_ORDER_WAW in
     * tx_attr and rx_attr): a request's last write may carry its
     * notification while the writes before it are still in flight. */
    bool writes_ordered;
    char why[768];
    unsigned nrails;
    struct ferry__rail rails[FERRY__MAX_RAILS];

    /*
     * One lock serialises posting, completion handling and request state:
     * the endpoints are opened FI_THREAD_DOMAIN, so ferry owns their
     * serialisation.  Never held across a user callback or a sleep.
     */
    pthread_mutex_t lock;
    struct ferry__req_list active; /* requests with work left or ops out */
    struct ferry__req_list done;   /* retired, waiting for ferry_req_free */
    unsigned running;              /* active requests still in progress */
    struct ferry_peer *peers;      /* singly linked, under lock */
    struct ferry_mem *mems;        /* doubly linked, under lock */
    struct ferry_rmem *rmems;      /* doubly linked, under lock */

    pthread_t progress_thread;
    bool progress_thread_started;
    char progress_cpus[256]; /* near the first rail's NIC, or "" */
    pthread_cond_t progressed; /* the thread handled events; under lock */
    unsigned waiters;          /* threads waiting on it; under lock */
    /* Registrations peers may write or read: while there are any, data
     * can arrive at any moment, and software providers (tcp, shm) move it
     * only when this side progresses, so the progress thread keeps
     * polling instead of sleeping. */
    _Atomic unsigned exposed_regions;
    atomic_bool stopping;

    struct ferry__rcache *rcache; /* NULL when disabled */
    /* How device memory is registered here (hmem.c), and why. */
    enum ferry__dev_path dev_path;
    char dev_why[600];
    struct ferry__stage *stage; /* staging buffers, made on first need */
    uint64_t next_mirror_id;    /* under lock */
    unsigned mirror_rmems;      /* imported remote mirrors; under lock */
    /* Devices whose memory peers may write through FI_HMEM: their GPUDirect
     * writes are flushed before a notification is delivered. */
    _Atomic unsigned hmem_exposed_devices;
    struct ferry__notify_queue notifications; /* under lock */
    /* Arrived while mirror copies were queued (stage.c): delivered once
     * they are done; under lock. */
    struct ferry__notify_queue held;
    struct ferry__counters counters;          /* under lock */

    /* statistics, under lock */
    uint64_t oneshot_registrations;
    uint64_t notifications_received;
    uint64_t notifications_in_writes; /* sent as a write's CQ data */
    uint64_t notifications_unqueued; /* counted, not queued: queue full */
    uint64_t staged_bytes, staged_chunks, staged_max_in_flight;
    uint64_t mirror_syncs;
};


/* ---- peer (peer.c) ----------------------------------------------------- */

struct ferry_peer {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_peer *next;
    fi_addr_t fi_addr[FERRY__MAX_RAILS];
    _Atomic unsigned rmem_count; /* imported regions still held */
};

/* Removes every peer (context destruction). */
void ferry__peers_destroy(struct ferry_context *ctx);

/* ---- blob (blob.c) ----------------------------------------------------- */

/*
 * Blobs are self-describing: a header with magic, version, kind, total
 * length and a checksum, then fields read and written through bounded
 * cursors.  A reader never reads past the end; any overrun sets `bad`.
 */
enum ferry__blob_kind { FERRY__BLOB_ADDR = 1, FERRY__BLOB_RKEY = 2 };
#define FERRY__BLOB_MAGIC 0x59525246u /* "FRRY" little-endian */
#define FERRY__BLOB_VERSION 1u
#define FERRY__BLOB_HEADER_LEN 16u

struct ferry__blob_writer {
    uint8_t *buf; /* may be NULL to measure */
    size_t cap;
    size_t len;
};
struct ferry__blob_reader {
    const uint8_t *buf;
    size_t len;
    size_t pos;
    bool bad;
};

void ferry__blob_begin(struct ferry__blob_writer *w, void *buf, size_t cap,
                       enum ferry__blob_kind kind);
void ferry__blob_put_u16(struct ferry__blob_writer *w, uint16_t v);
void ferry__blob_put_u32(struct ferry__blob_writer *w, uint32_t v);
void ferry__blob_put_u64(struct ferry__blob_writer *w, uint64_t v);
void ferry__blob_put_bytes(struct ferry__blob_writer *w, const void *p,
                           size_t n);
/* A string as u16 length + bytes (no NUL). */
void ferry__blob_put_str(struct ferry__blob_writer *w, const char *s);
/*
 * Seals the header (length, checksum).  Returns FERRY_ENOSPC with *len set
 * to the size needed when the buffer was too small or NULL.
 */
int ferry__blob_end(struct ferry__blob_writer *w, size_t *len);

/* Validates the header; `what` names the blob in error sentences. */
int ferry__blob_open(struct ferry__blob_reader *r, const void *buf,
                     size_t len, enum ferry__blob_kind kind,
                     const char *what);
uint16_t ferry__blob_get_u16(struct ferry__blob_reader *r);
uint32_t ferry__blob_get_u32(struct ferry__blob_reader *r);
uint64_t ferry__blob_get_u64(struct ferry__blob_reader *r);
void ferry__blob_get_bytes(struct ferry__blob_reader *r, void *p, size_t n);
/* Reads a string into buf (NUL-terminated); too long sets bad. */
void ferry__blob_get_str(struct ferry__blob_reader *r, char *buf, size_t cap);
/* 32-bit FNV-1a, the blob checksum. */
uint32_t ferry__fnv1a(const void *p, size_t n);

/* ---- mem (mem.c) ------------------------------------------------------- */

struct ferry_mem {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_mem *prev, *next; /* ctx->mems, under ctx->lock */
    uint8_t *addr;
    size_t len;
    enum ferry_mem_kind kind;
    int device;
    unsigned access;
    bool oneshot; /* made by a transfer for an iov without lmem */
    /*
     * Device memory the domain cannot register: transfers stage it
     * through host buffers (stage.c), and with remote access the
     * registrations below are of `mirror`, a pinned host copy peers
     * reach instead, identified to them by mirror_id.
     */
    bool staged;
    uint8_t *mirror;
    uint64_t mirror_id;
    uint64_t buffer_id; /* device allocation's id (cache validation) */
    enum ferry__dev_path path; /* FERRY__DEV_NONE for host memory */
    /* Operations and requests that still use it; deregistration waits. */
    _Atomic unsigned users;
    struct fid_mr *mr[FERRY__MAX_RAILS];
    void *desc[FERRY__MAX_RAILS];
    uint8_t key[FERRY__MAX_RAILS][FERRY__KEY_MAX];
    size_t key_len[FERRY__MAX_RAILS];
    uint64_t raw_base[FERRY__MAX_RAILS]; /* FI_MR_RAW: base for map_raw */
};

struct ferry_rmem {
    uint32_t magic;
    struct ferry_peer *peer;
    struct ferry_rmem *prev, *next; /* ctx->rmems, under ctx->lock */
    unsigned nrails; /* rails the exporter registered on that we share */
    uint64_t base;   /* exporter's address (VIRT_ADDR) or 0 */
    uint64_t len;
    unsigned access; /* FERRY_ACCESS_* the exporter granted */
    bool virt_addr;  /* remote addresses are base + offset */
    /* A host mirror of device memory (staged on the exporter's side):
     * written data reaches the device when ferry says so (stage.c). */
    bool mirror;
    uint64_t mirror_id;
    _Atomic unsigned users;
    uint64_t key[FERRY__MAX_RAILS];
    bool key_mapped[FERRY__MAX_RAILS]; /* raw key mapped with fi_mr_map_raw */
    char provider[FERRY__NAME_MAX];    /* exporter's, for error sentences */
};

/*
 * Registers without the public checks; used for one-shot registrations of
 * iovs that came without lmem.  Caller holds no lock.
 */
int ferry__mem_register(struct ferry_context *ctx, void *addr, size_t len,
                        unsigned access, bool oneshot, struct ferry_mem **out);
/*
 * The same for memory of any kind: asks the device backend what addr is
 * (device memory takes the context's device path, mem.c), unless kind is
 * FERRY_MEM_HOST.  `call` names the caller in error sentences.
 */
int ferry__mem_register_any(struct ferry_context *ctx, void *addr, size_t len,
                            enum ferry_mem_kind kind, int device,
                            unsigned access, bool oneshot, const char *call,
                            struct ferry_mem **out);
/*
 * fi_mr_regattr on one rail with ferry's key policy (requested keys that
 * fit mr_key_size, retried while taken) and FI_MR_ENDPOINT binding.
 * Caller holds ctx->lock (the domain is FI_THREAD_DOMAIN).
 */
int ferry__mr_open(struct ferry_context *ctx, struct ferry__rail *rail,
                   struct fi_mr_attr *attr, uint64_t flags,
                   struct fid_mr **mr);
/* Closes the registration; caller guarantees nobody uses it. */
void ferry__mem_close(struct ferry_mem *mem);
/* The same with ctx->lock already held by the caller. */
void ferry__mem_close_locked(struct ferry_mem *mem);
/* Address a remote operation targets for offset `off` in rmem. */
static inline uint64_t ferry__rma_addr(const struct ferry_rmem *rmem,
                                       uint64_t off)
{
    return rmem->virt_addr ? rmem->base + off : off;
}
/* Key bytes -> the u64 key of a non-raw key (little-endian). */
uint64_t ferry__key_to_u64(const uint8_t *key, size_t len);
void ferry__mems_destroy(struct ferry_context *ctx);

/* ---- dlist (dlist.c) ---------------------------------------------------- */

/* count blocks of block_size bytes, stride apart, from offset. */
struct ferry__dseg {
    struct ferry_mem *mem;   /* local lists */
    struct ferry_rmem *rmem; /* remote lists */
    uint64_t offset;
    size_t block_size;
    size_t count;
    size_t stride;
    size_t first; /* list index of the first block */
};

struct ferry_dlist {
    uint32_t magic;
    struct ferry_context *ctx;
    enum ferry_dlist_kind kind;
    char name[64];
    struct ferry__dseg *segs;
    size_t nseg, cap;
    size_t count;          /* blocks */
    size_t uniform_block;  /* every segment's block size, or 0 if mixed */
    atomic_bool frozen;    /* prepared once: no more segments */
    _Atomic unsigned prepared; /* prepared transfers using it */
};

struct ferry_prep {
    uint32_t magic;
    struct ferry_peer *peer;
    enum ferry__op_kind kind;
    struct ferry_dlist *local;
    struct ferry_dlist *remote;
    bool same_blocks;       /* no per-block length check needed */
    _Atomic unsigned users; /* requests in flight */
};

/* One block resolved to its region. */
struct ferry__block {
    struct ferry_mem *mem;
    struct ferry_rmem *rmem;
    uint64_t offset;
    size_t len;
};

const struct ferry__dseg *ferry__dlist_find(const struct ferry_dlist *dl,
                                            size_t idx);
void ferry__dlist_block(const struct ferry_dlist *dl, size_t idx,
                        struct ferry__block *b);
/* Bytes moved by posting these n local blocks. */
uint64_t ferry__prep_bytes(const struct ferry_prep *prep, const uint32_t *lidx,
                           size_t n);
int ferry__prep_check_indices(const struct ferry_prep *prep,
                              const uint32_t *lidx, const uint32_t *ridx,
                              size_t n);

/* ---- device memory (hmem.c, stage.c) ----------------------------------- */

/*
 * The device path of a context from facts alone, so every combination is
 * testable without a GPU: whether a backend runs, the domain's caps, the
 * libfabric versions at build time (FI_MR_DMABUF), at run time and
 * requested.  Writes a sentence saying why into why.
 */
struct ferry__dev_facts {
    const char *backend; /* NULL: none (backend_why says why) */
    const char *backend_why;
    const char *provider, *domain;
    bool domain_hmem;       /* the domain was opened with FI_HMEM */
    bool built_with_dmabuf; /* FI_MR_DMABUF in the headers ferry built with */
    uint32_t fi_runtime;    /* fi_version() */
    uint32_t fi_requested;  /* the API version ferry asked fi_getinfo for */
};
enum ferry__dev_path ferry__dev_path_choose(const struct ferry__dev_facts *f,
                                            char *why, size_t len);
const char *ferry__dev_path_name(enum ferry__dev_path path);
/* Sets ctx->dev_path and ctx->dev_why (context creation). */
void ferry__dev_path_init(struct ferry_context *ctx);
/* Before a notification is delivered: makes peers' GPUDirect writes into
 * this context's device memory visible to the devices. */
void ferry__hmem_flush_rdma(struct ferry_context *ctx);

/* Staging buffers and streams for device `ordinal` exist (no lock held). */
int ferry__stage_ensure(struct ferry_context *ctx, int ordinal);
/*
 * Starts the next chunk of the request's current item (at req->cur_off),
 * whose local memory is staged: returns the bytes started, 0 when no
 * buffer or operation slot is free now (progress retries), or -1 when it
 * failed and ended the request.  Caller holds ctx->lock.
 */
ssize_t ferry__stage_post(struct ferry_req *req,
                          const struct ferry_iov *item);
/* Moves staged chunks whose copies finished on (ctx->lock held). */
void ferry__stage_progress(struct ferry_context *ctx);
/* An RMA of a staged chunk came back (from ferry__op_complete). */
void ferry__stage_rma_done(struct ferry__op *op, int err);
void ferry__stage_destroy(struct ferry_context *ctx);
/*
 * Target side: a peer wrote [off, off + len) of the mirror of region
 * mirror_id; queues its copy to the device.  Caller holds ctx->lock.
 */
void ferry__mirror_sync(struct ferry_context *ctx, uint64_t mirror_id,
                        uint64_t off, uint64_t len);
/* Whether mirror copies are still queued (notifications wait for them). */
bool ferry__mirror_busy(struct ferry_context *ctx);
/* Delivers the notifications held back while mirror copies ran. */
void ferry__notify_release_held(struct ferry_context *ctx);

/* ---- xfer and progress (xfer.c, progress.c) ----------------------------- */

struct ferry__op {
    struct fi_context2 fi_ctx; /* first: libfabric hands it back */
    struct ferry_req *req;
    struct ferry__rail *rail;
    struct ferry__op *next_free;
    struct ferry__stage_slot *slot; /* a staged chunk's RMA, else NULL */
    enum ferry__op_kind kind;
    bool notifies; /* a write carrying its request's notification */
    size_t len;
    uint8_t msg[FERRY__MSG_SIZE]; /* a notification's wire bytes */
};

/* The registration ferry found (cached) or made (one-shot) for an iov. */
struct ferry__found {
    struct ferry_mem *mem;
    struct ferry__rc_entry *entry; /* cache reference, or NULL: mem is ours */
};

enum ferry__notify_state {
    FERRY__NOTIFY_NONE,    /* the request carries none */
    FERRY__NOTIFY_PENDING, /* to be sent once the data has landed */
    FERRY__NOTIFY_SENT,    /* in flight */
    FERRY__NOTIFY_DONE,
};

struct ferry_req {
    uint32_t magic;
    struct ferry_context *ctx;
    struct ferry_peer *peer;
    struct ferry_req *prev, *next; /* on ctx->active or ctx->done */
    struct ferry__req_list *list;  /* which of the two */
    enum ferry__op_kind kind;
    size_t niov;                 /* iovs, or prepared block pairs */
    struct ferry_iov *iov;       /* copy of the caller's array, or NULL */
    struct ferry_prep *prep;     /* a prepared request: */
    uint32_t *lidx, *ridx;       /* its block pairs (one allocation) */
    struct ferry__found *found;  /* per iov without lmem, or NULL */
    /* Next byte to post: iov index and offset within it. */
    size_t cur_iov;
    size_t cur_off;
    uint64_t bytes;  /* in all */
    bool striped;    /* chunks spread over the rails (rails.c, xfer.c) */
    size_t chunk;    /* largest operation it posts */
    unsigned rail;   /* the rail of an unstriped request */
    int rail_pending; /* rail chosen for the next chunk, or -1 */
    int64_t credit[FERRY__MAX_RAILS]; /* weighted round robin of chunks */
    size_t ops_in_flight;
    uint64_t bytes_done;
    uint64_t deadline_ns; /* 0: none */
    enum ferry__notify_state notify;
    uint64_t notify_id;
    uint64_t notify_value;
    /* Writes into remote mirrors (rmem->mirror) are followed by one sync
     * message per item, sync_next the next item to send one for; the
     * notification, if any, goes once they are all delivered. */
    bool sync_mirrors;
    size_t sync_next;
    bool staged; /* some of its local memory goes through staging */
    int status;           /* FERRY_EINPROGRESS, 0 or the error */
    bool user_freed;      /* free once the provider is done with it */
    char errmsg[256];
};

/*
 * All of these run with ctx->lock held.
 *
 * A request is posted chunk by chunk as operation slots allow, ends once
 * (success, error, deadline or cancel: the first end wins), and is retired
 * when it has ended and every operation it posted has come back: only then
 * are its registrations released, so a cancelled or timed-out request
 * never lets a buffer go while the provider may still touch it.
 */
/* Posts what the request still has to post, as far as slots allow. */
void ferry__req_post_pending(struct ferry_req *req);
/* Ends the request with status unless it has ended already. */
void ferry__req_end(struct ferry_req *req, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Takes op, the rail's first free slot, for req. */
void ferry__op_take(struct ferry__rail *rail, struct ferry__op *op,
                    struct ferry_req *req, enum ferry__op_kind kind,
                    size_t len);
/* fi_write or fi_read (req->kind) of [local, +len) at roff of rmem; a
 * write that notifies carries the request's notification as its remote
 * CQ data (fi_writedata). */
ssize_t ferry__rma_post(struct ferry_req *req, struct ferry__rail *rail,
                        struct ferry__op *op, void *local, void *desc,
                        const struct ferry_rmem *rmem, uint64_t roff,
                        size_t len, bool notifies);
/* Marks it done if all is posted and back; retires it if ended and idle. */
void ferry__req_settle(struct ferry_req *req);
/* An operation came back, with err 0 or the error and its sentence. */
void ferry__op_complete(struct ferry__op *op, int err, const char *why);
/* Frees every request (context destruction, after the endpoints closed). */
void ferry__reqs_destroy(struct ferry_context *ctx);

/* ---- notify (notify.c) --------------------------------------------------- */

/* Receive buffers (and their registrations); after fi_enable. */
int ferry__notify_rail_open(struct ferry_context *ctx,
                            struct ferry__rail *rail);
/* After the endpoint is closed. */
void ferry__notify_rail_close(struct ferry__rail *rail);
/* Posts the request's notification on op; returns fi_send's result. */
ssize_t ferry__notify_send(struct ferry_req *req, struct ferry__rail *rail,
                           struct ferry__op *op);
/* Posts a mirror sync message (stage.c) on op. */
ssize_t ferry__sync_send(struct ferry_req *req, struct ferry__rail *rail,
                         struct ferry__op *op, uint64_t mirror_id,
                         uint64_t off, uint64_t len);
/* Bits of each half of the rail's remote CQ data word, one for the id and
 * one for the value (0: the rail has no CQ data). */
unsigned ferry__notify_data_bits(const struct ferry__rail *rail);
/* Whether {id, value} fits the rail's remote CQ data, and packed into it
 * (the target unpacks it with the same rail's size: both ends of a rail
 * run the same provider). */
bool ferry__notify_fits(const struct ferry__rail *rail, uint64_t id,
                        uint64_t value);
uint64_t ferry__notify_pack(const struct ferry__rail *rail, uint64_t id,
                            uint64_t value);
/* A peer's write arrived carrying a notification as remote CQ data. */
void ferry__notify_data_received(struct ferry_context *ctx,
                                 const struct ferry__rail *rail,
                                 uint64_t data);
/* A receive completed with len bytes; queues, counts, re-posts. */
void ferry__notify_received(struct ferry_context *ctx,
                            struct ferry__rail *rail, struct ferry__recv *rv,
                            size_t len);
void ferry__notify_destroy(struct ferry_context *ctx);

/* Polls every rail once and enforces deadlines; caller holds ctx->lock. */
int ferry__progress_locked(struct ferry_context *ctx);
/* Progress for a caller that waits: none when a progress thread runs. */
int ferry__progress_poll(struct ferry_context *ctx);
/* Between two polls of a waiting loop (spins counts them). */
void ferry__progress_pause(struct ferry_context *ctx, unsigned spins);
int ferry__progress_thread_start(struct ferry_context *ctx);
void ferry__progress_thread_stop(struct ferry_context *ctx);

#endif /* FERRY_INTERNAL_H */
