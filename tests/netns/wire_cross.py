#!/usr/bin/env python3
"""Captures of real data traffic across two network namespaces, checked by independent
decoders (issue 8 acceptance).

  wire_cross.py [--build-dir build] [--mode preload|dropin]

Each program pair runs with the server in namespace a and the client in namespace b, while
tcpdump captures a's link (UDP only; perftest's TCP side channel is not RoCE). Then, per pair:
  * tshark decodes every captured UDP packet as InfiniBand (every port the capture used is
    decoded as RoCEv2: our QPNs live on their own UDP ports), none malformed, no expert error;
  * the BTH opcodes seen include the ones the program must produce (RC SEND, RDMA WRITE
    first/middle/last, READ request/responses, ACK, atomic + atomic ACK, UD SEND only, UC SEND
    and WRITE first/middle/last, XRC SEND only + XRC ACK), and no opcode outside the program's
    transport;
  * the CM pair's MADs decode as InfiniBand CM (REQ, REP, RTU);
  * scapy's RoCE layer (scapy.contrib.roce) computes the same ICRC as every packet carries (and
    a different one once the packet's ICRC is changed, so the comparison is not vacuous);
  * the server's own capture (RDMASHIM_PCAP) decodes the same way, holds only datagrams
    tcpdump saw and every one the server sent (UDP payloads byte for byte), and scapy agrees
    with the ICRC of every frame in it that the server sent.
Then (--icrc-target, c-tests/icrc_target): a live UD QP in a; from b, the captured UD SENDs
replayed to it with a flipped ICRC (scapy rebuilds each for the target's QPN, then changes the
ICRC), and datagrams of our own with a flipped ICRC around a correct one and a correct END: the
target must have been handed exactly the two correct ones.
Exit 0 all pass, 1 a failure, 77 not root / tcpdump, tshark, scapy or the programs missing.
"""

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "wire"))
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
import check_roce  # noqa: E402  (re-executes under /usr/bin/python3 when scapy is missing)
import cm_cross  # noqa: E402
import fixture  # noqa: E402
from placement import gid_index  # noqa: E402

TIMEOUT = 60

# BTH opcodes (IBTA vol. 1, 9.2): transport in the top 3 bits (RC 0, UC 1, UD 3), operation
# below.
OP = {0x00: "SEND First", 0x01: "SEND Middle", 0x02: "SEND Last", 0x03: "SEND Last Imm",
      0x04: "SEND Only", 0x05: "SEND Only Imm", 0x06: "WRITE First", 0x07: "WRITE Middle",
      0x08: "WRITE Last", 0x09: "WRITE Last Imm", 0x0a: "WRITE Only", 0x0b: "WRITE Only Imm",
      0x0c: "READ Request", 0x0d: "READ Response First", 0x0e: "READ Response Middle",
      0x0f: "READ Response Last", 0x10: "READ Response Only", 0x11: "ACK",
      0x12: "ATOMIC ACK", 0x13: "CmpSwap", 0x14: "FetchAdd",
      0x20: "UC SEND First", 0x21: "UC SEND Middle", 0x22: "UC SEND Last",
      0x23: "UC SEND Last Imm", 0x24: "UC SEND Only", 0x25: "UC SEND Only Imm",
      0x26: "UC WRITE First", 0x27: "UC WRITE Middle", 0x28: "UC WRITE Last",
      0x29: "UC WRITE Last Imm", 0x2a: "UC WRITE Only", 0x2b: "UC WRITE Only Imm",
      0x64: "UD SEND Only", 0x65: "UD SEND Only Imm",
      0xa4: "XRC SEND Only", 0xb1: "XRC ACK"}


def log(msg):
    print(f"wire_cross: {msg}", flush=True)


class Runner(cm_cross.Runner):
    def check(self, name, ok, detail=""):
        log(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            self.failures.append(name)


def tcp_listening(pid, port):
    """True once `pid`'s namespace has a TCP socket listening on `port` (perftest's and the
    pingpongs' side channel)."""
    want = f":{port:04X}"
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[1].endswith(want) and cols[3] == "0A":
                        return True
        except OSError:
            pass
    return False


def udp_ports(pcap):
    out = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-e", "udp.srcport",
                          "-e", "udp.dstport"], capture_output=True, text=True, timeout=60)
    return sorted({int(p) for line in out.stdout.split() for p in line.split(",") if p})


