/*
 * A local etcd for the metadata tests and the bench (see etcdutil.h).
 */
#include "etcdutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* How long a member gets to become healthy. */
#define START_MS 30000
/* One etcdctl call. */
#define CTL_MS 5000

/* ---- small things --------------------------------------------------------- */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void nap_ms(unsigned ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

static int fail(struct eu_cluster *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int fail(struct eu_cluster *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(c->why, sizeof(c->why), fmt, ap);
    va_end(ap);
    return -1;
}

static const char *bin_dir(void)
{
    const char *d = getenv("FERRY_TEST_ETCD_DIR");

    return d != NULL && d[0] != '\0' ? d : "/usr/bin";
}

static const char *bin(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", bin_dir(), name);
    return buf;
}

const char *eu_etcd_path(void)
{
    static char path[EU_PATH];

    return bin("etcd", path, sizeof(path));
}

const char *eu_missing(void)
{
    static char why[4 * EU_PATH];
    char etcd[EU_PATH], ctl[EU_PATH];

    bin("etcd", etcd, sizeof(etcd));
    bin("etcdctl", ctl, sizeof(ctl));
    if (access(etcd, X_OK) == 0 && access(ctl, X_OK) == 0)
        return NULL;
    snprintf(why, sizeof(why),
             "etcd is not installed (no %s or no %s): install etcd-server "
             "and etcd-client (Debian: apt-get install etcd-server "
             "etcd-client), or set FERRY_TEST_ETCD_DIR to the directory "
             "that holds etcd and etcdctl",
             etcd, ctl);
    return why;
}

/* The last bytes of a file, for a failure's sentence. */
static void file_tail(const char *path, char *out, size_t len)
{
    FILE *f = fopen(path, "r");
    long size;
    size_t n;

    out[0] = '\0';
    if (f == NULL)
        return;
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    if (size > (long)len - 1)
        fseek(f, size - (long)len + 1, SEEK_SET);
    else
        fseek(f, 0, SEEK_SET);
    n = fread(out, 1, len - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* ---- processes ----------------------------------------------------------- */

/* Our environment without etcd's own variables (etcd and etcdctl read
 * ETCD_* and ETCDCTL_* as flags), plus extra. */
static char **child_env(char *const extra[])
{
    size_t n = 0, k = 0, x = 0;
    char **env;

    while (environ[n] != NULL)
        n++;
    while (extra != NULL && extra[x] != NULL)
        x++;
    env = calloc(n + x + 1, sizeof(*env));
    if (env == NULL)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "ETCD_", 5) != 0 &&
            strncmp(environ[i], "ETCDCTL_", 8) != 0)
            env[k++] = environ[i];
    for (size_t i = 0; i < x; i++)
        env[k++] = extra[i];
    env[k] = NULL;
    return env;
}

/* Signals back to their defaults and none blocked in the child: Check
 * and libfabric may have changed either in the caller. */
static void spawn_attr(posix_spawnattr_t *attr)
{
    sigset_t none, dfl;

    sigemptyset(&none);
    sigemptyset(&dfl);
    for (int s = 1; s < 32; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaddset(&dfl, s);
    posix_spawnattr_init(attr);
    posix_spawnattr_setsigmask(attr, &none);
    posix_spawnattr_setsigdefault(attr, &dfl);
    posix_spawnattr_setflags(attr, POSIX_SPAWN_SETSIGMASK |
                                       POSIX_SPAWN_SETSIGDEF);
}

/*
 * Starts argv with stdin from /dev/null (or in_fd when >= 0) and stdout
 * and stderr appended to log (/dev/null when NULL), or dup'd from out_fd
 * when >= 0; stderr stays ours when keep_stderr.
 */
static int spawn_full(char *const argv[], char *const extra_env[], int in_fd,
                      int out_fd, const char *log, bool keep_stderr,
                      bool own_group, pid_t *pid)
{
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    char **env = child_env(extra_env);
    int ret;

    if (env == NULL)
        return ENOMEM;
    posix_spawn_file_actions_init(&fa);
    if (in_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
    else
        posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
    else
        posix_spawn_file_actions_addopen(&fa, 1,
                                         log != NULL ? log : "/dev/null",
                                         O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (!keep_stderr)
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    spawn_attr(&attr);
    if (own_group) {
        short flags = 0;

        posix_spawnattr_getflags(&attr, &flags);
        posix_spawnattr_setflags(&attr, flags | POSIX_SPAWN_SETPGROUP);
        posix_spawnattr_setpgroup(&attr, 0);
    }
    ret = posix_spawn(pid, argv[0], &fa, &attr, argv, env);
    posix_spawnattr_destroy(&attr);
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    return ret;
}

static int spawn(char *const argv[], char *const extra_env[], int in_fd,
                 int out_fd, const char *log, pid_t *pid)
{
    return spawn_full(argv, extra_env, in_fd, out_fd, log, false, false,
                      pid);
}

int eu_spawn(char *const argv[], char *const env[], int in_fd, int out_fd,
             pid_t *pid)
{
    return spawn_full(argv, env, in_fd, out_fd, NULL, true, false, pid);
}

int eu_run(char *const argv[], char *const env[], int timeout_ms, char *out,
           size_t len)
{
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    size_t used = 0;
    int fds[2], status = 0, ret;
    bool killed = false;
    pid_t pid;

    if (len > 0)
        out[0] = '\0';
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    ret = spawn(argv, env, -1, fds[1], NULL, &pid);
    close(fds[1]);
    if (ret != 0) {
        close(fds[0]);
        errno = ret;
        return -1;
    }
    for (;;) {
        uint64_t now = now_ms();
        struct pollfd p = {fds[0], POLLIN, 0};
        char buf[4096];
        ssize_t n;

        if (now >= deadline && !killed) {
            kill(pid, SIGKILL);
            killed = true;
        }
        if (poll(&p, 1, killed ? 1000 : (int)(deadline - now)) <= 0) {
            if (killed)
                break;
            continue;
        }
        n = read(fds[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        /* Keep the tail: the end of an error says the most. */
        if (len > 1) {
            size_t take = (size_t)n;
            if (take > len - 1) {
                memcpy(out, buf + take - (len - 1), len - 1);
                used = len - 1;
            } else {
                if (used + take > len - 1) {
                    size_t drop = used + take - (len - 1);
                    memmove(out, out + drop, used - drop);
                    used -= drop;
                }
                memcpy(out + used, buf, take);
                used += take;
            }
            out[used] = '\0';
        }
    }
    close(fds[0]);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    return 256 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Free loopback ports: bound together so that they differ, then closed. */
static int pick_ports(int *ports, int n)
{
    int fds[2 * EU_MAX_MEMBERS], ret = 0;

    for (int i = 0; i < n; i++)
        fds[i] = -1;
    for (int i = 0; i < n && ret == 0; i++) {
        struct sockaddr_in a = {.sin_family = AF_INET};
        socklen_t alen = sizeof(a);

        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0 ||
            getsockname(fds[i], (struct sockaddr *)&a, &alen) != 0)
            ret = -1;
        else
            ports[i] = ntohs(a.sin_port);
    }
    for (int i = 0; i < n; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return ret;
}

static int rm_one(const char *path, const struct stat *st, int flag,
                  struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir)
{
    if (dir[0] != '\0')
        nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- the cluster --------------------------------------------------------- */

static const char *scheme(const struct eu_cluster *c)
{
    return (c->flags & EU_TLS) ? "https" : "http";
}

void eu_hostport(const struct eu_cluster *c, int i, char *out, size_t len)
{
    snprintf(out, len, "127.0.0.1:%d", c->m[i].client_port);
}

void eu_url(const struct eu_cluster *c, const char *prefix, int first,
            char *out, size_t len)
{
    size_t used = (size_t)snprintf(out, len, "%s://",
                                   (c->flags & EU_TLS) ? "etcds" : "etcd");

    for (int k = 0; k < c->n && used < len; k++) {
        int i = (first + k) % c->n;
        used += (size_t)snprintf(out + used, len - used, "%s127.0.0.1:%d",
                                 k ? "," : "", c->m[i].client_port);
    }
    if (prefix != NULL && used < len)
        snprintf(out + used, len - used, "/%s", prefix);
}

/* --endpoints for etcdctl: the running members. */
static void ctl_endpoints(const struct eu_cluster *c, char *out, size_t len)
{
    size_t used = (size_t)snprintf(out, len, "--endpoints=");

    for (int i = 0, k = 0; i < c->n && used < len; i++)
        if (c->m[i].pid != 0 && !c->m[i].stopped)
            used += (size_t)snprintf(out + used, len - used,
                                     "%s%s://127.0.0.1:%d", k++ ? "," : "",
                                     scheme(c), c->m[i].client_port);
}

/* Runs etcdctl with the cluster's endpoints and TLS files, then args. */
static int ctl(struct eu_cluster *c, const char *const *args, char *out,
               size_t len)
{
    char path[EU_PATH], eps[512], cacert[EU_PATH + 16], cert[EU_PATH + 16],
        key[EU_PATH + 16];
    char *argv[24];
    char *env[] = {"ETCDCTL_API=3", NULL};
    int n = 0;

    argv[n++] = (char *)bin("etcdctl", path, sizeof(path));
    ctl_endpoints(c, eps, sizeof(eps));
    argv[n++] = eps;
    argv[n++] = "--dial-timeout=2s";
    argv[n++] = "--command-timeout=3s";
    if (c->flags & EU_TLS) {
        snprintf(cacert, sizeof(cacert), "--cacert=%s", c->ca);
        snprintf(cert, sizeof(cert), "--cert=%s", c->cert);
        snprintf(key, sizeof(key), "--key=%s", c->key);
        argv[n++] = cacert;
        argv[n++] = cert;
        argv[n++] = key;
    }
    while (*args != NULL && n < 23)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    return eu_run(argv, env, CTL_MS, out, len);
}

/* Writes text into file dir/name, its path into path. */
static int write_file(const char *dir, const char *name, const char *text,
                      char *path, size_t len)
{
    FILE *f;

    snprintf(path, len, "%s/%s", dir, name);
    f = fopen(path, "w");
    if (f == NULL)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* Runs openssl with args; -1 with c->why on failure. */
static int openssl(struct eu_cluster *c, const char *what,
                   const char *const *args)
{
    char *argv[32], out[2048];
    int n = 0, st;

    argv[n++] = "/usr/bin/openssl";
    while (*args != NULL && n < 31)
        argv[n++] = (char *)*args++;
    argv[n] = NULL;
    st = eu_run(argv, NULL, 30000, out, sizeof(out));
    if (st == 0)
        return 0;
    if (st < 0)
        return fail(c, "cannot run /usr/bin/openssl to make the %s (%s): "
                    "install openssl",
                    what, strerror(errno));
    return fail(c, "openssl failed making the %s (status %d): %s", what, st,
                out);
}

/*
 * The certificates: a CA, the members' certificate for IP 127.0.0.1
 * (server and client use: etcd's HTTP gateway presents it to its own gRPC
 * server, which asks for a client certificate under --client-cert-auth),
 * and a client certificate.  EC P-256 keys: made in no time.
 */
static int make_certs(struct eu_cluster *c)
{
    char tls[EU_DIR + 8], ca_key[EU_PATH], srv_csr[EU_PATH], srv_ext[EU_PATH],
        cli_csr[EU_PATH], cli_ext[EU_PATH], serial[EU_PATH];
    char srv_key[EU_PATH], srv_pem[EU_PATH];

    snprintf(tls, sizeof(tls), "%s/tls", c->dir);
    if (mkdir(tls, 0700) != 0)
        return fail(c, "mkdir %s: %s", tls, strerror(errno));
    snprintf(c->ca, sizeof(c->ca), "%s/ca.pem", tls);
    snprintf(ca_key, sizeof(ca_key), "%s/ca.key", tls);
    snprintf(serial, sizeof(serial), "%s/ca.srl", tls);
    snprintf(srv_key, sizeof(srv_key), "%s/server.key", tls);
    snprintf(srv_pem, sizeof(srv_pem), "%s/server.pem", tls);
    snprintf(srv_csr, sizeof(srv_csr), "%s/server.csr", tls);
    snprintf(c->key, sizeof(c->key), "%s/client.key", tls);
    snprintf(c->cert, sizeof(c->cert), "%s/client.pem", tls);
    snprintf(cli_csr, sizeof(cli_csr), "%s/client.csr", tls);
    if (write_file(tls, "server.ext",
                   "subjectAltName=IP:127.0.0.1\n"
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=serverAuth,clientAuth\n",
                   srv_ext, sizeof(srv_ext)) != 0 ||
        write_file(tls, "client.ext",
                   "keyUsage=critical,digitalSignature,keyEncipherment\n"
                   "extendedKeyUsage=clientAuth\n",
                   cli_ext, sizeof(cli_ext)) != 0)
        return fail(c, "cannot write the certificate extensions in %s: %s",
                    tls, strerror(errno));
    {
        const char *ca[] = {"req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes",
                            "-keyout", ca_key, "-out", c->ca, "-days", "2",
                            "-subj", "/CN=ferry test CA", "-addext",
                            "basicConstraints=critical,CA:TRUE", "-addext",
                            "keyUsage=critical,keyCertSign,cRLSign", NULL};
        const char *srv_req[] = {"req", "-new", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:prime256v1", "-nodes",
                                 "-keyout", srv_key, "-out", srv_csr,
                                 "-subj", "/CN=127.0.0.1", NULL};
        const char *srv_sign[] = {"x509", "-req", "-in", srv_csr, "-CA",
                                  c->ca, "-CAkey", ca_key, "-CAserial", serial,
                                  "-CAcreateserial", "-out", srv_pem, "-days",
                                  "2", "-extfile", srv_ext, NULL};
        const char *cli_req[] = {"req", "-new", "-newkey", "ec", "-pkeyopt",
                                 "ec_paramgen_curve:prime256v1", "-nodes",
                                 "-keyout", c->key, "-out", cli_csr, "-subj",
                                 "/CN=ferry test client", NULL};
        const char *cli_sign[] = {"x509", "-req", "-in", cli_csr, "-CA",
                                  c->ca, "-CAkey", ca_key, "-CAserial", serial,
                                  "-out", c->cert, "-days", "2", "-extfile",
                                  cli_ext, NULL};

        if (openssl(c, "CA", ca) || openssl(c, "server key", srv_req) ||
            openssl(c, "server certificate", srv_sign) ||
            openssl(c, "client key", cli_req) ||
            openssl(c, "client certificate", cli_sign))
            return -1;
    }
    return 0;
}

/* The members' certificate and key (made by make_certs). */
static void server_files(const struct eu_cluster *c, char *pem, char *key,
                         size_t len)
{
    snprintf(pem, len, "%s/tls/server.pem", c->dir);
    snprintf(key, len, "%s/tls/server.key", c->dir);
}

static void pid_file(const struct eu_cluster *c, int i, char *path, size_t len)
{
    snprintf(path, len, "%s/%s.pid", c->dir, c->m[i].name);
}

/* Starts member i (not waiting for it). */
static int start_member(struct eu_cluster *c, int i)
{
    struct eu_member *m = &c->m[i];
    char name[16], data[EU_PATH + 16], lcu[64], acu[64], lpu[64], apu[64],
        cluster[256], token[64], cert[EU_PATH + 16], key[EU_PATH + 16],
        ca[EU_PATH + 32], pem_path[EU_PATH], key_path[EU_PATH],
        pidf[EU_PATH], pids[32];
    char *argv[40];
    size_t used = 0;
    int n = 0, ret;
    FILE *f;

    snprintf(name, sizeof(name), "--name=%s", m->name);
    snprintf(data, sizeof(data), "--data-dir=%s", m->data_dir);
    snprintf(lcu, sizeof(lcu), "--listen-client-urls=%s://127.0.0.1:%d",
             scheme(c), m->client_port);
    snprintf(acu, sizeof(acu), "--advertise-client-urls=%s://127.0.0.1:%d",
             scheme(c), m->client_port);
    snprintf(lpu, sizeof(lpu), "--listen-peer-urls=http://127.0.0.1:%d",
             m->peer_port);
    snprintf(apu, sizeof(apu),
             "--initial-advertise-peer-urls=http://127.0.0.1:%d",
             m->peer_port);
    used = (size_t)snprintf(cluster, sizeof(cluster), "--initial-cluster=");
    for (int k = 0; k < c->n; k++)
        used += (size_t)snprintf(cluster + used, sizeof(cluster) - used,
                                 "%s%s=http://127.0.0.1:%d", k ? "," : "",
                                 c->m[k].name, c->m[k].peer_port);
    /* Unique per cluster: members of two clusters never join up. */
    snprintf(token, sizeof(token), "--initial-cluster-token=ferry-%d-%d",
             (int)getpid(), c->m[0].client_port);
    argv[n++] = (char *)eu_etcd_path();
    argv[n++] = name;
    argv[n++] = data;
    argv[n++] = lcu;
    argv[n++] = acu;
    argv[n++] = lpu;
    argv[n++] = apu;
    argv[n++] = cluster;
    argv[n++] = token;
    argv[n++] = "--initial-cluster-state=new";
    argv[n++] = "--logger=zap";
    argv[n++] = "--log-outputs=stderr";
    if (c->flags & EU_TLS) {
        server_files(c, pem_path, key_path, EU_PATH);
        snprintf(cert, sizeof(cert), "--cert-file=%s", pem_path);
        snprintf(key, sizeof(key), "--key-file=%s", key_path);
        argv[n++] = cert;
        argv[n++] = key;
        if (c->flags & EU_CLIENT_AUTH) {
            snprintf(ca, sizeof(ca), "--trusted-ca-file=%s", c->ca);
            argv[n++] = ca;
            argv[n++] = "--client-cert-auth";
        }
    }
    argv[n] = NULL;
    ret = spawn(argv, NULL, -1, -1, m->log, &m->pid);
    if (ret != 0) {
        m->pid = 0;
        return fail(c, "cannot start %s: %s", argv[0], strerror(ret));
    }
    m->stopped = false;
    /* For the guard, should this process die first. */
    pid_file(c, i, pidf, sizeof(pidf));
    snprintf(pids, sizeof(pids), "%d\n", (int)m->pid);
    f = fopen(pidf, "w");
    if (f != NULL) {
        fputs(pids, f);
        fclose(f);
    }
    return 0;
}

/* Member i has been reaped: it no longer runs, and the guard's pid file
 * goes with it. */
static void forget_member(struct eu_cluster *c, int i)
{
    char pidf[EU_PATH];

    c->m[i].pid = 0;
    c->m[i].stopped = false;
    pid_file(c, i, pidf, sizeof(pidf));
    unlink(pidf);
}

/* Reaps member i if it ended; true if it did (status in *status). */
static bool member_ended(struct eu_cluster *c, int i, int *status)
{
    if (c->m[i].pid == 0 || waitpid(c->m[i].pid, status, WNOHANG) != c->m[i].pid)
        return false;
    forget_member(c, i);
    return true;
}

int eu_wait_healthy(struct eu_cluster *c, int timeout_ms)
{
    const char *args[] = {"endpoint", "health", NULL};
    uint64_t deadline = now_ms() + (uint64_t)timeout_ms;
    char out[2048] = "", tail[1024];
    int st = -1;

    for (;;) {
        for (int i = 0; i < c->n; i++) {
            int status;

            if (member_ended(c, i, &status)) {
                file_tail(c->m[i].log, tail, sizeof(tail));
                return fail(c, "etcd member %s (127.0.0.1:%d) ended (status "
                            "0x%x) before it was healthy; its log (%s) "
                            "ends: %s",
                            c->m[i].name, c->m[i].client_port, status,
                            c->m[i].log, tail);
            }
        }
        st = ctl(c, args, out, sizeof(out));
        if (st == 0)
            return 0;
        if (now_ms() >= deadline)
            break;
        nap_ms(200);
    }
    for (int i = 0; i < c->n; i++)
        if (c->m[i].pid != 0) {
            file_tail(c->m[i].log, tail, sizeof(tail));
            break;
        }
    return fail(c, "etcd is not healthy after %d ms: etcdctl endpoint health "
                "(status %d) said: %s; a member's log ends: %s",
                timeout_ms, st, out, tail);
}

/*
 * The guard: when our end of its pipe closes (this process ended, even by
 * SIGKILL), it kills the members whose pid files remain and removes the
 * directory.  In a process group of its own: Check kills the group of a
 * test that ended (the members with it), and the guard must outlive that
 * to remove the directory.
 */
static int start_guard(struct eu_cluster *c)
{
    static const char script[] =
        "read _; for f in \"$1\"/*.pid; do [ -f \"$f\" ] && "
        "kill -9 \"$(cat \"$f\")\" 2>/dev/null; done; rm -rf \"$1\"";
    char *argv[] = {"/bin/sh", "-c", (char *)script, "sh", c->dir, NULL};
    int fds[2], ret;

    if (pipe2(fds, O_CLOEXEC) != 0)
        return fail(c, "pipe: %s", strerror(errno));
    ret = spawn_full(argv, NULL, fds[0], -1, NULL, false, true, &c->guard);
    close(fds[0]);
    if (ret != 0) {
        close(fds[1]);
        c->guard = 0;
        return fail(c, "cannot start the guard (/bin/sh): %s", strerror(ret));
    }
    c->guard_fd = fds[1];
    return 0;
}

int eu_start(struct eu_cluster *c, int members, unsigned flags)
{
    const char *tmp = getenv("TMPDIR");
    int ports[2 * EU_MAX_MEMBERS];

    memset(c, 0, sizeof(*c));
    c->guard_fd = -1;
    if (members < 1 || members > EU_MAX_MEMBERS)
        return fail(c, "eu_start: %d members; 1 to %d", members,
                    EU_MAX_MEMBERS);
    if (eu_missing() != NULL)
        return fail(c, "%s", eu_missing());
    c->flags = flags;
    c->n = members;
    snprintf(c->dir, sizeof(c->dir), "%s/ferry-etcd.XXXXXX",
             tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
    if (mkdtemp(c->dir) == NULL) {
        fail(c, "mkdtemp %s: %s", c->dir, strerror(errno));
        c->dir[0] = '\0';
        return -1;
    }
    if (start_guard(c) != 0 || ((flags & EU_TLS) && make_certs(c) != 0))
        goto failed;
    if (pick_ports(ports, 2 * members) != 0) {
        fail(c, "no free loopback port: %s", strerror(errno));
        goto failed;
    }
    for (int i = 0; i < members; i++) {
        struct eu_member *m = &c->m[i];
        char dir[EU_DIR];

        memcpy(dir, c->dir, sizeof(dir));
        snprintf(m->name, sizeof(m->name), "m%d", i);
        m->client_port = ports[2 * i];
        m->peer_port = ports[2 * i + 1];
        snprintf(m->data_dir, sizeof(m->data_dir), "%s/m%d.etcd", dir, i);
        snprintf(m->log, sizeof(m->log), "%s/m%d.log", dir, i);
    }
    for (int i = 0; i < members; i++)
        if (start_member(c, i) != 0)
            goto failed;
    if (eu_wait_healthy(c, START_MS) != 0)
        goto failed;
    return 0;
failed: {
    char why[sizeof(c->why)];

    memcpy(why, c->why, sizeof(why));
    eu_stop(c);
    memcpy(c->why, why, sizeof(why));
    return -1;
}
}

/*
 * Waits until member i has stopped (SIGSTOP) or resumed (SIGCONT).  kill()
 * only queues the signal: a member on the other CPU can still answer a
 * request it is reading before every one of its threads has stopped, and a
 * test that calls etcd "down" the moment kill() returns would then see a
 * call succeed.
 */
static int await_job_control(struct eu_cluster *c, int i, int sig)
{
    struct eu_member *m = &c->m[i];
    int flags = WNOHANG | (sig == SIGSTOP ? WUNTRACED : WCONTINUED);
    uint64_t deadline = now_ms() + 10000;
    int status;

    for (;;) {
        pid_t got = waitpid(m->pid, &status, flags);

        if (got == m->pid &&
            (sig == SIGSTOP ? WIFSTOPPED(status) : WIFCONTINUED(status)))
            return 0;
        if (got == m->pid && (WIFEXITED(status) || WIFSIGNALED(status))) {
            forget_member(c, i);
            return fail(c, "member %s ended while waiting for signal %d",
                        m->name, sig);
        }
        if (got < 0)
            return fail(c, "waitpid(%d): %s", (int)m->pid, strerror(errno));
        if (now_ms() >= deadline)
            return fail(c, "member %s did not %s within 10 s", m->name,
                        sig == SIGSTOP ? "stop" : "resume");
        nap_ms(1);
    }
}

int eu_signal(struct eu_cluster *c, int i, int sig)
{
    struct eu_member *m = &c->m[i];
    uint64_t deadline;
    int status;

    if (i < 0 || i >= c->n || m->pid == 0)
        return fail(c, "eu_signal: member %d is not running", i);
    if (kill(m->pid, sig) != 0)
        return fail(c, "kill(%d, %d): %s", (int)m->pid, sig, strerror(errno));
    if (sig == SIGSTOP || sig == SIGCONT) {
        m->stopped = sig == SIGSTOP;
        return await_job_control(c, i, sig);
    }
    if (sig != SIGKILL && sig != SIGTERM)
        return 0;
    if (m->stopped)
        kill(m->pid, SIGCONT); /* a stopped process does not end on TERM */
    deadline = now_ms() + 10000;
    while (waitpid(m->pid, &status, WNOHANG) == 0) {
        if (now_ms() >= deadline) {
            kill(m->pid, SIGKILL);
            deadline = UINT64_MAX;
        }
        nap_ms(10);
    }
    forget_member(c, i);
    return 0;
}

int eu_restart(struct eu_cluster *c, int i, bool wipe)
{
    if (i < 0 || i >= c->n)
        return fail(c, "eu_restart: no member %d", i);
    if (c->m[i].pid != 0)
        return fail(c, "eu_restart: member %s is running", c->m[i].name);
    if (wipe && c->n != 1)
        return fail(c, "eu_restart: an empty data directory needs a "
                    "cluster of one member (this one has %d)", c->n);
    if (wipe)
        remove_tree(c->m[i].data_dir);
    if (start_member(c, i) != 0)
        return -1;
    return eu_wait_healthy(c, START_MS);
}

long eu_count_keys(struct eu_cluster *c, const char *prefix)
{
    const char *args[] = {"get", prefix, "--prefix", "--keys-only", NULL};
    static char out[256 * 1024];
    long keys = 0;
    int st = ctl(c, args, out, sizeof(out));

    if (st != 0)
        return fail(c, "etcdctl get %s --prefix --keys-only (status %d): %s",
                    prefix, st, out);
    for (char *line = strtok(out, "\n"); line != NULL;
         line = strtok(NULL, "\n"))
        if (line[0] != '\0' && line[0] != '\r')
            keys++;
    return keys;
}

void eu_stop(struct eu_cluster *c)
{
    for (int i = 0; i < c->n; i++)
        if (c->m[i].pid != 0) {
            kill(c->m[i].pid, SIGKILL);
            while (waitpid(c->m[i].pid, NULL, 0) < 0 && errno == EINTR)
                ;
            c->m[i].pid = 0;
            c->m[i].stopped = false;
        }
    remove_tree(c->dir);
    c->dir[0] = '\0';
    if (c->guard_fd >= 0) {
        close(c->guard_fd);
        c->guard_fd = -1;
    }
    if (c->guard > 0) {
        while (waitpid(c->guard, NULL, 0) < 0 && errno == EINTR)
            ;
        c->guard = 0;
    }
}
