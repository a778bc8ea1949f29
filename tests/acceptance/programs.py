"""The acceptance scenarios: Debian's unmodified RDMA programs, run in pairs on rdmashim.

Each scenario is one server command and one client command (both started by run.py, server
first), how to tell that the server is ready, what both must print, and whether the server exits
by itself or is killed once the client is done. `run.py <scenario> <mode>` runs one;
docs/ACCEPTANCE.md has the table and the status; xfail.txt lists the ones that do not work yet.

Commands are argument lists; `{port}` is replaced by a port, `{host}` by the server's address
(the program names the server), `{local}` by the program's own address and `{gid}` by the GID
index of the program's own IPv4 address: on loopback 127.0.0.1 and GID 0 for both; across network
namespaces (`run.py --netns`) the namespaces' addresses and the index of the veth address.
`netns_args` are added (before a trailing `{host}`) only across namespaces, where the GID must be
named (perftest's `-x`). run.py picks a random free port for every run, so two suites on
one host (two checkouts, two engineers) never meet; with --fixed-ports it uses the table's
(`port` for preload, `port + 1` for dropin, distinct for every scenario), which is also what
docs/ACCEPTANCE.md shows for running a scenario by hand. udaddy (fixed port 7174) and mckey (no
port; the group address) cannot be separated that way: they must not run twice at once.

Success criteria (all must hold):
  * every program whose exit matters exits 0 (`server_exits=False`: the server never exits by
    itself; it must still be running when the client is done, and is then killed);
  * `expect` lines: (who, regex[, count]) -- who is "server", "client" or "both"; count None
    means "at least one matching line", an int means exactly that many;
  * no `forbid` line: (who, regex).
"""

import filecmp
import os
import re
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Tuple

HOST = "127.0.0.1"


class _Keep(dict):
    """Format values that leave an unknown `{name}` as it is (run.py --list shows commands
    before a scenario's files exist)."""
    def __missing__(self, key):
        return "{" + key + "}"


@dataclass
class Scenario:
    name: str
    issue: int                       # the issue whose acceptance list has it (2 = foundation)
    title: str                       # one line for humans
    server: List[str]
    client: List[str]
    port: int = 0                    # preload uses port, dropin port + 1 (0: no port option)
    # Readiness: "tcp" waits until the server listens on TCP {port} (side-channel programs);
    # "sleep" waits `ready_wait` seconds. Then the client starts.
    ready: str = "sleep"
    ready_wait: float = 0.5
    # Client output meaning "the server is not listening yet": the client is started again
    # (at most `retries` attempts in all) while the server still runs.
    not_ready: Optional[str] = None
    retries: int = 5
    # Client output of a known race in the program itself after which neither side can go on
    # (the server waits forever): run.py reruns the whole scenario (at most `reruns` times) and
    # says so in the log ("RERUN ... known race").
    rerun_on: Optional[str] = None
    reruns: int = 2
    # Output (either side's) of a known failure of the program itself (its own measurement, or
    # its own teardown race after a verified exchange), which says nothing about the library
    # and leaves no verdict: run.py reruns the scenario as for
    # `rerun_on` (at most `reruns` times, logged), but unlike `rerun_on` it is never a reason
    # to skip the scenario under a sanitizer.
    rerun_on_own_failure: Optional[str] = None
    server_exits: bool = True        # False: the server never exits by itself (killed at the end)
    expect: List[Tuple] = field(default_factory=list)
    forbid: List[Tuple] = field(default_factory=list)
    timeout: float = 30.0            # seconds, per program
    # Name of a host-wide lock (a file under $TMPDIR) for scenarios whose port or group address
    # the program fixes: run.py holds it while the scenario runs, so two suites on one host
    # take turns instead of meeting.
    host_lock: Optional[str] = None
    # Checks of the programs' results beyond the regexes: f(server output, client output) ->
    # list of problems (e.g. perftest's figures: iteration counts and non-zero results).
    check: Optional[Callable[[str, str], List[str]]] = None
    # Files the programs work on: prepare(scratch dir) makes them and returns extra `{name}`
    # substitutions for the commands; verify(those substitutions) -> list of problems (e.g. a
    # copied file that differs from its source). Run by run.py around the pair.
    prepare: Optional[Callable[[str], dict]] = None
    verify: Optional[Callable[[dict], List[str]]] = None
    # Options both programs get across namespaces only (before a trailing "{host}").
    netns_args: List[str] = field(default_factory=list)
    # Environment variables both programs get (shown in the logged command lines).
    env: dict = field(default_factory=dict)
    # Drop-in vendor stub functions (scripts/gen_vendor_stubs.py) the program calls to ask
    # whether a device is that vendor's (the stub answers no); any other stub call fails the run.
    stub_probes: List[str] = field(default_factory=list)

    def argv(self, which, port, host=HOST, local=HOST, gid=0, netns=False, files=None):
        cmd = list(self.server if which == "server" else self.client)
        if netns and self.netns_args:
            at = len(cmd) - 1 if cmd[-1] == "{host}" else len(cmd)
            cmd[at:at] = self.netns_args
        return [a.format_map(_Keep(port=port, host=host, local=local, gid=gid, **(files or {}))) for a in cmd]

    def port_for(self, mode):
        return self.port + (1 if mode == "dropin" else 0) if self.port else 0


