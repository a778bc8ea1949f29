#!/usr/bin/env python3
"""Another RoCEv2 stack across namespaces: Debian's programs on rdmashim talk to a peer that is
not rdmashim (issue 8: port 4791 for data).

  foreign_peer.py [--build-dir build] [--mode preload|dropin]

The peer in namespace b is this script (scapy), behaving as rxe or a RoCE NIC does: its QPN
(0x11) names no UDP port, it sends every packet to port 4791 with a random IPv4 ID and a random
source port, and it listens on port 4791. ibv_ud_pingpong's server runs in namespace a. The
peer exchanges addresses with it over TCP as ibv_ud_pingpong's client does, then sends each
ping as a RoCEv2 UD SEND to a:4791 and waits for the pong at its own port 4791, checking the
pong's BTH, DETH, length and ICRC (scapy's). Four runs:

  * ud own: the server is the only rdmashim process in a, so it owns port 4791 itself;
  * ud relayed: another rdmashim process (an idle ibv_ud_pingpong server) owns port 4791 first,
    so every ping reaches the server through the owner's relay by QPN;
  * rc relayed: the same with ibv_rc_pingpong: the peer sends each ping as an RC SEND Only with
    the PSN it announced, and acknowledges each pong (an ACK to the server's QPN); the server's
    ACKs and pongs must come to port 4791 with the PSNs it announced, so the RC QP accepted
    packets from another stack's source ports.
  * cm relayed: Debian's rdma_client in a (an idle process owning a's 4791) against the peer as
    a kernel CM: REP and DREP to a:4791 from port 4791, passed on by comm id; the client's RC
    SEND is ACKed and answered.

Exit 0 pass, 1 fail, 77 not root / scapy missing.
"""

import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "wire"))
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
import check_roce  # noqa: E402,F401  (re-executes under /usr/bin/python3 when scapy is missing)
import cm_cross  # noqa: E402
import fixture  # noqa: E402
from placement import gid_index  # noqa: E402

FOREIGN_QPN = 0x11        # rxe's first QPN: names no UDP port
FOREIGN_PSN = 0x1234
UD_QKEY = 0x11111111      # ibv_ud_pingpong's
ITERS = 20
SIZE = 512
MSG_LEN = len("0000:000000:000000:00000000000000000000000000000000") + 1


def log(msg):
    print(f"foreign_peer: {msg}", flush=True)


class Wire:
    """Another stack's RoCEv2 port in namespace b: it sends raw IPv4 packets (a random ID, a
    chosen source port, scapy's ICRC) and receives at its own port 4791."""

    def __init__(self, my_ip, server_ip):
        import socket
        self.my_ip, self.server_ip = my_ip, server_ip
        # A UDP socket, not a raw one: on veth a segmented (GSO) send reaches a raw socket
        # whole, where a wire would carry its datagrams one by one.
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.bind(("0.0.0.0", 4791))
        self.rx.settimeout(1.0)
        self.out = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)

    def send(self, opcode, dqpn, psn, body, ackreq=0, sport=None):
        import random
        import scapy.contrib.roce as roce
        from scapy.layers.inet import IP, UDP
        from scapy.packet import Raw
        pkt = (IP(src=self.my_ip, dst=self.server_ip, id=random.getrandbits(16), ttl=64,
                  flags="DF")
               / UDP(sport=sport or random.randint(49152, 65535), dport=4791)
               / roce.BTH(opcode=opcode, dqpn=dqpn, psn=psn & 0xffffff, ackreq=ackreq)
               / Raw(body))
        self.out.sendto(bytes(pkt), (self.server_ip, 0))

    def recv(self, deadline):
        """The next datagram from the server as the IP packet it travelled in, and whether
        scapy computes its ICRC. A UDP socket does not show the IPv4 ID (which the ICRC
        covers): rdmashim sends with ID 0, and the k-th datagram of a segmented send has ID k,
        so IDs below 64 are tried. (None, False) at the deadline."""
        import socket
        import scapy.contrib.roce as roce
        from scapy.layers.inet import IP, UDP
        from scapy.packet import Raw
        while time.monotonic() < deadline:
            try:
                data, (src, sport) = self.rx.recvfrom(65535)
            except socket.timeout:
                continue
            if src != self.server_ip:
                continue
            for ident in range(64):
                p = IP(bytes(IP(src=src, dst=self.my_ip, id=ident, ttl=64, flags="DF")
                             / UDP(sport=sport, dport=4791) / Raw(data)))
                if p[roce.BTH].compute_icrc(None) == data[-4:]:
                    return p, True
            return p, False
        return None, False