def tshark_rows(pcap):
    """(rows, problems): (frame, opcode or None, CM attribute or '') per frame."""
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t",
           "-E", "occurrence=f", "-e", "frame.number", "-e", "frame.protocols",
           "-e", "_ws.malformed", "-e", "_ws.expert.severity", "-e", "infiniband.bth.opcode",
           "-e", "infiniband.mad.attributeid"]
    for p in udp_ports(pcap):
        cmd += ["-d", f"udp.port=={p},infiniband"]
    for proto in check_roce.infiniband_heuristics():
        cmd += ["--disable-protocol", proto]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    rows, problems = [], []
    if out.returncode != 0:
        problems.append(f"tshark exit {out.returncode}: {out.stderr.strip()}")
    for line in out.stdout.splitlines():
        n, protos, malformed, severity, op, attr = (line.split("\t") + [""] * 6)[:6]
        if "infiniband" not in protos.split(":"):
            problems.append(f"frame {n}: not InfiniBand ({protos})")
        if malformed or "malformed" in protos:
            problems.append(f"frame {n}: malformed ({protos})")
        if severity and int(severity, 0) >= 0x00800000:
            problems.append(f"frame {n}: expert error")
        rows.append((n, int(op, 0) if op else None, attr, protos))
    return rows, problems


def scapy_icrc(pcap, only_from=None):
    """(checked, problems): scapy's ICRC against the one each IPv4/UDP frame carries (from
    `only_from` only, if given: a received frame in our own capture has IPv4 ID 0, which its
    ICRC need not be for)."""
    import scapy.contrib.roce as roce
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import bind_layers
    from scapy.utils import rdpcap

    for p in udp_ports(pcap):
        bind_layers(UDP, roce.BTH, dport=p)
    problems, checked = [], 0
    for i, pkt in enumerate(rdpcap(pcap), 1):
        raw = bytes(pkt)
        p = Ether(raw)
        if UDP not in p:
            continue
        if only_from is not None and (IP not in p or p[IP].src != only_from):
            continue
        if roce.BTH not in p:
            problems.append(f"frame {i}: scapy finds no BTH")
            continue
        want = p[roce.BTH].compute_icrc(None)
        if want != raw[-4:]:
            problems.append(f"frame {i}: ICRC {raw[-4:].hex()}, scapy computes {want.hex()}")
        bad = raw[:-1] + bytes([raw[-1] ^ 0xff])
        if Ether(bad)[roce.BTH].compute_icrc(None) == bad[-4:]:
            problems.append(f"frame {i}: scapy also accepts a changed ICRC")
        checked += 1
    return checked, problems


class Pair:
    def __init__(self, name, server, client, need, allowed, ready="tcp", port=None, cm=False):
        self.name, self.server, self.client = name, server, client
        self.need, self.allowed, self.ready, self.port, self.cm = need, allowed, ready, port, cm


RC_ALL = set(range(0x00, 0x15))
UC_ALL = set(range(0x20, 0x2c))
XRC_ALL = set(range(0xa0, 0xb8)) - {0xb5}
UD_ALL = {0x64, 0x65}


