#!/usr/bin/env python3
"""Debian's own librspreload.so (librdmacm1: rsocket/librspreload.so) running unmodified socket
programs over rdmashim's rsockets: the preload finds the r* functions with dlsym(RTLD_DEFAULT),
and <build>/dropin first on LD_LIBRARY_PATH makes them ours.

Scenarios (each proves the traffic went through rdmashim, not the kernel's TCP):
  iperf  iperf (version 2) server and client for 2 s; both report a transfer;
  copy   a 20 MB random file: socat (TCP-LISTEN, writes the file) as the server, nc (OpenBSD)
         as the client reading it from stdin; the copy is compared byte for byte.
  fork   the preload's fork mode (RDMAV_FORK_SAFE=1: a TCP connection becomes an rsocket on
         its first read or write, so a server may fork per connection first): --prog
         c-tests/preload_fork, a forking server and three clients (plain socket calls), every
         byte checked, every end proven an rsocket by the program. Not socat/nc: Debian 12's
         socat crashes under the preload when it opens a file for reading or runs EXEC (a call
         through a null pointer), and nc makes SOCK_NONBLOCK sockets, which the preload's fork
         mode does not take (it only converts plain SOCK_STREAM).

Proof: while the pair runs, no kernel TCP socket has the port (/proc/net/tcp and tcp6: the
preload's listener and connection are rsockets), and the server process holds rdmashim's QP
sockets (unix sockets named @rdmashim/qp/<qpn> among its descriptors).

What cannot work (Debian 12's preload has no epoll and no accept4): programs that wait with
epoll (socat's client with its default build, iperf3) or accept with accept4 (OpenBSD nc -l)
get the kernel's answer for an rsocket number ("Socket operation on non-socket"). So the
copy uses socat as the server (select + accept) and nc only as the client.

Usage: rspreload.py {iperf|copy|fork} --build-dir BUILD [--prog PATH]
(exit 77: a program or the preload is not installed)
"""
import argparse
import filecmp
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
import sanitizer_env  # noqa: E402

PRELOAD = "/usr/lib/x86_64-linux-gnu/rsocket/librspreload.so"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(build):
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "dropin")
    env["LD_PRELOAD"] = PRELOAD
    env["RDMASHIM_PROVIDER"] = "soft"
    # A sanitizer build's library needs its runtime first in the library list; the programs'
    # own leaks at exit are told apart from ours as in the acceptance runner.
    if sanitizer_env.runtime_preload(build):
        supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "acceptance",
                            "lsan-programs.supp")
        env["LSAN_OPTIONS"] = f"suppressions={supp}:malloc_context_size=2:print_suppressions=0"
    return sanitizer_env.with_runtime(env, build)


