#!/usr/bin/env python3
"""Another local user cannot reach a process's QP and CM sockets (issue 9, item 9).

As root: a root rdma_server's CM listener and a root ibv_rc_pingpong's QP socket get a
well-formed REQ / QP handshake from a process running as uid 65534: the connection is closed
without an answer, and the servers are unaffected (a root client then completes with them).
With RDMASHIM_ALLOW_UIDS on both sides, rdma_client running as uid 65534 connects to a root
rdma_server and exchanges data.

Before the fix the REQ was answered (a REP came back) and the handshake was kept.
Needs root (to switch uid); exits 77 otherwise.
Usage: other_user.py --build-dir BUILD
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (SKIP, closed_by_peer, cm_req, connect, env_for, finish, free_port,  # noqa: E402
                    listeners, qp_hello, start, stop, wait_for)

NOBODY = 65534


def as_nobody(fn):
    """Runs fn() in a forked child as uid/gid 65534; returns its exit status (fn's truth)."""
    pid = os.fork()
    if pid == 0:
        code = 2
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            code = 0 if fn() else 1
        except BaseException as e:  # noqa: BLE001 - report anything, exit the child
            print(f"child: {e!r}")
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def refused_cm(build):
    env = env_for(build)
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env)
    try:
        name = wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))[0]

        def attempt():
            s = connect(name)
            try:
                s.send(cm_req())
            except (BrokenPipeError, ConnectionResetError):
                return True  # closed before the message went out: refused as well
            return closed_by_peer(s, 10)

        if as_nobody(attempt) != 0:
            raise SystemExit("FAIL: a REQ from uid 65534 to a root listener was not refused")
        print("uid 65534: REQ to a root rdma_server refused (closed, no answer)")
        client = start(["rdma_client", "-s", "127.0.0.1", "-p", port], env)
        finish(client, "root rdma_client after the refused REQ", 20)
        finish(server, "rdma_server", 10)
        print("root rdma_client then completed: the server was unaffected")
    finally:
        stop(server)


def refused_qp(build):
    env = env_for(build)
    port = str(free_port())
    server = start(["ibv_rc_pingpong", "-g", "0", "-n", "100", "-p", port], env)
    try:
        name = wait_for("the server's QP socket", lambda: listeners(server.pid, "rdmashim/qp/"))[0]
        qpn = int(name.rsplit("/", 1)[1], 16)

        def attempt():
            s = connect(name)
            try:
                s.send(qp_hello(0x100, qpn))
            except (BrokenPipeError, ConnectionResetError):
                return True  # closed before the message went out: refused as well
            return closed_by_peer(s, 10)

        if as_nobody(attempt) != 0:
            raise SystemExit("FAIL: a QP handshake from uid 65534 to a root QP was not refused")
        print("uid 65534: handshake to a root QP refused (closed, no answer)")
        client = start(["ibv_rc_pingpong", "-g", "0", "-n", "100", "-p", port, "127.0.0.1"], env)
        finish(client, "root ibv_rc_pingpong client", 30)
        finish(server, "ibv_rc_pingpong server", 10)
        print("root ibv_rc_pingpong pair then completed")
    finally:
        stop(server)


def allowed_with_opt_in(build):
    # uid 65534 must be able to load the library: use a world-readable copy (the checkout may
    # sit in a directory only root can enter).
    tmp = tempfile.mkdtemp(prefix="rdmashim-other-user-")
    os.chmod(tmp, 0o755)
    lib = os.path.join(tmp, "librdmashim.so")
    shutil.copy(os.path.join(build, "librdmashim.so"), lib)
    os.chmod(lib, 0o755)
    try:
        refused_program(build, lib)
        run_opted_in(build, lib)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def refused_program(build, lib):
    """rdma_client as uid 65534 (which would accept root) against a root server that did not
    opt in: the client fails, nothing is established, and a root client then completes."""
    env = env_for(build)
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env)
    try:
        wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))
        client = start(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        "rdma_client", "-s", "127.0.0.1", "-p", port],
                       env_for(build, {"RDMASHIM_ALLOW_UIDS": "0", "LD_PRELOAD": lib}))
        try:
            out, _ = client.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            client.kill()
            raise SystemExit("FAIL: rdma_client as uid 65534 hung instead of being refused")
        if client.returncode == 0:
            print(out)
            raise SystemExit("FAIL: rdma_client as uid 65534 connected to a root server")
        print(f"rdma_client as uid 65534 refused: {out.strip().splitlines()[-1]}")
        root = start(["rdma_client", "-s", "127.0.0.1", "-p", port], env)
        finish(root, "root rdma_client after the refused one", 20)
        finish(server, "rdma_server", 10)
        print("root rdma_client then completed: the server was unaffected")
    finally:
        stop(server)


def run_opted_in(build, lib):
    port = str(free_port())
    server = start(["rdma_server", "-p", port], env_for(build, {"RDMASHIM_ALLOW_UIDS": str(NOBODY)}))
    try:
        wait_for("rdma_server's CM listener", lambda: listeners(server.pid, "rdmashim/cm/"))
        client = start(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                        "rdma_client", "-s", "127.0.0.1", "-p", port],
                       env_for(build, {"RDMASHIM_ALLOW_UIDS": "0", "LD_PRELOAD": lib}))
        finish(client, "rdma_client as uid 65534 (both sides opted in)", 20)
        finish(server, "rdma_server", 10)
        print("with RDMASHIM_ALLOW_UIDS on both sides, uid 65534 connected to root and moved data")
    finally:
        stop(server)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    build = os.path.abspath(ap.parse_args().build_dir)
    if os.geteuid() != 0:
        print("SKIP: needs root to run a process as another user (uid 65534)")
        return SKIP
    if not shutil.which("setpriv"):
        print("SKIP: setpriv (util-linux) is not installed")
        return SKIP
    refused_cm(build)
    refused_qp(build)
    allowed_with_opt_in(build)
    print("other_user: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
