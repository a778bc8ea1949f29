"""What bench/run measures, and how each program's own output is read.

A measurement is a key such as ("rdmashim", "send_lat", 64) -> value. Units:
  *_lat   one-way latency in µs: perftest's t_typical (its median), UCX's 50th percentile,
          fi_pingpong's usec/xfer (half a round trip, the mean: it prints no median);
  *_bw    bandwidth in MiB/s (perftest and UCX print MiB as "MB"; fi_pingpong's decimal MB are
          converted);
  *_mr    message rate in millions of messages per second;
  rc_pingpong_*  µs per round trip, from ibv_rc_pingpong's "usec/iter" line; the event-mode
          figure's peer ("kernel") is bench/wake_pingpong.c, two processes passing a byte over
          pipes (each round trip two sleeps and two wake-ups: what those cost the kernel);
  rstream_lat / rstream_bw  rstream's own usec/xfer (one way: it halves the round trip) and
          Gb/sec (converted to MiB/s), over rsockets ("rdmashim") and with -T s over the
          kernel's TCP on loopback ("tcp"), same program, same options."""
import os
import re
import statistics
import subprocess

from pairs import HOST, free_port, run_pair

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = [64, 4096, 1048576]


def compile_helper(runner, tmp, name, *flags):
    """bench/<name>.c compiled into `tmp`; its path, or None after saying why."""
    exe = os.path.join(tmp, name)
    r = subprocess.run(["cc", "-O2", "-o", exe, os.path.join(HERE, f"{name}.c"), *flags],
                       capture_output=True, text=True)
    if r.returncode != 0:
        runner.failures.append(f"compiling bench/{name}.c failed: {r.stderr[-300:]}")
        return None
    return exe