SCENARIOS: List[Scenario] = []


def add(s):
    assert all(o.name != s.name for o in SCENARIOS), s.name
    assert not s.port or all(abs(o.port - s.port) >= 2 for o in SCENARIOS if o.port), s.name
    SCENARIOS.append(s)


# Port plan (--fixed-ports): 7500..7599, two per scenario (preload, dropin). udaddy's port is
# fixed by the program (7174, RDMA_PS_UDP) and mckey has none; neither can run twice at once.

# --- issue 2: the foundation ------------------------------------------------------------------
add(Scenario(
    name="rdma-server-client", issue=2,
    title="rdma_server / rdma_client: sync CM endpoint API, one RC SEND each way",
    server=["rdma_server", "-p", "{port}"],
    client=["rdma_client", "-s", "{host}", "-p", "{port}"],
    port=7500,
    not_ready=r"rdma_connect: Connection refused",
    expect=[("both", r"end 0\s*$")],
))

# --- issue 4: datagrams and multicast ---------------------------------------------------------
UD_DONE = [("both", r"^data transfers complete"), ("both", r"^test complete"),
           ("both", r"^return status 0\s*$")]
add(Scenario(
    name="udaddy", issue=4,
    title="udaddy: RDMA_PS_UDP through the CM, SEND_WITH_IMM, AH from WC (fixed port 7174)",
    server=["udaddy", "-b", "{host}"],
    client=["udaddy", "-s", "{host}"],
    host_lock="udaddy-ps-udp-7174",
    not_ready=r"RDMA_CM_EVENT_(REJECTED|UNREACHABLE)",
    expect=UD_DONE,
))
add(Scenario(
    name="udaddy-c4", issue=4,
    title="udaddy -c 4 -C 50: four UD connections, fifty messages each",
    server=["udaddy", "-b", "{host}", "-c", "4", "-C", "50"],
    client=["udaddy", "-s", "{host}", "-c", "4", "-C", "50"],
    host_lock="udaddy-ps-udp-7174",
    not_ready=r"RDMA_CM_EVENT_(REJECTED|UNREACHABLE)",
    expect=UD_DONE,
))
add(Scenario(
    name="mckey", issue=4,
    title="mckey: join 239.1.1.1, the sender's 10 datagrams reach the receiver",
    server=["mckey", "-m", "239.1.1.1", "-b", "{host}"],             # receiver
    client=["mckey", "-m", "239.1.1.1", "-s", "-b", "{local}"],      # sender
    host_lock="mckey-239.1.1.1",
    ready_wait=1.0,   # the receiver must have joined before the sender sends
    expect=[("both", r"^mckey: joined dgid: ")] + UD_DONE,
))
add(Scenario(
    name="ud-pingpong", issue=4,
    title="ibv_ud_pingpong -g 0: raw UD verbs, GRH, qkey 0x11111111",
    server=["ibv_ud_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100"],
    client=["ibv_ud_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100", "{host}"],
    port=7502, ready="tcp",
    expect=[("both", r"^\s*local address: "), ("both", r"^\s*remote address: "),
            ("both", r"^\d+ bytes in [\d.]+ seconds"), ("both", r"^100 iters in [\d.]+ seconds")],
))

# --- issue 5: full RC verbs -------------------------------------------------------------------
RPING_N = 50
# rping's CM thread loops on rdma_get_cm_event with no way to stop, while the main thread, once
# the exchange is done, destroys the event channel. A CM thread that comes back for the next
# event after the channel is gone fails (perror "rdma_get_cm_event: ...") and exit()s with -1,
# though every ping was verified. Fixed upstream after Debian 12's rdma-core (rdma-core pull
# request 1622, "rping: Fix spurious failure return codes": an eventfd stops the thread first).
# Only that signature is rerun: the DISCONNECTED event seen, the client's last ping verified
# (-V checks before it prints "ping data"), and the failed rdma_get_cm_event.
RPING_TEARDOWN_RACE = (r"(?s)\A(?=.*DISCONNECT EVENT\.\.\.)"
                       rf"(?=.*(?<!server )ping data: rdma-ping-{RPING_N - 1}: )"
                       r"(?=.*rdma_get_cm_event: )")
