/*
 * ferry: one-sided RMA between the memories of machines over libfabric.
 *
 * The core of the public API: contexts, registration, peers, transfers,
 * notifications, descriptor lists, fan-out.  <ferry.h> includes it with
 * the other subjects: <ferry/meta.h> (how peers meet), <ferry/topo.h>
 * (NICs and GPUs) and <ferry/testing.h> (device memory for tests and
 * examples).  Handles are opaque; public structs start with a
 * `size` field that the caller sets (ferry_config_init() and the *_INIT
 * macros do it) so that they can grow without breaking old callers.
 *
 * Every call returns 0 on success or a negative error from
 * <ferry/errno.h>.  ferry_last_error() then holds a sentence saying what
 * was wrong and what would be right.
 *
 * Threads: every call may be made from several threads at once, except
 * that a handle may not be closed while another thread uses it.
 *
 * Timeouts, one rule for the whole API (ferry(7) "Timeouts"):
 *   - a call that waits (ferry_req_wait, ferry_counter_wait,
 *     ferry_meta_peer...) takes timeout_ms: < 0 waits without limit, 0
 *     looks once without waiting, > 0 waits at most that long; when the
 *     time is up before what it waits for, it returns FERRY_EAGAIN:
 *     nothing failed, and calling again goes on waiting;
 *   - a deadline (config.timeout_ms, ferry_xfer_opts.timeout_ms,
 *     config.metadata_timeout_ms, ferry_fanout_opts.timeout_ms, a
 *     connection's): < 0 none, 0 the default, > 0 milliseconds; work whose
 *     deadline passes ends with FERRY_ETIMEDOUT.
 */
#ifndef FERRY_API_CORE_H
#define FERRY_API_CORE_H

#include <stddef.h>
#include <stdint.h>

#include <ferry/errno.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FERRY_API __attribute__((visibility("default")))
#else
#define FERRY_API
#endif
/* A function of the API defined in the header itself, compiled into the
 * caller (ferry_config_init: the caller's sizeof). */
#define FERRY_INLINE static inline

/*
 * What the FERRY_..._INIT macros stand for: a struct whose size field says
 * its size, every other member zero.  C names the field.  C++ before C++20
 * has no designated initializers, and g++ -Wextra warns of every member a
 * braced list leaves out, so there a value-initialized (zeroed) object is
 * given its size.
 */
#ifdef __cplusplus
#define FERRY__SIZED_INIT(type)                                                \
    ([] {                                                                      \
        type sized_{};                                                         \
        sized_.size = sizeof(sized_);                                          \
        return sized_;                                                         \
    }())
#else
#define FERRY__SIZED_INIT(type) {.size = sizeof(type)}
#endif

/* API version this header describes: major << 16 | minor << 8 | release. */
#define FERRY_API_VERSION 0x010000

/* The API version of the library actually loaded. */
FERRY_API unsigned ferry_get_api_version(void);
/* "ferry 1.0.0 (libfabric 1.17)": static string, never NULL. */
FERRY_API const char *ferry_version_string(void);

/* Static description of an error code, never NULL. */
FERRY_API const char *ferry_strerror(int err);
/*
 * The sentence that explains the last error returned to this thread, or ""
 * when there was none.  Valid until the thread's next ferry call.
 */
FERRY_API const char *ferry_last_error(void);

typedef struct ferry_context ferry_context_t;
typedef struct ferry_peer ferry_peer_t;
typedef struct ferry_mem ferry_mem_t;
typedef struct ferry_rmem ferry_rmem_t;
typedef struct ferry_req ferry_req_t;

/*
 * Memory registration modes (libfabric's mr_mode bits).  ferry adapts to
 * whichever the provider asks for; the config can also offer fewer or
 * force more of them, which is how every path is tested.
 */
enum ferry_mr_mode {
    FERRY_MR_LOCAL = 1u << 0,     /* local buffers need a registration */
    FERRY_MR_VIRT_ADDR = 1u << 1, /* remote addresses are virtual, not offsets */
    FERRY_MR_ALLOCATED = 1u << 2, /* only mapped memory may be registered */
    FERRY_MR_PROV_KEY = 1u << 3,  /* the provider chooses the keys */
    FERRY_MR_ENDPOINT = 1u << 4,  /* registrations are bound to an endpoint */
    FERRY_MR_RAW = 1u << 5,       /* keys may be longer than 8 bytes */
    FERRY_MR_HMEM = 1u << 6,      /* device memory needs FI_HMEM registration */
};
#define FERRY_MR_ALL 0x7fu

