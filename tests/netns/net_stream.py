#!/usr/bin/env python3
"""c-tests/net_stream.c across two network namespaces (RoCEv2 over UDP), once clean and once
under RDMASHIM_FAULTS (drops, duplicates, reordering, delays on both sides): SENDs exactly once
and in order with their checksums, 1 MiB written and read back, fetch-and-adds executed once.

  net_stream.py PATH/TO/net_stream

Root only (the fixture): exits 77 with the reason otherwise.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import fixture  # noqa: E402
import sanitizer_env  # noqa: E402
from placement import gid_index  # noqa: E402

PORT = "18515"
FAULTS = "drop=0.03,dup=0.03,reorder=0.03,delay=0.03:2ms"
TIMEOUT = 240


def run(fx, prog, faults):
    sp, cp, sip, cip = fixture.pair_env(fx)
    env = ["env", "RDMASHIM_PROVIDER=soft"] + ([f"RDMASHIM_FAULTS={faults}"] if faults else [])
    # A sanitizer build's library needs its runtime first in the library list (the program is
    # <build>/c-tests/net_stream).
    pre = sanitizer_env.runtime_preload(os.path.dirname(os.path.dirname(os.path.abspath(prog))))
    if pre:
        env.append("LD_PRELOAD=" + " ".join(pre))
    sg = str(gid_index(fx.hosts[0].ns, sip))
    cg = str(gid_index(fx.hosts[1].ns, cip))
    server = subprocess.Popen(sp + env + [prog, "server", PORT, sg], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        client = subprocess.run(cp + env + [prog, "client", sip, PORT, cg], capture_output=True,
                                text=True, timeout=TIMEOUT)
        cout, crc = client.stdout + client.stderr, client.returncode
    except subprocess.TimeoutExpired as e:
        cout, crc = f"{e.stdout or ''}{e.stderr or ''}(timeout {TIMEOUT} s)", "timeout"
    try:
        # A failed client leaves the server waiting for what never comes.
        sout, _ = server.communicate(timeout=60 if crc == 0 else 1)
    except subprocess.TimeoutExpired:
        server.kill()
        sout, _ = server.communicate()
        sout += "(killed: still running)"
    tag = f"faults {faults}" if faults else "no faults"
    print(f"--- server ({tag}), exit {server.returncode} ---\n{sout}")
    print(f"--- client ({tag}), exit {crc} ---\n{cout}")
    ok = server.returncode == 0 and crc == 0 and "net_stream: OK" in sout \
        and "net_stream: OK" in cout
    print(f"net_stream.py: {'PASS' if ok else 'FAIL'} ({tag})", flush=True)
    return ok


def main():
    # An optional second argument replaces the faulty run's RDMASHIM_FAULTS (heavier faults).
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    faulty = sys.argv[2] if len(sys.argv) == 3 else FAULTS
    try:
        fixture.require()
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    ok = True
    for faults in (None, faulty):
        with fixture.Fixture(hosts=2) as fx:
            ok &= run(fx, os.path.abspath(sys.argv[1]), faults)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