def peer(kind, server_ip, port, my_ip):
    """Runs in namespace b (--peer): ibv_{ud,rc}_pingpong's client side, as another stack."""
    import socket
    import struct
    import scapy.contrib.roce as roce
    from scapy.layers.inet import UDP

    wire = Wire(my_ip, server_ip)
    gid = "00000000" * 2 + "0000ffff" + socket.inet_aton(my_ip).hex()
    t0 = time.monotonic()
    while True:
        try:
            tcp = socket.create_connection((server_ip, port), timeout=5)
            break
        except OSError:
            if time.monotonic() - t0 > 20:
                raise
            time.sleep(0.05)
    tcp.sendall(f"0000:{FOREIGN_QPN:06x}:{FOREIGN_PSN:06x}:{gid}".encode() + b"\0")
    msg = b""
    while len(msg) < MSG_LEN:
        chunk = tcp.recv(MSG_LEN - len(msg))
        if not chunk:
            raise SystemExit("server closed the exchange")
        msg += chunk
    m = re.match(r"([0-9a-f]{4}):([0-9a-f]{6}):([0-9a-f]{6}):([0-9a-f]{32})", msg.decode())
    if not m:
        raise SystemExit(f"server sent {msg!r}")
    qpn, server_psn = int(m.group(2), 16), int(m.group(3), 16)
    print(f"server qpn {qpn:#x}", flush=True)
    tcp.sendall(b"done\0")
    rc = kind == "rc"

    def send(opcode, psn, body, ackreq=0):
        wire.send(opcode, qpn, psn, body, ackreq)

    problems = []
    acks = 0
    for i in range(ITERS):
        if rc:
            send(0x04, FOREIGN_PSN + i, bytes([i]) * SIZE, ackreq=1)
        else:
            send(0x64, FOREIGN_PSN + i,
                 struct.pack("!IB", UD_QKEY, 0) + FOREIGN_QPN.to_bytes(3, "big")
                 + bytes([i]) * SIZE)
        deadline = time.monotonic() + 10
        pong = None
        while pong is None:
            p, icrc_ok = wire.recv(deadline)
            if p is None:
                break
            if not icrc_ok:
                problems.append(f"ping {i}: a packet whose ICRC scapy does not compute")
            if rc and p[roce.BTH].opcode == 0x11:       # the server's ACK of a ping
                acks += 1
                continue
            if rc and i > 0 and p[roce.BTH].psn == (server_psn + i - 1) & 0xffffff:
                # The last pong again: the server did not see our ACK in time (a busy machine).
                # A responder acknowledges a duplicate again.
                send(0x11, p[roce.BTH].psn, struct.pack("!I", (0x1f << 24) | i))
                continue
            pong = p
        if pong is None:
            problems.append(f"ping {i}: no pong at port 4791 within 10 s")
            break
        bth = pong[roce.BTH]
        ib = bytes(pong[UDP].payload)
        if rc:
            if bth.opcode != 0x04 or bth.dqpn != FOREIGN_QPN or bth.psn != (server_psn + i) & 0xffffff:
                problems.append(f"pong {i}: opcode {bth.opcode:#x} to QPN {bth.dqpn:#x} "
                                f"PSN {bth.psn:#x}")
            if len(ib) - 12 - 4 - bth.padcount != SIZE:
                problems.append(f"pong {i}: {len(ib)} bytes of UDP payload")
            # ACK it: the server's send completes, and it goes on.
            send(0x11, bth.psn, struct.pack("!I", (0x1f << 24) | (i + 1)))
            continue
        if bth.opcode != 0x64 or bth.dqpn != FOREIGN_QPN:
            problems.append(f"pong {i}: opcode {bth.opcode:#x} to QPN {bth.dqpn:#x}")
        qkey, src_qpn = struct.unpack("!I", ib[12:16])[0], int.from_bytes(ib[17:20], "big")
        if qkey != UD_QKEY or src_qpn != qpn:
            problems.append(f"pong {i}: DETH qkey {qkey:#x} source QP {src_qpn:#x}")
        if len(ib) - 12 - 8 - 4 - bth.padcount != SIZE:
            problems.append(f"pong {i}: {len(ib)} bytes of UDP payload")
    if rc and not acks:
        problems.append("the server acknowledged no ping")
    print(f"pongs checked: {ITERS if not problems else i}, ACKs seen: {acks}", flush=True)
    for p in problems:
        print(p, flush=True)
    return 1 if problems else 0