struct ferry_config {
    size_t size; /* sizeof(struct ferry_config), set by ferry_config_init */
    /*
     * libfabric provider ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa"...)
     * and domain ("lo", "mlx5_0").  NULL: chosen by capability.  FI_PROVIDER
     * in the environment narrows the choice too.
     */
    const char *provider;
    const char *domain;
    unsigned max_rails; /* domains used side by side; default 1 */
    /* Every peer is on this host: shared memory becomes a candidate. */
    int local_only;
    /* FERRY_MR_* bits offered to the provider (default FERRY_MR_ALL). */
    unsigned mr_mode_offer;
    /* FERRY_MR_* bits applied even when the provider does not ask. */
    unsigned mr_mode_force;
    size_t mr_key_size;  /* cap on key bytes used; 0: the provider's */
    /* Cap on one RMA operation; 0: 1 MiB, or the provider's maximum if
     * lower (larger requests go as several operations).  Device memory
     * that shm registered is capped only by this, when set, and by the
     * provider: shm copies each operation with the device's copy engine. */
    size_t max_msg_size;
    size_t tx_depth;     /* cap on operations in flight per rail; 0: provider's */
    /* Default deadline of a request in ms: < 0 none, 0 the default
     * (60000; FERRY_TIMEOUT_MS, -1 for none). */
    int timeout_ms;
    /*
     * Start a thread that drives progress.  A context that is only ever a
     * target (its memory written or read by peers) and never calls
     * ferry_progress() needs it: most providers move data only when the
     * target progresses.
     */
    int progress_thread;
    /* Shared secret of the bootstrap (bootstrap:// metadata); NULL:
     * FERRY_OOB_TOKEN. */
    const char *oob_token;
    /*
     * Registration cache for iovs given without lmem (default on).  Its
     * bounds (defaults 16384 entries, 64 GiB): past either, unused
     * entries are evicted (ferry_stats' rcache_evictions), and a range
     * larger than rcache_max_bytes is registered for its request only.
     * ferry_config_init takes them from FERRY_RCACHE_MAX_ENTRIES and
     * FERRY_RCACHE_MAX_BYTES (whole numbers, at least 1; bytes without a
     * suffix).
     */
    int registration_cache;
    size_t rcache_max_entries;
    size_t rcache_max_bytes;
    /*
     * The CUDA device whose memory the context mostly moves: its nearest
     * NICs become the first rails.  -1 (default): host memory, whose
     * nearest NICs are those of the calling thread's NUMA node.
     */
    int cuda_device;
    /* hwloc XML topology to use instead of the live one; NULL: the file
     * FERRY_TOPOLOGY_XML names, or the live machine. */
    const char *topology_xml;
    /* Notifications kept for ferry_notify_poll (default 1M); past it they
     * are only counted (ferry_counter_*), and a warning says so once. */
    size_t notify_queue_max;
    /* Requests of at least this many bytes are striped over the rails in
     * proportion to their speed; smaller ones take rails in turn
     * (default 128 KiB). */
    size_t stripe_threshold;
    /*
     * Device memory on a domain that cannot register it (no FI_HMEM, as
     * with Debian's libfabric) moves through this many pinned host
     * buffers of this size, copies and network transfers overlapping
     * (defaults 8 and 1 MiB; FERRY_STAGING_BUFFERS, FERRY_STAGING_CHUNK;
     * a chunk moves as one operation, so never above max_msg_size).
     */
    size_t staging_buffers;
    size_t staging_chunk;
    /*
     * A host name or address peers are reached at (where the bootstrap
     * connects or listens): the domain on the interface the kernel routes
     * to it comes first (loopback for 127.0.0.1), and the choice sentence
     * says so.  NULL: FERRY_PEER_HOST, else no preference.
     */
    const char *peer_host;
    /*
     * Liveness (docs/semantics.md): a peer ferry waits on -- requests to
     * it, ferry_counter_wait_peer, ferry_peer_watch -- that shows no sign
     * of life for this long is declared dead (or unreachable, if it never
     * answered), and everything waiting on it ends with FERRY_EPEERDEAD.
     * Completions are signs of life; when there are none, ferry sends a
     * small heartbeat.  Default 2000; 0 turns liveness off (requests then
     * end by their deadline).  FERRY_LIVENESS_MS sets it.  It must exceed
     * the time one operation (max_msg_size bytes) takes on the link.
     */
    unsigned liveness_ms;
    /*
     * Listening on an address other than loopback without a bootstrap
     * token is refused (anyone who reaches the port could import every
     * published region); 1 allows it.  FERRY_OOB_INSECURE=1 sets it.
     */
    int oob_insecure;
    /*
     * The metadata service ferry_meta_open uses when given no URL (see
     * "Metadata" below).  NULL: FERRY_METADATA.
     */
    const char *metadata;
    /* Seconds a context's metadata entries outlive it when it dies
     * (default 10; FERRY_METADATA_TTL): its lease on etcd. */
    unsigned metadata_ttl_s;
    /* Deadline in ms of a metadata call that has no timeout of its own
     * (publish, withdraw, open), per attempt: < 0 none, 0 the default
     * (5000). */
    int metadata_timeout_ms;
    /*
     * Endpoints opened on each domain, each a rail of its own (requests
     * take the rails in turn; large ones are striped over them), at most
     * 8 rails in all.  0 (default): ferry's choice, 2 on shm and 1
     * elsewhere -- before libfabric 2.5 an shm endpoint moves one write
     * of up to 4 KiB to a peer at a time, and a second endpoint lets
     * another go meanwhile; from 2.5 on, shm's writes of up to its inject
     * size keep to the first endpoint and the second serves larger
     * transfers (docs/performance.md).  FERRY_ENDPOINTS_PER_DOMAIN sets
     * it.
     */
    unsigned endpoints_per_domain;
    /*
     * Peers on this host over shared memory while the context's provider
     * reaches the others: 1 on, 0 off, -1 (default) on unless a provider
     * is named (config.provider, FERRY_PROVIDER or FI_PROVIDER), which is
     * then used for every peer.  ferry_peer_info says which transport a
     * peer got and why.  FERRY_SHM_PEERS sets it.
     */
    int shm_peers;
    /*
     * A directory (made if missing) the context writes its metrics to
     * every telemetry_interval_ms (default 1000), as
     * DIR/ferry-PID-N.prom, for ferry_stat(1); NULL (default): none.
     * FERRY_TELEMETRY and FERRY_TELEMETRY_INTERVAL_MS set them.  The
     * string must outlive ferry_context_create only.
     */
    const char *telemetry_dir;
    unsigned telemetry_interval_ms;
};

/*
 * Every field of struct ferry_config, in its order, as
 * X(name, kind, default, variable): kind is STR, BOOL, INT, UINT or SIZE
 * (const char *, int 0/1, int, unsigned, size_t); default is what
 * ferry_config_init sets before it reads the environment; variable is the
 * FERRY_* variable ferry_config_init reads for it, or "" for none.  (Two
 * fields are read where they are used, when left NULL: oob_token's
 * FERRY_OOB_TOKEN and topology_xml's FERRY_TOPOLOGY_XML.)  ferry's own
 * defaults, its Python binding and the docs' check walk this list.
 */
#define FERRY_CONFIG_FIELDS(X)                                               \
    X(provider, STR, NULL, "FERRY_PROVIDER")                                 \
    X(domain, STR, NULL, "FERRY_DOMAIN")                                     \
    X(max_rails, UINT, 1, "FERRY_MAX_RAILS")                                 \
    X(local_only, BOOL, 0, "")                                               \
    X(mr_mode_offer, UINT, FERRY_MR_ALL, "")                                 \
    X(mr_mode_force, UINT, 0, "")                                            \
    X(mr_key_size, SIZE, 0, "")                                              \
    X(max_msg_size, SIZE, 0, "")                                             \
    X(tx_depth, SIZE, 0, "")                                                 \
    X(timeout_ms, INT, 60000, "FERRY_TIMEOUT_MS")                            \
    X(progress_thread, BOOL, 0, "")                                          \
    X(oob_token, STR, NULL, "")                                              \
    X(registration_cache, BOOL, 1, "")                                       \
    X(rcache_max_entries, SIZE, 16384, "FERRY_RCACHE_MAX_ENTRIES")           \
    X(rcache_max_bytes, SIZE, (size_t)64 << 30, "FERRY_RCACHE_MAX_BYTES")    \
    X(cuda_device, INT, -1, "")                                              \
    X(topology_xml, STR, NULL, "")                                           \
    X(notify_queue_max, SIZE, (size_t)1 << 20, "")                           \
    X(stripe_threshold, SIZE, (size_t)128 << 10, "")                         \
    X(staging_buffers, SIZE, 8, "FERRY_STAGING_BUFFERS")                     \
    X(staging_chunk, SIZE, (size_t)1 << 20, "FERRY_STAGING_CHUNK")           \
    X(peer_host, STR, NULL, "FERRY_PEER_HOST")                               \
    X(liveness_ms, UINT, 2000, "FERRY_LIVENESS_MS")                          \
    X(oob_insecure, BOOL, 0, "FERRY_OOB_INSECURE")                           \
    X(metadata, STR, NULL, "FERRY_METADATA")                                 \
    X(metadata_ttl_s, UINT, 10, "FERRY_METADATA_TTL")                        \
    X(metadata_timeout_ms, INT, 5000, "")                                    \
    X(endpoints_per_domain, UINT, 0, "FERRY_ENDPOINTS_PER_DOMAIN")           \
    X(shm_peers, INT, -1, "FERRY_SHM_PEERS")                                 \
    X(telemetry_dir, STR, NULL, "FERRY_TELEMETRY")                           \
    X(telemetry_interval_ms, UINT, 1000, "FERRY_TELEMETRY_INTERVAL_MS")

