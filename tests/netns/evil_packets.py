#!/usr/bin/env python3
"""Malicious RoCEv2 packets across two network namespaces (issue 8 acceptance).

  evil_packets.py --target build/c-tests/evil_target [--build-dir build]

c-tests/evil_target runs in namespace a on rdmashim: one RC QP per malicious packet plus an
honest one, an MR of one page between two guard pages, a 64-byte receive per QP. It learns its
peer (QPN, PSN, address) on stdin; the peer is this script's sender in namespace b (scapy;
every packet well formed RoCEv2 with a correct ICRC, so that it passes the ICRC check and
reaches the transport). To a QP each it sends: WRITEs with a wrong rkey, before/after/across
the MR's ends, at an address that wraps, with more payload than the RETH's length and a huge
length; WRITE/SEND Middle or Last with no First; a SEND larger than the receive and one larger
than the path MTU; READs beyond the MR, of 1 MiB, with a wrong rkey; atomics misaligned and
outside the MR; WRITEs with a PSN far out of the window and just behind it; truncated headers
(BTH only, half a RETH, half an AtomicETH); reserved opcodes; a UD SEND; an unsolicited ACK;
then junk shorter than a BTH. Then, on the last QP, an honest WRITE and SEND. The target must
end on its own (no crash, no hang), the guard pages must be untouched, the stale-PSN WRITEs
must not have landed, and the honest WRITE and SEND must have arrived.
Exit 0 pass, 1 fail, 77 not root / scapy missing.
"""

import argparse
import os
import re
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "wire"))
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
import check_roce  # noqa: E402,F401  (re-executes under /usr/bin/python3 when scapy is missing)
import cm_cross  # noqa: E402
import fixture  # noqa: E402
import wire_cross  # noqa: E402
from placement import gid_index  # noqa: E402

PEER_PSN = 0x2000
PEER_QPN = (wire_cross.ATTACKER_PORT << 8) | 1


def log(msg):
    print(f"evil_packets: {msg}", flush=True)


def reth(va, rkey, length):
    return struct.pack("!QII", va % (1 << 64), rkey, length)


def atomic(va, rkey):
    return struct.pack("!QIQQ", va % (1 << 64), rkey, 1, 0)


def attacks(t):
    """(name, opcode, psn, body), one per target QP; t: the target's numbers."""
    a, k, n, p = t["addr"], t["rkey"], t["len"], PEER_PSN
    x = b"X" * 64
    return [
        ("WRITE, wrong rkey", 0x0a, p, reth(a, k ^ 0xff00, 64) + x),
        ("WRITE across the MR's end", 0x0a, p, reth(a + n - 16, k, 64) + x),
        ("WRITE before the MR", 0x0a, p, reth(a - 64, k, 64) + x),
        ("WRITE after the MR", 0x0a, p, reth(a + n, k, 64) + x),
        ("WRITE at a wrapping address", 0x0a, p, reth(-32, k, 64) + x),
        ("WRITE, payload beyond the RETH length", 0x0a, p, reth(a + n - 16, k, 16) + b"Y" * 1000),
        ("WRITE, huge length", 0x0a, p, reth(a, k, 0xffffffff) + x),
        ("WRITE Middle with no First", 0x07, p, b"Z" * 1024),
        ("WRITE Last with no First", 0x08, p, b"Z" * 64),
        ("SEND larger than the receive", 0x04, p, b"S" * 1024),
        ("SEND Middle with no First", 0x01, p, b"S" * 1024),
        ("READ beyond the MR", 0x0c, p, reth(a + n - 8, k, 4096)),
        ("READ of 1 MiB", 0x0c, p, reth(a, k, 1 << 20)),
        ("READ, wrong rkey", 0x0c, p, reth(a, k + 1, 8)),
        ("FetchAdd misaligned", 0x14, p, atomic(a + 1, k)),
        ("FetchAdd before the MR", 0x14, p, atomic(a - 8, k)),
        ("CmpSwap after the MR", 0x13, p, atomic(a + n, k)),
        ("WRITE, PSN out of the window", 0x0a, (p + 0x400000) % (1 << 24),
         reth(a + 256, k, 8) + b"PSNBAD.."),
        ("WRITE, PSN just behind", 0x0a, (p - 5) % (1 << 24), reth(a + 256, k, 8) + b"OLDPSN.."),
        ("WRITE Only, BTH only", 0x0a, p, b""),
        ("WRITE Only, half a RETH", 0x0a, p, reth(a, k, 8)[:6]),
        ("FetchAdd, half an AtomicETH", 0x14, p, atomic(a, k)[:10]),
        ("reserved opcode 0x1f", 0x1f, p, x),
        ("reserved opcode 0x18", 0x18, p, x),
        ("opcode 0xff", 0xff, p, x),
        ("UD SEND Only on an RC QP", 0x64, p, struct.pack("!II", 0x11111111, 1) + x),
        ("SEND larger than the path MTU", 0x04, p, b"M" * 1400),
        ("ACK for nothing", 0x11, p, struct.pack("!I", 0x1f000000 | 5)),
    ]