for suffix, extra, title in [
        ("", [], "rping: async CM + CM thread, RDMA READ/WRITE, data verified (-V)"),
        ("-q", ["-q"], "rping -q: own QP, rdma_init_qp_attr, CONNECT_RESPONSE + rdma_establish")]:
    add(Scenario(
        name="rping" + suffix, issue=5, title=title,
        server=["rping", "-s"] + extra + ["-a", "{host}", "-p", "{port}", "-v"],
        client=["rping", "-c"] + extra + ["-a", "{host}", "-p", "{port}", "-C", str(RPING_N), "-V", "-v"],
        port=7504 if not suffix else 7506,
        not_ready=r"RDMA_CM_EVENT_REJECTED",
        expect=[("client", r"^ping data: rdma-ping-\d+: ", RPING_N),
                ("server", r"^server ping data: rdma-ping-\d+: ", RPING_N)],
        forbid=[("both", r"data mismatch|error|failed")],
        rerun_on_own_failure=RPING_TEARDOWN_RACE,
    ))

UCMATOSE_DONE = [("both", r"^data transfers complete"), ("both", r"^test complete"),
                 ("both", r"^return status 0\s*$")]
add(Scenario(
    name="ucmatose-c8", issue=5,
    title="ucmatose -c 8: eight async RC connections, sends both ways, server disconnects",
    server=["ucmatose", "-b", "{host}", "-p", "{port}", "-c", "8"],
    client=["ucmatose", "-s", "{host}", "-p", "{port}", "-c", "8"],
    port=7508,
    not_ready=r"RDMA_CM_EVENT_REJECTED",
    expect=UCMATOSE_DONE + [("server", r"^cmatose: disconnecting"), ("client", r"^sending replies")],
))
add(Scenario(
    name="ucmatose-m", issue=5,
    title="ucmatose -m: rdma_migrate_id to a new event channel",
    server=["ucmatose", "-b", "{host}", "-p", "{port}", "-m"],
    client=["ucmatose", "-s", "{host}", "-p", "{port}", "-m"],
    port=7510,
    not_ready=r"RDMA_CM_EVENT_REJECTED",
    expect=UCMATOSE_DONE + [("both", r"^migrating to new event channel")],
))
add(Scenario(
    name="cmtime", issue=5,
    title="cmtime -c 100: 100 parallel connects/disconnects, CM calls from several threads",
    server=["cmtime", "-b", "{host}", "-p", "{port}"],
    client=["cmtime", "-s", "{host}", "-p", "{port}", "-c", "100"],
    port=7512,
    server_exits=False,
    not_ready=r"RDMA_CM_EVENT_REJECTED",
    expect=[("client", r"^" + step + r"\s*$") for step in
            ("creating id", "resolving address", "resolving route", "creating qp", "connecting",
             "disconnecting", "destroying id")]
    + [("client", r"^connect\s+:\s+[\d.]+"), ("client", r"^disconnect\s+:\s+[\d.]+")],
    # Rejected or failed connections are only reported as event lines; the exit code stays 0.
    forbid=[("client", r"^event: ")],
))
add(Scenario(
    name="rdma-xserver", issue=5,
    title="rdma_xserver / rdma_xclient -c r: ibv_post_send inline beyond max_inline_data",
    server=["rdma_xserver", "-p", "{port}", "-c", "r"],
    client=["rdma_xclient", "-s", "{host}", "-p", "{port}", "-c", "r"],
    port=7514,
    not_ready=r"rdma_connect: Connection refused",
    expect=[("both", r"end 0\s*$")],
))
add(Scenario(
    name="rdma-xserver-x", issue=13,
    title="rdma_xserver / rdma_xclient -c x: XRC over RDMA_PS_IB (XRC SRQ, its number in the "
          "private data, a SEND naming it)",
    server=["rdma_xserver", "-p", "{port}", "-c", "x"],
    client=["rdma_xclient", "-s", "{host}", "-p", "{port}", "-c", "x"],
    port=7528,
    not_ready=r"rdma_connect: Connection refused",
    expect=[("both", r"end 0\s*$")],
))

