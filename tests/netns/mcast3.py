#!/usr/bin/env python3
"""UD multicast across three network namespaces: Debian's unmodified `mckey` on rdmashim.

  mcast3.py [--build-dir build] [--mode preload|dropin] [--listeners] [--ipv6]

Receivers `mckey -m 239.1.1.1` in namespaces a and c, then the sender (`-s`) in b: the sender's
10 datagrams travel once as RoCEv2 UD SENDs to 239.1.1.1:4791, and each receiver must report
`data transfers complete` (all 10 received) and exit 0, as must the sender.

With --listeners, each receiver's namespace also has a CM listener (`udaddy`, which owns port
4791 there while it listens): in a it starts before the receiver joins, in c after. The group's
socket on `239.1.1.1:4791` and the listener's `[::]:4791` must coexist in either order: both
receivers get every datagram, and then `udaddy -s` from b reaches each listener. With --ipv6
the group is ff0e::239:1:1:1 and every program uses its namespace's IPv6 address.
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
GROUP6 = "ff0e::239:1:1:1"  # global scope: routed between the namespaces' veths


def finish(p, who):
    """`p`'s output once it ended (killed if it hangs past TIMEOUT), printed under `who`."""
    try:
        text, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        text, _ = p.communicate()
        print(f"mcast3: {who} hung (killed)")
    print(f"--- {who}: exit {p.returncode} ---\n{text}")
    return text


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--mode", choices=["preload", "dropin"], default="preload")
    ap.add_argument("--listeners", action="store_true")
    ap.add_argument("--ipv6", action="store_true", help=f"the group {GROUP6}, IPv6 addresses")
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
    group = GROUP6 if args.ipv6 else GROUP

    def addr(h):
        return h.ipv6 if args.ipv6 else h.ipv4

    try:
        with fixture.Fixture(hosts=3) as fx:
            a, b, c = fx.hosts
            out = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            listeners = {}
            if args.listeners:
                listeners[a.ns] = fx.popen(a, prefix + ["udaddy", "-b", addr(a)], **out)
                time.sleep(1.0)  # a's listener owns 4791 before a's receiver joins
            receivers = {h.ns: fx.popen(h, prefix + ["mckey", "-m", group, "-b", addr(h)], **out)
                         for h in (a, c)}
            time.sleep(1.5)  # the receivers join before the sender sends (mckey does not retry)
            clients = {}
            if args.listeners:
                listeners[c.ns] = fx.popen(c, prefix + ["udaddy", "-b", addr(c)], **out)
                time.sleep(1.0)  # c's listener takes 4791 after c's receiver joined
                # ... and is reached while that receiver still holds the group's socket.
                clients[c.ns] = fx.run(b, prefix + ["udaddy", "-s", addr(c), "-b", addr(b)],
                                       timeout=TIMEOUT, **out)
            sender = fx.run(b, prefix + ["mckey", "-m", group, "-s", "-b", addr(b)],
                            timeout=TIMEOUT, **out)
            print(f"--- sender in {b.ns}: exit {sender.returncode} ---\n{sender.stdout}")
            ok = sender.returncode == 0
            for ns, p in receivers.items():
                text = finish(p, f"receiver in {ns}")
                ok = ok and p.returncode == 0 and "data transfers complete" in text
            for h in (a, c):
                if h.ns not in listeners:
                    continue
                client = clients.get(h.ns) or fx.run(
                    b, prefix + ["udaddy", "-s", addr(h), "-b", addr(b)], timeout=TIMEOUT, **out)
                print(f"--- udaddy -s {addr(h)} from {b.ns}: exit {client.returncode} ---\n"
                      f"{client.stdout}")
                p = listeners[h.ns]
                finish(p, f"udaddy listener in {h.ns}")
                ok = ok and client.returncode == 0 and p.returncode == 0
    except fixture.Skip as e:
        print(f"mcast3: SKIP: {e}")
        return 77
    print("mcast3: PASS" if ok else "mcast3: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