/*
 * Fills cfg with defaults, then applies FERRY_PROVIDER, FERRY_DOMAIN,
 * FERRY_PEER_HOST, FERRY_LIVENESS_MS, FERRY_METADATA, FERRY_METADATA_TTL,
 * FERRY_OOB_INSECURE, FERRY_MAX_RAILS, FERRY_ENDPOINTS_PER_DOMAIN,
 * FERRY_TIMEOUT_MS, FERRY_STAGING_BUFFERS, FERRY_STAGING_CHUNK,
 * FERRY_RCACHE_MAX_ENTRIES, FERRY_RCACHE_MAX_BYTES, FERRY_SHM_PEERS,
 * FERRY_TELEMETRY and FERRY_TELEMETRY_INTERVAL_MS from the environment, and checks FERRY_KEEP_FI_MR_CACHE (below).
 * Returns 0, or FERRY_EINVAL if cfg is NULL or a variable is malformed
 * (the sentence names the variable, its value and what it accepts).
 */
FERRY_API int ferry_config_init_sized(struct ferry_config *cfg, size_t size);

/*
 * ferry_config_init_sized with the size of the struct ferry_config this
 * header declares, compiled into the caller: a program built against an
 * older ferry 1.x header, whose struct is shorter, never has more
 * written into it than it holds.  Fields the caller's struct lacks keep
 * their defaults (ferry_context_create reads *size* bytes).  size must be
 * at least sizeof(size_t) and at most this ferry's struct (FERRY_EINVAL).
 */
FERRY_INLINE int ferry_config_init(struct ferry_config *cfg)
{
    return ferry_config_init_sized(cfg, sizeof(*cfg));
}

/*
 * libfabric's own registration cache.  It can deadlock with malloc/madvise
 * hooks (Open MPI's under mimalloc: libfabric #10879), and ferry caches
 * registrations itself, so before its first libfabric call ferry sets
 * FI_MR_CACHE_MONITOR=disabled, FI_MR_CUDA_CACHE_MONITOR_ENABLED=0 and
 * FI_EFA_MR_CACHE_ENABLE=0 in the process environment, each unless it is
 * already set (not FI_MR_CACHE_MAX_COUNT=0: that also sizes the cache of
 * GPU IPC handles, without which shm with CUDA opens no domain).  The environment is the
 * process's: this turns the cache off for every other libfabric user in
 * the process too (aws-ofi-nccl, another library's libfabric backend).
 *
 * FERRY_KEEP_FI_MR_CACHE=1 in the environment makes ferry set none
 * (then libfabric also caches ferry's registrations, and the deadlock
 * above is possible again).  0 or unset: the default.  Any other value is
 * refused by ferry_config_init (FERRY_EINVAL), and ignored with a warning
 * where ferry decides without one.
 *
 * ferry decides once per process, at its first libfabric call or the
 * first call of the two functions below, whichever comes first, so set
 * the variable before either; it is not a config field because libfabric
 * itself reads its variables only once, when it initialises, and a
 * context's config could not change them.  For the same reason, if another
 * library initialised libfabric in this process before ferry's first
 * call, ferry's setting comes too late: set FI_MR_CACHE_MONITOR=disabled
 * yourself then.
 */
enum ferry_fi_mr_cache {
    FERRY_FI_MR_CACHE_OFF = 0,  /* ferry set the variables to "off" */
    FERRY_FI_MR_CACHE_USER = 1, /* some were set before ferry looked: left
                                   as they were (ferry set the others,
                                   unless FERRY_KEEP_FI_MR_CACHE=1) */
    FERRY_FI_MR_CACHE_KEPT = 2, /* FERRY_KEEP_FI_MR_CACHE=1: ferry set none */
};
/* What ferry did, deciding now if it had not yet. */
FERRY_API enum ferry_fi_mr_cache ferry_fi_mr_cache_state(void);
/*
 * The same in one sentence naming the variables and their values, e.g.
 * "ferry turned libfabric's MR cache off for this process
 * (FI_MR_CACHE_MONITOR=disabled, FI_MR_CUDA_CACHE_MONITOR_ENABLED=0,
 * FI_EFA_MR_CACHE_ENABLE=0); FERRY_KEEP_FI_MR_CACHE=1 leaves it on".  Static, never NULL.
 */
FERRY_API const char *ferry_fi_mr_cache_status(void);

/*
 * Opens a context: provider selection, then fabric, domain, endpoint,
 * completion queue and address vector for each rail.
 * cfg may be NULL (defaults).  *ctx is set on success only.
 * Returns 0, FERRY_EINVAL (bad cfg), FERRY_ENOPROVIDER (the sentence lists
 * every candidate and why it was refused), FERRY_ENOSPC (shm: no room in
 * /dev/shm), FERRY_EPROVIDER or FERRY_ENOMEM.
 */
FERRY_API int ferry_context_create(const struct ferry_config *cfg,
                                   ferry_context_t **ctx);
/*
 * Closes the context and everything made from it still open: metadata
 * handles, requests (those in flight end), fan-outs, prepared transfers,
 * descriptor lists, registrations, remote regions and peers, in that
 * order; their handles become invalid (ferry(7): ownership).  Returns 0
 * (also for NULL) or FERRY_EHANDLE.
 */
FERRY_API int ferry_context_close(ferry_context_t *ctx);

/*
 * Copies the context's address blob (what a peer passes to
 * ferry_peer_add) into buf.  *len: in, the capacity; out, the size used or
 * needed.  Returns 0, FERRY_ENOSPC (buf NULL or too small; *len says how
 * much is needed) or FERRY_EINVAL.
 */
FERRY_API int ferry_context_address(ferry_context_t *ctx, void *buf,
                                    size_t *len);