# Debian's ibverbs-utils pingpongs, connected over their TCP side channel. With -c the client
# writes 0 into the first byte of every page of its buffer before the exchange, and the server
# (whose buffer starts as 0x7b) checks those bytes after it, printing "invalid data in page N"
# for each that differs.
PINGPONG_FAILED = [("both", r"invalid data in page"), ("both", r"Couldn't prefetch MR")]
for prog, suffix, extra, title, issue, port in [
        ("rc", "", [], "ibv_rc_pingpong -g 0: raw RC verbs, TCP side channel", 5, 7516),
        ("rc", "-e", ["-e"], "ibv_rc_pingpong -e: completion channel events", 5, 7518),
        ("rc", "-N", ["-N"], "ibv_rc_pingpong -N: ibv_create_qp_ex + ibv_wr_* posting", 5, 7520),
        ("rc", "-t", ["-t"], "ibv_rc_pingpong -t: ibv_create_cq_ex with timestamps, ibv_start_poll", 5,
         7522),
        ("uc", "", [], "ibv_uc_pingpong -g 0: raw UC verbs (no acknowledgements), TCP side channel", 13,
         7524),
        ("uc", "-e", ["-e"], "ibv_uc_pingpong -e: UC with completion channel events", 13, 7526),
        ("rc", "-odp", ["-c", "-o"], "ibv_rc_pingpong -c -o: an on-demand-paged MR (odp_caps), data "
         "checked", 13, 7594),
        ("rc", "-iodp", ["-c", "-O", "-P"], "ibv_rc_pingpong -c -O -P: an implicit ODP MR (the whole "
         "address space), prefetched with ibv_advise_mr, data checked", 13, 7596),
        ("rc", "-dm", ["-c", "-j"], "ibv_rc_pingpong -c -j: device memory (ibv_alloc_dm, "
         "ibv_reg_dm_mr, ibv_memcpy_to/from_dm), data checked", 13, 7598),
        ("srq", "", ["-c"], "ibv_srq_pingpong -c: 16 RC QPs receiving from one SRQ, data checked", 13,
         7600),
        ("srq", "-odp", ["-c", "-o"], "ibv_srq_pingpong -c -o: the same over an on-demand-paged MR", 13,
         7606)]:
    qps = 16 if prog == "srq" else None   # one address line per QP: srq_pingpong has 16
    add(Scenario(
        name=f"{prog}-pingpong" + suffix, issue=issue, title=title,
        server=[f"ibv_{prog}_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100"] + extra,
        client=[f"ibv_{prog}_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100"] + extra + ["{host}"],
        port=port, ready="tcp",
        expect=[("both", r"^\s*local address: ", qps), ("both", r"^\s*remote address: ", qps),
                ("both", r"^\d+ bytes in [\d.]+ seconds"), ("both", r"^100 iters in [\d.]+ seconds")],
        forbid=PINGPONG_FAILED,
    ))
for suffix, extra, title, port in [
        ("", [], "ibv_xsrq_pingpong: XRC (an XRC domain on /tmp/xrc_domain, an XRC SRQ, XRC_SEND and "
         "XRC_RECV QPs, SENDs naming the peer's SRQ number)", 7602),
        ("-e", ["-e"], "ibv_xsrq_pingpong -e: XRC with completion channel events", 7604),
        ("-odp", ["-o"], "ibv_xsrq_pingpong -o: XRC over an on-demand-paged MR (xrc_odp_caps)", 7608)]:
    add(Scenario(
        name="xsrq-pingpong" + suffix, issue=13, title=title,
        server=["ibv_xsrq_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100", "-s", "4096"] + extra,
        client=["ibv_xsrq_pingpong", "-g", "{gid}", "-p", "{port}", "-n", "100", "-s", "4096"] + extra
        + ["{host}"],
        port=port, ready="tcp",
        expect=[("both", r"^\s*local: LID .*SRQN [0-9a-f]+"), ("both", r"^\s*remote: LID .*SRQN [0-9a-f]+"),
                ("both", r"^success$")],
    ))

# perftest: small iteration counts keep the whole set fast; the result table stays in the log.
PERFTEST_ROW = r"^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+"   # "#bytes #iterations figure figure ..."

# perftest -R connects twice: first a connection for exchanging parameters, then, after a
# handshake over it, the test connection to a listener the server creates only then. A client
# that starts before the first listener exists is rejected with "Unexpected CM event ... 8" and
# can simply start again. If the client's second connect beats the server's second rdma_listen
# (our address and route resolution take no time, so it can), it is rejected (REJECTED, status 8:
# no listener); perftest then retries, but Debian's 4.5-0.17 retries on the ids it has just
# destroyed, which fails with "Failed to destroy RDMA CM ID number 0" (fixed upstream in 3d9d8d0
# "Fix crashes and logical flaws in RDMA CM connection retry"), and the server waits forever.
# Only running the pair again helps. The rule forgives exactly that sequence: the rejection for
# want of a listener, then the failed destroy of the already destroyed id, in the client's output.
PERFTEST_CM_RETRY_RACE = (r"^Event: RDMA_CM_EVENT_REJECTED; error: 8\.\n(?:.*\n){0,12}?"
                          r"Failed to destroy RDMA CM ID number 0\.$")

# perftest converts its timestamps with a CPU frequency it measures for each report: a least-
# squares fit of the time-stamp counter against gettimeofday over a short busy loop. A process
# preempted during that loop gets a poor fit, and perftest then prints no figures and exits 1
# ("Correlation coefficient r^2: 0.707447 < 0.9" / "Can't produce a report", seen once with
# `-a` under AddressSanitizer on a loaded machine: 23 reports, 23 fits). The run has no verdict;
# it is run again.
PERFTEST_CLOCK_FIT_FAILED = (r"Correlation coefficient r\^2: [\d.]+ < 0\.9\s*\n"
                             r"Can't produce a report")


