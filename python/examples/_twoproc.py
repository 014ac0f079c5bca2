"""What the two-process examples share (kv_disagg.py, weights.py).

One command runs both sides on this host, like the C demos: the script
starts itself twice, as its two roles, in processes of their own.  The
listening role reports its port (and, at the end, a result) on a pipe; the
parent then starts the connecting role, waits for both within a deadline,
and kills whatever is left when it passes.  A random bootstrap token goes
to both children in FERRY_OOB_TOKEN, so no other process on the host can
reach the published memory.

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


def is_loopback(hostport):
    """Whether HOST:PORT is on this host; ":PORT" (every address) is not:
    peers on other hosts reach it."""
    host = hostport.rpartition(":")[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def open_context(ferry, a, listener):
    """The role's context: the listener is the target (a progress thread);
    both are on one host when they meet on a loopback address."""
    hostport = a.listen if listener else a.connect
    same_host = a.same_host or (a.metadata is None and is_loopback(hostport))
    return ferry.Context(**context_config(a, listener, same_host))


class Meeting:
    """How the two roles meet: through the metadata service (--metadata,
    the listener joins as NAME-SUFFIX, the connector as NAME) or through
    ferry's bootstrap (--listen / --connect)."""

    def __init__(self, ctx, a, suffix):
        self.ctx, self.a, self.suffix = ctx, a, suffix
        self.meta = self.lis = self.conn = None

    # -- the listening role --

    def publish(self, regions, report):
        """Publishes {region: Memory}, then tells the launcher (its port)
        and returns where the regions are, in words."""
        a = self.a
        if a.metadata is not None:
            self.meta = self.ctx.metadata(a.name + self.suffix, url=a.metadata)
            for name, mem in regions.items():
                self.meta.publish(name, mem)
            report.send(port=None)
            return '%s as "%s%s"' % (a.metadata, a.name, self.suffix)
        self.lis = self.ctx.listen(a.listen)
        for name, mem in regions.items():
            self.lis.publish(name, mem)
        report.send(port=self.lis.port)
        return "%s:%d" % (a.listen.rpartition(":")[0] or "*", self.lis.port)

    def wait_peer(self):
        """The connecting role, once it has come."""
        if self.meta is not None:
            return self.meta.peer(self.a.name, timeout=self.a.timeout)
        # Kept: the connection closes when its object goes, and the other
        # role's lookups on it would end.
        self.conn = self.lis.accept(timeout=self.a.timeout)
        return self.conn.peer

    # -- the connecting role --

    def join(self):
        """Finds the listening role; returns its Peer."""
        a = self.a
        if a.metadata is not None:
            self.meta = self.ctx.metadata(a.name, url=a.metadata)
            return self.meta.peer(a.name + self.suffix, timeout=a.timeout)
        self.conn = self.ctx.connect(a.connect, timeout=a.timeout)
        return self.conn.peer

    def lookup(self, region):
        """A region the listening role published (after join)."""
        if self.meta is not None:
            return self.meta.lookup(self.a.name + self.suffix, region,
                                    timeout=self.a.timeout)
        return self.conn.lookup(region, timeout=self.a.timeout)


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
                   help="meet through this metadata service "
                        "(etcd://..., bootstrap://HOST:PORT) instead of the "
                        "bootstrap; default: FERRY_METADATA if set")
    p.add_argument("--name", default=None,
                   help="with --metadata: the name the listening side joins "
                        "as (the other joins as NAME-<role>)")
    # Set by the parent for its children.
    p.add_argument("--role", default=None, help="run one side only")
    p.add_argument("--report-fd", type=int, default=-1,
                   help=argparse_suppress())
    p.add_argument("--same-host", action="store_true",
                   help=argparse_suppress())


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


class Report:
    """The listening child's pipe to the parent: one JSON object a line."""

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


def run_roles(prog, script, listener_role, connector_role, metadata,
              deadline):
    """run_pair for a program whose two roles meet through the bootstrap
    (the listener on a free loopback port, the connector told it) or,
    when metadata is given, through that service (both get the URL from
    the command line already).  Returns the final report, or None when
    either role failed or sent none."""
    if metadata is not None:
        listen_args, connect_args = [], []
    else:
        listen_args = ["--listen", "127.0.0.1:0"]
        connect_args = ["--connect", "127.0.0.1:{port}"]
    ok, reports = run_pair(prog, script, listener_role, listen_args,
                           connector_role, connect_args, deadline)
    verdict = [r for r in reports if "ok" in r]
    return verdict[-1] if ok and verdict and verdict[-1]["ok"] else None


def run_pair(prog, script, listener_role, listener_args, connector_role,
             connector_args, deadline, grace=10.0):
    """Runs `script --role listener_role ...`, waits for its first report
    (its port), then `script --role connector_role ...` with the port in
    place of {port} in connector_args; waits for both within deadline
    seconds.  Returns (ok, reports): ok when both exited 0; reports: the
    listener's report lines after the first (dicts).  A child that fails
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
        children.append(Child(listener_role,
                              base + ["--role", listener_role,
                                      "--report-fd", str(wfd)] + listener_args,
                              env, pass_fds=(wfd,)))
        os.close(wfd)
        first = _read_report(reader, end)
        if first is None:
            try:  # an early exit closed the pipe: give it time to be reaped
                status = children[0].proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                status = None
            print("%s: %s did not start (%s)" % (
                prog, listener_role,
                "exit %s" % status if status is not None else
                "no report before the deadline"), file=sys.stderr, flush=True)
            return False, []
        argv = [a.replace("{port}", str(first.get("port", ""))) for a in
                connector_args]
        children.append(Child(connector_role,
                              base + ["--role", connector_role] + argv, env))
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
        for line in reader:  # the listener has exited: its pipe is closed
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