struct ferry_context_info {
    size_t size; /* set by the caller: sizeof(struct ferry_context_info) */
    /* Strings stay valid while the context lives. */
    const char *provider;
    const char *fabric;
    const char *domain; /* of the first rail */
    unsigned nrails;
    unsigned mr_mode; /* FERRY_MR_* bits in effect */
    size_t mr_key_size;
    /* Largest single RMA operation ferry posts, but of device memory
     * that shm registered (config.max_msg_size says how). */
    size_t max_msg_size;
    size_t tx_depth;     /* operations in flight per rail */
    size_t rx_depth;
    int hmem;                 /* the domain registers device memory */
    unsigned fi_version;      /* libfabric at run time, FI_VERSION() form */
    const char *why;          /* one sentence: why this provider */
    /* How cached registrations learn that memory went away, and whether
     * the userfaultfd monitor runs (else only ferry_mem_invalidate calls). */
    const char *rcache_monitor;
    int rcache_monitor_running;
    /* How device memory is registered on this context, and why: dmabuf,
     * FI_HMEM by virtual address, staged through host buffers, or not at
     * all (no device backend). */
    const char *device_path;
    /* A write request's notification rides on its last write (remote CQ
     * data) when its id and value are each below 2^notify_in_write_bits;
     * 0: notifications always go as messages (docs/semantics.md). */
    unsigned notify_in_write_bits;
    /* What the peers of this host use when it is not provider ("shm",
     * beside a network provider: config.shm_peers), else NULL; and the
     * sentence saying why, either way.  nrails counts its rails too. */
    const char *local_provider;
    const char *local_why;
};
#define FERRY_CONTEXT_INFO_INIT FERRY__SIZED_INIT(struct ferry_context_info)

/* Returns 0, or FERRY_EINVAL if ctx or info is NULL or info->size is 0. */
FERRY_API int ferry_context_info(ferry_context_t *ctx,
                                 struct ferry_context_info *info);

/*
 * Event loops (epoll, libuv, asyncio): *fd becomes readable when, since
 * the last ferry_context_arm, a request of the context ended or a
 * notification arrived.  The context's progress thread does the work and
 * writes the descriptor (config.progress_thread = 1; without one the
 * call refuses with FERRY_EINVAL).  The descriptor is the context's: do
 * not close it; it goes with the context.  The loop:
 *
 *     for (;;) {
 *         test the requests, poll the notifications;
 *         if (ferry_context_arm(ctx) == FERRY_EAGAIN)
 *             continue;        (something came since the last arm)
 *         wait until fd is readable;
 *     }
 *
 * ferry_context_arm returns 0 (armed: anything that comes from now on
 * makes fd readable), FERRY_EAGAIN (events came since the previous arm,
 * which may not have been looked at: look, then arm again) or
 * FERRY_EINVAL (no ferry_context_fd yet).
 */
FERRY_API int ferry_context_fd(ferry_context_t *ctx, int *fd);
FERRY_API int ferry_context_arm(ferry_context_t *ctx);

/*
 * What ferry would choose from, without opening anything: every candidate
 * provider/domain for cfg (NULL: defaults and the environment), best
 * first, and why the others were refused.  tools/ferry_info prints it.
 */
typedef struct ferry_probe ferry_probe_t;

struct ferry_provider_report {
    size_t size; /* set by the caller: FERRY_PROVIDER_REPORT_INIT */
    const char *provider;
    const char *fabric;
    const char *domain;
    int chosen;          /* what ferry_context_create would pick */
    const char *verdict; /* what it is, in a few words */
    unsigned mr_mode;    /* FERRY_MR_* the provider asks for */
    size_t mr_key_size;
    size_t max_msg_size;
    size_t tx_depth;
    /* What the provider is, from its name on this libfabric: "rxm
     * (reliable datagrams) over tcp's connected endpoints (on libfabric
     * 1.17 the reliable-datagram tcp provider is called net)". */
    const char *about;
};
#define FERRY_PROVIDER_REPORT_INIT FERRY__SIZED_INIT(struct ferry_provider_report)

/* Returns 0 even when nothing is usable (count 0; see refused), or
 * FERRY_EINVAL / FERRY_ENOMEM / FERRY_EPROVIDER. */
FERRY_API int ferry_probe_providers(const struct ferry_config *cfg,
                                    ferry_probe_t **probe);
FERRY_API size_t ferry_probe_count(const ferry_probe_t *probe);
/* Strings stay valid while probe lives.  Returns 0 or FERRY_EINVAL. */
FERRY_API int ferry_probe_entry(const ferry_probe_t *probe, size_t i,
                                struct ferry_provider_report *report);
/* "verbs: no device or interface available; ..." or "". */
FERRY_API const char *ferry_probe_refused(const ferry_probe_t *probe);
/* The same, one provider at a time: how many, and the i-th provider name
 * with its reason (valid while probe lives).  Returns 0 or FERRY_EINVAL. */
FERRY_API size_t ferry_probe_refusal_count(const ferry_probe_t *probe);
FERRY_API int ferry_probe_refusal(const ferry_probe_t *probe, size_t i,
                                  const char **provider, const char **reason);
/* Frees the report.  Returns 0 (also for NULL). */
FERRY_API int ferry_probe_close(ferry_probe_t *probe);

/*
 * Adds a peer from its address blob.  Returns 0, FERRY_EBLOB (malformed),
 * FERRY_EINCOMPAT (another provider or address format: the sentence names
 * both sides), FERRY_EHOSTUNREACH (shared memory or a loopback address
 * towards another host), FERRY_ENOSPC (no room in /dev/shm),
 * FERRY_EPEERDEAD (a closed shm context of this process), FERRY_EPROVIDER
 * or FERRY_ENOMEM.  The peer lives until
 * ferry_peer_close() or the context's destruction.
 */
FERRY_API int ferry_peer_add(ferry_context_t *ctx, const void *addr,
                             size_t len, ferry_peer_t **peer);
/*
 * Removes a peer.  Returns FERRY_EBUSY while remote regions imported from
 * it are still held (ferry_rmem_close them first), or while requests to it
 * run or a ferry_counter_wait_peer waits on it.  Operations the provider
 * still holds for it (of requests that ended, heartbeats) do not hold the
 * call: the handle is invalid at once, and its memory goes when they come
 * back.  NULL-safe (returns 0).
 */
FERRY_API int ferry_peer_close(ferry_peer_t *peer);

/*
 * A peer's state.  CONNECTING: added, never heard from yet.  UP: it
 * answered.  UNREACHABLE: waited on for config.liveness_ms without ever
 * answering (nothing listens at its address, or no route).  DEAD: it had
 * answered, then its connection was reset or it went silent for
 * liveness_ms while waited on.  The last two are final: requests to the
 * peer end with FERRY_EPEERDEAD and new ones are refused with it; a peer
 * that comes back is added again (ferry_peer_add gives a new handle).
 */
enum ferry_peer_state {
    FERRY_PEER_CONNECTING = 0,
    FERRY_PEER_UP = 1,
    FERRY_PEER_UNREACHABLE = 2,
    FERRY_PEER_DEAD = 3,
};