def tcp_ports():
    """Local ports of every kernel TCP socket (any state)."""
    ports = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    ports.add(int(line.split()[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return ports


def qp_sockets(pid):
    """How many of the process's descriptors are rdmashim QP sockets."""
    names = {}
    with open("/proc/net/unix") as fh:
        next(fh)
        for line in fh:
            parts = line.split()
            if len(parts) >= 8:
                names[parts[6]] = parts[7]
    count = 0
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inode = target[8:-1]
                if names.get(inode, "").startswith("@rdmashim/qp/"):
                    count += 1
    except OSError:
        pass
    return count


def watch(server, port, seconds):
    """Samples the proof while the pair runs: (TCP seen on the port, max QP sockets)."""
    tcp_seen, qps = False, 0
    end = time.monotonic() + seconds
    while time.monotonic() < end and server.poll() is None:
        tcp_seen |= port in tcp_ports()
        qps = max(qps, qp_sockets(server.pid))
        time.sleep(0.05)
    return tcp_seen, qps


def rsocket_reads(trace_path):
    """Bytes the server read through rsockets, from its RDMASHIM_TRACE: a pair that ends
    between two samples of `watch` still leaves this proof."""
    try:
        with open(trace_path, errors="replace") as f:
            text = f.read()
    except OSError:
        return 0
    return sum(int(m.group(1)) for m in
               re.finditer(r"^\S+\s+\d+ r(?:recv|read|readv|recvfrom|recvmsg)\(.*\) = (\d+) <",
                           text, re.M))


def run_pair(server_argv, client_argv, env, port, client_stdin=None, timeout=60):
    problems = []
    trace = tempfile.NamedTemporaryFile(prefix="rdmashim-rspreload-", suffix=".trace",
                                        delete=False)
    trace.close()
    server_env = dict(env, RDMASHIM_TRACE=trace.name)
    with tempfile.TemporaryFile() as so, tempfile.TemporaryFile() as co:
        server = subprocess.Popen(server_argv, env=server_env, stdout=so, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            time.sleep(1.0)
            tcp_before = port in tcp_ports()
            client = subprocess.Popen(client_argv, env=env, stdout=co, stderr=subprocess.STDOUT,
                                      stdin=client_stdin or subprocess.DEVNULL, start_new_session=True)
            tcp_seen, qps = watch(server, port, 1.0)
            try:
                crc = client.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                client.kill()
                crc = "timeout"
            try:
                src = server.wait(timeout=5)
            except subprocess.TimeoutExpired:
                src = None  # a server that runs until killed (iperf -s)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
        so.seek(0)
        co.seek(0)
        sout, cout = so.read().decode(errors="replace"), co.read().decode(errors="replace")
    print(f"--- server: {' '.join(server_argv)} (exit {src}) ---\n{sout}")
    print(f"--- client: {' '.join(client_argv)} (exit {crc}) ---\n{cout}")
    if crc != 0:
        problems.append(f"client exit {crc}")
    if src not in (0, None):
        problems.append(f"server exit {src}")
    if tcp_before or tcp_seen:
        problems.append(f"a kernel TCP socket has port {port}: the traffic did not go through rsockets")
    read = rsocket_reads(trace.name)
    os.unlink(trace.name)
    if qps == 0 and read == 0:
        problems.append("the server held no rdmashim QP socket and read nothing through rsockets")
    print(f"proof: kernel TCP sockets on port {port}: {'yes' if tcp_before or tcp_seen else 'none'}; "
          f"rdmashim QP sockets in the server: {qps}; bytes it read through rsockets: {read}")
    return problems, sout, cout


def scenario_iperf(build):
    port = free_port()
    env = env_for(build)
    problems, sout, cout = run_pair(["iperf", "-s", "-p", str(port)],
                                    ["iperf", "-c", "127.0.0.1", "-p", str(port), "-t", "2"], env, port)
    for who, out in (("server", sout), ("client", cout)):
        if not any("Bytes" in l and "bits/sec" in l for l in out.splitlines()):
            problems.append(f"iperf {who}: no transfer line (…Bytes … bits/sec)")
    return problems


def scenario_copy(build):
    port = free_port()
    env = env_for(build)
    tmp = tempfile.mkdtemp(prefix="rdmashim-rspreload-")
    try:
        src, dst = os.path.join(tmp, "src.bin"), os.path.join(tmp, "dst.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(20 * 1000 * 1000))
        with open(src, "rb") as stdin:
            problems, _, _ = run_pair(
                ["socat", "-u", f"TCP-LISTEN:{port},bind=127.0.0.1,reuseaddr", f"OPEN:{dst},creat,trunc"],
                ["nc", "-N", "127.0.0.1", str(port)], env, port, client_stdin=stdin)
        if not os.path.exists(dst):
            problems.append("the copy was not written")
        elif not filecmp.cmp(src, dst, shallow=False):
            problems.append(f"the copy differs from the source ({os.path.getsize(dst)} of "
                            f"{os.path.getsize(src)} bytes)")
        else:
            print(f"copy: {os.path.getsize(dst)} bytes, identical")
        return problems
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def scenario_fork(build, prog):
    """c-tests/preload_fork under the preload with RDMAV_FORK_SAFE=1: the program checks every
    byte and that both ends of each connection became rsockets (SOL_RDMA getsockopt)."""
    env = env_for(build)
    env["RDMAV_FORK_SAFE"] = "1"
    try:
        r = subprocess.run([prog], env=env, capture_output=True, text=True, timeout=150,
                           start_new_session=True)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = f"{e.stdout or ''}{e.stderr or ''}(timeout)", "timeout"
    print(f"--- RDMAV_FORK_SAFE=1 {prog} (exit {rc}) ---\n{out}")
    return [] if rc == 0 and "ok" in out.split() else [f"{os.path.basename(prog)} exit {rc}"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario", choices=("iperf", "copy", "fork"))
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--prog", help="c-tests/preload_fork (the fork scenario)")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    need = {"iperf": ["iperf"], "copy": ["socat", "nc"], "fork": []}[a.scenario]
    for prog in need:
        if not shutil.which(prog):
            print(f"SKIP: {prog} is not installed (scripts/deps installs it)")
            return 77
    if not os.path.exists(PRELOAD):
        print(f"SKIP: {PRELOAD} is not installed (Debian's librdmacm1)")
        return 77
    if a.scenario == "fork":
        if not a.prog:
            ap.error("fork needs --prog")
        problems = scenario_fork(build, os.path.abspath(a.prog))
    else:
        problems = scenario_iperf(build) if a.scenario == "iperf" else scenario_copy(build)
    for p in problems:
        print(f"FAIL: {p}")
    print("PASS" if not problems else "FAIL")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
