"""bench/run --netns: rdmashim beside UCX (UCX_TLS=tcp) and libfabric (fi_pingpong -p tcp and
-p udp) across two network namespaces joined by one veth pair (issue 8), all in one run.

The namespaces come from tests/netns/fixture.py (root only): every server runs in namespace a,
every client in b and names a's veth address. rdmashim is Debian's perftest under LD_PRELOAD
with `-x <gid>`, the index of the veth's IPv4 address in rdmashim's GID table, so its traffic is
RoCEv2 over UDP across the veth. Keys are as in suites.py; the peers are "ucx-tcp", "fi-tcp" and
"fi-udp". Programs get their own variables through `env VAR=value` after `ip netns exec`, so that
`ip` itself never loads the preloaded library."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

from pairs import free_port, run_pair
from suites import Runner, compile_helper, perftest_row, record_fi_pingpong, record_ucx, run_rounds

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "netns"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "acceptance"))
import fixture  # noqa: E402
from placement import gid_index  # noqa: E402

MIB = 1 << 20


def iterations(kind, size, quick):
    """Fewer than on loopback: a veth path is slower, and a figure must come in well within the
    per-program timeout for every program here; ten times fewer with --quick."""
    n = {("lat", 64): 5000, ("lat", MIB): 200, ("bw", 64): 100000, ("bw", MIB): 500}[(kind, size)]
    return max(100, n // 10) if quick else n


class NetnsRunner(Runner):
    """One fixture's two namespaces; `results`, `failures`, `commands` and `record` as
    suites.Runner, programs placed by `pair`."""

    def __init__(self, fx, lib, timeout, quick, log):
        # The environment of `ip` itself: nothing preloaded.
        super().__init__({k: v for k, v in os.environ.items() if k != "LD_PRELOAD"},
                         timeout, quick, log)
        self.fx, self.lib = fx, lib
        self.server, self.client = fx.hosts[0], fx.hosts[1]
        self.gid = {"server": gid_index(self.server.ns, self.server.ipv4),
                    "client": gid_index(self.client.ns, self.client.ipv4)}
        self.udp_exe = None    # bench/udp_pingpong.c, compiled by measure()

    def pair(self, what, server, client, variables, ready_wait=None):
        """Runs `server` in namespace a and `client` in b with the program-only `variables`;
        returns the Outcome, or None after recording why it failed."""
        prefix = ["env"] + [f"{k}={v}" for k, v in variables.items()]
        shown = {k: ("<build>/librdmashim.so" if k == "LD_PRELOAD" else v)
                 for k, v in variables.items()}
        # A program compiled into a temporary directory is shown by its name.
        shown_client = [os.path.basename(client[0])] + client[1:]
        self.command(" ".join([f"{k}={v}" for k, v in shown.items()] + shown_client))
        port = self.port
        return self.checked(what, run_pair(self.fx.exec_argv(self.server.ns, prefix + server),
                                           self.fx.exec_argv(self.client.ns, prefix + client),
                                           self.env, port, self.timeout, ready_wait))

    # --- rdmashim: Debian's perftest over RoCEv2/UDP --------------------------------------------
    def perftest(self, prog, size):
        kind = "lat" if prog.endswith("_lat") else "bw"
        self.port = free_port()
        args = ["-p", str(self.port), "-n", str(iterations(kind, size, self.quick)),
                "-s", str(size)]
        variables = {"LD_PRELOAD": self.lib, "RDMASHIM_PROVIDER": "soft"}
        out = self.pair(f"ib_{prog} {size}",
                        ["ib_" + prog] + args + ["-x", str(self.gid["server"])],
                        ["ib_" + prog] + args + ["-x", str(self.gid["client"]),
                                                 self.server.ipv4], variables)
        if not out:
            return
        header, row = perftest_row(out.client_out)
        if not row:
            self.failures.append(f"ib_{prog} {size}: no result row in its output")
            return
        if kind == "lat":
            col = header.index("t_typical[usec]") if "t_typical[usec]" in header else 4
            self.record(("rdmashim", prog, size), row[col], f"ib_{prog} {size}")
        else:                  # #bytes #iterations BW-peak BW-average MsgRate
            self.record(("rdmashim", prog, size), row[3], f"ib_{prog} {size}")
            self.record(("rdmashim", prog.replace("_bw", "_mr"), size), row[4],
                        f"ib_{prog} {size}")

    # --- UCX over TCP ----------------------------------------------------------------------------
    def ucx(self, test, size):
        kind = "lat" if test.endswith("_lat") else "bw"
        self.port = free_port()
        base = ["ucx_perftest", "-p", str(self.port)]
        out = self.pair(f"ucx_perftest -t {test} -s {size}", base,
                        base + [self.server.ipv4, "-t", test, "-s", str(size), "-n",
                                str(iterations(kind, size, self.quick)), "-f"],
                        {"UCX_TLS": "tcp"})
        if out:
            record_ucx(self, "ucx-tcp", test, size, out)

    # --- libfabric: fi_pingpong over its tcp (msg endpoint) and udp (datagram) providers -------
    def fi_pingpong(self, prov, size):
        self.port = free_port()
        ep = "msg" if prov == "tcp" else "dgram"
        common = ["fi_pingpong", "-p", prov, "-e", ep, "-I",
                  str(iterations("lat", size, self.quick)), "-S", str(size)]
        out = self.pair(f"fi_pingpong -p {prov} -S {size}", common + ["-B", str(self.port)],
                        common + ["-P", str(self.port), self.server.ipv4], {})
        if out:
            record_fi_pingpong(self, f"fi-{prov}", f"fi_pingpong -p {prov} {size}", size, out)

    # --- the floor: UDP alone on the same veth (bench/udp_pingpong.c) --------------------------
    def udp_floor(self, ack):
        """A 64-byte UDP ping-pong, busy-polling; with `ack`, each message goes with a 20-byte
        datagram that the other side waits for too, as a signaled RC SEND's answer carries its
        ACK. Keys ("udp", "send_lat", 64) and ("udp-ack", "send_lat", 64)."""
        if not self.udp_exe:
            return
        self.port = free_port()
        n = str(iterations("lat", 64, self.quick))
        client = [self.udp_exe, "-c", self.server.ipv4, str(self.port), n, "64"]
        # The client says hello until the server answers: no readiness to wait for.
        out = self.pair(f"udp_pingpong {'ack' if ack else 'plain'}",
                        [self.udp_exe, "-s", str(self.port)], client + (["ack"] if ack else []),
                        {}, ready_wait=0)
        if not out:
            return
        m = re.search(r"([\d.]+) usec one way", out.client_out)
        if not m:
            self.failures.append(f"udp_pingpong: no figure in its output: {out.client_out[-200:]}")
            return
        self.record(("udp-ack" if ack else "udp", "send_lat", 64), float(m.group(1)),
                    "udp_pingpong")


def run_all(r, have):
    """Every figure of the cross-namespace table; each rdmashim figure right before its peers'
    at the same size, as in suites.run_all."""
    perf, ucx, fab = have("ib_send_lat"), have("ucx_perftest"), have("fi_pingpong")
    if perf:
        r.perftest("send_lat", 64)
    if ucx:
        r.ucx("tag_lat", 64)
    if fab:
        r.fi_pingpong("tcp", 64)
        r.fi_pingpong("udp", 64)
    r.udp_floor(ack=False)
    r.udp_floor(ack=True)
    if perf:
        r.perftest("write_lat", 64)
    if ucx:
        r.ucx("ucp_put_lat", 64)
    # Ping-pong bandwidth at 1 MiB: fi_pingpong's only bandwidth, against 1 MiB / rdmashim's
    # one-way latency at 1 MiB (one message in flight on both sides).
    if perf:
        r.perftest("send_lat", MIB)
    if fab:
        r.fi_pingpong("tcp", MIB)
        r.fi_pingpong("udp", MIB)
    for size in (MIB, 64):
        if perf:
            r.perftest("send_bw", size)
        if ucx:
            r.ucx("tag_bw", size)
        if perf:
            r.perftest("write_bw", size)
        if ucx:
            r.ucx("ucp_put_bw", size)
    lat = r.results.get(("rdmashim", "send_lat", MIB))
    if lat:
        r.results[("rdmashim", "pingpong_bw", MIB)] = 1e6 / lat     # MiB per second


def measure(lib, timeout, quick, log, have, rounds=1):
    """Sets up the namespaces, runs everything `rounds` times, tears them down. Returns the
    runner (results, samples, failures, commands) and the fixture's description, or raises
    fixture.Skip (not root, no iproute2)."""
    fixture.require()
    with fixture.Fixture(hosts=2) as fx:
        r = NetnsRunner(fx, lib, timeout, quick, log)
        a, b = fx.hosts
        where = (f"a {a.ipv4} (GID index {r.gid['server']}), b {b.ipv4} (GID index "
                 f"{r.gid['client']}); one veth pair, MTU {fx.mtu}")
        log(where)
        with tempfile.TemporaryDirectory(prefix="rdmashim-bench-") as tmp:
            if have("cc"):
                r.udp_exe = compile_helper(r, tmp, "udp_pingpong")   # plain C, no RDMA
            run_rounds(r, have, rounds, run_all)
    return r, where


def uptime():
    """`uptime`'s line (load and how many are logged in), or the load average alone."""
    if shutil.which("uptime"):
        p = subprocess.run(["uptime"], capture_output=True, text=True)
        if p.returncode == 0:
            return p.stdout.strip()
    return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def section(cmd, start, end, where, r, failures, quick, rounds):
    """The "Across namespaces (veth)" part of docs/PERFORMANCE.md (report.py splices it in)."""
    import report
    results, commands = r.results, r.commands
    if ("fi-udp", "pingpong_bw", MIB) in results:
        udp_note = ("The udp provider's 1 MiB ping-pong ran: "
                    f"{report.fmt(results[('fi-udp', 'pingpong_bw', MIB)])} MiB/s.")
    else:
        udp_note = ("libfabric's udp provider is datagram-only: it found no endpoint for "
                    "1 MiB messages\n  (see below), so it has no bandwidth figure.")
    return f"""## Across namespaces (veth)

Generated by `{cmd}` (issue 8; do not edit by hand).
A measurement, not a test: nothing here is asserted, and every figure comes from the program's
own output in this one run, all on the same veth between two namespaces made by
`tests/netns/fixture.py`: servers in a, clients in b.

| | |
|---|---|
| namespaces | {where} |
| date | {start['date']} |
| `uptime` at the start | {start['uptime']} |
| `uptime` at the end | {end['uptime']} |
| iterations | {"--quick (a tenth)" if quick else "full"} |
| rounds | {rounds}{" (each figure is the median of its rounds; spread below)" if rounds > 1 else ""} |

Other work shares this 2-core machine (see the load): every program here busy-polls, so a busy
machine makes all the columns noisier; compare the columns of one run, not across runs.

### How it was measured

* rdmashim: Debian's unmodified perftest under `LD_PRELOAD=<build>/librdmashim.so`,
  `RDMASHIM_PROVIDER=soft`, with `-x <GID index of the veth address>` on both sides, so the
  traffic is RoCEv2 over UDP on the veth (connection over perftest's TCP side channel).
* UCX: `ucx_perftest` with `UCX_TLS=tcp` (`tag_lat`, `ucp_put_lat`, `tag_bw`, `ucp_put_bw`).
* libfabric: `fi_pingpong -p tcp -e msg` and `fi_pingpong -p udp -e dgram`.
* Latency is one way: perftest's `t_typical` (median), UCX's 50th percentile, fi_pingpong's
  `usec/xfer` (a mean: it prints no median). Bandwidth in MiB/s; message rate in millions per
  second.
* What the peers cannot give: `fi_pingpong` is a ping-pong (one message in flight), so
  libfabric has no streaming bandwidth and no message rate here; its 1 MiB figure is set
  against rdmashim's ping-pong bandwidth, 1 MiB divided by `ib_send_lat`'s one-way time at
  1 MiB.
* {udp_note}

### Results

{report.table(results, report.netns_rows())}

### Goals (issue 8: at least the peers' figures)

{report.netns_goals(results)}

### The floor: UDP alone on this veth

`bench/udp_pingpong.c`, run in the same namespaces right after `ib_send_lat`: a 64-byte UDP
ping-pong in which both sides busy-poll a non-blocking socket, as rdmashim's application
threads do. No RDMA, no protocol: what the kernel's path takes, under any RoCEv2 provider in
userspace. In the second row every message goes with a 20-byte datagram that the other side
waits for as well, in one segmented send (`UDP_SEGMENT`) read with `UDP_GRO`, as rdmashim sends
and reads them: the shape of `ib_send_lat`, whose every SEND is signaled, so each side needs
the ACK of its request (an IB packet of its own) before it answers. UCX's TCP carries its
acknowledgement inside the answer's segment, which RoCEv2 cannot do.

{report.table(results, report.netns_floor_rows())}
{report.spread_section(r.samples, rounds, "###")}
### Programs run

The client side of each pair, in order (the server ran the same program in namespace a without
the address, with its own GID index):

<details><summary>{len(commands)} commands</summary>

```
{chr(10).join(commands)}
```
</details>

### What could not be run

{chr(10).join("- " + f for f in failures) if failures else "Everything ran."}
"""
