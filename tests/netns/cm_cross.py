#!/usr/bin/env python3
"""The connection manager across two network namespaces: Debian's unmodified librdmacm programs
on rdmashim, the CM exchange travelling as InfiniBand CM MADs in RoCEv2 over UDP.

  cm_cross.py [--build-dir build] [--mode preload|dropin]

Scenarios (one fixture, server in namespace a, client in namespace b):
  cmtime4 / cmtime6   `cmtime -c 100` (IPv4) and `-c 20` (IPv6): 100 ids resolve, connect
                      (REQ/REP/RTU) and disconnect (DREQ/DREP) through the CM only, no data;
                      both programs must exit 0.
  pair                rdma_server/rdma_client, captured on a's link: the capture must hold
                      REQ, REP and RTU (and DREQ/DREP once the client ends), every frame decoded
                      by tshark as InfiniBand CM, none malformed; and neither program may fail in
                      a CM call. The data exchange after ESTABLISHED is the data path's
                      (RoCEv2 over UDP, the `net` branch): reported, not required, until it lands
                      (then this scenario requires both programs to end 0: --require-data).
  ud                  udaddy (RDMA_PS_UDP, SIDR): the capture holds SIDR_REQ then SIDR_REP, all
                      decoded as InfiniBand CM, and the client reports no UNREACHABLE/REJECTED;
                      its UD data needs the data path (reported, or required by --require-data).
  rejected            rdma_client to a port nobody listens on (a's port 4791 is owned by the
                      server's process): REJ "invalid service id" -> `rdma_connect: Connection
                      refused`.
  relayed             two listening processes in a: the first owns port 4791, so cmtime's
                      requests reach the second through the owner's relay (its rendezvous);
                      then the owner is killed and the second takes 4791 over (it retries the
                      bind each second): cmtime connects again.
  lossy               nftables drops 5% of a's UDP (every port, both directions): `cmtime -c 20`
                      still connects and disconnects everything (resends; repeated messages are
                      answered again, never delivered twice); the rule must have dropped some.
  vanished            c-tests/cm_vanish (--vanish-prog; linked to rdmashim, so run once per
                      mode alike): connected across the namespaces, the server is SIGKILLed,
                      then the client's rdma_disconnect: its DREQ is never answered, and the
                      client must get DISCONNECTED after the CM's resends, not hang.
  unreachable         rdma_client to a namespace where no rdmashim process runs (nobody owns
                      4791 there): the REQ goes unanswered; after the CM's retries the client
                      gets UNREACHABLE -> `rdma_connect: Connection timed out`, well within the
                      program timeout (never a hang).
Exit 0 all pass, 1 a failure, 77 not root / no `ip` / programs or tshark missing.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "wire"))
import fixture  # noqa: E402
# check_roce re-executes itself under /usr/bin/python3 when scapy is missing; we only want its
# tshark helpers, which need no scapy.
os.environ.setdefault("CHECK_ROCE_REEXEC", "1")
import check_roce  # noqa: E402

TIMEOUT = 60          # per program: a hang is a failure
# A failed call as the programs report it (perror): "rdma_connect: Connection refused".
CM_CALL_FAILED = re.compile(r"^rdma_\w+: (?!start$|end )[^\n]*$", re.M)
CMTIME_STEPS = ("creating id", "resolving address", "resolving route", "creating qp",
                "connecting", "disconnecting", "destroying id")


def log(msg):
    print(f"cm_cross: {msg}", flush=True)


def prepare(say, mode, build_dir, tools=(), scapy=False):
    """What a namespace test needs before it starts: root and `tools` (else skip), scapy if
    asked (else skip), and the library of `mode` (else fail). (penv, env) for the programs,
    or the exit code to end with; `say` logs why."""
    try:
        fixture.require(*tools)
    except fixture.Skip as e:
        say(f"SKIP: {e}")
        return fixture.SKIP
    if scapy and not check_roce.have_scapy():
        say("SKIP: scapy (python3-scapy) is missing")
        return fixture.SKIP
    try:
        return program_env(mode, build_dir), clean_environ(build_dir)
    except FileNotFoundError as e:
        say(f"FAIL: {e}")
        return 1


class Checks:
    """Named checks, each logged as it is made; `failures` names the failed ones."""

    def __init__(self, say):
        self.say, self.failures = say, []

    def __call__(self, name, ok, detail=""):
        self.say(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            self.failures.append(name)

    def verdict(self):
        """The exit code: 1 (and the failed names) if any check failed, else 0."""
        if self.failures:
            self.say(f"FAIL: {'; '.join(self.failures)}")
            return 1
        self.say("all checks pass")
        return 0


def program_env(mode, build_dir):
    """`env VAR=...` for the programs (after the namespace prefix, so `ip` itself does not load
    the library)."""
    build_dir = os.path.abspath(build_dir)
    if mode == "preload":
        lib = os.path.join(build_dir, "librdmashim.so")
        need, var = lib, f"LD_PRELOAD={lib}"
    else:
        need = os.path.join(build_dir, "dropin", "librdmacm.so.1")
        var = f"LD_LIBRARY_PATH={os.path.join(build_dir, 'dropin')}"
    if not os.path.exists(need):
        raise FileNotFoundError(f"{need} is missing (build first: ninja -C {build_dir})")
    return ["env", var, "RDMASHIM_PROVIDER=soft"]


def clean_environ(build_dir):
    """The runner's environment without meson's LD_LIBRARY_PATH entries into the build tree:
    each mode sets exactly what it tests."""
    build_dir = os.path.realpath(build_dir)
    env = dict(os.environ)
    kept = [p for p in env.pop("LD_LIBRARY_PATH", "").split(":")
            if p and not os.path.realpath(p).startswith(build_dir)]
    if kept:
        env["LD_LIBRARY_PATH"] = ":".join(kept)
    env.pop("LD_PRELOAD", None)
    return env


def listening(pid, port):
    """True once rdmashim's CM rendezvous for `port` exists in `pid`'s namespace (this also
    proves the program runs on rdmashim)."""
    try:
        with open(f"/proc/{pid}/net/unix") as f:
            return any("@rdmashim/cm/" in line and f"/{port}/" in line for line in f)
    except OSError:
        return False


class Runner:
    def __init__(self, fx, penv, env):
        self.fx, self.penv, self.env = fx, penv, env
        self.failures = []

    def start(self, host, argv, port):
        p = self.fx.popen(host, self.penv + argv, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, env=self.env)
        deadline = time.monotonic() + 10
        while not listening(p.pid, port) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not listening(p.pid, port):
            out = stop(p)
            raise RuntimeError(f"{argv[0]} never listened on {port}:\n{out}")
        return p

    def run(self, host, argv):
        t0 = time.monotonic()
        try:
            r = self.fx.run(host, self.penv + argv, timeout=TIMEOUT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=self.env)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return None, out, time.monotonic() - t0
        return r.returncode, r.stdout, time.monotonic() - t0

    def check(self, name, ok, detail=""):
        log(f"{'ok  ' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
        if not ok:
            self.failures.append(name)


def stop(proc, timeout=5):
    if proc.poll() is None:
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.communicate()[0]


def cmtime(r, fx, ip, port, count, name):
    """The cmtime server never exits; the client reports a failed connection only as an
    `event:` line (its exit code stays 0), so its output is what is checked."""
    a, b = fx.hosts[0], fx.hosts[1]
    srv = r.start(a, ["cmtime", "-b", ip, "-p", str(port)], port)
    try:
        rc, out, secs = r.run(b, ["cmtime", "-s", ip, "-p", str(port), "-c", str(count)])
    finally:
        srv.kill()
        sout = stop(srv)
    lines = out.splitlines()
    ok = (rc == 0 and all(s in lines for s in CMTIME_STEPS)
          and not any(line.startswith("event: ") for line in lines)
          and any(re.match(r"^connect\s+:\s+[\d.]+", line) for line in lines)
          and any(re.match(r"^disconnect\s+:\s+[\d.]+", line) for line in lines))
    r.check(name, ok, f"client exit {rc}, {secs:.1f} s"
            + ("" if ok else f"\nclient:\n{out}server:\n{sout}"))


def tshark_cm(pcap):
    """(rows, problems): each frame's protocols and CM attribute, every UDP port of the capture
    decoded as RoCEv2 (our replies go process to process, not to 4791)."""
    ports = subprocess.run(["tshark", "-n", "-r", pcap, "-T", "fields", "-e", "udp.srcport",
                            "-e", "udp.dstport"], capture_output=True, text=True, timeout=60)
    cmd = ["tshark", "-n", "-r", pcap, "-T", "fields", "-E", "separator=\t",
           "-e", "frame.number", "-e", "frame.protocols", "-e", "_ws.malformed",
           "-e", "infiniband.mad.attributeid"]
    for p in sorted({p for line in ports.stdout.split() for p in line.split(",") if p}):
        cmd += ["-d", f"udp.port=={p},infiniband"]
    for proto in check_roce.infiniband_heuristics():
        cmd += ["--disable-protocol", proto]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    rows, problems = [], []
    for line in out.stdout.splitlines():
        n, protos, malformed, attr = (line.split("\t") + ["", "", "", ""])[:4]
        if "infiniband" not in protos.split(":"):
            problems.append(f"frame {n}: not InfiniBand ({protos})")
        if malformed or "malformed" in protos:
            problems.append(f"frame {n}: malformed ({protos})")
        rows.append((n, protos, attr))
    return rows, problems


CM_ATTR = {0x10: "REQ", 0x11: "MRA", 0x12: "REJ", 0x13: "REP", 0x14: "RTU", 0x15: "DREQ",
           0x16: "DREP", 0x17: "SIDR_REQ", 0x18: "SIDR_REP"}


def pair(r, fx, require_data, tmp):
    a, b = fx.hosts[0], fx.hosts[1]
    port = 7500
    pcap = os.path.join(tmp, "cm.pcap")
    cap = fx.capture(a, pcap, "udp").start()
    srv = r.start(a, ["rdma_server", "-p", str(port)], port)
    rc, cout, _ = r.run(b, ["rdma_client", "-s", a.ipv4, "-p", str(port)])
    time.sleep(0.5)
    sout = stop(srv, 3 if rc == 0 else 1)
    cap.stop()
    bad = [m for m in CM_CALL_FAILED.findall(cout + sout)]
    data_ok = rc == 0 and "rdma_client: end 0" in cout and "rdma_server: end 0" in sout
    rows, problems = tshark_cm(pcap)
    seen = [CM_ATTR.get(int(x, 0), x) for _, _, x in rows if x]
    log(f"pair: CM messages captured: {' '.join(seen)}")
    r.check("pair: no CM call failed", not bad, "; ".join(bad) + f"\nclient:\n{cout}\nserver:\n{sout}"
            if bad else "")
    want = ["REQ", "REP", "RTU"]
    r.check("pair: REQ, REP, RTU in order", [s for s in seen if s in want][:3] == want,
            " ".join(seen))
    if rc == 0:
        r.check("pair: DREQ and DREP after the client ended",
                "DREQ" in seen and "DREP" in seen, " ".join(seen))
    r.check("pair: every frame decodes as InfiniBand, none malformed", not problems and rows,
            "; ".join(problems) or f"{len(rows)} frames")
    if require_data:
        r.check("pair: data exchanged (both programs end 0)", data_ok,
                f"\nclient:\n{cout}\nserver:\n{sout}")
    else:
        log(f"pair: data path {'works' if data_ok else 'not there yet (net branch)'}; "
            "not required by this scenario")


def ud(r, fx, require_data, tmp):
    a, b = fx.hosts[0], fx.hosts[1]
    pcap = os.path.join(tmp, "ud.pcap")
    cap = fx.capture(a, pcap, "udp").start()
    srv = r.start(a, ["udaddy", "-b", a.ipv4], 7174)
    try:
        # Line-buffered (stdbuf adds its library to LD_PRELOAD), so a client killed while it
        # waits for data still shows what the CM told it.
        c = fx.popen(b, r.penv + ["stdbuf", "-oL", "udaddy", "-s", a.ipv4],
                     stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True, env=r.env)
        try:
            cout = c.communicate(timeout=8)[0]
        except subprocess.TimeoutExpired:
            c.kill()     # waiting for UD data the data path does not carry yet
            cout = c.communicate()[0]
    finally:
        time.sleep(0.3)
        srv.kill()
        sout = stop(srv)
        cap.stop()
    rows, problems = tshark_cm(pcap)
    seen = [CM_ATTR.get(int(x, 0), x) for _, _, x in rows if x]
    r.check("ud: SIDR_REQ then SIDR_REP", seen[:2] == ["SIDR_REQ", "SIDR_REP"], " ".join(seen))
    r.check("ud: every frame decodes as InfiniBand, none malformed", not problems and rows,
            "; ".join(problems) or f"{len(rows)} frames")
    r.check("ud: the client connected (no UNREACHABLE/REJECTED)",
            "initiating data transfers" in cout and not re.search(r"UNREACHABLE|REJECTED", cout),
            cout.strip())
    data_ok = c.returncode == 0 and "return status 0" in cout
    if require_data:
        r.check("ud: data exchanged", data_ok, f"\nclient:\n{cout}\nserver:\n{sout}")
    else:
        log(f"ud: data path {'works' if data_ok else 'not there yet (net branch)'}; "
            "not required by this scenario")


def rejected(r, fx):
    a, b = fx.hosts[0], fx.hosts[1]
    srv = r.start(a, ["rdma_server", "-p", "7600"], 7600)
    try:
        rc, out, secs = r.run(b, ["rdma_client", "-s", a.ipv4, "-p", "7601"])
    finally:
        srv.kill()
        stop(srv)
    r.check("rejected: no listener -> Connection refused",
            rc not in (None, 0) and "rdma_connect: Connection refused" in out,
            f"exit {rc}, {secs:.1f} s: {out.strip()}")


def relayed(r, fx):
    a, b = fx.hosts[0], fx.hosts[1]
    owner = r.start(a, ["rdma_server", "-p", "7800"], 7800)
    try:
        cmtime(r, fx, a.ipv4, 7801, 20, "relayed: cmtime -c 20 through the owner of 4791")
    finally:
        owner.kill()
        stop(owner)
    # The cmtime server of the next call starts after the owner died: it binds 4791 at once.
    # A takeover proper: a listener that was refused 4791 gets it when the owner exits.
    owner = r.start(a, ["rdma_server", "-p", "7802"], 7802)
    srv = r.start(a, ["cmtime", "-b", a.ipv4, "-p", "7803"], 7803)
    try:
        owner.kill()
        stop(owner)
        time.sleep(2.5)   # two of the survivor's one-second bind retries
        rc, out, secs = r.run(b, ["cmtime", "-s", a.ipv4, "-p", "7803", "-c", "10"])
    finally:
        srv.kill()
        stop(srv)
    ok = rc == 0 and not re.search(r"^event: ", out, re.M) and "disconnecting" in out
    r.check("relayed: the surviving listener took port 4791 over", ok,
            f"exit {rc}, {secs:.1f} s" + ("" if ok else f"\n{out}"))


def lossy(r, fx):
    a = fx.hosts[0]
    try:
        rule = fx.drop_udp(a, 5, ports=(1, 65535)).install()
    except fixture.Skip as e:
        log(f"lossy: skipped ({e})")
        return
    try:
        cmtime(r, fx, a.ipv4, 7900, 20, "lossy: cmtime -c 20 with 5% of a's UDP dropped")
        dropped = rule.dropped()
    finally:
        rule.remove()
    r.check("lossy: the rule dropped packets", dropped > 0, f"{dropped} dropped")


def vanished(r, fx, prog):
    a, b = fx.hosts[0], fx.hosts[1]
    port = "7950"
    srv = fx.popen(a, [prog, "server", a.ipv4, port], stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, text=True, env=r.env)
    cli = None
    try:
        deadline = time.monotonic() + 10
        while not listening(srv.pid, port) and srv.poll() is None \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        cli = fx.popen(b, [prog, "client", a.ipv4, port], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=r.env)
        first = cli.stdout.readline()
        if first.strip() != "established":
            cli.kill()
            r.check("vanished: connected", False, first + cli.communicate()[0])
            return
        srv.stdout.readline()          # the server's "established": its side is up too
        srv.kill()
        srv.wait()
        try:
            out = cli.communicate("go\n", timeout=TIMEOUT)[0]
        except subprocess.TimeoutExpired:
            cli.kill()
            out = cli.communicate()[0] + "(hung)"
        r.check("vanished: unanswered DREQ -> DISCONNECTED", cli.returncode == 0
                and "disconnected after" in out, f"exit {cli.returncode}: {out.strip()}")
    finally:
        for p in (srv, cli):
            if p and p.poll() is None:
                p.kill()
                p.wait()


def unreachable(r, fx):
    a, b = fx.hosts[0], fx.hosts[1]
    # Nothing of ours runs in a now: its kernel drops the REQ (port 4791 closed).
    rc, out, secs = r.run(b, ["rdma_client", "-s", a.ipv4, "-p", "7700"])
    r.check("unreachable: unanswered REQ -> Connection timed out, no hang",
            rc not in (None, 0) and "rdma_connect: Connection timed out" in out,
            f"exit {rc}, {secs:.1f} s: {out.strip()}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default="build")
    ap.add_argument("--mode", choices=("preload", "dropin"), default="preload")
    ap.add_argument("--require-data", action="store_true",
                    help="the pair must also exchange its data (after the data path lands)")
    ap.add_argument("--vanish-prog", help="c-tests/cm_vanish as built (scenario vanished)")
    args = ap.parse_args()
    try:
        fixture.require("tcpdump", "tshark")
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    for prog in ("rdma_server", "rdma_client", "cmtime"):
        if shutil.which(prog) is None:
            print(f"SKIP: {prog} not found (Debian package rdmacm-utils)")
            return fixture.SKIP
    try:
        penv = program_env(args.mode, args.build_dir)
        env = clean_environ(args.build_dir)
    except FileNotFoundError as e:
        log(f"FAIL: {e}")
        return 1
    with fixture.Fixture(hosts=2) as fx, tempfile.TemporaryDirectory() as tmp:
        r = Runner(fx, penv, env)
        a = fx.hosts[0]
        cmtime(r, fx, a.ipv4, 7471, 100, "cmtime4: cmtime -c 100 over IPv4")
        cmtime(r, fx, a.ipv6, 7472, 20, "cmtime6: cmtime -c 20 over IPv6")
        pair(r, fx, args.require_data, tmp)
        ud(r, fx, args.require_data, tmp)
        rejected(r, fx)
        relayed(r, fx)
        lossy(r, fx)
        if args.vanish_prog:
            vanished(r, fx, args.vanish_prog)
        else:
            log("vanished: skipped (no --vanish-prog)")
        unreachable(r, fx)
    if r.failures:
        log(f"FAIL ({args.mode}): {', '.join(r.failures)}")
        return 1
    log(f"all scenarios pass ({args.mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