def perftest_results(text):
    """The rows of perftest's result table in `text`: (header columns, [row values])."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*#bytes\s+#iterations", line):
            header = re.findall(r"#?[A-Za-z_%.0-9]+(?:\[[^\]]*\])?", line)
            rows = []
            for row in lines[i + 1:]:
                if not re.match(PERFTEST_ROW, row):
                    break
                rows.append([float(v) for v in row.split()])
            return header, rows
    return None, []


def perftest_check(iters, server_prints, server_peak):
    """A `check` for perftest: on the client, and on the server where the program prints its
    table there, every result row reports exactly `iters` iterations and non-zero figures:
    bandwidth and message rate (bw tests) or t_min/t_max/t_typical/t_avg (latency tests).
    `server_peak`: whether the server's "BW peak" must be non-zero too (ib_send_bw's receiver
    reports 0.00 for it on every device: it computes the peak over send completions it has none
    of)."""
    def check(server_text, client_text):
        problems = []
        sides = [("client", client_text, True)]
        if server_prints:
            sides.append(("server", server_text, server_peak))
        for who, text, peak in sides:
            header, rows = perftest_results(text)
            if not rows:
                problems.append(f"{who}: no perftest result rows")
                continue
            for row in rows:
                if len(row) < 4:
                    problems.append(f"{who}: short result row {row}")
                    continue
                if row[1] != iters:
                    problems.append(f"{who}: {row[1]:.0f} iterations reported, -n {iters} asked")
                if header and header[2].startswith("t_min"):
                    figures = row[2:6]               # t_min t_max t_typical t_avg
                else:
                    figures = row[2:5] if peak else row[3:5]   # [peak] average msgrate
                    # perftest prints MB/s (2^20 B) with two decimals: at a (non-zero) message
                    # rate whose bandwidth is below 0.005 MB/s (8-byte atomics at a few hundred
                    # per second, across namespaces on a loaded machine) a correct run prints
                    # 0.00 there. Only then the bandwidth columns may be zero.
                    if row[4] > 0 and row[0] * row[4] * 1e6 / 2**20 < 0.005:
                        figures = row[4:5]
                if any(f <= 0 for f in figures):
                    problems.append(f"{who}: a zero figure in result row {row}")
        return problems
    return check


port = 7530
for prog in ("send_lat", "send_bw", "write_lat", "write_bw", "read_lat", "read_bw",
             "atomic_lat", "atomic_bw"):
    iters = 100 if prog.endswith("lat") else 50
    # The passive side of READ and atomic latency tests prints no table.
    server_prints = prog not in ("read_lat", "atomic_lat")
    for rdma_cm in (False, True):
        extra = ["-R"] if rdma_cm else []
        add(Scenario(
            name=f"ib-{prog.replace('_', '-')}" + ("-R" if rdma_cm else ""), issue=5,
            title=f"perftest ib_{prog}" + (" -R (connection through rdma_cm)" if rdma_cm
                                           else " (TCP side channel)"),
            server=[f"ib_{prog}", "-p", "{port}", "-n", str(iters)] + extra,
            client=[f"ib_{prog}", "-p", "{port}", "-n", str(iters)] + extra + ["{host}"],
            port=port,
            ready="sleep" if rdma_cm else "tcp",
            rerun_on=PERFTEST_CM_RETRY_RACE if rdma_cm else None,
            # The race is won by the client in about a third of the attempts on a quiet 2-core
            # machine and in most of them when it is loaded: twelve reruns keep the chance that
            # it alone fails a scenario negligible; every rerun is printed and counted.
            reruns=12,
            expect=[("client", r"^\s*#bytes\s+#iterations"), ("client", PERFTEST_ROW)],
            forbid=[("both", r"Couldn't|Unable to|Failed to|failed|Segmentation")],
            check=perftest_check(iters, server_prints, server_peak=prog != "send_bw"),
            # Across namespaces the GID (the veth address) must be named: without -x perftest
            # uses no GRH, as on InfiniBand.
            netns_args=[] if rdma_cm else ["-x", "{gid}"],
            rerun_on_own_failure=PERFTEST_CLOCK_FIT_FAILED,
        ))
        port += 2

def perftest_sizes_check(iters):
    """A `check` for perftest -a on the client: one row per size 2, 4, ..., 8 MiB, each with
    exactly `iters` iterations and a non-zero message rate (the MB/s columns of the smallest
    sizes may round to 0.00 on a slow link)."""
    def check(server_text, client_text):
        problems = []
        _, rows = perftest_results(client_text)
        sizes = [int(r[0]) for r in rows]
        want = [1 << k for k in range(1, 24)]
        if sizes != want:
            problems.append(f"client: sizes {sizes}, want 2..8388608")
        for row in rows:
            if row[1] != iters or row[-1] <= 0:
                problems.append(f"client: result row {row}: want {iters} iterations, a message rate")
        return problems
    return check


# perftest -a (every size from 2 bytes to 8 MiB): the bandwidth tests move large messages,
# segmented into path-MTU packets and reassembled.
for prog in ("send_bw", "write_bw", "read_bw"):
    iters = 20
    add(Scenario(
        name=f"ib-{prog.replace('_', '-')}-a", issue=8,
        title=f"perftest ib_{prog} -a: every message size up to 8 MiB",
        server=[f"ib_{prog}", "-p", "{port}", "-n", str(iters), "-a"],
        client=[f"ib_{prog}", "-p", "{port}", "-n", str(iters), "-a", "{host}"],
        port=port, ready="tcp", timeout=120.0,
        expect=[("client", r"^\s*#bytes\s+#iterations"), ("client", r"^\s*8388608\s+20\s")],
        forbid=[("both", r"Couldn't|Unable to|Failed to|failed|Segmentation")],
        check=perftest_sizes_check(iters),
        netns_args=["-x", "{gid}"],
        rerun_on_own_failure=PERFTEST_CLOCK_FIT_FAILED,
    ))
    port += 2


# perftest over UD (-c UD): datagrams between the two processes; fewer iterations than
# perftest's receive depth, so no datagram finds the receive queue empty (UD would drop it).
for prog, port in (("send_lat", 7650), ("send_bw", 7652)):
    iters = 100 if prog.endswith("lat") else 50
    add(Scenario(
        name=f"ib-{prog.replace('_', '-')}-ud", issue=11,
        title=f"perftest ib_{prog} -c UD: datagrams",
        server=[f"ib_{prog}", "-c", "UD", "-p", "{port}", "-n", str(iters)],
        client=[f"ib_{prog}", "-c", "UD", "-p", "{port}", "-n", str(iters), "{host}"],
        port=port, ready="tcp",
        expect=[("client", r"^\s*#bytes\s+#iterations"), ("client", PERFTEST_ROW)],
        forbid=[("both", r"Couldn't|Unable to|Failed to|failed|Segmentation")],
        check=perftest_check(iters, True, server_peak=prog != "send_bw"),
        netns_args=["-x", "{gid}"],
        rerun_on_own_failure=PERFTEST_CLOCK_FIT_FAILED,
    ))

# perftest -e waits on the completion channel: wait for an event, re-arm, poll up to 16. With
# post lists of 4 each signaled, more than 16 send completions can be queued when it re-arms;
# it then waits for the event of the rest (which ConnectX raises at the arm, as we do).
add(Scenario(
    name="ib-send-bw-e", issue=11,
    title="perftest ib_send_bw -e -l 4: completion events, post lists of 4 (re-arming over queued "
          "completions)",
    server=["ib_send_bw", "-e", "-l", "4", "-p", "{port}", "-n", "200"],
    client=["ib_send_bw", "-e", "-l", "4", "-p", "{port}", "-n", "200", "{host}"],
    port=7654, ready="tcp",
    expect=[("client", r"^\s*#bytes\s+#iterations"), ("client", PERFTEST_ROW)],
    forbid=[("both", r"Couldn't|Unable to|Failed to|failed|Segmentation")],
    check=perftest_check(200, True, server_peak=False),
    netns_args=["-x", "{gid}"],
    rerun_on_own_failure=PERFTEST_CLOCK_FIT_FAILED,
))


MMAP_BYTES = 8 << 20


def mmap_files(tmp):
    """One file per side for perftest's --mmap (its buffer is the file, mapped shared)."""
    files = {}
    for side in ("sfile", "cfile"):
        files[side] = os.path.join(tmp, f"{side}.bin")
        with open(files[side], "wb") as f:
            f.truncate(MMAP_BYTES)
    return files


