"""Where run.py's two programs run: both on loopback, or server and client in two network
namespaces of tests/netns/fixture.py (`run.py --netns`, docs/ACCEPTANCE.md "Across namespaces").
"""

import os
import re
import subprocess
import sys

import programs

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "netns"))
import fixture  # noqa: E402


def gid_index(ns, ip):
    """The index of `ip` in rdmashim's GID table inside namespace `ns`: the table lists the
    IPv4 addresses first, loopback first, then in the kernel's order (src/runtime/ifaddrs.rs)."""
    out = subprocess.run(["ip", "-n", ns, "-o", "-4", "addr", "show"], capture_output=True,
                         text=True, check=True).stdout
    addrs = [m.group(1) for m in re.finditer(r"\binet (\d+\.\d+\.\d+\.\d+)/", out)]
    addrs.sort(key=lambda a: not a.startswith("127."))
    return addrs.index(ip)


class Placement:
    """Where the two programs run: both here on loopback, or in two network namespaces."""

    def __init__(self, fx=None):
        self.fx = fx
        if fx is None:
            self.prefix = {"server": [], "client": []}
            self.ip = {"server": programs.HOST, "client": programs.HOST}
            self.gid = {"server": 0, "client": 0}
            return
        sp, cp, sip, cip = fixture.pair_env(fx)
        self.prefix = {"server": sp, "client": cp}
        self.ip = {"server": sip, "client": cip}
        self.gid = {"server": gid_index(fx.hosts[0].ns, sip),
                    "client": gid_index(fx.hosts[1].ns, cip)}

    def argv(self, sc, which, port, files=None):
        return sc.argv(which, port, host=self.ip["server"], local=self.ip[which],
                       gid=self.gid[which], netns=self.fx is not None, files=files)

    def popen_argv(self, which, argv, variables):
        """The command line that runs `argv` in its place with the program-only `variables`."""
        if self.fx is None:
            return argv
        return self.prefix[which] + ["env"] + [f"{k}={v}" for k, v in variables.items()] + argv


def run_netns(run):
    """`run(place)` with the programs in fresh network namespaces: its result, or a skip
    (no root or iproute2)."""
    try:
        fixture.require()
    except fixture.Skip as e:
        print(f"run: SKIP: {e}", flush=True)
        return "skip", [], ("", "")
    with fixture.Fixture(hosts=2) as fx:
        return run(Placement(fx))
