/*
 * ferry_bench: loopback mode (the target as a child process) and the time
 * bound that keeps any session from hanging.
 */
#include "loopback.h"

#include "fbench.h"
#include "initiator.h"
#include "metrics.h"
#include "options.h"
#include "target.h"
#include "util.h"

#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* The target process, killed and reaped on any failure. */
static volatile sig_atomic_t g_child;

static char g_alarm_msg[160];

/* Async-signal-safe: kill(2) and waitpid(2) only. */
static void kill_child_now(void)
{
    pid_t c = (pid_t)g_child;

    if (c > 0) {
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        g_child = 0;
    }
}

static void on_alarm(int sig)
{
    (void)sig;
    if (write(STDERR_FILENO, g_alarm_msg, strlen(g_alarm_msg)) < 0) {
        /* nothing more can be done in a signal handler */
    }
    kill_child_now();
    _exit(EXIT_TIMEOUT);
}

static void on_interrupt(int sig)
{
    kill_child_now();
    _exit(128 + sig);
}

/* SIGALRM after seconds: the session may not run longer than that. */
void arm_time_bound(double seconds)
{
    struct sigaction sa;

    snprintf(g_alarm_msg, sizeof(g_alarm_msg),
             "%s: the session passed its time bound of %.0f s (raise it "
             "with --time-limit); stopping\n",
             g_role, seconds);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    alarm(seconds >= UINT_MAX ? UINT_MAX : (unsigned)seconds + 1);
}

/* The parent: an interrupted run takes the child with it. */
static void catch_interrupts(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_interrupt;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/*
 * Waits up to grace_ms for the child to exit, then kills it (*killed);
 * always reaps it.  Returns its wait status, or -1 when there was none.
 */
static int reap_child(int grace_ms, bool *killed)
{
    pid_t c = (pid_t)g_child;
    int status = -1;
    uint64_t until = now_ns() + (uint64_t)grace_ms * 1000000u;

    *killed = false;
    if (c <= 0)
        return -1;
    while (waitpid(c, &status, WNOHANG) == 0) {
        if (now_ns() >= until) {
            *killed = true;
            kill(c, SIGKILL);
            waitpid(c, &status, 0);
            break;
        }
        sleep_ns(2000000);
    }
    g_child = 0;
    return status;
}

static const char *describe_status(char *out, size_t n, int status)
{
    if (status == -1)
        snprintf(out, n, "is gone");
    else if (WIFEXITED(status))
        snprintf(out, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        snprintf(out, n, "was killed by signal %d", WTERMSIG(status));
    else
        snprintf(out, n, "ended with wait status %d", status);
    return out;
}

/* --pin: this process, and the threads it starts from now on, on one CPU
 * (before the context: its progress thread inherits the mask). */
static bool pin_to_cpu(int cpu)
{
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof(set), &set) == 0)
        return true;
    return complain("--pin: cannot run on CPU %d: %s (it needs two CPUs)",
                    cpu, strerror(errno));
}

/* The child: the target, bound to die with its parent. */
static void loopback_child(const struct options *o, pid_t parent, int fd,
                           double bound_s)
{
    struct sigaction sa;

    g_role = "ferry_bench (target)";
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_DFL;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1); /* the parent is already gone */
    arm_time_bound(bound_s + 10);
    if (o->pin && !pin_to_cpu(1))
        _exit(1);
    struct options to = *o;
    to.cuda = o->target_cuda;
    to.cuda_device = o->target_cuda_device;
    to.mem_text = o->target_mem_text;
    int code = target_main(&to, fd);
    fflush(NULL);
    _exit(code);
}

int loopback_main(const struct options *o, double bound_s, FILE *csv)
{
    int fds[2], code, status;
    pid_t parent = getpid(), pid;
    bool killed;
    char url[FBENCH_URL_MAX], st[64];
    ssize_t n;

    if (pipe(fds) != 0)
        return complain("pipe: %s", strerror(errno));
    fflush(NULL);
    catch_interrupts(); /* before fork: no window without the handler */
    pid = fork();
    if (pid < 0)
        return complain("fork: %s", strerror(errno));
    if (pid == 0) {
        close(fds[0]);
        loopback_child(o, parent, fds[1], bound_s);
    }
    g_child = pid;
    arm_time_bound(bound_s);
    if (o->pin && !pin_to_cpu(0)) {
        reap_child(0, &killed);
        return 1;
    }
    close(fds[1]);
    do
        n = read(fds[0], url, sizeof(url));
    while (n < 0 && errno == EINTR);
    close(fds[0]);
    if (n != (ssize_t)sizeof(url)) {
        status = reap_child(5000, &killed);
        return complain("the target process did not start: it %s (its "
                        "message is above)",
                        describe_status(st, sizeof(st), status));
    }
    url[sizeof(url) - 1] = '\0';
    code = initiator_main(o, url, o->name, bound_s, csv);
    /* After a failure the target sees this side leave the bootstrap and
     * stops; it gets a second to say why, then it is killed. */
    status = reap_child(code == 0 ? 10000 : 1000, &killed);
    if (code != 0)
        return code; /* the target's end is a consequence, not news */
    if (killed) {
        complain("the target process did not stop after the session; it "
                 "was killed");
        return 1;
    }
    if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        complain("the target process %s",
                 describe_status(st, sizeof(st), status));
        return 1;
    }
    if (o->metrics != NULL) {
        char target[4096];

        metrics_target_path(o->metrics, target, sizeof(target));
        return metrics_merge(o->metrics, target);
    }
    return 0;
}
