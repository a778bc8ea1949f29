#!/usr/bin/env python3
"""c-tests/slow_accept.c across two network namespaces (issue 8): the server in a accepts its
one connection DELAY seconds after the request arrives, longer than the requester's REQ
retries last without an MRA (~9.7 s); the client in b must connect (after at least DELAY s)
and both must exit 0. Before MRAs the client got RDMA_CM_EVENT_UNREACHABLE.

  slow_accept.py PATH/TO/slow_accept

Root only (the fixture): exits 77 with the reason otherwise.
"""

import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import fixture  # noqa: E402
import sanitizer_env  # noqa: E402

PORT = "18527"
DELAY = 13  # seconds: more than (1 + 8 resends) x 1.07 s


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    prog = os.path.abspath(sys.argv[1])
    if os.geteuid() != 0:
        print("slow_accept: SKIP: network namespaces need root")
        return 77
    env = ["env", "RDMASHIM_PROVIDER=soft"]
    pre = sanitizer_env.runtime_preload(os.path.dirname(os.path.dirname(prog)))
    if pre:
        env.append("LD_PRELOAD=" + " ".join(pre))
    out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with fixture.Fixture(hosts=2) as fx:
            a, b = fx.hosts
            server = fx.popen(a, env + [prog, "serve", a.ipv4, PORT, str(DELAY)], **out)
            time.sleep(1.0)  # listening before the request goes out
            try:
                client = fx.run(b, env + [prog, "connect", a.ipv4, PORT], timeout=DELAY + 60,
                                **out)
                ctext, crc = client.stdout, client.returncode
            except subprocess.TimeoutExpired as e:
                ctext, crc = f"{e.stdout or ''}(timeout)", "timeout"
            try:
                stext, _ = server.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                stext, _ = server.communicate()
                stext += "(killed: hung)"
    except fixture.Skip as e:
        print(f"slow_accept: SKIP: {e}")
        return 77
    print(f"--- server in a: exit {server.returncode} ---\n{stext}")
    print(f"--- client in b: exit {crc} ---\n{ctext}")
    m = re.search(r"connected after ([0-9.]+) s", ctext or "")
    took = float(m.group(1)) if m else 0.0
    ok = server.returncode == 0 and crc == 0 and took >= DELAY - 0.5
    if m and took < DELAY - 0.5:
        print(f"slow_accept: connected after {took} s, before the server accepted ({DELAY} s)?")
    print("slow_accept: PASS" if ok else "slow_accept: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