def iterations(kind, size, quick):
    """Fewer iterations for big messages, and ten times fewer with --quick."""
    if kind == "lat":
        n = 20000 if (size or 0) <= 4096 else 1000
    else:
        n = {64: 200000, 4096: 100000}.get(size, 5000)
    return max(100, n // 10) if quick else n


def perftest_row(text):
    """perftest's result row under "#bytes #iterations ...": (header words, [floats])."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*#bytes\s+#iterations", line):
            header = line.split()
            for row in lines[i + 1:]:
                if re.match(r"^\s*\d+\s+\d+\s+[\d.]+", row):
                    return header, [float(v) for v in row.split()]
            break
    return None, None


def ucx_row(text):
    """ucx_perftest's last result row as floats: iterations, latency (µs) 50th percentile /
    average / overall, bandwidth (MiB/s, printed "MB/s") average / overall, message rate (per
    second) average / overall; None if there is none."""
    rows = [ln.split() for ln in text.splitlines() if re.match(r"^\s*\d+(\s+[\d.]+){7}\s*$", ln)]
    return [float(v) for v in rows[-1]] if rows else None


def fi_pingpong_row(text):
    """fi_pingpong's result row: (MB/sec (decimal), usec/xfer, Mxfers/sec), or None."""
    m = re.search(r"^(\d+[kmg]?)\s+\S+\s+\S+\s+\S+\s+\S+\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$",
                  text, re.M)
    return (float(m.group(2)), float(m.group(3)), float(m.group(4))) if m else None


UCX_FIGURES = {"tag_lat": "send_lat", "ucp_put_lat": "write_lat",
               "tag_bw": "send_bw", "ucp_put_bw": "write_bw"}


def record_ucx(runner, who, test, size, out):
    """Records as `who`'s the figures of a finished ucx_perftest pair `out`: one-way latency, or
    bandwidth and message rate."""
    row = ucx_row(out.client_out)
    if not row:
        runner.failures.append(f"ucx_perftest {test} {size}: no result row in its output")
        return
    name, what = UCX_FIGURES[test], f"ucx {test} {size}"
    if test.endswith("_lat"):
        runner.record((who, name, size), row[1], what)
    else:
        runner.record((who, name, size), row[5], what)
        runner.record((who, name.replace("_bw", "_mr"), size), row[7] / 1e6, what)


def record_fi_pingpong(runner, who, what, size, out):
    """Records as `who`'s the figures of a finished fi_pingpong pair `out`: one-way latency and
    ping-pong bandwidth."""
    row = fi_pingpong_row(out.client_out)
    if not row:
        runner.failures.append(f"{what}: no result row in its output")
        return
    runner.record((who, "send_lat", size), row[1], what)
    runner.record((who, "pingpong_bw", size), row[0] * 1e6 / 2**20, what)


class Runner:
    def __init__(self, env, timeout, quick, log):
        self.env, self.timeout, self.quick, self.log = env, timeout, quick, log
        self.results = {}
        self.failures = []
        self.commands = []
        self.samples = {}     # key -> the figure of each round; results holds their median
        self.round = 0        # which round of run_all is running (bench/run --rounds)
        self.wake_exe = None  # bench/wake_pingpong.c, compiled by bench/run

    def record(self, key, value, what):
        if value is None or not value > 0:
            self.failures.append(f"{what}: no non-zero figure in its output")
            return
        self.samples.setdefault(key, []).append(value)
        self.results[key] = statistics.median(self.samples[key])
        self.log(f"  {key[0]:9} {key[1]:22} {key[2]:>8}  {value:.3f}")

    def command(self, text):
        """Notes a client's command line; once, since every round runs the same programs."""
        if self.round == 0:
            self.commands.append(text)

    def pair(self, what, server, client, env, ready_wait=None):
        """Runs a pair; returns the Outcome, or None after recording why it failed."""
        prefix = ("UCX_TLS=posix,self " if "UCX_TLS" in env else
                  "LD_PRELOAD=<build>/librdmashim.so RDMASHIM_PROVIDER=soft "
                  if "LD_PRELOAD" in env else "")
        self.command(prefix + " ".join(client))
        return self.checked(what, run_pair(server, client, env, self.port, self.timeout,
                                           ready_wait))

    def checked(self, what, out):
        """`out` (a pair's Outcome) if it went well, else None after recording why."""
        if not out.ok:
            self.failures.append(f"{what}: " + "; ".join(out.problems))
            self.log(f"  FAILED {what}: " + "; ".join(out.problems))
            return None
        return out

    # --- rdmashim under Debian's perftest and ibverbs-utils --------------------------------
    def perftest(self, prog, size):
        kind = "lat" if prog.endswith("_lat") else "bw"
        n = iterations(kind, size, self.quick)
        self.port = free_port()
        args = ["-p", str(self.port), "-n", str(n)]
        if size is not None:
            args += ["-s", str(size)]
        out = self.pair(f"ib_{prog} {size or ''}".strip(), ["ib_" + prog] + args,
                        ["ib_" + prog] + args + [HOST], self.env)
        if not out:
            return
        header, row = perftest_row(out.client_out)
        if not row:
            self.failures.append(f"ib_{prog}: no result row in its output")
            return
        size = int(row[0])
        if kind == "lat":
            col = header.index("t_typical[usec]") if "t_typical[usec]" in header else 4
            self.record(("rdmashim", prog, size), row[col], f"ib_{prog} {size}")
        else:                  # #bytes #iterations BW-peak BW-average MsgRate
            self.record(("rdmashim", prog, size), row[3], f"ib_{prog} {size}")
            self.record(("rdmashim", prog.replace("_bw", "_mr"), size), row[4], f"ib_{prog} {size}")

    def rc_pingpong(self, event):
        n = 200 if self.quick else 2000
        self.port = free_port()
        args = ["ibv_rc_pingpong", "-g", "0", "-p", str(self.port), "-n", str(n), "-s", "64"]
        if event:
            args.append("-e")
        name = "rc_pingpong_event" if event else "rc_pingpong_poll"
        out = self.pair(" ".join(args[:1] + (["-e"] if event else [])), args, args + [HOST],
                        self.env)
        if not out:
            return
        m = re.search(r"^\d+ iters in [\d.]+ seconds = ([\d.]+) usec/iter", out.client_out, re.M)
        self.record(("rdmashim", name, 64), float(m.group(1)) if m else None,
                    "ibv_rc_pingpong" + (" -e" if event else ""))

    def wake_pingpong(self):
        """The kernel's round trip of two sleeping processes (bench/wake_pingpong.c), the peer of
        the event-mode figure, measured right after it."""
        n = 200 if self.quick else 2000
        self.command(f"wake_pingpong {n}   (bench/wake_pingpong.c)")
        try:
            r = subprocess.run([self.wake_exe, str(n)], capture_output=True, text=True,
                               timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.failures.append(f"wake_pingpong: timed out after {self.timeout} s")
            return
        if r.returncode != 0:
            self.failures.append(f"wake_pingpong: exit status {r.returncode}: {r.stderr[-300:]}")
            return
        m = re.search(r"^([\d.]+) usec/round trip", r.stdout, re.M)
        self.record(("kernel", "rc_pingpong_event", 64), float(m.group(1)) if m else None,
                    "wake_pingpong")

    # --- rsockets: Debian's rstream, over rdmashim and (-T s) over TCP ------------------------
    def rstream(self, tcp, size):
        """64 B latency (-I round trips of one transfer) or 1 MiB bandwidth (-C transfers)."""
        lat = size <= 4096
        n = iterations("lat" if lat else "bw", size, self.quick)
        self.port = free_port()
        args = ["-p", str(self.port), "-S", str(size)]
        args += ["-C", "1", "-I", str(n)] if lat else ["-C", str(max(50, n // 25))]
        if tcp:
            args += ["-T", "s"]
        out = self.pair(f"rstream {' '.join(args[2:])}", ["rstream", "-b", HOST] + args,
                        ["rstream", "-s", HOST] + args, self.env, ready_wait=None if tcp else 0.5)
        if not out:
            return
        m = re.search(r"^custom\s+\S+\s+\S+\s+\S+\s+\S+\s+[\d.]+s\s+([\d.]+)\s+([\d.]+)\s*$",
                      out.client_out, re.M)
        who = "tcp" if tcp else "rdmashim"
        if not m:
            self.failures.append(f"rstream {who} {size}: no result row in its output")
            return
        if lat:
            self.record((who, "rstream_lat", size), float(m.group(2)), f"rstream {who} {size}")
        else:
            self.record((who, "rstream_bw", size), float(m.group(1)) * 1e9 / 8 / 2**20,
                        f"rstream {who} {size}")

    # --- UCX -------------------------------------------------------------------------------
    def ucx(self, test, size):
        kind = "lat" if test.endswith("_lat") else "bw"
        n = iterations(kind, size, self.quick)
        self.port = free_port()
        env = dict(self.env, UCX_TLS="posix,self")
        env.pop("LD_PRELOAD", None)
        base = ["ucx_perftest", "-p", str(self.port)]
        out = self.pair(f"ucx_perftest -t {test} -s {size}", base,
                        base + [HOST, "-t", test, "-s", str(size), "-n", str(n), "-f"], env)
        if out:
            record_ucx(self, "ucx", test, size, out)

    # --- libfabric -------------------------------------------------------------------------
    def fi_pingpong(self, size):
        n = iterations("lat", size, self.quick)
        self.port = free_port()
        env = dict(self.env)
        env.pop("LD_PRELOAD", None)
        common = ["fi_pingpong", "-p", "shm", "-e", "rdm", "-I", str(n), "-S", str(size)]
        out = self.pair(f"fi_pingpong -p shm -S {size}", common + ["-B", str(self.port)],
                        common + ["-P", str(self.port), HOST], env)
        if out:
            record_fi_pingpong(self, "libfabric", f"fi_pingpong {size}", size, out)


def run_all(runner, have):
    """Everything; `have(program)` says whether a program is installed. Each rdmashim figure
    runs right beside its peers' figures, so that a change in the machine's load between them
    is as small as it can be."""
    r = runner
    perf, ucx, fab = have("ib_send_lat"), have("ucx_perftest"), have("fi_pingpong")
    for size in SIZES:
        if perf:
            r.perftest("send_lat", size)
        if ucx:
            r.ucx("tag_lat", size)
        if fab:
            r.fi_pingpong(size)
        if perf:
            r.perftest("write_lat", size)
        if ucx:
            r.ucx("ucp_put_lat", size)
    if perf:
        r.perftest("read_lat", 64)
        r.perftest("atomic_lat", None)          # atomics are 8 bytes; it takes no -s
    for size in SIZES:
        if perf:
            r.perftest("send_bw", size)
        if ucx:
            r.ucx("tag_bw", size)
        if perf:
            r.perftest("write_bw", size)
        if ucx:
            r.ucx("ucp_put_bw", size)
    if have("rstream"):
        for size in (64, 1048576):
            r.rstream(False, size)
            r.rstream(True, size)
    if have("ibv_rc_pingpong"):
        r.rc_pingpong(event=True)
        if r.wake_exe:
            r.wake_pingpong()
        r.rc_pingpong(event=False)


def run_rounds(runner, have, rounds, run_all=run_all):
    """`run_all` `rounds` times over; each figure is then the median of its rounds (see
    Runner.record), and a failure names its round when there are several."""
    for k in range(rounds):
        runner.round = k
        before = len(runner.failures)
        run_all(runner, have)
        if rounds > 1:
            runner.failures[before:] = [f"round {k + 1}: {f}" for f in runner.failures[before:]]
