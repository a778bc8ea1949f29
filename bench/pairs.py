"""Running one benchmark program, or a server/client pair of them, on 127.0.0.1 under a timeout.

Every server here (perftest, ibv_rc_pingpong, ucx_perftest, fi_pingpong) takes its parameters
over a TCP side channel, so "ready" means: something listens on the chosen TCP port, read from
/proc/net/tcp (a probe connection would use up the server's one accept)."""
import os
import random
import signal
import socket
import subprocess
import time

HOST = "127.0.0.1"


def free_port():
    """A TCP port that is free right now on 127.0.0.1 and the wildcard address, and that no
    abstract unix socket (rdmashim's CM rendezvous) names."""
    for _ in range(100):
        port = random.randint(20000, 59999)
        ok = True
        for addr in (HOST, "0.0.0.0"):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((addr, port))
            except OSError:
                ok = False
            finally:
                s.close()
        try:
            with open("/proc/net/unix") as f:
                if any(f"/{port}/" in line for line in f):
                    ok = False
        except OSError:
            pass
        if ok:
            return port
    raise RuntimeError("no free TCP port found")


def tcp_listening(port, pid=None):
    """Whether something listens on TCP `port` in the network namespace of `pid` (default:
    ours); /proc/<pid>/net is that process's namespace's view, so this also sees a server that
    runs inside another namespace."""
    base = f"/proc/{pid}/net" if pid else "/proc/net"
    for name in (f"{base}/tcp", f"{base}/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[3] == "0A" and \
                            int(parts[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def _kill(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    try:
        out, _ = proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        out = ""
    return out or ""


def _start(argv, env):
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)


class Outcome:
    """What a pair run produced: both outputs and a list of problems (empty when it worked)."""

    def __init__(self, server_out, client_out, problems):
        self.server_out, self.client_out, self.problems = server_out, client_out, problems

    @property
    def ok(self):
        return not self.problems


def run_pair(server, client, env, port, timeout, ready_wait=None):
    """Starts `server`, waits until it listens on `port` (or, when `ready_wait` is given, that
    many seconds: an rsocket listener has no TCP socket), runs `client`; both must exit 0
    within `timeout` seconds. Commands are argument lists; a server started through `ip netns
exec` (which execs it: same pid) is watched in its own namespace."""
    problems = []
    srv = _start(server, env)
    deadline = time.monotonic() + min(timeout, 20)
    if ready_wait is not None:
        time.sleep(ready_wait)
    while ready_wait is None and not tcp_listening(port, srv.pid):
        if srv.poll() is not None or time.monotonic() > deadline:
            out = _kill(srv)
            return Outcome(out, "", [f"server did not start listening on port {port}: "
                                     f"{last_lines(out)}"])
        time.sleep(0.02)
    cli = _start(client, env)
    end = time.monotonic() + timeout
    try:
        client_out, _ = cli.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        client_out = _kill(cli)
        problems.append(f"client timed out after {timeout} s")
    if cli.returncode not in (0, None) and not problems:
        problems.append(f"client exited with status {cli.returncode}")
    try:
        server_out, _ = srv.communicate(timeout=max(1.0, end - time.monotonic()))
        if srv.returncode != 0:
            problems.append(f"server exited with status {srv.returncode}")
    except subprocess.TimeoutExpired:
        server_out = _kill(srv)
        problems.append("server timed out")
    if problems:
        problems.append("client: " + last_lines(client_out) + " | server: " + last_lines(server_out))
    return Outcome(server_out or "", client_out or "", problems)


def last_lines(text, n=3):
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return " / ".join(lines[-n:]) if lines else "(no output)"