GSI_QKEY = 0x80010000
CM_ATTR = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ",
           0x16: "DREP"}
PEER_COMM_ID = 0x5eed0001


def mad(attr, tid, body):
    """A CM MAD (base version 1, class 7, version 2, method Send) with a 232-byte body."""
    import struct
    hdr = struct.pack("!BBBBHHQHHI", 1, 7, 2, 3, 0, 0, tid, attr, 0, 0)
    return hdr + body.ljust(232, b"\0")


def cm_peer(client_ip, my_ip):
    """Runs in namespace b (--cm-peer): the passive side of Debian's rdma_client as a kernel
    CM on another stack answers it: every MAD and packet to port 4791, from port 4791 (MADs)."""
    import struct
    import scapy.contrib.roce as roce
    from scapy.layers.inet import UDP

    wire = Wire(my_ip, client_ip)
    seen, problems = [], []
    client_qpn = client_comm_id = None
    my_psn, deadline = 0x777, time.monotonic() + 60

    def send_mad(attr, tid, body):
        deth = struct.pack("!II", GSI_QKEY, 1)
        wire.send(0x64, 1, 0, deth + mad(attr, tid, body), sport=4791)

    while time.monotonic() < deadline:
        p, icrc_ok = wire.recv(deadline)
        if p is None:
            break
        if not icrc_ok:
            problems.append("a packet whose ICRC scapy does not compute")
        bth, ib = p[roce.BTH], bytes(p[UDP].payload)
        if bth.dqpn == 1:
            m = ib[12 + 8:-4]
            tid, attr = struct.unpack("!Q", m[8:16])[0], struct.unpack("!H", m[16:18])[0]
            body = m[24:]
            name = CM_ATTR.get(attr, hex(attr))
            seen.append(name)
            if name == "REQ" and client_comm_id is None:
                client_comm_id = struct.unpack("!I", body[0:4])[0]
                client_qpn = struct.unpack("!I", body[32:36])[0] >> 8
                client_psn = struct.unpack("!I", body[44:48])[0] >> 8
                rep = struct.pack("!IIII", PEER_COMM_ID, client_comm_id, 0, FOREIGN_QPN << 8)
                rep += struct.pack("!II", 0, my_psn << 8) + bytes([1, 1, 0x80, 0xe0])
                send_mad(0x13, tid, rep)
            elif name == "DREQ":
                send_mad(0x16, tid, struct.pack("!II", PEER_COMM_ID, client_comm_id))
                break
            continue
        if bth.dqpn != FOREIGN_QPN or client_qpn is None:
            problems.append(f"a packet to QPN {bth.dqpn:#x}")
            continue
        if bth.opcode == 0x04:                  # the client's SEND: ACK it, then answer
            seen.append("SEND")
            if bth.psn != client_psn:
                problems.append(f"SEND with PSN {bth.psn:#x}, the REQ said {client_psn:#x}")
            wire.send(0x11, client_qpn, bth.psn, struct.pack("!I", 0x1f000001))
            wire.send(0x04, client_qpn, my_psn, b"pong from peer!\0", ackreq=1)
        elif bth.opcode == 0x11:
            seen.append("ACK")
    print("seen: " + " ".join(seen), flush=True)
    want = ["REQ", "RTU", "SEND", "ACK", "DREQ"]
    if list(dict.fromkeys(x for x in seen if x in want)) != want:
        problems.append(f"expected {' '.join(want)} (in that order)")
    for p in problems:
        print(p, flush=True)
    return 1 if problems else 0


