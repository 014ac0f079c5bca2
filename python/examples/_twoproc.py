"""What the two-process examples share (kv_disagg.py, weights.py).

The two roles meet through ferry's metadata service (Context.metadata):
the publishing role joins it, publishes its regions and waits for the
other, which joins it too and looks them up.  By default the service is
ferry's embedded bootstrap, bootstrap://HOST:PORT: the first role to open
it becomes the hub and listens there, and the other opens the same URL.

One command runs both sides on this host, like the C demos: the script
starts itself twice, as its two roles, in processes of their own.  The
publishing role opens a hub on a free loopback port (or the --metadata
given) and reports its URL (and, at the end, a result) on a pipe; the
parent then starts the other role with that URL, waits for both within a
deadline, and kills whatever is left when it passes.  A random bootstrap
token goes to both children in FERRY_OOB_TOKEN, so no other process on
the host can reach the published memory.

Nothing here imports ferry or torch: the parent stays light, and the
children import them in their own time.
"""
import json
import os
import secrets
import select
import signal
import subprocess
import sys
import time


def context_config(args, target, same_host):
    """Keywords of ferry.Context for one side, as examples/example.h's
    ex_local_config: provider and domain from the options (else the
    environment, else ferry's choice); for two processes on one host the
    peer is at 127.0.0.1 and shared memory is a candidate; a target gets a
    progress thread."""
    kw = {"progress_thread": target}
    if same_host:
        kw["local_only"] = True
        if not os.environ.get("FERRY_PEER_HOST"):
            kw["peer_host"] = "127.0.0.1"
    if args.provider is not None:
        kw["provider"] = args.provider
    if args.domain is not None:
        kw["domain"] = args.domain or None  # "": the provider's own
    return kw


def is_loopback(url):
    """Whether a bootstrap://HOST:PORT hub is on this host's loopback;
    bootstrap://:PORT (every address) is not: peers on other hosts reach
    it.  Another service (etcd) says nothing of where the peers are."""
    scheme, _, hostport = url.partition("://")
    host = hostport.rpartition(":")[0].strip("[]")
    return scheme == "bootstrap" and (host in ("localhost", "::1") or
                                      host.startswith("127."))


def open_context(ferry, a, target):
    """The role's context: the publishing role is the target (a progress
    thread); both are on one host when they meet at a loopback hub."""
    same_host = a.same_host or is_loopback(a.metadata)
    return ferry.Context(**context_config(a, target, same_host))


class Meeting:
    """How the two roles meet: both join the metadata service at
    --metadata, the publishing role as NAME-SUFFIX, the other as NAME.
    Each keeps its Meta while they work: its entries go with it."""

    def __init__(self, ctx, a, suffix):
        self.ctx, self.a, self.suffix = ctx, a, suffix
        self.meta = None

    # -- the publishing role --

    def publish(self, regions, report):
        """Joins, publishes {region: Memory}, then tells the launcher the
        service's URL (a hub opened at port 0 names the port it got) and
        returns where the regions are, in words."""
        a = self.a
        self.meta = self.ctx.metadata(a.name + self.suffix, url=a.metadata)
        for name, mem in regions.items():
            self.meta.publish(name, mem)
        report.send(url=self.meta.url)
        return '%s as "%s%s"' % (self.meta.url, a.name, self.suffix)

    def wait_peer(self):
        """The other role, once it has joined."""
        return self.meta.peer(self.a.name, timeout=self.a.timeout)

    # -- the other role --

    def join(self):
        """Joins; returns the publishing role's Peer."""
        a = self.a
        self.meta = self.ctx.metadata(a.name, url=a.metadata)
        return self.meta.peer(a.name + self.suffix, timeout=a.timeout)

    def lookup(self, region):
        """A region the publishing role published (after join)."""
        return self.meta.lookup(self.a.name + self.suffix, region,
                                timeout=self.a.timeout)


def add_common_options(p, timeout=30.0, deadline=120.0):
    """Options every role takes, and those of the parent."""
    p.add_argument("--provider", default=None,
                   help='libfabric provider ("shm", "tcp;ofi_rxm"...); '
                        "default: FERRY_PROVIDER, else ferry's choice")
    p.add_argument("--domain", default=None,
                   help='domain ("lo"; "": the provider\'s own); default: '
                        "FERRY_DOMAIN, else ferry's choice")
    p.add_argument("--timeout", type=float, default=timeout,
                   help="seconds any one wait may take (default %(default)s)")
    p.add_argument("--deadline", type=float, default=deadline,
                   help="seconds the whole run may take before the parent "
                        "kills both sides (default %(default)s)")
    p.add_argument("--metadata", default=None,
                   help="where the roles meet: bootstrap://HOST:PORT (the "
                        "first to open it becomes the hub and listens "
                        "there; bootstrap://:PORT listens on every "
                        "address) or etcd://...; default: FERRY_METADATA, "
                        "else a hub on 127.0.0.1 (at the program's port for "
                        "one role, a free one for both)")
    p.add_argument("--name", default=None,
                   help="the name the second role joins as; the publishing "
                        "role joins as NAME-<its role> (default: the "
                        "program's name)")
    # Set by the parent for its children.
    p.add_argument("--role", default=None, help="run one side only")
    p.add_argument("--report-fd", type=int, default=-1,
                   help=argparse_suppress())
    p.add_argument("--same-host", action="store_true",
                   help=argparse_suppress())


