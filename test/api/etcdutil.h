/*
 * A local etcd for the metadata tests (test/api/check_meta.c) and
 * bench/meta_bench: 1 or 3 members on loopback ports the kernel picks,
 * their data under a fresh temporary directory, optionally TLS with a CA
 * and certificates made by the `openssl` command.
 *
 * No Check calls: a failure returns -1 and leaves a sentence in c->why, so
 * that programs other than the suites (the bench) use it too.  Processes
 * are started with posix_spawn, never fork: the callers run threads.  A
 * guard process kills the members and removes the directory if the
 * caller dies without eu_stop (a Check timeout kills the test process).
 */
#ifndef FERRY_ETCDUTIL_H
#define FERRY_ETCDUTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define EU_MAX_MEMBERS 3
/* The temporary directory, and the paths under it. */
#define EU_DIR 256
#define EU_PATH 512

/* eu_start's flags. */
enum {
    EU_TLS = 1,         /* clients speak https; etcds:// URLs */
    EU_CLIENT_AUTH = 2, /* with EU_TLS: the members ask for client certs */
};

struct eu_member {
    char name[8];     /* "m0" */
    pid_t pid;        /* 0: not running */
    bool stopped;     /* SIGSTOPped (eu_signal) */
    int client_port;  /* 127.0.0.1:client_port serves clients */
    int peer_port;
    char data_dir[EU_PATH];
    char log[EU_PATH]; /* its stdout and stderr, every incarnation */
};

struct eu_cluster {
    char dir[EU_DIR]; /* the temporary directory: data, logs, certs */
    unsigned flags;
    int n;
    struct eu_member m[EU_MAX_MEMBERS];
    /* TLS: what a client needs (FERRY_ETCD_CACERT, _CERT, _KEY). */
    char ca[EU_PATH];
    char cert[EU_PATH];
    char key[EU_PATH];
    pid_t guard;
    int guard_fd;
    char why[4096]; /* the last failure */
};

/* The etcd and etcdctl binaries used (FERRY_TEST_ETCD_DIR, else /usr/bin). */
const char *eu_etcd_path(void);
/* NULL when etcd and etcdctl are installed, else the sentence saying what
 * to install. */
const char *eu_missing(void);

/*
 * Starts `members` (1 to EU_MAX_MEMBERS) members with flags and waits
 * until every one is healthy (etcdctl endpoint health, 30 s at most).
 * Returns 0, or -1 with c->why (and nothing left running).
 */
int eu_start(struct eu_cluster *c, int members, unsigned flags);
/* Kills every member, waits for them and removes the directory.  Safe on
 * a cluster that failed to start or was already stopped. */
void eu_stop(struct eu_cluster *c);

/*
 * The URL for ferry: "etcd://127.0.0.1:P0,127.0.0.1:P1/PREFIX" (etcds://
 * with EU_TLS), members in order; prefix NULL: none.  first: the member
 * listed first (the others follow in order).
 */
void eu_url(const struct eu_cluster *c, const char *prefix, int first,
            char *out, size_t len);
/* "127.0.0.1:P" of member i. */
void eu_hostport(const struct eu_cluster *c, int i, char *out, size_t len);

/*
 * Sends sig to member i.  SIGKILL and SIGTERM wait for it to end (it is
 * then not running); SIGSTOP and SIGCONT wait until it has stopped or
 * resumed, and mark it so.
 * Returns 0 or -1 with c->why.
 */
int eu_signal(struct eu_cluster *c, int i, int sig);
/*
 * Starts member i again on its ports: on its data directory, or on an
 * empty one when wipe (a cluster of one member only).  Waits until
 * healthy.  Returns 0 or -1 with c->why.
 */
int eu_restart(struct eu_cluster *c, int i, bool wipe);
/* Waits until every running member answers etcdctl endpoint health, at
 * most timeout_ms.  Returns 0 or -1 with c->why (and the logs' tails). */
int eu_wait_healthy(struct eu_cluster *c, int timeout_ms);

/*
 * The number of keys under prefix (etcdctl get --prefix --keys-only on
 * the running members), or -1 with c->why.
 */
long eu_count_keys(struct eu_cluster *c, const char *prefix);

/*
 * Runs argv (argv[0] a path) with stdout and stderr into out (len bytes,
 * NUL-terminated, the tail kept when longer), killed after timeout_ms.
 * env: extra "NAME=value" entries (NULL-terminated, may be NULL).
 * Returns the exit status (0-255), 256 + signal, or -1 when it could not
 * start (errno).
 */
int eu_run(char *const argv[], char *const env[], int timeout_ms, char *out,
           size_t len);

/*
 * Starts argv (argv[0] a path) by posix_spawn with stdin from in_fd and
 * stdout to out_fd (each -1: /dev/null), stderr ours, our environment
 * (less ETCD_* and ETCDCTL_*) plus env (may be NULL), signals at their
 * defaults and none blocked.  Returns 0 or an errno.
 */
int eu_spawn(char *const argv[], char *const env[], int in_fd, int out_fd,
             pid_t *pid);

#endif /* FERRY_ETCDUTIL_H */
