#!/usr/bin/env python3
"""Descriptor exhaustion neither spins nor wedges a process (issue 9, item 4).

A listening rdma_server is brought to its descriptor limit (prlimit on the running process:
the limit is set to its lowest free descriptor number, so the next accept4 fails with EMFILE)
and connections wait at its CM listener. Counted, not timed:
  * its accept4 calls over 2 s (strace -f -c): a backed-off retry makes a handful, a
    level-triggered busy loop thousands (bound: 40);
  * its CPU ticks over 2 s from /proc/<pid>/stat (bound: 20% of one CPU).
A client connecting meanwhile waits in the listen queue; once the limit is raised it connects
and exchanges data (bounded wait).
Usage: emfile.py --build-dir BUILD
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (SKIP, connect, env_for, finish, free_port, listeners, start, stop,  # noqa: E402
                    strace_count, wait_for)

WINDOW = 2.0
MAX_ACCEPTS = 40


def ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def lowest_free_fd(pid):
    used = {int(x) for x in os.listdir(f"/proc/{pid}/fd")}
    n = 0
    while n in used:
        n += 1
    return n


def resource_soft_limit(pid):
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                return int(line.split()[3])
    raise SystemExit("FAIL: no open-files limit in /proc/<pid>/limits")


def accept4_calls(pid):
    return strace_count(pid, ["accept4"], WINDOW).get("accept4", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    for tool in ("strace", "prlimit"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} is not installed")
            return SKIP
    env = env_for(build)
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env)
    try:
        name = wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))[0]
        limit = lowest_free_fd(server.pid)
        soft = resource_soft_limit(server.pid)
        subprocess.run(["prlimit", f"--pid={server.pid}", f"--nofile={limit}:"], check=True)
        print(f"rdma_server (pid {server.pid}) limited to {limit} descriptors, all in use")
        waiting = [connect(name) for _ in range(5)]
        client = start(["rdma_client", "-s", "127.0.0.1", "-p", port], env)
        time.sleep(0.5)  # let the listener fail and back off before counting
        t0 = ticks(server.pid)
        time.sleep(WINDOW)
        used = ticks(server.pid) - t0
        calls = accept4_calls(server.pid)
        print(f"at the limit: {calls} accept4 calls and {used} CPU ticks in {WINDOW} s")
        ok = True
        if calls > MAX_ACCEPTS:
            print(f"FAIL: {calls} accept4 calls in {WINDOW} s: the listener is retried in a loop")
            ok = False
        if used > os.sysconf("SC_CLK_TCK") * WINDOW * 0.2:
            print("FAIL: the server burns CPU at the descriptor limit")
            ok = False
        if client.poll() is not None:
            print(client.communicate()[0])
            print("FAIL: the waiting client did not wait for the server")
            ok = False
        subprocess.run(["prlimit", f"--pid={server.pid}", f"--nofile={soft}:"], check=True)
        for s in waiting:
            s.close()
        finish(client, "rdma_client once descriptors were free again", 30)
        finish(server, "rdma_server", 10)
        if not ok:
            return 1
        print("emfile: ok")
        return 0
    finally:
        stop(server)


if __name__ == "__main__":
    sys.exit(main())
