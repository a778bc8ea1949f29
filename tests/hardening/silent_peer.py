#!/usr/bin/env python3
"""Peers that connect and then misbehave must not stall a process (issue 9, item 3).

1. CM listener: Debian's rdma_server on rdmashim; connections to its listener's abstract socket
   that send nothing, or garbage, are closed by the server (bounded wait), and while a hundred
   silent ones are open, rdma_client still connects and exchanges data (bounded wait).
2. QP socket: while silent and garbage connections to the server's QP socket are open, an
   ibv_rc_pingpong pair in event mode (which needs the server's progress thread) completes.
3. A peer that never reads: a fake CM client completes REQ/REP/RTU with rdma_server, then sends
   DREQs (each answered by a DREP) and never reads. Counted with strace over 1 s: the server
   makes no sendmsg calls once our queue is full (it does not wait for room to send). (The
   unit test src/runtime/unix.rs `send_never_waits_for_a_reader` shows the same for send.)

Before the fix the progress thread blocked reading the first silent connection: the silent
connection stayed open forever and rdma_client / ibv_rc_pingpong never completed.
Usage: silent_peer.py --build-dir BUILD
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (DREQ, REP, RTU, closed_by_peer, cm_msg, connect, env_for, finish,  # noqa: E402
                    free_port, listeners, start, stop, strace_count, wait_for)


def cm_listener(build):
    env = env_for(build)
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env)
    try:
        name = wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))[0]
        print(f"CM listener: @{name}")
        silent = connect(name)
        garbage = connect(name)
        garbage.send(b"\xde\xad\xbe\xef" * 8)
        if not closed_by_peer(garbage, 10):
            raise SystemExit("FAIL: a connection that sent garbage was not closed")
        if not closed_by_peer(silent, 10):
            raise SystemExit("FAIL: a connection that sent nothing was not closed")
        print("garbage and silent connections were closed by the server")
        held = [connect(name) for _ in range(100)]
        client = start(["rdma_client", "-s", "127.0.0.1", "-p", port], env)
        finish(client, "rdma_client (100 silent connections open)", 20)
        finish(server, "rdma_server", 10)
        print("rdma_client connected and exchanged data while 100 silent connections were open")
        for s in held:
            s.close()
    finally:
        stop(server)


def qp_socket(build):
    env = env_for(build)
    port = str(free_port())
    server = start(["ibv_rc_pingpong", "-e", "-g", "0", "-n", "100", "-p", port], env)
    try:
        name = wait_for("the server's QP socket", lambda: listeners(server.pid, "rdmashim/qp/"))[0]
        print(f"QP socket: @{name}")
        held = [connect(name) for _ in range(3)]
        g = connect(name)
        g.send(b"\x00" * 16)
        held.append(g)
        client = start(["ibv_rc_pingpong", "-e", "-g", "0", "-n", "100", "-p", port, "127.0.0.1"], env)
        finish(client, "ibv_rc_pingpong client", 30)
        finish(server, "ibv_rc_pingpong server", 10)
        print("ibv_rc_pingpong -e completed while silent connections to the server's QP were open")
        for s in held:
            s.close()
    finally:
        stop(server)


def never_reads(build):
    env = env_for(build)
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env)
    try:
        name = wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))[0]
        s = connect(name)
        s.send(cm_msg(1, qpn=0xfffff0))
        s.settimeout(10)
        rep = s.recv(4096)
        if len(rep) < 4 or int.from_bytes(rep[:4], "little") != REP:
            raise SystemExit(f"FAIL: no REP from rdma_server ({rep[:8]!r})")
        s.send(cm_msg(RTU))
        s.setblocking(False)
        sent = 0
        for _ in range(5000):
            try:
                s.send(cm_msg(DREQ))
                sent += 1
            except BlockingIOError:
                break
        time.sleep(0.5)  # let the server answer what it can
        counts = strace_count(server.pid, ["sendmsg", "poll"], 1.0)
        print(f"sent {sent} DREQs without reading; server in 1 s: {counts}")
        if counts.get("sendmsg", 0) > 2:
            raise SystemExit("FAIL: the server keeps trying to send to a peer that never reads")
        s.close()
    finally:
        stop(server)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    cm_listener(build)
    qp_socket(build)
    never_reads(build)
    print("silent_peer: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
