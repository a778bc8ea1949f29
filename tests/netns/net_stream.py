#!/usr/bin/env python3
"""A two-process C test across two network namespaces (RoCEv2 over UDP), clean and then under
provider faults: c-tests/net_stream.c (SENDs exactly once and in order with their checksums,
RDMA WRITEs read back byte-exact and checked by both sides, fetch-and-adds executed once) or
c-tests/net_verbs.c (memory windows, SEND_WITH_INV, ODP and device memory reached by the peer).
Either takes `server PORT GIDX` / `client HOST PORT GIDX` and prints "<name>: OK".

  net_stream.py PATH/TO/net_verbs             # clean, then under faults
  net_stream.py PATH/TO/net_stream            # 400 SENDs and 1 MiB: clean, then under faults
  net_stream.py PATH/TO/net_stream --full     # issue 8's scale: 1,000,000 SENDs, 1 GiB of
                                              # WRITEs and 1 GiB of READs, twice: under
                                              # RDMASHIM_FAULTS (5% drop, duplication and
                                              # reordering), then under a 5% nftables drop rule
                                              # on the server's namespace (each packet meets it
                                              # once) plus 5% duplication and reordering

Root only (the fixture): exits 77 with the reason otherwise.
"""

import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import fixture  # noqa: E402
import sanitizer_env  # noqa: E402
from placement import gid_index  # noqa: E402

PORT = "18515"
FAULTS = "drop=0.03,dup=0.03,reorder=0.03,delay=0.03:2ms"
# The full scale: SENDs, their largest size, bytes written (and as many read).
FULL_SIZES = ["1000000", "64", str(1 << 30)]
FULL_TIMEOUT = 1500
TIMEOUT = 240

def run(fx, prog, faults, sizes=(), timeout=TIMEOUT, tag=None):
    name = os.path.basename(prog)
    sp, cp, sip, cip = fixture.pair_env(fx)
    # Each RC QP's transport state and last packets, shown when the run fails.
    trace = tempfile.NamedTemporaryFile(prefix=name + "-", suffix=".trace", delete=False)
    trace.close()
    env = ["env", "RDMASHIM_PROVIDER=soft", f"RDMASHIM_NET_DEBUG={trace.name}"] \
        + ([f"RDMASHIM_FAULTS={faults}"] if faults else [])
    # A sanitizer build's library needs its runtime first in the library list (the program is
    # <build>/c-tests/net_stream).
    pre = sanitizer_env.runtime_preload(os.path.dirname(os.path.dirname(os.path.abspath(prog))))
    if pre:
        env.append("LD_PRELOAD=" + " ".join(pre))
    sg = str(gid_index(fx.hosts[0].ns, sip))
    cg = str(gid_index(fx.hosts[1].ns, cip))
    t0 = time.monotonic()
    server = subprocess.Popen(sp + env + [prog, "server", PORT, sg, *sizes],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        client = subprocess.run(cp + env + [prog, "client", sip, PORT, cg, *sizes],
                                capture_output=True, text=True, timeout=timeout)
        cout, crc = client.stdout + client.stderr, client.returncode
    except subprocess.TimeoutExpired as e:
        cout, crc = f"{e.stdout or ''}{e.stderr or ''}(timeout {timeout} s)", "timeout"
    try:
        # A failed client leaves the server waiting for what never comes.
        sout, _ = server.communicate(timeout=60 if crc == 0 else 1)
    except subprocess.TimeoutExpired:
        server.kill()
        sout, _ = server.communicate()
        sout += "(killed: still running)"
    tag = tag or (f"faults {faults}" if faults else "no faults")
    print(f"--- server ({tag}), exit {server.returncode} ---\n{sout}")
    print(f"--- client ({tag}), exit {crc} ---\n{cout}")
    ok = server.returncode == 0 and crc == 0 and f"{name}: OK" in sout \
        and f"{name}: OK" in cout
    print(f"net_stream.py: {name} {'PASS' if ok else 'FAIL'} ({tag}, {time.monotonic() - t0:.0f} s)",
          flush=True)
    if not ok:
        show_trace(trace.name)
    os.unlink(trace.name)
    return ok


def show_trace(path):
    """RDMASHIM_NET_DEBUG's dumps that explain a failure: each engine error and flush, and
    each process's last dump (its QP's state and last packets)."""
    with open(path, errors="replace") as f:
        blocks = ["pid " + b for b in f.read().split("\npid ") if b.strip()]
    blocks[0:1] = [blocks[0][4:]] if blocks else []
    last = {b.split()[1]: b for b in blocks}
    shown = [b for b in blocks if "(engine error)" in b or "(flush)" in b]
    shown += [b for b in last.values() if b not in shown]
    print(f"--- transport trace: {len(shown)} of {len(blocks)} dumps ---", flush=True)
    for b in shown:
        print(b.rstrip(), flush=True)


def full(prog):
    # Jumbo frames, as RoCE fabrics run them: path MTU 4096 (the 1500-byte default, path MTU
    # 1024, is what net-stream-netns and the acceptance pairs use). A quarter of the packets
    # per GiB, so a quarter of the losses to recover.
    ok = True
    with fixture.Fixture(hosts=2, mtu=9000) as fx:
        ok &= run(fx, prog, "drop=0.05,dup=0.05,reorder=0.05", FULL_SIZES, FULL_TIMEOUT)
    with fixture.Fixture(hosts=2, mtu=9000) as fx:
        # 5% of the UDP packets in and out of the server's namespace (every RoCEv2 packet
        # either way, once; the test's TCP exchange is left alone).
        with fx.drop_udp(fx.hosts[0], 5, (1024, 65535)) as rule:
            ok &= run(fx, prog, "dup=0.05,reorder=0.05", FULL_SIZES, FULL_TIMEOUT,
                      "nftables drop 5%, faults dup=0.05,reorder=0.05")
            dropped = rule.dropped()
        print(f"net_stream.py: nftables dropped {dropped} packets")
        if dropped == 0:
            print("net_stream.py: FAIL (the nftables rule dropped nothing)")
            ok = False
    return ok


def main():
    # An optional second argument replaces the faulty run's RDMASHIM_FAULTS (heavier faults),
    # or is --full.
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    prog = os.path.abspath(sys.argv[1])
    try:
        fixture.require(*(["nft"] if sys.argv[2:] == ["--full"] else []))
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    if sys.argv[2:] == ["--full"]:
        return 0 if full(prog) else 1
    faulty = sys.argv[2] if len(sys.argv) == 3 else FAULTS
    ok = True
    for faults in (None, faulty):
        with fixture.Fixture(hosts=2) as fx:
            ok &= run(fx, prog, faults)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