/*
 * The peer's state, and into why (len bytes, may be NULL) the sentence
 * that says what was seen ("no sign of life for 2013 ms: 3 heartbeats
 * unanswered").  Returns 0, FERRY_EINVAL (NULL peer or state) or
 * FERRY_EHANDLE (not a live peer).
 */
FERRY_API int ferry_peer_state(ferry_peer_t *peer,
                               enum ferry_peer_state *state, char *why,
                               size_t len);

/*
 * How the context reaches a peer.  A context may have two transports:
 * its provider, and shared memory for the peers of its host beside it
 * (config.shm_peers); ferry_peer_add takes shared memory for a peer of
 * this host when both sides have it, else a transport both have.
 */
struct ferry_peer_info {
    size_t size; /* set by the caller: sizeof(struct ferry_peer_info) */
    /* Strings stay valid while the peer does. */
    const char *label;    /* "HOST at ADDRESS", as log lines name it */
    const char *provider; /* the transport's provider ("shm", "tcp;ofi_rxm") */
    unsigned nrails;      /* rails used towards it */
    int shm;              /* shared memory: the peer is on this host */
    const char *why;      /* one sentence: why this transport */
};
#define FERRY_PEER_INFO_INIT FERRY__SIZED_INIT(struct ferry_peer_info)

/* Returns 0, FERRY_EINVAL (NULL info or info->size 0) or FERRY_EHANDLE. */
FERRY_API int ferry_peer_info(ferry_peer_t *peer,
                              struct ferry_peer_info *info);

/*
 * Keeps checking the peer's liveness while nothing else waits on it (on:
 * 1; off: 0), so that its death is noticed and delivered as a
 * FERRY_NOTIFICATION_PEER_DOWN event (ferry_notify_poll): how a target
 * learns that an initiator it serves is gone.  Returns 0, FERRY_EINVAL
 * (NULL) or FERRY_EHANDLE.
 */
FERRY_API int ferry_peer_watch(ferry_peer_t *peer, int on);

/*
 * Declares the peer dead because something outside ferry knows it is
 * gone (a metadata service saw its lease end, a scheduler killed it):
 * as if liveness had found it, its requests end with FERRY_EPEERDEAD and
 * a FERRY_NOTIFICATION_PEER_DOWN event is queued.  why (may be NULL) is
 * kept for ferry_peer_state.  Returns 0 (also when it was already gone),
 * FERRY_EINVAL or FERRY_EHANDLE.
 */
FERRY_API int ferry_peer_declare_dead(ferry_peer_t *peer, const char *why);

enum ferry_mem_kind {
    FERRY_MEM_HOST = 0,
    FERRY_MEM_CUDA = 1,
    FERRY_MEM_AUTO = 2, /* ask the pointer */
};

/* Access a registration grants to peers (local access is always given). */
enum ferry_access {
    FERRY_ACCESS_REMOTE_READ = 1u << 0,
    FERRY_ACCESS_REMOTE_WRITE = 1u << 1,
    /* The region may receive a fan-out (ferry_fanout): with REMOTE_WRITE,
     * ferry keeps a small inbox beside it for the fan-out's plan, and
     * the exported blob carries it; with REMOTE_READ too it may forward
     * the fan-out to other receivers. */
    FERRY_ACCESS_FANOUT = 1u << 2,
};

/*
 * Tells every registration cache that [addr, addr + len) was unmapped or
 * changed, so no later transfer uses a registration of the old pages.
 * ferry calls it itself from its userfaultfd monitor; allocators and
 * memory hooks (Open MPI's, say) call it too.  It takes no lock,
 * allocates nothing, uses no thread-local storage and preserves errno:
 * safe in a malloc or madvise hook and in a signal handler.
 */
FERRY_API void ferry_mem_invalidate(const void *addr, size_t len);


/* Counters of a context (ferry_context_stats). */
struct ferry_stats {
    size_t size; /* set by the caller: sizeof(struct ferry_stats) */
    uint64_t rcache_hits;
    uint64_t rcache_misses;
    uint64_t rcache_invalidations; /* entries invalidated */
    uint64_t rcache_evictions;
    uint64_t rcache_entries;       /* live now */
    uint64_t rcache_bytes;         /* registered by the cache now */
    uint64_t oneshot_registrations; /* made for one request, not cached */
    uint64_t notifications_received;
    uint64_t notifications_unqueued; /* counted only: the queue was full */
    uint64_t bytes_posted[8];      /* per rail */
    /* Device memory staged through host buffers (see staging_chunk). */
    uint64_t staged_bytes;
    uint64_t staged_chunks;
    uint64_t staged_max_in_flight; /* most chunks ever in flight at once */
    uint64_t mirror_syncs; /* host mirrors copied to the device (target) */
    /* Notifications sent as the remote CQ data of their request's last
     * write rather than as messages (docs/semantics.md). */
    uint64_t notifications_in_writes;
    /* Liveness (config.liveness_ms): heartbeats sent (none while
     * completions come), peers declared dead or unreachable. */
    uint64_t heartbeats;
    uint64_t peers_declared;
    /* Writes and reads handed to the provider, per rail: a run of
     * contiguous iovs or blocks goes as one (docs/semantics.md); a write
     * sent again to cover others (shm before libfabric 2.5) counts once. */
    uint64_t rma_ops_posted[8];
    /* Operations a dropped connection flushed, held until their peer
     * answered again or was declared, and those of them posted again
     * (docs/semantics.md, "Stale keys"). */
    uint64_t ops_interrupted;
    uint64_t ops_posted_again;
};
#define FERRY_STATS_INIT FERRY__SIZED_INIT(struct ferry_stats)

/* Returns 0, or FERRY_EINVAL for NULL arguments or stats->size 0. */
FERRY_API int ferry_context_stats(ferry_context_t *ctx,
                                  struct ferry_stats *stats);

/*
 * The context's metrics as Prometheus text (exposition format 0.0.4),
 * into buf (len bytes; NUL-terminated whenever len > 0), for any HTTP
 * server the application runs to serve: bytes and operations per peer,
 * rail and direction; requests ended per peer, kind and outcome; request
 * durations and sizes (histograms); requests in flight; peer liveness;
 * the registration cache, staging, notifications and fan-outs.  Always
 * counted: there is nothing to turn on.  *need (may be NULL) gets the
 * bytes the whole text needs, its NUL included.  Returns 0, FERRY_ENOSPC
 * (buf too small: call again with *need bytes; a little more, as the
 * text grows with the peers), FERRY_EINVAL or FERRY_ENOMEM.
 */
FERRY_API int ferry_metrics_text(ferry_context_t *ctx, char *buf, size_t len,
                                 size_t *need);

