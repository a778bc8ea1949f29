"""Helpers shared by the hardening tests: run Debian's RDMA programs on rdmashim (preload
mode), find the abstract unix sockets a process listens on, and speak to them directly."""

import os
import socket
import struct
import subprocess
import time

SKIP = 77


def env_for(build, extra=None):
    env = dict(os.environ)
    # meson puts build directories on LD_LIBRARY_PATH; preload mode must sit on the system libs.
    env.pop("LD_LIBRARY_PATH", None)
    env["LD_PRELOAD"] = os.path.join(build, "librdmashim.so")
    env["RDMASHIM_PROVIDER"] = "soft"
    env.pop("RDMASHIM_ALLOW_UIDS", None)
    env.update(extra or {})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, cond, timeout=10.0):
    """Polls cond() until it returns something true; fails the test after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise SystemExit(f"FAIL: timed out waiting for {what}")


def socket_inodes(pid):
    out = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                out.add(int(t[8:-1]))
    except OSError:
        pass
    return out


def listeners(pid, prefix):
    """Abstract names (without '@') of the listening unix sockets of `pid` starting with prefix."""
    mine = socket_inodes(pid)
    names = []
    with open("/proc/net/unix") as f:
        next(f)
        for line in f:
            p = line.split()
            # Num RefCount Protocol Flags Type St Inode Path; Flags 00010000 = listening
            if len(p) >= 8 and int(p[3], 16) & 0x10000 and int(p[6]) in mine and p[7].startswith("@" + prefix):
                names.append(p[7][1:])
    return names


def connect(name):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.connect("\0" + name)
    return s


def closed_by_peer(s, timeout):
    """True if the peer closes `s` (EOF) within `timeout` seconds without sending anything;
    False if it sends something or keeps it open."""
    s.settimeout(timeout)
    try:
        return s.recv(4096) == b""
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True


REQ, REP, RTU, DREQ = 1, 2, 3, 5


def cm_msg(kind, qpn=0x123456):
    """A well-formed CM message as rdmashim's CM sends it (src/cm/proto.rs `Msg`)."""
    wire = bytes(10) + b"\xff\xff" + bytes([127, 0, 0, 1]) + struct.pack(">H", 40000) + bytes(10)
    # kind qpn status private_len · resp init flow retry rnr srq path_mtu transport (0: RC)
    # · psn qkey ece_vendor ece_options · src dst private
    return struct.pack("<IIiI6BBxIIII28s28s196s", kind, qpn, 0, 0, 1, 1, 0, 7, 7, 0, 0, 0, 0, 0,
                       0, wire, wire, bytes(196))


def cm_req(qpn=0x123456):
    return cm_msg(REQ, qpn)


def qp_hello(from_qpn, to_qpn):
    """A well-formed QP handshake (src/provider/soft/link.rs `Hello`, without descriptors)."""
    return struct.pack("<IIII", 0x52444D53, 1, from_qpn, to_qpn)


def strace_count(pid, calls, seconds):
    """System calls of `pid` (all threads) over `seconds`, counted by strace -c: {name: count}."""
    import re
    import signal
    with subprocess.Popen(["strace", "-f", "-c", "-e", "trace=" + ",".join(calls), "-p", str(pid)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as st:
        time.sleep(seconds)
        st.send_signal(signal.SIGINT)
        _, report = st.communicate(timeout=30)
    print(report.strip())
    if "attached" not in report:
        raise SystemExit("FAIL: strace could not attach to the server (needs ptrace rights)")
    counts = {}
    for m in re.finditer(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", report, re.M):
        counts[m.group(2)] = int(m.group(1))
    return counts


def start(argv, env):
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(p, who, timeout):
    """Waits (bounded) for p; returns its output; fails the test if it does not exit 0."""
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        print(out)
        raise SystemExit(f"FAIL: {who} did not finish within {timeout} s")
    if p.returncode != 0:
        print(out)
        raise SystemExit(f"FAIL: {who} exited {p.returncode}")
    return out


def stop(p):
    if p.poll() is None:
        p.kill()
    p.communicate()