# Registered memory that is a shared file mapping (perftest --mmap): such a region cannot go on
# a memfd, so peers take the copy path (DESIGN-NOTES "direct path"), and registration faults the
# file's pages in. WRITE and READ, each side's buffer its own file.
for prog, port in (("write_bw", 7664), ("read_bw", 7666)):
    add(Scenario(
        name=f"ib-{prog.replace('_', '-')}-mmap", issue=11,
        title=f"perftest ib_{prog} --mmap: buffers that are shared file mappings (copy path)",
        server=[f"ib_{prog}", "--mmap={sfile}", "-s", "65536", "-p", "{port}", "-n", "200"],
        client=[f"ib_{prog}", "--mmap={cfile}", "-s", "65536", "-p", "{port}", "-n", "200",
                "{host}"],
        port=port, ready="tcp",
        prepare=mmap_files,
        expect=[("client", r"^\s*#bytes\s+#iterations"), ("client", PERFTEST_ROW)],
        forbid=[("both", r"Couldn't|Unable to|Failed to|failed|Segmentation")],
        check=perftest_check(200, True, server_peak=True),
        netns_args=["-x", "{gid}"],
        rerun_on_own_failure=PERFTEST_CLOCK_FIT_FAILED,
    ))


# libfabric's verbs provider (Debian's libfabric1) over our libibverbs and librdmacm, driven by
# its own fi_pingpong: every size of its table up to 6 MiB (datagrams: up to the MTU), each
# message checked byte for byte (-c). "msg" is verbs' RC endpoint connected through rdma_cm;
# "rdm" is libfabric's reliable-datagram layer (ofi_rxm) on top of it; "dgram" is UD.
# FI_VERBS_PREFER_XRC with a shared receive context makes rxm connect XRC endpoints through
# rdma_cm: an XRC domain opened on a file, XRC SRQs, XRC_SEND and XRC_RECV QPs made by
# rdma_create_qp_ex, and a request's SRQ number set per message.
# fi_pingpong's failures: its error lines ("[error] util/pingpong.c:411: failed to connect"), a
# failed call ("fi_send(): util/pingpong.c:1234, ret=-5 (...)") and a data check that failed.
# (Not a bare "error": libfabric's own info log, which the XRC run turns on, has such words.)
FI_PINGPONG_FAIL = (r"^\[error\]|\(\): \S+:\s*\d+, ret=|^Error at iteration|Segmentation|"
                    r"Aborted|core dumped")