def send_all(src, dst, target):
    """Runs in namespace b (--send): the attacks on QP1, then honest traffic on QP2."""
    import socket
    import time
    t = {k: int(v, 0) for k, v in (kv.split("=") for kv in target.split(","))}
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    sport = wire_cross.ATTACKER_PORT
    evil = attacks(t)
    for i, (name, op, psn, body) in enumerate(evil):
        s.sendto(wire_cross.forge(src, dst, t["qpn"] + i, body, False, op, psn, PEER_QPN + i),
                 (dst, 0))
        time.sleep(0.02)
    # Shorter than a BTH: raw UDP payload of 5 bytes (plus a few with random bytes).
    from scapy.layers.inet import IP, UDP
    for junk in (b"\x0a\x00\xff\xff\x00", os.urandom(20), os.urandom(200)):
        s.sendto(bytes(IP(src=src, dst=dst, id=0, flags="DF")
                       / UDP(sport=sport, dport=t["qpn"] >> 8) / junk), (dst, 0))
    time.sleep(0.2)
    a, h = t["addr"], len(evil)
    s.sendto(wire_cross.forge(src, dst, t["qpn"] + h, reth(a + 512, t["rkey"], 8) + b"HONEST..",
                              False, 0x0a, PEER_PSN, PEER_QPN + h), (dst, 0))
    s.sendto(wire_cross.forge(src, dst, t["qpn"] + h, b"HELLO...", False, 0x04, PEER_PSN + 1,
                              PEER_QPN + h), (dst, 0))
    time.sleep(0.5)
    print(f"sent {len(attacks(t)) + 3} malicious packets, then 2 honest ones")
    return 0


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--send":
        return send_all(sys.argv[2], sys.argv[3], sys.argv[4])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--target", required=True, help="c-tests/evil_target")
    args = ap.parse_args()
    ready = cm_cross.prepare(log, "preload", args.build_dir, scapy=True)
    if isinstance(ready, int):
        return ready
    penv, env = ready
    check = cm_cross.Checks(log)

    with fixture.Fixture(hosts=2) as fx:
        a, b = fx.hosts[0], fx.hosts[1]
        nq = len(attacks({"addr": 0, "rkey": 0, "len": 0})) + 1
        t = fx.popen(a, penv + [os.path.abspath(args.target), str(gid_index(a.ns, a.ipv4)),
                                str(nq)],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True, env=env)
        first = t.stdout.readline()
        m = re.match(r"qpn (\S+) psn (\S+) rkey (\S+) addr (\S+) len (\d+)", first)
        if not m:
            t.kill()
            check("target starts", False, first + t.communicate()[0])
            return 1
        keys = ("qpn", "psn", "rkey", "addr", "len")
        target = ",".join(f"{k}={v}" for k, v in zip(keys, m.groups()))
        t.stdin.write(f"{b.ipv4} {PEER_QPN:x} {PEER_PSN:x}\n")
        t.stdin.flush()
        ready = t.stdout.readline()
        check("target connected its QPs", ready.strip() == "ready", ready)
        snd = fx.run(b, ["/usr/bin/python3", os.path.abspath(__file__), "--send", b.ipv4,
                         a.ipv4, target], timeout=60, capture_output=True, text=True)
        check("sender ran", snd.returncode == 0, (snd.stdout + snd.stderr).strip())
        t.stdin.close()
        try:
            out = t.stdout.read() if t.wait(timeout=30) is not None else ""
        except subprocess.TimeoutExpired:
            t.kill()
            t.wait()
            out = ""
            check("target ends (no hang)", False)
        log("target said:\n" + first + ready + out)
        check("target ends on its own, exit 0 (no crash)", t.returncode == 0,
              f"exit {t.returncode}")
        check("guard pages around the MR untouched", "guard bytes changed: 0" in out)
        check("WRITEs with a PSN out of the window or behind it did not land",
              "stale PSN write landed: no" in out)
        check("honest WRITE on the last QP arrived", "honest write: yes" in out)
        check("honest SEND on the last QP arrived", "honest send: yes" in out)
    return check.verdict()


if __name__ == "__main__":
    sys.exit(main())