def run_cm(fx, penv, env, check):
    """Debian's rdma_client in a, with an idle rdmashim process owning a's port 4791, against
    a CM on another stack in b: its REP and DREP come to a:4791 and must be passed on by comm
    id, its data by QPN."""
    a, b = fx.hosts[0], fx.hosts[1]
    idle = idle_owner(fx, a, penv, env, 18603, check, "cm relayed")
    if idle is None:
        return
    try:
        p = fx.popen(b, ["/usr/bin/python3", os.path.abspath(__file__), "--cm-peer", a.ipv4,
                         b.ipv4], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)                          # its port 4791 bound before the REQ comes
        c = fx.run(a, penv + ["rdma_client", "-s", b.ipv4, "-p", "7471"], timeout=60,
                   capture_output=True, text=True, env=env)
        out = cm_cross.stop(p, 30)
        owner = owner_of_4791(fx, a)
    finally:
        idle.kill()
        idle.wait()
    check("cm relayed: the other stack's CM saw REQ, RTU, the SEND, an ACK and DREQ",
          p.returncode == 0, out.strip())
    check("cm relayed: rdma_client connected, moved its data and disconnected (end 0)",
          c.returncode == 0 and "rdma_client: end 0" in c.stdout,
          f"exit {c.returncode}: {(c.stdout + c.stderr).strip()}")
    check("cm relayed: port 4791 stayed with the idle process (the answers were relayed)",
          owner == idle.pid, f"owner {owner}, idle {idle.pid}")


def owner_of_4791(fx, host):
    """The pid holding UDP port 4791 in `host`'s namespace (`ss`), or None."""
    out = fx.run(host, ["ss", "-Hulpn", "sport = :4791"], capture_output=True, text=True).stdout
    m = re.search(r"pid=(\d+)", out)
    return int(m.group(1)) if m else None


def wait_owner(fx, host, pid, seconds=10):
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if owner_of_4791(fx, host) == pid:
            return True
        time.sleep(0.05)
    return False


def idle_owner(fx, host, penv, env, port, check, name):
    """An idle rdmashim process (an ibv_ud_pingpong server nobody connects to) that owns port
    4791 in `host`'s namespace; None, with a failed check, if it does not get it."""
    idle = fx.popen(host, penv + ["ibv_ud_pingpong", "-g", str(gid_index(host.ns, host.ipv4)),
                                  "-p", str(port)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    if wait_owner(fx, host, idle.pid):
        return idle
    check(f"{name}: an idle rdmashim process owns port 4791", False,
          f"owner {owner_of_4791(fx, host)}, idle {idle.pid}")
    idle.kill()
    idle.wait()
    return None


def run(fx, penv, env, kind, relayed, check):
    a, b = fx.hosts[0], fx.hosts[1]
    name = kind + (" relayed" if relayed else " own")
    prog = f"ibv_{kind}_pingpong"
    gidx = str(gid_index(a.ns, a.ipv4))
    idle = idle_owner(fx, a, penv, env, 18601, check, name) if relayed else None
    if relayed and idle is None:
        return
    srv = fx.popen(a, penv + [prog, "-g", gidx, "-p", "18602", "-s", str(SIZE),
                              "-n", str(ITERS)],
                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        p = fx.run(b, ["/usr/bin/python3", os.path.abspath(__file__), "--peer", kind, a.ipv4,
                       "18602", b.ipv4], timeout=120, capture_output=True, text=True)
        out = cm_cross.stop(srv, 20)
        owner = owner_of_4791(fx, a)
    finally:
        if idle:
            idle.kill()
            idle.wait()
    check(f"{name}: the foreign peer got every pong, well formed (ICRC by scapy)",
          p.returncode == 0, (p.stdout + p.stderr).strip())
    check(f"{name}: {prog}'s server ends with exit 0",
          srv.returncode == 0 and re.search(r"\d+ iters in", out) is not None,
          f"exit {srv.returncode}: {out.strip()}")
    if relayed:
        check(f"{name}: port 4791 stayed with the idle process (the pings were relayed)",
              owner == idle.pid, f"owner {owner}, idle {idle.pid}")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--cm-peer":
        return cm_peer(sys.argv[2], sys.argv[3])
    if len(sys.argv) == 6 and sys.argv[1] == "--peer":
        return peer(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--mode", choices=("preload", "dropin"), default="preload")
    args = ap.parse_args()
    ready = cm_cross.prepare(log, args.mode, args.build_dir, scapy=True)
    if isinstance(ready, int):
        return ready
    penv, env = ready
    check = cm_cross.Checks(log)

    with fixture.Fixture(hosts=2) as fx:
        run(fx, penv, env, "ud", False, check)
        run(fx, penv, env, "ud", True, check)
        run(fx, penv, env, "rc", True, check)
        run_cm(fx, penv, env, check)
    return check.verdict()


if __name__ == "__main__":
    sys.exit(main())