def meeting_options(a, port, name):
    """Completes --metadata and --name after parsing: FERRY_METADATA, else
    for a role bootstrap://127.0.0.1:PORT (the parent, which runs both
    roles, gives them a hub on a free port instead); the program's name."""
    if a.metadata is None:
        a.metadata = os.environ.get("FERRY_METADATA") or None
    if a.metadata is None and a.role is not None:
        a.metadata = "bootstrap://127.0.0.1:%d" % port
    if a.name is None:
        a.name = name


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


class Report:
    """The publishing child's pipe to the parent: one JSON object a line."""

    def __init__(self, fd):
        self.f = os.fdopen(fd, "w", buffering=1) if fd >= 0 else None

    def send(self, **fields):
        if self.f is not None:
            self.f.write(json.dumps(fields) + "\n")
            self.f.flush()

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None


class Steps:
    """What a role is doing now, so a failure says which step failed."""

    def __init__(self, who):
        self.who = who
        self.what = "starting"

    def __call__(self, what):
        self.what = what

    def fail(self, exc):
        print("%s: %s failed: %s: %s" % (self.who, self.what,
                                         type(exc).__name__, exc),
              file=sys.stderr, flush=True)
        return 1


def _die_with_parent():
    """In the child: SIGKILL when the parent goes (PR_SET_PDEATHSIG), so a
    killed demo leaves nothing behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except Exception:
        pass


class Child:
    def __init__(self, role, argv, env, pass_fds=()):
        self.role = role
        self.proc = subprocess.Popen(argv, env=env, pass_fds=pass_fds,
                                     preexec_fn=_die_with_parent)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
            return True
        return False


def run_roles(prog, script, first_role, second_role, metadata, deadline):
    """run_pair for a program whose two roles meet through the metadata
    service: the publishing role (first_role) opens metadata, or without
    one a bootstrap hub of its own on a free loopback port, and reports
    its URL, which the second role opens.  Returns the final report, or
    None when either role failed or sent none."""
    ok, reports = run_pair(
        prog, script, first_role,
        ["--metadata", metadata or "bootstrap://127.0.0.1:0"], second_role,
        ["--metadata", "{url}"], deadline)
    verdict = [r for r in reports if "ok" in r]
    return verdict[-1] if ok and verdict and verdict[-1]["ok"] else None


def run_pair(prog, script, first_role, first_args, second_role,
             second_args, deadline, grace=10.0):
    """Runs `script --role first_role ...`, waits for its first report
    (the service's URL), then `script --role second_role ...` with the URL
    in place of {url} in second_args; waits for both within deadline
    seconds.  Returns (ok, reports): ok when both exited 0; reports: the
    first role's report lines after the first (dicts).  A child that fails
    gives the other `grace` seconds to end on its own before it is killed."""
    end = time.monotonic() + deadline
    env = dict(os.environ, FERRY_OOB_TOKEN=secrets.token_hex(16))
    # The children share this process's stdout.  Unbuffered, a print()
    # is two writes, its text and its newline, and one child's line could
    # land between the two halves of the other's; buffered, print(...,
    # flush=True) writes the whole line at once.
    env.pop("PYTHONUNBUFFERED", None)
    base = [sys.executable, script] + sys.argv[1:] + ["--same-host"]
    rfd, wfd = os.pipe()
    children = []
    reader = os.fdopen(rfd, "r")
    try:
        children.append(Child(first_role,
                              base + ["--role", first_role,
                                      "--report-fd", str(wfd)] + first_args,
                              env, pass_fds=(wfd,)))
        os.close(wfd)
        first = _read_report(reader, end)
        if first is None:
            try:  # an early exit closed the pipe: give it time to be reaped
                status = children[0].proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                status = None
            print("%s: %s did not start (%s)" % (
                prog, first_role,
                "exit %s" % status if status is not None else
                "no report before the deadline"), file=sys.stderr, flush=True)
            return False, []
        argv = [a.replace("{url}", str(first.get("url", ""))) for a in
                second_args]
        children.append(Child(second_role,
                              base + ["--role", second_role] + argv, env))
        failed_at = None
        while any(c.proc.poll() is None for c in children):
            now = time.monotonic()
            if failed_at is None and any(c.proc.returncode not in (None, 0)
                                         for c in children):
                failed_at = now
            if now >= end or (failed_at is not None and
                              now - failed_at >= grace):
                why = ("the deadline (%g s) passed" % deadline if now >= end
                       else "the other side failed")
                for c in children:
                    if c.kill():
                        print("%s: %s: killed (%s)" % (prog, c.role, why),
                              file=sys.stderr, flush=True)
                break
            time.sleep(0.05)
        reports = []
        for line in reader:  # the first role has exited: its pipe is closed
            try:
                reports.append(json.loads(line))
            except ValueError:
                pass
        ok = True
        for c in children:
            code = c.proc.returncode
            if code != 0:
                ok = False
                print("%s: %s exited with %s" % (
                    prog, c.role,
                    "signal %d" % -code if code < 0 else "status %d" % code),
                      file=sys.stderr, flush=True)
        return ok, reports
    except KeyboardInterrupt:
        print("%s: interrupted" % prog, file=sys.stderr, flush=True)
        return False, []
    finally:
        for c in children:
            c.kill()
        reader.close()


def _read_report(reader, end):
    """The next report line (a dict), or None at EOF or the deadline."""
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([reader], [], [], min(left, 0.5))
        if ready:
            line = reader.readline()
            if not line:
                return None
            try:
                return json.loads(line)
            except ValueError:
                continue