# The XRC run logs libfabric's choices (verbs only): that rxm took the XRC domain (soft0-xrc,
# offered only when the device has IBV_DEVICE_XRC) is then in both sides' output.
FI_XRC = {"FI_VERBS_PREFER_XRC": "1", "FI_OFI_RXM_USE_SRX": "1", "FI_LOG_LEVEL": "info",
          "FI_LOG_PROV": "verbs"}
for suffix, ep, env, title, port in [
        ("msg", "msg", {}, "RC endpoints through rdma_cm", 7656),
        ("rdm", "rdm", {}, "ofi_rxm reliable datagrams over RC", 7658),
        ("dgram", "dgram", {}, "UD datagrams", 7660),
        ("rdm-xrc", "rdm", FI_XRC,
         "ofi_rxm over XRC endpoints (XRC domain, SRQs and QPs through rdma_cm)", 7662)]:
    last = r"4k" if ep == "dgram" else r"6m"
    xrc = [("both", r"skipping device soft0 \(want soft0-xrc\)")] if env else []
    add(Scenario(
        name="fi-pingpong-" + suffix, issue=13,
        title=f"libfabric fi_pingpong -p verbs -e {ep}: {title}, every size, data checked",
        server=["fi_pingpong", "-p", "verbs", "-e", ep, "-S", "all", "-c", "-I", "20",
                "-B", "{port}"],
        client=["fi_pingpong", "-p", "verbs", "-e", ep, "-S", "all", "-c", "-I", "20",
                "-P", "{port}", "{host}"],
        port=port, ready="tcp",
        timeout=90.0,
        env=env,
        # libfabric's efa provider asks every device whether it is an EFA device.
        stub_probes=["efadv_query_device"],
        expect=[("both", r"^bytes\s+#sent\s+#ack\s+total"),
                ("both", r"^1\s+20\s+=20\s"), ("both", rf"^{last}\s+20\s+=20\s")] + xrc,
        forbid=[("both", FI_PINGPONG_FAIL)],
    ))


# --- issue 10: rsockets ----------------------------------------------------------------------
# rstream prints one table row per size; -T v checks every byte it receives (and exits non-zero
# on a mismatch). Both sides print the table.
RSTREAM_ROW = r"^\S+\s+\d+[kmg]?\s+\d+[kmg]?\s+\d+\s+\d+[kmg]?\s+[\d.]+s\s+[\d.]+\s+[\d.]+\s*$"
RSTREAM_FAIL = r"(?i)fail|error|mismatch|unable|refused|Segmentation"
for suffix, extra, title, port in [
        ("v", ["-T", "v", "-S", "1000000", "-C", "200"], "rstream -T v -S 1000000 -C 200: custom size, data verified", 7570),
        ("v-small", ["-T", "v", "-S", "100", "-C", "5000"], "rstream -T v -S 100 -C 5000: small transfers, data verified", 7572),
        ("b", ["-T", "b"], "rstream -T b: blocking calls, every size of the table", 7574),
        ("a", ["-T", "a", "-S", "65536", "-C", "2000"], "rstream -T a: non-blocking with rpoll, 64 KiB", 7576),
        ("n", ["-T", "n"], "rstream -T n: non-blocking (spinning on EAGAIN), every size", 7578),
        ("r", ["-T", "r", "-S", "1000000", "-C", "100"], "rstream -T r: addresses resolved with rdma_getaddrinfo", 7580),
        ("k", ["-k", "5", "-T", "v", "-S", "65536", "-C", "200"], "rstream -k 5: keepalive on, data verified", 7582)]:
    add(Scenario(
        name="rstream-" + suffix, issue=10, title=title,
        server=["rstream", "-b", "{host}", "-p", "{port}"] + extra,
        client=["rstream", "-s", "{host}", "-p", "{port}"] + extra,
        port=port,
        not_ready=r"rconnect|Connection refused",
        timeout=90.0,
        expect=[("both", r"^name\s+bytes\s+xfers"), ("both", RSTREAM_ROW)],
        forbid=[("both", RSTREAM_FAIL)],
    ))