/*
 * Registers [addr, addr + len) with every rail of the context.
 *
 * kind FERRY_MEM_CUDA: device memory of CUDA device `device` (-1: the
 * device the pointer belongs to).  FERRY_MEM_AUTO asks the pointer.
 * Device memory is registered with dmabuf where libfabric (>= 1.20), the
 * provider and the driver allow it, else with FI_HMEM by virtual address;
 * on a domain without FI_HMEM it is staged: transfers copy it through
 * pinned host buffers, and a region exported for remote access is
 * exported as a host mirror (see docs/semantics.md: a peer's write into
 * it reaches the device before the write's notification is delivered).
 * ferry_mem_path() says which.
 *
 * Returns 0, FERRY_EINVAL (a host pointer registered as CUDA memory, a
 * device pointer as host memory, a device ordinal that is not the
 * pointer's, a range past its allocation), FERRY_ENOTSUP (no CUDA: the
 * sentence says why), FERRY_ENOSPC (key space of the provider exhausted),
 * FERRY_EPROVIDER or FERRY_ENOMEM.
 */
FERRY_API int ferry_mem_register(ferry_context_t *ctx, void *addr, size_t len,
                                 enum ferry_mem_kind kind, int device,
                                 unsigned access, ferry_mem_t **mem);
/*
 * Deregisters.  Returns FERRY_EBUSY, and changes nothing, while a request
 * that uses the region has operations in flight (wait for or free the
 * request first; a freed request releases its regions once the provider
 * is done with them).  NULL-safe (returns 0).
 */
FERRY_API int ferry_mem_close(ferry_mem_t *mem);

/*
 * How the region is registered: "host", "cuda dmabuf", "cuda FI_HMEM"
 * (by virtual address) or "cuda staged" (through host buffers); NULL for
 * an invalid handle.
 */
FERRY_API const char *ferry_mem_path(const ferry_mem_t *mem);
/*
 * For a staged device region exported for remote reads: copies the
 * device's current contents into the host mirror peers read (it is
 * filled at registration; later device writes need this call).  Returns
 * 0 (also for regions that are not staged, which need nothing) or an
 * error.
 */
FERRY_API int ferry_mem_refresh(ferry_mem_t *mem);

/*
 * Writes the remote-key blob a peer needs to reach this region with
 * ferry_rmem_import.  *len as for ferry_context_address.  Returns 0,
 * FERRY_ENOSPC, or FERRY_EINVAL (the region grants no remote access).
 */
FERRY_API int ferry_mem_export(const ferry_mem_t *mem, void *blob,
                               size_t *len);
/*
 * Imports a peer's remote-key blob.  Returns 0, FERRY_EBLOB, FERRY_EINCOMPAT
 * (made by another provider or key format: the sentence names both sides),
 * FERRY_EPROVIDER or FERRY_ENOMEM.
 */
FERRY_API int ferry_rmem_import(ferry_peer_t *peer, const void *blob,
                                size_t len, ferry_rmem_t **rmem);
/* Length of the remote region in bytes (0 for NULL). */
FERRY_API size_t ferry_rmem_length(const ferry_rmem_t *rmem);
/*
 * Releases an imported region.  Returns FERRY_EBUSY while requests in
 * flight use it.  NULL-safe (returns 0).
 */
FERRY_API int ferry_rmem_close(ferry_rmem_t *rmem);

/* One piece of a transfer: len bytes between local and the remote region. */
struct ferry_iov {
    void *local;        /* local address */
    ferry_mem_t *lmem;  /* registration covering local, or NULL: ferry finds
                           or makes one */
    ferry_rmem_t *rmem; /* remote region (imported from the request's peer) */
    uint64_t roffset;   /* offset into the remote region */
    size_t len;         /* bytes, > 0 */
};

/* Flags of struct ferry_xfer_opts. */
enum ferry_xfer_flags {
    /* Deliver {notify_id, notify_value} to the peer after all the data. */
    FERRY_XFER_NOTIFY = 1u << 0,
};

struct ferry_xfer_opts {
    size_t size;    /* sizeof(struct ferry_xfer_opts) */
    int timeout_ms; /* 0: the context's default; < 0: no deadline */
    unsigned flags; /* FERRY_XFER_* */
    uint64_t notify_id;
    uint64_t notify_value;
    /* The caller's, handed back by ferry_req_result (since 0.1: a caller
     * built with an older header passes a smaller size, and gets NULL). */
    void *user_data;
};
#define FERRY_XFER_OPTS_INIT FERRY__SIZED_INIT(struct ferry_xfer_opts)

/*
 * Writes (or reads) every iov as one request.  Each iov is checked against
 * its local and remote regions before anything is posted; a bad one refuses
 * the whole request with the index and the bound crossed in the sentence.
 * opts may be NULL.  *req is set on success; free it with ferry_req_close.
 * Returns 0, FERRY_EINVAL, FERRY_ERANGE, FERRY_EHANDLE, FERRY_ENOMEM.
 */
FERRY_API int ferry_write(ferry_peer_t *peer, const struct ferry_iov *iov,
                          size_t n, const struct ferry_xfer_opts *opts,
                          ferry_req_t **req);
FERRY_API int ferry_read(ferry_peer_t *peer, const struct ferry_iov *iov,
                         size_t n, const struct ferry_xfer_opts *opts,
                         ferry_req_t **req);

/*
 * Drives the request's context once.  Returns 0 (done), FERRY_EINPROGRESS,
 * or the error that ended it (FERRY_ETIMEDOUT, FERRY_ECANCELED,
 * FERRY_ECONNRESET, FERRY_EIO...; ferry_last_error() says more).
 */
FERRY_API int ferry_req_test(ferry_req_t *req);
/*
 * Waits at most timeout_ms for the request to end (the rule above; its own
 * deadline still applies).  Returns as ferry_req_test, or FERRY_EAGAIN when
 * this wait ran out (the request goes on).
 */
FERRY_API int ferry_req_wait(ferry_req_t *req, int timeout_ms);
/*
 * Ends the request with FERRY_ECANCELED unless it has already ended.
 * Operations already handed to the provider finish in the background;
 * buffers stay registered until they do.  Returns 0, FERRY_EINVAL (NULL)
 * or FERRY_EHANDLE (closed already, or not a request).
 */
FERRY_API int ferry_req_cancel(ferry_req_t *req);
/* Frees the request, cancelling it if it has not ended.  Returns 0 (also
 * for NULL) or FERRY_EHANDLE (closed already, or not a request). */
FERRY_API int ferry_req_close(ferry_req_t *req);

