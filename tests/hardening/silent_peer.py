#!/usr/bin/env python3
"""Peers that connect and then misbehave must not stall a process (issue 9, item 3).

1. CM listener: Debian's rdma_server on rdmashim; connections to its listener's abstract socket
   that send nothing, or garbage, are closed by the server (bounded wait), and while a hundred
   silent ones are open, rdma_client still connects and exchanges data (bounded wait).
2. QP socket: while silent and garbage connections to the server's QP socket are open, an
   ibv_rc_pingpong pair in event mode (which needs the server's progress thread) completes.
(A peer that never reads: src/provider/soft/unix.rs `send_never_waits_for_a_reader`.)

Before the fix the progress thread blocked reading the first silent connection: the silent
connection stayed open forever and rdma_client / ibv_rc_pingpong never completed.
Usage: silent_peer.py --build-dir BUILD
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (closed_by_peer, connect, env_for, finish, free_port, listeners, start,  # noqa: E402
                    stop, wait_for)


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    cm_listener(build)
    qp_socket(build)
    print("silent_peer: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
