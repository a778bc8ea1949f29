#!/usr/bin/env python3
"""UD multicast across three network namespaces: Debian's unmodified `mckey` on rdmashim.

  mcast3.py [--build-dir build] [--mode preload|dropin]

Receivers `mckey -m 239.1.1.1` in namespaces a and c, then the sender (`-s`) in b: the sender's
10 datagrams travel once as RoCEv2 UD SENDs to 239.1.1.1:4791, and each receiver must report
`data transfers complete` (all 10 received) and exit 0, as must the sender.
Exit 0 pass, 1 a failure, 77 not root / no `ip` / mckey or the build missing.
"""

import argparse
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fixture  # noqa: E402
import cm_cross  # noqa: E402

TIMEOUT = 60  # per program: a hang is a failure
GROUP = "239.1.1.1"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--mode", choices=["preload", "dropin"], default="preload")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("mcast3: SKIP: network namespaces need root")
        return 77
    if not os.path.exists("/usr/bin/mckey"):
        print("mcast3: SKIP: mckey (rdmacm-utils) is not installed")
        return 77
    try:
        prefix = cm_cross.program_env(args.mode, args.build_dir)
    except FileNotFoundError as e:
        print(f"mcast3: SKIP: {e}")
        return 77
    env = cm_cross.clean_environ(args.build_dir)
    try:
        with fixture.Fixture(hosts=3) as fx:
            a, b, c = fx.hosts
            out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            receivers = {h.ns: fx.popen(h, prefix + ["mckey", "-m", GROUP, "-b", h.ipv4], **out)
                         for h in (a, c)}
            time.sleep(1.5)  # the receivers join before the sender sends (mckey does not retry)
            sender = fx.run(b, prefix + ["mckey", "-m", GROUP, "-s", "-b", b.ipv4],
                            timeout=TIMEOUT, **out)
            print(f"--- sender in {b.ns}: exit {sender.returncode} ---\n{sender.stdout}")
            ok = sender.returncode == 0
            for ns, p in receivers.items():
                try:
                    text, _ = p.communicate(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    p.kill()
                    text, _ = p.communicate()
                    print(f"mcast3: receiver in {ns} hung (killed)")
                print(f"--- receiver in {ns}: exit {p.returncode} ---\n{text}")
                ok = ok and p.returncode == 0 and "data transfers complete" in text
    except fixture.Skip as e:
        print(f"mcast3: SKIP: {e}")
        return 77
    print("mcast3: PASS" if ok else "mcast3: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