# riostream places data with riowrite into the peer's riomap'ed buffer and spins on its last
# byte; -T v checks every byte. Its default table starts with 100000 64-byte round trips, each
# needing both progress threads on a 2-core machine where both programs spin (minutes): the
# scenarios use custom sizes instead.
for suffix, extra, title, port in [
        ("v", ["-T", "v", "-S", "65536", "-C", "1000"], "riostream -T v -S 65536 -C 1000: riomap/riowrite, data verified", 7586),
        ("v-lat", ["-T", "v", "-S", "64", "-C", "1", "-I", "500"], "riostream -T v -S 64 -I 500: 500 riowrite round trips, verified", 7588)]:
    add(Scenario(
        name="riostream-" + suffix, issue=10, title=title,
        server=["riostream", "-b", "{host}", "-p", "{port}"] + extra,
        client=["riostream", "-s", "{host}", "-p", "{port}"] + extra,
        port=port,
        not_ready=r"rconnect|Connection refused",
        timeout=90.0,
        expect=[("both", r"^name\s+bytes\s+xfers"), ("both", RSTREAM_ROW)],
        forbid=[("both", RSTREAM_FAIL)],
    ))

# udpong: SOCK_DGRAM rsockets (UD after a first datagram over UDP teaches each side the other's
# QPN). The server never exits. Echo mode (-T e) answers every datagram and the client resends
# after 1 ms without an answer; non-echo mode counts what arrived (UD may drop) and reports it.
UDPONG_ROW = r"^custom\s+\d+[kmg]?\s+\d+[kmg]?\s+[\d.]+[kmg]?\s+[\d.]+s\s+[\d.]+\s+[\d.]+\s*$"
for suffix, extra, title, port in [
        ("echo", ["-T", "e", "-S", "64", "-C", "50"], "udpong -T e: 50 echoed datagrams (rsendto/rrecvfrom over UD)", 7590),
        ("data", ["-S", "1000", "-C", "2000"], "udpong: 2000 datagrams one way, the server reports the count", 7592)]:
    add(Scenario(
        name="udpong-" + suffix, issue=10, title=title,
        server=["udpong", "-b", "{host}", "-p", "{port}"],
        client=["udpong", "-s", "{host}", "-p", "{port}"] + extra,
        port=port,
        server_exits=False,
        timeout=30.0,
        expect=[("client", r"^name\s+bytes\s+xfers"), ("client", UDPONG_ROW)],
        forbid=[("both", r"(?i)fail|error|rsend|rrecv|rsocket|rbind")],
    ))

RCOPY_BYTES = 50 * 1000 * 1000


def rcopy_files(tmp):
    src, dst = os.path.join(tmp, "src.bin"), os.path.join(tmp, "dst.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(RCOPY_BYTES))
    return {"src": src, "dst": dst}


def same_files(files):
    src, dst = files["src"], files["dst"]
    if not os.path.exists(dst):
        return [f"rcopy: {dst} was not written"]
    if not filecmp.cmp(src, dst, shallow=False):
        return [f"rcopy: {dst} differs from {src} (sizes {os.path.getsize(src)}/{os.path.getsize(dst)})"]
    return []


add(Scenario(
    name="rcopy", issue=10,
    title="rcopy of a 50 MB random file over rsockets, then compared byte for byte",
    server=["rcopy", "-p", "{port}"],
    client=["rcopy", "{src}", "{host}:{dst}", "-p", "{port}"],
    port=7584,
    server_exits=False,           # rcopy's server waits for the next file until killed
    not_ready=r"rconnect|Connection refused",
    timeout=60.0,
    prepare=rcopy_files,
    verify=same_files,
    expect=[("client", r"^50000000 bytes in [\d.]+ seconds"), ("server", r"50000000 bytes\.\.\.closing\.\.\.done")],
    forbid=[("both", r"(?i)fail|error|refused")],
))


def by_name(name):
    for s in SCENARIOS:
        if s.name == name:
            return s
    return None