/*
 * Waits at most timeout_ms (< 0: no limit) until one of the n requests
 * has ended, drives their context meanwhile, and sets *index to the first
 * that has (lowest index).  NULL entries are skipped, so a caller can
 * clear the ones it is done with; every other entry must belong to one
 * context.  Returns that request's status, as ferry_req_test (0 or its
 * error; ferry_req_result says more); FERRY_EAGAIN when this wait ran
 * out (then *index is n); FERRY_EINVAL for no request, or requests of two
 * contexts.
 */
FERRY_API int ferry_req_wait_any(ferry_req_t *const *reqs, size_t n,
                                 int timeout_ms, size_t *index);

/* iov index of a result whose failure is not one iov's. */
#define FERRY_NO_IOV ((size_t)-1)

/* What a request did (ferry_req_result). */
struct ferry_req_result {
    size_t size;         /* sizeof(struct ferry_req_result) */
    int status;          /* 0, FERRY_EINPROGRESS while it runs, or its error */
    uint64_t bytes;      /* the bytes of all its iovs */
    /* Of them, completed by the provider: delivered, but for a small
     * write on shm before libfabric 2.5 that a later one of the request
     * covers, which counts once sent (docs/semantics.md). */
    uint64_t bytes_done;
    /* CLOCK_MONOTONIC: when ferry took the request (where Linux keeps
     * that clock on the CPU's time stamp counter, read through the
     * counter: within a few microseconds of clock_gettime's) */
    uint64_t posted_ns;
    uint64_t ended_ns;   /* when it ended; 0 while it runs */
    /* The first iov (or prepared block pair) whose operation failed, or
     * FERRY_NO_IOV: success, or an end that is not one iov's (deadline,
     * cancel, a dead peer, the notification, a staging copy). */
    size_t failed_iov;
    const char *error;   /* its sentence ("" if none); lives with req */
    void *user_data;     /* opts->user_data */
};
#define FERRY_REQ_RESULT_INIT FERRY__SIZED_INIT(struct ferry_req_result)

/*
 * Fills out (at most out->size bytes of it) with what req did so far;
 * drives nothing, so call it after a test or wait said the request ended.
 * Returns 0, FERRY_EHANDLE or FERRY_EINVAL (out NULL or its size 0).
 */
FERRY_API int ferry_req_result(ferry_req_t *req, struct ferry_req_result *out);

/*
 * Polls completions, posts queued operations and enforces deadlines.
 * Returns the number of completions handled (>= 0) or an error.
 */
FERRY_API int ferry_progress(ferry_context_t *ctx);

/*
 * Prepared descriptor lists: describe many blocks once, validate once, post
 * by index.  A local list holds blocks of registrations (ferry_mem_t), a
 * remote list blocks of imported regions (ferry_rmem_t).  Each segment
 * adds `count` blocks of `block_size` bytes, `stride` bytes apart, from
 * `offset` in its region (count 1: one explicit entry).  Lists are
 * independent: any number of them, over the same regions or others, are
 * prepared and posted side by side.
 */
typedef struct ferry_dlist ferry_dlist_t;
typedef struct ferry_prep ferry_prep_t;

enum ferry_dlist_kind { FERRY_DLIST_LOCAL = 1, FERRY_DLIST_REMOTE = 2 };
enum ferry_op { FERRY_OP_WRITE = 1, FERRY_OP_READ = 2 };

struct ferry_dlist_segment {
    ferry_mem_t *mem;   /* local lists */
    ferry_rmem_t *rmem; /* remote lists */
    uint64_t offset;    /* of block 0 in the region */
    size_t block_size;
    size_t count;
    size_t stride; /* >= block_size when count > 1 */
};

/* name appears in error sentences.  Returns 0, FERRY_EINVAL, FERRY_ENOMEM. */
FERRY_API int ferry_dlist_create(ferry_context_t *ctx,
                                 enum ferry_dlist_kind kind, const char *name,
                                 ferry_dlist_t **dl);
/*
 * Appends a segment; *first_index (may be NULL) gets its first block's
 * index.  Every block is checked against its region now.  Returns 0,
 * FERRY_EINVAL, FERRY_ERANGE (a block runs past its region), FERRY_EBUSY
 * (the list is already prepared: lists freeze then) or FERRY_EOVERFLOW.
 * The list keeps its regions registered until it is closed.
 */
FERRY_API int ferry_dlist_add(ferry_dlist_t *dl,
                              const struct ferry_dlist_segment *seg,
                              size_t *first_index);
/* Blocks in the list (0 for NULL). */
FERRY_API size_t ferry_dlist_count(const ferry_dlist_t *dl);
/* FERRY_EBUSY while a prepared transfer uses it.  NULL-safe. */
FERRY_API int ferry_dlist_close(ferry_dlist_t *dl);

/*
 * Validates a local and a remote list for op towards peer, once.  Returns
 * 0, FERRY_EINVAL (wrong kinds, empty list, region without the access op
 * needs) or FERRY_EHANDLE (lists of another context or peer).
 */
FERRY_API int ferry_xfer_prepare(ferry_peer_t *peer, enum ferry_op op,
                                 ferry_dlist_t *local, ferry_dlist_t *remote,
                                 ferry_prep_t **prep);
/*
 * Moves block local_idx[i] <-> block remote_idx[i] for every i < n, as one
 * request.  Only the indices are checked (an invalid one names the list,
 * the index and the valid range); no allocation per block.
 */
FERRY_API int ferry_xfer_post(ferry_prep_t *prep, const uint32_t *local_idx,
                              const uint32_t *remote_idx, size_t n,
                              const struct ferry_xfer_opts *opts,
                              ferry_req_t **req);
/* FERRY_EBUSY while requests posted from it are in flight.  NULL-safe. */
FERRY_API int ferry_xfer_close(ferry_prep_t *prep);

/*
 * Notifications.  A request with FERRY_XFER_NOTIFY delivers {id, value} to
 * the peer's context only after all of the request's data is visible in
 * the peer's memory; the request completes when the notification has been
 * delivered too.  The receiving context queues notifications in arrival
 * order and adds each value to a counter per id.
 */
enum ferry_notification_kind {
    /* {id, value} delivered after the request's data. */
    FERRY_NOTIFICATION_DATA = 0,
    /* The sender's request that was to deliver {id, value} ended without
     * it (cancelled, or past its deadline): nothing more comes for it.
     * Waits on counter id end with FERRY_EABORTED until it is reset. */
    FERRY_NOTIFICATION_ABORT = 1,
    /* peer was declared dead or unreachable (ferry_peer_state says why);
     * id and value are 0. */
    FERRY_NOTIFICATION_PEER_DOWN = 2,
};

struct ferry_notification {
    uint64_t id;
    uint64_t value;
    enum ferry_notification_kind kind;
    /* PEER_DOWN: the peer; otherwise NULL.  Compare it with handles
     * still held only: once ferry_peer_close freed a handle, a later
     * ferry_peer_add may return the same pointer, so poll the events of
     * a peer before removing it. */
    ferry_peer_t *peer;
};

