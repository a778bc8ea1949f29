#!/usr/bin/env python3
"""Self-test of tests/netns/fixture.py (meson test `netns-fixture`, suite netns).

The fixture is what the cross-namespace acceptance tests of issue 8 will stand on, so each of
its promises is checked by counting packets that real sockets exchange between namespaces
(run through `ip netns exec`, not ping, which may be absent):
  * 2 namespaces: UDP and TCP, IPv4 and IPv6, both ways;
  * the MTU option: 9000 carries an 8000-byte datagram with DF set, 1500 refuses it;
  * 3 namespaces on a bridge: IP multicast from one reaches the two others;
  * a tcpdump capture is a readable pcap holding exactly the datagrams sent;
  * the nftables drop rule: 50% drops some but not all (counted against nft's own counter),
    and with the rule removed every datagram arrives;
  * nothing with the fixture's names remains after a normal exit, an exception inside the
    `with`, SIGTERM/SIGINT of a process holding the fixture; a SIGKILLed holder's debris is
    removed by cleanup_stale(), which leaves a live run alone.
Exit 0 pass, 1 fail, 77 skip (not root, no ip/nft/tcpdump). The whole run is bounded by alarm().

This file is also its own socket helper inside the namespaces: `test_fixture.py --helper ...`.
"""

import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture  # noqa: E402

SELF = os.path.abspath(__file__)
PORT = 4791          # the RoCEv2 port: the drop rule's default target
END_PORT = 4792      # the end marker, outside the drop rule (veth does not reorder)
IP_MTU_DISCOVER, IP_PMTUDISC_DO = 10, 2   # <linux/in.h>; not exported by Python's socket
HELPER_TIMEOUT = 20  # seconds any helper waits for traffic before giving up