def pairs(gid_a, gid_b):
    def perf(prog, port, extra):
        s = [prog, "-p", str(port), "-n", "20", "-x", str(gid_a)] + extra
        c = [prog, "-p", str(port), "-n", "20", "-x", str(gid_b)] + extra + ["{host}"]
        return s, c
    out = []
    out.append(Pair("rdma_server/rdma_client (CM, RC SEND)", ["rdma_server", "-p", "7600"],
                    ["rdma_client", "-s", "{host}", "-p", "7600"],
                    {0x04, 0x11}, RC_ALL, ready="cm", port=7600, cm=True))
    s, c = perf("ib_write_bw", 7602, ["-s", "10000"])
    out.append(Pair("ib_write_bw -s 10000", s, c, {0x06, 0x07, 0x08, 0x11}, RC_ALL, port=7602))
    s, c = perf("ib_write_bw", 7604, ["-s", "64"])
    out.append(Pair("ib_write_bw -s 64", s, c, {0x0a}, RC_ALL, port=7604))
    s, c = perf("ib_read_bw", 7606, ["-s", "10000"])
    out.append(Pair("ib_read_bw -s 10000", s, c, {0x0c, 0x0d, 0x0e, 0x0f}, RC_ALL, port=7606))
    s, c = perf("ib_read_bw", 7608, ["-s", "64"])
    out.append(Pair("ib_read_bw -s 64", s, c, {0x0c, 0x10}, RC_ALL, port=7608))
    s, c = perf("ib_atomic_bw", 7610, [])
    out.append(Pair("ib_atomic_bw", s, c, {0x14, 0x12}, RC_ALL, port=7610))
    # UC: no ACKs at all (an RC opcode here would be a bug), 4 KiB messages at MTU 1024; WRITEs
    # both ways (a ping-pong: the server's own capture must hold what it sent).
    out.append(Pair("ibv_uc_pingpong", ["ibv_uc_pingpong", "-g", str(gid_a), "-p", "7614",
                                        "-n", "20"],
                    ["ibv_uc_pingpong", "-g", str(gid_b), "-p", "7614", "-n", "20", "{host}"],
                    {0x20, 0x21, 0x22}, UC_ALL, port=7614))
    s, c = perf("ib_write_lat", 7616, ["-s", "10000", "-c", "UC"])
    out.append(Pair("ib_write_lat -c UC -s 10000", s, c, {0x26, 0x27, 0x28}, UC_ALL, port=7616))
    # XRC through rdma_cm: the client's XRC_SEND QP names the server's XRC SRQ (from the
    # private data) in each SEND's XRCETH; the server's XRC_RECV QP answers with XRC ACKs.
    out.append(Pair("rdma_xserver/rdma_xclient -c x (CM, XRC SEND)",
                    ["rdma_xserver", "-p", "7618", "-c", "x"],
                    ["rdma_xclient", "-s", "{host}", "-p", "7618", "-c", "x"],
                    {0xa4, 0xb1}, XRC_ALL, ready="cm", port=7618, cm=True))
    # Last: its capture feeds the ICRC replay.
    out.append(Pair("ibv_ud_pingpong", ["ibv_ud_pingpong", "-g", str(gid_a), "-p", "7612",
                                        "-n", "20"],
                    ["ibv_ud_pingpong", "-g", str(gid_b), "-p", "7612", "-n", "20", "{host}"],
                    {0x64}, UD_ALL, port=7612))
    return out


