#!/usr/bin/env python3
"""Independent oracles for the RoCEv2 and CM wire codecs (issue 8).

examples/roce_vectors writes a pcap of Ethernet/IPv4/UDP(4791) frames, one per opcode of the
table, per NAK and per CM message (UD SEND Only to QP1, Q_Key 0x80010000), plus the fields it
encoded. Then:
  * tshark must decode every frame as InfiniBand, without malformed packets or expert errors,
    with every encoded field (BTH, RETH, AETH, DETH, AtomicETH, ImmDt, IETH, MAD, CM) as sent;
    Debian 12's tshark has no XRCETH dissector, so for XRC frames the BTH is checked and the
    bytes after it (XRCETH first) must be exactly the encoded ones;
  * scapy's RoCE layer (scapy.contrib.roce) recomputes every frame's ICRC and must agree;
  * the Rust decoder must accept every frame, and refuse every frame once one byte of its ICRC
    (or one bit of its BTH) is flipped.
Exit 77 (skip) only if tshark or scapy is not installed.
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

SKIP = 77


def have_scapy():
    try:
        import scapy.contrib.roce  # noqa: F401
        return True
    except ImportError:
        return False


# scapy may live in the system Python only (a pyenv python3 may come first in PATH).
if not have_scapy() and os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") \
        and os.path.exists("/usr/bin/python3") and not os.environ.get("CHECK_ROCE_REEXEC"):
    os.environ["CHECK_ROCE_REEXEC"] = "1"
    os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\xd4\xc3\xb2\xa1":
        fail(path + ": not a little-endian pcap")
    frames, at = [], 24
    while at < len(data):
        ts, us, incl, orig = struct.unpack_from("<IIII", data, at)
        frames.append((ts, us, bytearray(data[at + 16:at + 16 + incl])))
        at += 16 + incl
    return data[:24], frames


def write_pcap(path, header, frames):
    with open(path, "wb") as f:
        f.write(header)
        for ts, us, fr in frames:
            f.write(struct.pack("<IIII", ts, us, len(fr), len(fr)))
            f.write(bytes(fr))


def read_expect(path):
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            out.append(dict(p.split("=", 1) for p in parts[1:]))
    return out


def rust_check(binary, pcap):
    r = subprocess.run([binary, "check", pcap], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("roce_vectors check: exit %d: %s" % (r.returncode, r.stderr))
    return [line.split(None, 2)[1:] for line in r.stdout.splitlines()]


def same(expected, got):
    first = got.split(",")[0].strip()
    try:
        return int(expected, 0) == int(first, 0)
    except ValueError:
        return expected.lower() == first.lower()


def infiniband_heuristics():
    """The heuristic dissectors tshark runs on InfiniBand payloads (RPC-over-RDMA, iSER, SMB
    Direct, ...). The payloads are opaque bytes: a guess on arbitrary bytes reports "malformed"
    for a packet that is not, so checks turn them off (also tests/netns/cm_cross.py)."""
    heur = subprocess.run(["tshark", "-G", "heuristic-decodes"], capture_output=True, text=True)
    disable = []
    for line in heur.stdout.splitlines():
        cols = line.split("\t")
        if len(cols) >= 3 and cols[0].startswith("infiniband") and cols[2] == "T" \
                and cols[1] != "ethertype" and cols[1] not in disable:
            disable.append(cols[1])
    return disable


def check_tshark(pcap, expect):
    disable = infiniband_heuristics()
    keys = sorted({k for e in expect for k in e})
    base = ["frame.number", "frame.protocols", "_ws.malformed", "_ws.expert.severity",
            "_ws.expert.message"]
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=a"]
    for p in disable:
        cmd += ["--disable-protocol", p]
    for f in base + ["infiniband." + k for k in keys]:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        fail("tshark: exit %d: %s" % (r.returncode, r.stderr))
    rows = [line.split("\t") for line in r.stdout.splitlines()]
    if len(rows) != len(expect):
        fail("tshark decoded %d frames, %d were written" % (len(rows), len(expect)))
    errors = 0
    for row, exp in zip(rows, expect):
        n, protos, malformed, severity, message = row[:5]
        vals = dict(zip(keys, row[5:]))
        if "infiniband" not in protos.split(":"):
            print("frame %s: not decoded as InfiniBand (%s)" % (n, protos))
            errors += 1
        if malformed or "malformed" in protos:
            print("frame %s: malformed (%s)" % (n, protos))
            errors += 1
        # Expert severities: 0x00800000 is "error".
        for s in filter(None, severity.split(",")):
            if int(s, 0) >= 0x00800000:
                print("frame %s: expert error: %s" % (n, message))
                errors += 1
        if "mad.attributeid" in exp and "infiniband.cm" not in " ".join([protos]) \
                and not vals.get("mad.mgmtclass"):
            print("frame %s: CM MAD not decoded" % n)
            errors += 1
        for k, v in exp.items():
            got = vals.get(k, "")
            if k == "vendor":
                # tshark shows an XRC frame's unknown headers twice: the first 4 bytes, then
                # everything after the BTH (the vector's value).
                got = got.split(",")[-1]
            if not same(v, got):
                print("frame %s: %s: sent %s, tshark read %r" % (n, k, v, vals.get(k)))
                errors += 1
    if errors:
        fail("tshark disagrees with the encoder in %d places" % errors)
    print("tshark: %d frames decoded as InfiniBand, %d fields checked"
          % (len(rows), sum(len(e) for e in expect)))


def check_scapy(frames):
    import scapy.contrib.roce as roce
    from scapy.layers.l2 import Ether
    from scapy.layers.inet import UDP

    errors = 0
    for i, (_, _, fr) in enumerate(frames, 1):
        p = Ether(bytes(fr))
        if roce.BTH not in p or p[UDP].dport != 4791:
            print("frame %d: scapy finds no BTH" % i)
            errors += 1
            continue
        want = p[roce.BTH].compute_icrc(None)
        if want != bytes(fr[-4:]):
            print("frame %d: ICRC %s, scapy computes %s" % (i, fr[-4:].hex(), want.hex()))
            errors += 1
        # Not vacuous: the same frame with its ICRC changed no longer agrees.
        bad = bytearray(fr)
        bad[-1] ^= 0xff
        if Ether(bytes(bad))[roce.BTH].compute_icrc(None) == bytes(bad[-4:]):
            print("frame %d: scapy accepts a changed ICRC" % i)
            errors += 1
    if errors:
        fail("scapy disagrees on %d ICRCs" % errors)
    print("scapy: %d ICRCs agree" % len(frames))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cargo", default="cargo")
    ap.add_argument("--manifest-path", required=True)
    ap.add_argument("--target-dir", required=True)
    a = ap.parse_args()

    missing = [t for t in ("tshark",) if subprocess.run(["sh", "-c", "command -v " + t],
                                                        capture_output=True).returncode != 0]
    if missing:
        print("SKIP: %s not installed (scripts/deps installs it)" % ", ".join(missing))
        return SKIP
    if not have_scapy():
        print("SKIP: python3-scapy not installed (scripts/deps installs it)")
        return SKIP

    env = dict(os.environ, CARGO_TARGET_DIR=a.target_dir)
    subprocess.run([a.cargo, "build", "--release", "--quiet", "--example", "roce_vectors",
                    "--manifest-path", a.manifest_path], check=True, env=env, timeout=1500)
    binary = os.path.join(a.target_dir, "release", "examples", "roce_vectors")

    with tempfile.TemporaryDirectory() as tmp:
        pcap = os.path.join(tmp, "vectors.pcap")
        subprocess.run([binary, "write", pcap], check=True, timeout=60)
        expect = read_expect(pcap + ".expect")
        header, frames = read_pcap(pcap)
        if len(frames) != len(expect) or len(frames) < 50:
            fail("%d frames, %d expectations" % (len(frames), len(expect)))

        got = rust_check(binary, pcap)
        for i, (g, e) in enumerate(zip(got, expect), 1):
            if g[0] != "ok" or int(g[1].split()[0], 0) != int(e["bth.opcode"]):
                fail("frame %d: the Rust decoder says %s" % (i, " ".join(g)))
        print("rust: %d frames decode with their ICRC" % len(got))

        check_tshark(pcap, expect)
        check_scapy(frames)

        # Flip one ICRC byte (a different one per frame), then one BTH bit (the PSN's lowest).
        for what, pos in (("ICRC byte", lambda i, fr: len(fr) - 4 + i % 4),
                          ("BTH PSN bit", lambda i, fr: 42 + 11)):
            bad = []
            for i, (ts, us, fr) in enumerate(frames):
                fr = bytearray(fr)
                fr[pos(i, fr)] ^= 0x01
                bad.append((ts, us, fr))
            bad_pcap = os.path.join(tmp, "flipped.pcap")
            write_pcap(bad_pcap, header, bad)
            got = rust_check(binary, bad_pcap)
            if len(got) != len(frames):
                fail("flipped %s: %d results for %d frames" % (what, len(got), len(frames)))
            for i, g in enumerate(got, 1):
                if g != ["error", "IcrcMismatch"]:
                    fail("frame %d with a flipped %s: the Rust decoder says %s" % (i, what, g))
            print("rust: %d frames with a flipped %s refused (IcrcMismatch)" % (len(got), what))
    print("1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
