#!/usr/bin/env python3
"""fio's rdma engine over the soft device (issue 12, the fio acceptance item), with Debian's
unmodified fio: a server (`--rw=read`, no hostname: it listens) and a client (`--rw=write
--hostname=127.0.0.1`, fio's roles for this engine) on 127.0.0.1, for each of `--verb=write`
(RDMA WRITE into the server's buffer), `--verb=read` (RDMA READ from it) and `--verb=send`
(SEND into the server's posted receives), in preload mode (LD_PRELOAD=<build>/librdmashim.so)
and drop-in mode (LD_LIBRARY_PATH=<build>/dropin), each directly and through `rdmashim run`:

1. both sides exit 0 and print `err= 0`; the client issued all its blocks (size / bs);
2. RDMASHIM_TRACE on the client shows it posted exactly that many work requests of the verb's
   opcode (IBV_WR_RDMA_WRITE, IBV_WR_RDMA_READ, IBV_WR_SEND) of bs bytes, all accepted, and
   every completion it polled succeeded;
3. drop-in: fio loads our libibverbs/librdmacm, no system one.

fio finds its device through librdmacm (rdma_resolve_addr on 127.0.0.1), not sysfs, so it
needs no device view; `rdmashim run` works as well. fio's engine has no data check (its
`verify=` reads back through the same engine, which the rdma client cannot).

The server's iodepth (16) is above the client's (4 for the one-sided verbs, 1 for SEND):
fio connects with rnr_retry_count 0, so a SEND that finds no posted receive fails at once
(IBV_WC_RNR_RETRY_EXC_ERR, as on hardware), and fio keeps more receives posted than the client
has in flight only if the server's iodepth is larger, as in fio's examples/rdmaio-*.fio.

Usage: fio_rdma.py --build-dir BUILD
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading

failures = []
BS, SIZE = 64 * 1024, 16 << 20
OPCODE = {"write": "IBV_WR_RDMA_WRITE", "read": "IBV_WR_RDMA_READ", "send": "IBV_WR_SEND"}


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def mode_env(mode, build, **extra):
    env = dict(os.environ)
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "RDMASHIM_PROVIDER"):
        env.pop(k, None)
    if mode == "preload":
        env["LD_PRELOAD"] = os.path.join(build, "librdmashim.so")
    elif mode == "dropin":
        env["LD_LIBRARY_PATH"] = os.path.join(build, "dropin")
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_tree(pid):
    """SIGKILL pid and its descendants: fio forks a process per job, and a stuck fio ignores
    SIGTERM (it waits for its jobs)."""
    children = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (ValueError, OSError, IndexError):
            pass
    todo = [pid]
    while todo:
        p = todo.pop()
        todo.extend(children.get(p, []))
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass


class Server:
    """fio's server, its output read as it comes: the client starts once the server says
    `waiting for connection`, which fio prints after rdma_listen."""

    def __init__(self, cmd, env):
        self.p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  start_new_session=True)
        self.out = b""
        self.listening = threading.Event()
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        while True:
            b = os.read(self.p.stdout.fileno(), 4096)
            if not b:
                break
            self.out += b
            if b"waiting for connection" in self.out:
                self.listening.set()
        self.listening.set()

    def finish(self, timeout):
        try:
            self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(self.p.pid)
            self.p.wait()
        self.t.join(timeout=10)
        return self.p.returncode, self.out.decode(errors="replace")


def run(cmd, env, timeout):
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        kill_tree(p.pid)
        out, _ = p.communicate()
        return None, out


def pair(tool, build, mode, launcher, verb, tmp):
    port = str(free_port())
    trace = os.path.join(tmp, f"client-{mode}-{launcher}-{verb}.trace")
    pre = [tool, "run", "--mode", mode, "--"] if launcher == "run" else []
    # `rdmashim run` sets the mode itself: it gets the environment without one.
    env = mode_env(mode if launcher == "env" else None, build)
    # The engine's options (port, hostname, verb) exist only after --ioengine on the line.
    common = ["--ioengine=rdma", f"--port={port}", f"--bs={BS}", f"--size={SIZE}"]
    what = f"fio verb={verb} ({mode}, {'rdmashim run' if launcher == 'run' else 'environment'})"
    server = Server(pre + ["fio", "--name=server"] + common + ["--rw=read", "--iodepth=16"], env)
    client_rc, client = None, ""
    if server.listening.wait(timeout=60) and server.p.poll() is None:
        client_rc, client = run(pre + ["fio", "--name=client"] + common
                                + ["--rw=write", "--hostname=127.0.0.1", f"--verb={verb}",
                                   f"--iodepth={1 if verb == 'send' else 4}"],
                                dict(env, RDMASHIM_TRACE=trace), 120)
    server_rc, served = server.finish(60 if client_rc is not None else 5)
    errs = (re.findall(r"^server: \(groupid=\d+, jobs=\d+\): err=\s*(\d+)", served, re.M),
            re.findall(r"^client: \(groupid=\d+, jobs=\d+\): err=\s*(\d+)", client, re.M))
    check(server_rc == 0 and client_rc == 0 and errs == (["0"], ["0"]),
          f"{what}: both sides exit 0 with err= 0 (exit {server_rc}/{client_rc}, err= {errs})")
    issued = re.search(r"issued rwts: total=\d+,(\d+),", client)
    check(issued and int(issued.group(1)) == SIZE // BS,
          f"{what}: the client issued {SIZE // BS} blocks of {BS} bytes "
          f"({issued.group(1) if issued else 'none'})")
    try:
        with open(trace) as f:
            t = f.read()
    except OSError:
        t = ""
    posts = re.findall(r"ibv_post_send\(.*opcode=(\w+) [^\n]*length=(\d+)\}\][^\n]*\) = (-?\d+)", t)
    data = [p for p in posts if p[0] == OPCODE[verb] and p[1] == str(BS)]
    refused = [p for p in posts if p[2] != "0"]
    statuses = set(re.findall(r"^\S+\s+\d+\s+wc wr_id=\S+ status=(\w+)", t, re.M))
    check(len(data) == SIZE // BS and not refused and statuses == {"IBV_WC_SUCCESS"},
          f"{what}: the client posted {len(data)} {OPCODE[verb]} of {BS} bytes "
          f"(want {SIZE // BS}; refused {len(refused)}; completions {sorted(statuses)})")
    if server_rc != 0 or client_rc != 0 or errs != (["0"], ["0"]):
        print("server:\n" + served[-2000:] + "\nclient:\n" + client[-2000:])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    tool = os.path.join(build, "rdmashim")
    if not shutil.which("fio"):
        print("SKIP: fio is not installed (Debian: fio)")
        return 77
    r = subprocess.run(["fio", "--enghelp=rdma"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0 or "verb" not in r.stdout:
        print("SKIP: this fio has no rdma engine: " + (r.stdout + r.stderr).strip()[:200])
        return 77
    tmp = tempfile.mkdtemp(prefix="rdmashim-fio-")
    try:
        for mode in ("preload", "dropin"):
            for launcher in ("env", "run"):
                for verb in ("write", "read", "send"):
                    pair(tool, build, mode, launcher, verb, tmp)
        # The loader's own account of what fio loaded in drop-in mode.
        r = subprocess.run(["fio", "--enghelp=rdma"], capture_output=True, text=True,
                           timeout=60, env=mode_env("dropin", build, LD_DEBUG="files"))
        inits = re.findall(r"calling init: (\S*lib(?:ibverbs|rdmacm)\.so\S*)", r.stderr)
        ours = os.path.join(build, "dropin") + "/"
        check(len(inits) >= 2 and all(p.startswith(ours) for p in inits),
              f"drop-in: fio loads our libibverbs/librdmacm, no system one ({sorted(set(inits))})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
