#!/usr/bin/env python3
"""Design properties of the same-host data path, checked by counting, not timing:

1. no system call per work request while both sides poll: Debian's ibv_rc_pingpong (busy
   polling, 64-byte messages) under strace makes far fewer system calls than messages;
2. ~0% CPU when idle: a listening rdma_server that waits for a connection uses (almost) no CPU
   time over two seconds, read from /proc/<pid>/stat.

Usage: fastpath.py --build-dir BUILD
"""
import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(build):
    env = dict(os.environ)
    # meson puts build directories on LD_LIBRARY_PATH; preload mode must sit on the system libs.
    env.pop("LD_LIBRARY_PATH", None)
    env["LD_PRELOAD"] = os.path.join(build, "librdmashim.so")
    env["RDMASHIM_PROVIDER"] = "soft"
    return env


def syscalls_per_message(build, iters=20000):
    env = env_for(build)
    port = str(free_port())
    server = subprocess.Popen(["ibv_rc_pingpong", "-g", "0", "-s", "64", "-n", str(iters), "-p", port],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)
    with tempfile.NamedTemporaryFile("r", suffix=".strace") as out:
        client = subprocess.run(["strace", "-f", "-c", "-o", out.name, "ibv_rc_pingpong", "-g", "0", "-s", "64",
                                 "-n", str(iters), "-p", port, "127.0.0.1"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        report = out.read()
    server_out, _ = server.communicate(timeout=60)
    if client.returncode != 0 or server.returncode != 0:
        print(client.stdout, server_out)
        raise SystemExit("fastpath: ibv_rc_pingpong failed")
    # strace -c's last line: "100.00  seconds  usecs/call  CALLS  [errors]  total"
    total = re.search(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?total\s*$", report, re.M)
    calls = int(total.group(1)) if total else None
    print(report)
    if calls is None:
        raise SystemExit("fastpath: could not read strace's total")
    return calls, 2 * iters  # each iteration is one message each way


def idle_cpu_ticks(build, seconds=2.0):
    env = env_for(build)
    port = str(free_port())
    p = subprocess.Popen(["rdma_server", "-p", port], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)  # start-up is not idle time

        def ticks():
            with open(f"/proc/{p.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime, in clock ticks

        t0 = ticks()
        time.sleep(seconds)
        return ticks() - t0, os.sysconf("SC_CLK_TCK") * seconds
    finally:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    ok = True
    calls, messages = syscalls_per_message(build)
    print(f"fastpath: {calls} system calls for {messages} messages ({calls / messages:.4f} per message)")
    # A design with a system call per request would show at least 0.5 here (the client sends
    # every other message); the 1 ms naps of the progress thread stay far below 0.25.
    if calls * 4 > messages:
        print("FAIL: the busy-polling data path makes system calls per message")
        ok = False
    used, available = idle_cpu_ticks(build)
    print(f"idle: a waiting rdma_server used {used} of {available:.0f} clock ticks")
    if used > available * 0.02:
        print("FAIL: an idle process uses CPU")
        ok = False
    print("fastpath: ok" if ok else "fastpath: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