/*
 * Sends a notification with no data (a request of its own).  Returns as
 * ferry_write.
 */
FERRY_API int ferry_notify_send(ferry_peer_t *peer, uint64_t id,
                                uint64_t value,
                                const struct ferry_xfer_opts *opts,
                                ferry_req_t **req);
/*
 * Progresses, then moves up to max queued notifications, oldest first,
 * into out.  Returns how many (>= 0) or an error.
 */
FERRY_API int ferry_notify_poll(ferry_context_t *ctx,
                                struct ferry_notification *out, size_t max);
/*
 * Waits until notifications are queued, then moves up to max of them as
 * ferry_notify_poll does.  Returns how many (>= 1), FERRY_EAGAIN when
 * none came within timeout_ms (the rule above), or an error.  With a
 * progress thread the caller sleeps until one is queued, instead of
 * polling.
 */
FERRY_API int ferry_notify_wait(ferry_context_t *ctx,
                                struct ferry_notification *out, size_t max,
                                int timeout_ms);
/* Progresses, then reads the sum of the values received for id so far. */
FERRY_API int ferry_counter_get(ferry_context_t *ctx, uint64_t id,
                                uint64_t *value);
/*
 * Waits until the sum for id reaches at least expected.  Returns 0,
 * FERRY_EAGAIN when timeout_ms ran out (the sum reached is in the
 * sentence), or FERRY_EABORTED when a sender abandoned a transfer that
 * was to add to id (FERRY_NOTIFICATION_ABORT).
 */
FERRY_API int ferry_counter_wait(ferry_context_t *ctx, uint64_t id,
                                 uint64_t expected, int timeout_ms);
/*
 * The same, for values peer sends: while it waits, ferry checks that peer
 * is alive (config.liveness_ms), and the wait ends with FERRY_EPEERDEAD
 * as soon as the peer is declared dead or unreachable.
 */
FERRY_API int ferry_counter_wait_peer(ferry_peer_t *peer, uint64_t id,
                                      uint64_t expected, int timeout_ms);
/* Sets the sum for id back to 0 and forgets an abort (to reuse an id).
 * Returns 0. */
FERRY_API int ferry_counter_reset(ferry_context_t *ctx, uint64_t id);

/*
 * Notification ids from FERRY_NOTIFY_ID_RESERVED up are ferry's own (the
 * fan-out's messages): requests with such an id are refused.
 */
#define FERRY_NOTIFY_ID_RESERVED UINT64_C(0xfe00000000000000)

/*
 * Fan-out: the same bytes to the regions of n peers in about the time of
 * one copy.  The source cuts [offset, offset + len) of src into chunks
 * and writes them to the first receivers of a chain or a tree; every
 * receiver writes each chunk on to its own children, from its own region,
 * as soon as the chunk has landed.  The plan (who forwards to whom, the
 * keys) travels with the data, into the inbox of each receiving region:
 * receivers register their regions with FERRY_ACCESS_REMOTE_READ |
 * FERRY_ACCESS_REMOTE_WRITE | FERRY_ACCESS_FANOUT, export them, and wait
 * on a counter; their progress (the progress thread, or their calls)
 * forwards.  Only a region peers may read forwards (it sends out what it
 * holds on the word of whoever wrote the plan); one without
 * FERRY_ACCESS_REMOTE_READ is a leaf (docs/semantics.md).
 *
 * A receiver that dies is reported; its children are taken over by its
 * nearest live ancestor and still receive everything.  The fan-out ends
 * once every receiver has all the data or is dead, or at its deadline.
 */
typedef struct ferry_fanout ferry_fanout_t;

struct ferry_fanout_opts {
    size_t size;        /* sizeof(struct ferry_fanout_opts) */
    size_t chunk;       /* bytes per chunk; 0: ferry picks (len / 64,
                           256 KiB to 8 MiB) */
    unsigned degree;    /* children per node: 1 is a chain; 0: ferry picks
                           1 to 4 by a model of the link speed, the data
                           and the hops (docs/semantics.md) */
    int timeout_ms;     /* the whole fan-out; 0: the context's default;
                           < 0: none */
    uint64_t notify_id; /* each receiver's context adds 1 to this counter
                           once its region holds everything, the source
                           knows, and its own children have their copies:
                           it may leave then (below
                           FERRY_NOTIFY_ID_RESERVED) */
};
#define FERRY_FANOUT_OPTS_INIT FERRY__SIZED_INIT(struct ferry_fanout_opts)

/*
 * Starts the fan-out of len bytes at offset in src to dst[i] (imported
 * from peers[i]; written from their offset 0) for every i < n.  Returns
 * 0, FERRY_EINVAL (a region too small or without a fan-out inbox, or
 * one that would forward without FERRY_ACCESS_REMOTE_READ: the sentence
 * names the receiver), FERRY_EHANDLE or FERRY_ENOMEM.
 */
FERRY_API int ferry_fanout(ferry_mem_t *src, uint64_t offset, size_t len,
                           ferry_peer_t *const *peers,
                           ferry_rmem_t *const *dst, size_t n,
                           const struct ferry_fanout_opts *opts,
                           ferry_fanout_t **out);
/*
 * Drives it once.  Returns FERRY_EINPROGRESS, 0 (every receiver has
 * everything), FERRY_EPEERDEAD (it ended; some receivers died without
 * the data: ferry_fanout_missing names them, as does the sentence) or
 * FERRY_ETIMEDOUT.
 */
FERRY_API int ferry_fanout_test(ferry_fanout_t *f);
/* Waits at most timeout_ms (the rule above); returns as the test, or
 * FERRY_EAGAIN when this wait ran out (the fan-out goes on). */
FERRY_API int ferry_fanout_wait(ferry_fanout_t *f, int timeout_ms);
/*
 * How far it is: *total the bytes it moves to each receiver, *done those
 * every receiver the source sends to itself has received (the front of
 * the chain or tree: the receivers further on follow a chunk or so per
 * hop behind; all of them once it ended with 0).  For a progress line.
 * Returns 0, FERRY_EINVAL or FERRY_EHANDLE.
 */
FERRY_API int ferry_fanout_progress(ferry_fanout_t *f, uint64_t *done,
                                    uint64_t *total);
/* The receivers (indices into dst) without the data, up to max of them
 * into idx (may be NULL); returns how many there are. */
FERRY_API size_t ferry_fanout_missing(const ferry_fanout_t *f, size_t *idx,
                                      size_t max);
/* Ends it (receivers still forwarding stop) and frees it.  Returns 0
 * (also for NULL) or FERRY_EHANDLE. */
FERRY_API int ferry_fanout_close(ferry_fanout_t *f);

#ifdef __cplusplus
}
#endif

#endif /* FERRY_API_CORE_H */