# --- helpers that run inside a namespace ------------------------------------------------------
def family_of(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def helper(argv):
    """Socket roles run inside a namespace; each prints one result line on stdout."""
    role, args = argv[0], argv[1:]
    signal.alarm(HELPER_TIMEOUT)
    if role == "udp-recv":         # BIND_ADDR COUNT [GROUP]: count datagrams until end marker
        bind, want = args[0], int(args[1])
        group = args[2] if len(args) > 2 else None
        fam = family_of(bind)
        data, end = socket.socket(fam, socket.SOCK_DGRAM), socket.socket(fam, socket.SOCK_DGRAM)
        for s, port in ((data, PORT), (end, END_PORT)):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((group or bind, port))
            if group:
                mreq = socket.inet_aton(group) + socket.inet_aton(bind)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        # Room for every datagram, so that only the drop rule can lose one.
        data.setsockopt(socket.SOL_SOCKET, 33, 4 << 20)   # SO_RCVBUFFORCE (root)
        print("ready", flush=True)
        end.recv(100)                                     # the sender is done
        data.setblocking(False)
        n = 0
        while True:
            try:
                n += data.recv(65536).startswith(b"probe")
            except BlockingIOError:
                break
        print(f"received {n} of {want}", flush=True)
    elif role == "udp-send":       # DST COUNT SIZE [DF]: COUNT datagrams, then the end marker
        dst, count, size = args[0], int(args[1]), int(args[2])
        s = socket.socket(family_of(dst), socket.SOCK_DGRAM)
        if family_of(dst) == socket.AF_INET:
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            if len(args) > 3:
                s.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DO)
        payload = (b"probe" + b"x" * size)[:size]
        try:
            for _ in range(count):
                s.sendto(payload, (dst, PORT))
        except OSError as e:
            print(f"send error {e.errno}", flush=True)
            return 0
        for _ in range(3):         # the receiver needs one; spares are harmless
            s.sendto(b"end", (dst, END_PORT))
        print(f"sent {count}", flush=True)
    elif role == "tcp-echo":       # BIND: accept one connection, echo one message
        srv = socket.socket(family_of(args[0]), socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        srv.bind((args[0], PORT))
        srv.listen(1)
        print("ready", flush=True)
        c, _ = srv.accept()
        c.sendall(c.recv(100))
        print("echoed", flush=True)
    elif role == "tcp-call":       # DST: connect, send, expect the echo
        c = socket.create_connection((args[0], PORT), timeout=HELPER_TIMEOUT)
        c.sendall(b"hello across namespaces")
        print("echo ok" if c.recv(100) == b"hello across namespaces" else "echo wrong", flush=True)
    return 0


# --- the checks -----------------------------------------------------------------------------
FAILS = []


def check(cond, what):
    print(f"{'ok  ' if cond else 'FAIL'} {what}", flush=True)
    if not cond:
        FAILS.append(what)
    return cond


def start(fx, host, *args):
    """Start a helper in `host`'s namespace and wait for its "ready" line."""
    p = fx.popen(host, [sys.executable, SELF, "--helper", *args], stdout=subprocess.PIPE,
                 text=True)
    line = p.stdout.readline().strip()
    if line != "ready":
        raise RuntimeError(f"helper {args} did not start: {line!r}")
    return p


def finish(p):
    out = p.communicate(timeout=HELPER_TIMEOUT + 5)[0].strip()
    return out


def call(fx, host, *args):
    # stderr stays the test's: a helper's traceback shows in the log.
    return fx.run(host, [sys.executable, SELF, "--helper", *args], stdout=subprocess.PIPE,
                  text=True, timeout=HELPER_TIMEOUT + 5).stdout.strip()


def udp(fx, src, dst, dst_addr, count=20, size=64, group=None, df=False):
    """Send `count` datagrams from src to dst_addr; returns what dst counted."""
    recv = start(fx, dst, "udp-recv", dst_addr if not group else dst.ipv4, str(count),
                 *([group] if group else []))
    sent = call(fx, src, "udp-send", group or dst_addr, str(count), str(size),
                *(["df"] if df else []))
    if not sent.startswith("sent"):
        recv.kill()
        recv.wait()
        return sent
    return finish(recv)


def leftovers(run_id):
    """Namespaces of `run_id`, and root-namespace links that belong to any fixture run."""
    ns = [n for n in fixture.list_namespaces() if run_id in n]
    links = [line for line in fixture.sh(["ip", "-o", "link", "show"]).splitlines()
             if fixture.PREFIX in line]
    return ns + links


def test_two(tmp):
    with fixture.Fixture(hosts=2) as fx:
        a, b = fx.hosts
        for src, dst in ((a, b), (b, a)):
            for fam, addr in (("IPv4", dst.ipv4), ("IPv6", dst.ipv6)):
                got = udp(fx, src, dst, addr)
                check(got == "received 20 of 20", f"UDP {fam} {src.role}->{dst.role}: {got}")
                srv = start(fx, dst, "tcp-echo", addr)
                got = call(fx, src, "tcp-call", addr)
                check(got == "echo ok" and finish(srv) == "echoed",
                      f"TCP {fam} {src.role}->{dst.role}: {got}")
        check(fx.run(a, ["ip", "route", "get", "192.0.2.1"], capture_output=True).returncode != 0,
              "no route out of the namespaces (192.0.2.1 unreachable)")
        # Capture on b while a sends: exactly the datagrams sent, in a readable pcap.
        pcap = os.path.join(tmp, "two.pcap")
        with fx.capture(b, pcap, f"udp port {PORT}"):
            got = udp(fx, a, b, b.ipv4, count=25)
        n, bad = count_pcap(pcap, b.ipv4, PORT)
        check(got == "received 25 of 25" and n == 25 and not bad,
              f"capture: {n} UDP/{PORT} datagrams to {b.ipv4} in the pcap (25 sent), "
              f"{bad or 'no'} unreadable records")
        # Drop rule in b: 50% of 200 datagrams lost, as nft's counter says; none once removed.
        with fx.drop_udp(b, 50) as rule:
            got = udp(fx, a, b, b.ipv4, count=200)
            k = int(got.split()[1]) if got.startswith("received") else -1
            dropped = rule.dropped()
        check(20 < k < 180 and k + dropped == 200,
              f"50% drop rule: {k} of 200 arrived, nft dropped {dropped}")
        got = udp(fx, a, b, b.ipv4, count=200)
        check(got == "received 200 of 200", f"drop rule removed: {got}")
        # MTU 1500: an 8000-byte datagram with DF set cannot leave.
        got = udp(fx, a, b, b.ipv4, count=1, size=8000, df=True)
        check(got.startswith("send error"), f"MTU 1500 refuses 8000 bytes with DF: {got}")
        names, run_id = fx.namespaces(), fx.run_id
        check(len(names) == 2, f"two namespaces: {names}")
    left = leftovers(run_id)
    check(not left, f"after exit nothing of {run_id} remains: {left}")


def test_mtu():
    with fixture.Fixture(hosts=2, mtu=9000) as fx:
        a, b = fx.hosts
        link = fx.ns_sh(a.ns, ["ip", "-o", "link", "show", a.ifname])
        check(" mtu 9000 " in link, "MTU 9000 set on the link")
        got = udp(fx, a, b, b.ipv4, count=3, size=8000, df=True)
        check(got == "received 3 of 3", f"MTU 9000 carries 8000 bytes with DF: {got}")


def test_three(tmp):
    with fixture.Fixture(hosts=3) as fx:
        a, b, c = fx.hosts
        check(fx.bridge_ns is not None and len(fx.namespaces()) == 4,
              "three hosts and a bridge namespace")
        got = udp(fx, c, a, a.ipv6)
        check(got == "received 20 of 20", f"UDP IPv6 c->a across the bridge: {got}")
        group = f"239.199.{fx.net4.network_address.packed[2]}.7"
        pcap = os.path.join(tmp, "mcast.pcap")
        rb = start(fx, b, "udp-recv", b.ipv4, "10", group)
        rc = start(fx, c, "udp-recv", c.ipv4, "10", group)
        with fx.capture(c, pcap, "udp"):
            sent = call(fx, a, "udp-send", group, "10", "64")
            gb, gc = finish(rb), finish(rc)
        check(sent == "sent 10" and gb == gc == "received 10 of 10",
              f"multicast {group} a->b,c: {sent}; b {gb}; c {gc}")
        n, bad = count_pcap(pcap, group, PORT)
        check(n == 10 and not bad, f"capture on c holds the 10 multicast datagrams: {n}")
        run_id = fx.run_id
    left = leftovers(run_id)
    check(not left, f"after exit nothing of {run_id} remains: {left}")


def test_exception():
    run_id = None
    try:
        with fixture.Fixture(hosts=3) as fx:
            run_id = fx.run_id
            raise ValueError("boom")
    except ValueError:
        pass
    left = leftovers(run_id)
    check(run_id and not left, f"after an exception in the with block nothing remains: {left}")


def holder(extra=()):
    """A process holding a fixture up (`fixture.py run`); returns (proc, run_id) when up."""
    p = subprocess.Popen([sys.executable, os.path.join(HERE, "fixture.py"), "run", *extra, "--",
                          "sh", "-c", "echo run=$NETNS_RUN; exec sleep 60"],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    line = p.stdout.readline().strip()
    if not line.startswith("run="):
        p.kill()
        raise RuntimeError(f"fixture.py run did not come up: {line!r}")
    return p, line[4:]


def test_signals():
    for sig in (signal.SIGTERM, signal.SIGINT):
        p, run_id = holder()
        up = leftovers(run_id)
        p.send_signal(sig)             # the python process only; it kills its sleep itself
        rc = p.wait(timeout=30)
        left = leftovers(run_id)
        check(len(up) == 2 and not left and rc != 0,
              f"{sig.name} to a holder: {len(up)} namespaces up before, {left or 'none'} after "
              f"(exit {rc})")


def test_stale():
    with fixture.Fixture(hosts=2, cleanup_stale_first=False) as live:
        p, run_id = holder(["--hosts", "3"])
        os.killpg(p.pid, signal.SIGKILL)   # the holder and its sleep: no cleanup runs
        p.wait()
        debris = leftovers(run_id)
        gone = fixture.cleanup_stale()
        # `gone` may hold older debris of other dead runs, and a suite running beside this one
        # may have removed some of ours first (its own cleanup_stale): judge by what remains.
        mine = [n for n in gone if run_id in n]
        left = leftovers(run_id)
        check(len(debris) == 4 and not left,
              f"SIGKILLed holder left {len(debris)} namespaces; after cleanup_stale {len(left)} "
              f"remain ({len(mine)} removed by this call)")
        check(all(n in fixture.list_namespaces() for n in live.namespaces()),
              "cleanup_stale leaves a live owner's namespaces alone")


# --- pcap ---------------------------------------------------------------------------------
def count_pcap(path, dst_ip, dst_port):
    """(UDP datagrams to dst_ip:dst_port, unreadable records) in a classic pcap (Ethernet)."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    endian = {b"\xd4\xc3\xb2\xa1": "<", b"\xa1\xb2\xc3\xd4": ">",
              b"\x4d\x3c\xb2\xa1": "<", b"\xa1\xb2\x3c\x4d": ">"}.get(magic)
    if endian is None or len(data) < 24:
        return 0, 1
    linktype = struct.unpack(endian + "I", data[20:24])[0]
    if linktype != 1:
        return 0, 1
    want = socket.inet_aton(dst_ip)
    off, n, bad = 24, 0, 0
    while off + 16 <= len(data):
        _, _, caplen, _ = struct.unpack(endian + "IIII", data[off:off + 16])
        frame = data[off + 16:off + 16 + caplen]
        off += 16 + caplen
        if len(frame) < caplen:
            bad += 1
            break
        if len(frame) < 42 or frame[12:14] != b"\x08\x00":
            continue
        ihl = (frame[14] & 0x0f) * 4
        ip = frame[14:]
        dport = struct.unpack("!H", ip[ihl + 2:ihl + 4])[0]
        if ip[9] == 17 and ip[16:20] == want and dport == dst_port:
            n += ip[ihl + 8:ihl + 13] == b"probe"
    if off != len(data):
        bad += 1
    return n, bad


def on_alarm(signum, frame):
    raise TimeoutError("test_fixture.py: no result after 240 s (a hang)")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--helper":
        return helper(sys.argv[2:])
    try:
        fixture.require("nft", "tcpdump")
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    # A hang is a failure, not a stuck suite; raised as an exception so the fixtures unwind.
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(240)
    with tempfile.TemporaryDirectory(prefix="netns-test-") as tmp:
        try:
            test_two(tmp)
            test_mtu()
            test_three(tmp)
            test_exception()
            test_signals()
            test_stale()
        except fixture.Skip as e:
            print(f"SKIP: {e}")
            return fixture.SKIP
    print(f"{len(FAILS)} failed" if FAILS else "all passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