def udp_datagrams(pcap):
    """Counter of (source, source port, destination, destination port, UDP payload) per frame
    (the IP header's other fields aside: a receiving socket cannot know the IPv4 ID)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether
    from scapy.utils import rdpcap

    out = collections.Counter()
    for pkt in rdpcap(pcap):
        p = Ether(bytes(pkt))
        ip = p[IP] if IP in p else p[IPv6] if IPv6 in p else None
        if ip is not None and UDP in p:
            u = p[UDP]
            out[(ip.src, u.sport, ip.dst, u.dport, bytes(u.payload))] += 1
    return out


def check_own_capture(r, pair, wire, ours, a, dropped):
    """RDMASHIM_PCAP of the server against tcpdump's capture of its link, of which tcpdump
    says it dropped `dropped` packets (its capture ring overflows in a burst)."""
    if not os.path.exists(ours):
        r.check(f"{pair.name}: RDMASHIM_PCAP wrote a capture", False, ours)
        return
    rows, problems = tshark_rows(ours)
    r.check(f"{pair.name}: RDMASHIM_PCAP: every frame decodes as InfiniBand, none malformed",
            rows and not problems, "; ".join(problems[:10]) or f"{len(rows)} frames")
    if pair.cm:
        seen = [cm_cross.CM_ATTR.get(int(x, 0), x) for _, _, x, p in rows
                if x and "infiniband" in p.split(":")]
        r.check(f"{pair.name}: RDMASHIM_PCAP: REQ, REP, RTU decoded as InfiniBand CM",
                all(m in seen for m in ("REQ", "REP", "RTU")), " ".join(seen))
    on_wire, own = udp_datagrams(wire), udp_datagrams(ours)
    extra = sum((own - on_wire).values())
    r.check(f"{pair.name}: RDMASHIM_PCAP holds only datagrams the wire carried (but for those "
            "tcpdump dropped)", own and extra <= dropped,
            f"{sum(own.values())} datagrams, {extra} not in tcpdump's capture, which dropped "
            f"{dropped}")
    sent = collections.Counter({k: v for k, v in on_wire.items() if k[0] == a.ipv4})
    missing = sent - own
    r.check(f"{pair.name}: RDMASHIM_PCAP holds every datagram the server sent",
            sent and not missing, f"{sum(missing.values())} of {sum(sent.values())} missing"
            if missing else f"{sum(sent.values())} sent")
    checked, problems = scapy_icrc(ours, only_from=a.ipv4)
    r.check(f"{pair.name}: RDMASHIM_PCAP: scapy computes the ICRC of every frame sent",
            checked > 0 and not problems, "; ".join(problems[:10]) or f"{checked} frames")


def run_pair(r, fx, pair, tmp, n):
    a, b = fx.hosts[0], fx.hosts[1]
    pcap = os.path.join(tmp, f"pair{n}.pcap")
    ours = os.path.join(tmp, f"ours{n}.pcap")
    cap = fx.capture(a, pcap, "udp").start()
    client = [x.replace("{host}", a.ipv4) for x in pair.client]
    # The server also captures its own traffic (RDMASHIM_PCAP), checked against tcpdump's.
    server = ["env", f"RDMASHIM_PCAP={ours}"] + pair.server
    try:
        if pair.ready == "cm":
            srv = r.start(a, server, pair.port)
        else:
            srv = fx.popen(a, r.penv + server, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=r.env)
            deadline = time.monotonic() + 10
            while not tcp_listening(srv.pid, pair.port) and srv.poll() is None \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
        rc, cout, _ = r.run(b, client)
        sout = cm_cross.stop(srv, 10 if rc == 0 else 1)
        src = srv.returncode
    finally:
        time.sleep(0.2)
        summary = cap.stop()
    r.check(f"{pair.name}: both programs end 0", rc == 0 and src == 0,
            f"client {rc}, server {src}\nclient:\n{cout}\nserver:\n{sout}"
            if (rc, src) != (0, 0) else "")
    rows, problems = tshark_rows(pcap)
    # The CM's MADs travel as UD SEND Only to QP1 beside an RC connection's data.
    ops = {op for _, op, attr, _ in rows if op is not None and not (pair.cm and attr)}
    names = ", ".join(OP.get(o, hex(o)) for o in sorted(ops))
    log(f"{pair.name}: {len(rows)} frames; opcodes {names}")
    r.check(f"{pair.name}: every UDP frame decodes as InfiniBand, none malformed",
            rows and not problems, "; ".join(problems[:10]) or f"{len(rows)} frames")
    r.check(f"{pair.name}: opcodes include {', '.join(OP[o] for o in sorted(pair.need))}",
            pair.need <= ops, names)
    r.check(f"{pair.name}: no opcode outside the transport", ops <= pair.allowed, names)
    if pair.cm:
        seen = [cm_cross.CM_ATTR.get(int(x, 0), x) for _, _, x, p in rows
                if x and "infiniband" in p.split(":")]
        r.check(f"{pair.name}: REQ, REP, RTU decoded as InfiniBand CM",
                all(m in seen for m in ("REQ", "REP", "RTU")), " ".join(seen))
    checked, problems = scapy_icrc(pcap)
    r.check(f"{pair.name}: scapy computes the ICRC every frame carries",
            checked == len(rows) and checked > 0 and not problems,
            "; ".join(problems[:10]) or f"{checked} frames")
    m = re.search(r"(\d+) packets? dropped by kernel", summary or "")
    check_own_capture(r, pair, pcap, ours, a, int(m.group(1)) if m else 0)
    return pcap


UD_QKEY = 0x11111111
ATTACKER_PORT = 0xC123     # the UDP port (and QPN >> 8) the forged sender claims


def forge(src, dst, dqpn, body, flip, opcode=0x64, psn=0, sqpn=None):
    """IPv4 (ID 0, DF: the receiver checks the ICRC over the header it rebuilds from the
    socket's addresses, src/provider/soft/roce/icrc.rs)/UDP/BTH/`body`/ICRC as bytes, the ICRC
    computed by scapy and, if `flip`, then changed in its last byte. `sqpn` (RC) names the
    sender's QP: its UDP source port is sqpn >> 8."""
    import scapy.contrib.roce as roce
    from scapy.layers.inet import IP, UDP
    from scapy.packet import Raw

    pkt = (IP(src=src, dst=dst, id=0, ttl=64, flags="DF")
           / UDP(sport=ATTACKER_PORT if sqpn is None else sqpn >> 8, dport=dqpn >> 8)
           / roce.BTH(opcode=opcode, dqpn=dqpn, psn=psn) / Raw(body))
    raw = bytes(pkt)
    return raw[:-1] + bytes([raw[-1] ^ 0xff]) if flip else raw


def deth(payload):
    import struct
    return struct.pack("!IB", UD_QKEY, 0) + ((ATTACKER_PORT << 8) | 1).to_bytes(3, "big") \
        + payload


def captured_ud(pcap):
    """(opcode, psn, DETH + data) of the UD SENDs captured from ibv_ud_pingpong (Q_Key
    0x11111111, like the target's)."""
    from scapy.layers.inet import UDP
    from scapy.utils import rdpcap
    out = []
    for pkt in rdpcap(pcap):
        if UDP in pkt:
            b = bytes(pkt[UDP].payload)
            if len(b) > 12 + 8 + 4 and b[0] == 0x64:
                out.append((b[0], int.from_bytes(b[9:12], "big"), b[12:-4]))
    return out


def send_forged(src, dst, dqpn, pcap):
    """Runs inside the attacker's namespace (--send): the captured UD SENDs replayed to the
    target with a flipped ICRC, then our own datagrams, flipped ones around a correct one, and a
    correct END. Raw IPv4 (IP_HDRINCL): the bytes go out as built."""
    import socket
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    replayed = captured_ud(pcap)[:20]
    for op, psn, body in replayed:
        s.sendto(forge(src, dst, dqpn, body, True, op, psn), (dst, 0))
    print(f"replayed {len(replayed)} captured UD SENDs with a flipped ICRC")
    for payload, flip in ((b"BAD1", True), (b"BAD2", True), (b"GOOD", False),
                          (b"BAD3", True), (b"END.", False)):
        s.sendto(forge(src, dst, dqpn, deth(payload), flip), (dst, 0))
        time.sleep(0.1)
    return 0 if replayed else 1


def icrc_replay(r, fx, target, pcap):
    """A live UD QP (c-tests/icrc_target) in a; from b, RoCEv2 UD SENDs whose ICRC is broken
    must not be delivered, the same datagrams with scapy's ICRC must."""
    a, b = fx.hosts[0], fx.hosts[1]
    t = fx.popen(a, r.penv + [target], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                 text=True, env=r.env)
    first = t.stdout.readline()
    m = re.match(r"qpn 0x([0-9a-f]+) qkey", first)
    if not m:
        t.kill()
        r.check("icrc replay: target starts", False, first + t.communicate()[0])
        return
    qpn = int(m.group(1), 16)
    snd = fx.run(b, ["/usr/bin/python3", os.path.abspath(__file__), "--send", b.ipv4, a.ipv4,
                     hex(qpn), pcap], timeout=TIMEOUT, capture_output=True, text=True)
    try:
        out = t.communicate(timeout=25)[0]
    except subprocess.TimeoutExpired:
        t.kill()
        out = t.communicate()[0]
    got = re.findall(r"^got (.*)$", out, re.M)
    r.check("icrc replay: sender replayed captured frames", snd.returncode == 0,
            (snd.stdout + snd.stderr).strip())
    r.check("icrc replay: frames with a flipped ICRC are not delivered, correct ones are",
            got == ["GOOD", "END."] and t.returncode == 0,
            f"delivered {got}, target exit {t.returncode}\n{first}{out}")


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--send":
        return send_forged(sys.argv[2], sys.argv[3], int(sys.argv[4], 16), sys.argv[5])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--mode", choices=("preload", "dropin"), default="preload")
    ap.add_argument("--icrc-target", help="c-tests/icrc_target (the ICRC replay's live QP)")
    args = ap.parse_args()
    ready = cm_cross.prepare(log, args.mode, args.build_dir,
                             ("tcpdump", "tshark", "ib_write_bw", "ib_read_bw", "ib_atomic_bw",
                              "ibv_ud_pingpong", "rdma_server", "rdma_client"), scapy=True)
    if isinstance(ready, int):
        return ready
    penv, env = ready
    with fixture.Fixture(hosts=2) as fx, tempfile.TemporaryDirectory() as tmp:
        r = Runner(fx, penv, env)
        a, b = fx.hosts[0], fx.hosts[1]
        gid_a, gid_b = gid_index(a.ns, a.ipv4), gid_index(b.ns, b.ipv4)
        # The last pair is ibv_ud_pingpong: its capture feeds the ICRC replay.
        for n, pair in enumerate(pairs(gid_a, gid_b)):
            ud_pcap = run_pair(r, fx, pair, tmp, n)
        if args.icrc_target:
            icrc_replay(r, fx, os.path.abspath(args.icrc_target), ud_pcap)
        else:
            log("icrc replay: skipped (no --icrc-target)")
    if r.failures:
        log(f"FAIL ({args.mode}): {len(r.failures)} checks: {'; '.join(r.failures)}")
        return 1
    log(f"all checks pass ({args.mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
