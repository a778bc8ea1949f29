#!/usr/bin/env python3
"""Network namespaces for multi-host tests (issue 8: RoCEv2 over UDP across namespaces).

Two namespaces joined by a veth pair, or three joined by a bridge that lives in a fourth
namespace, with private addresses, so that a test can run a server "on one host" and a client
"on another" without a second machine. The root namespace's interfaces, routes and firewall are
never touched: every link is created inside the fixture's namespaces, nothing routes out of
them (no default route, no NAT), and everything is deleted afterwards, also on exceptions and
on SIGINT/SIGTERM. A SIGKILLed owner leaves debris; `cleanup_stale()` (run at every start, and
`fixture.py cleanup`) removes the namespaces whose owner process is dead.

    with Fixture(hosts=2) as fx:                 # fx.hosts[0].ns, .ifname, .ipv4, .ipv6
        srv = fx.popen(fx.hosts[0], ["prog", "-b", fx.hosts[0].ipv4])
        ...

CLI:
    fixture.py up [--hosts 2|3] [--mtu N] [--owner PID]   # prints shell assignments; stays up
                                                          # until `down` (or the owner, default the
                                                          # session leader, dies and a cleanup runs)
    fixture.py down RUN_ID                                # deletes that run's namespaces
    fixture.py run [--hosts N] [--mtu N] -- CMD...        # up, CMD with NETNS_* env vars, down
    fixture.py cleanup                                    # delete stale runs (dead owners)
    fixture.py list

Needs root and iproute2 (`ip`); without them `require()` raises Skip and the tests exit 77.
Standard library only. Names: rsnt-<owner pid>-<owner start time>-<random>-<role>; the owner's
start time (from /proc/<pid>/stat) tells a live owner from a reused pid.
"""

import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

PREFIX = "rsnt"
NAME_RE = re.compile(rf"^{PREFIX}-(\d+)-(\d+)-([0-9a-f]+)-([a-z]+)$")
ROLES = "abc"            # host namespaces; the bridge namespace is "br"
SKIP = 77
UDP_ROCE_PORT = 4791
CMD_TIMEOUT = 30         # any single `ip`/`nft` command; a hang becomes an error


class Skip(Exception):
    """The fixture cannot run here (not root, no `ip`, no namespaces); tests exit 77."""


def log(msg):
    print(f"netns: {msg}", file=sys.stderr, flush=True)


def require(*tools):
    """Raise Skip with the reason unless we are root and `ip` (and `tools`) are on PATH."""
    if os.geteuid() != 0:
        raise Skip("needs root (network namespaces); CI runs as root")
    for tool in ("ip",) + tools:
        if shutil.which(tool) is None:
            pkg = {"ip": "iproute2", "nft": "nftables"}.get(tool, tool)
            raise Skip(f"`{tool}` not found (Debian package {pkg}; scripts/deps installs it)")


def sh(argv, check=True, input=None):
    """Run a short command; return its stdout. Failures raise with the command's stderr."""
    p = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=CMD_TIMEOUT)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def proc_start_time(pid):
    """Start time of `pid` in clock ticks since boot (field 22 of /proc/pid/stat), or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def list_namespaces():
    """Names of all named network namespaces (`ip netns list`, first word of each line)."""
    return [line.split()[0] for line in sh(["ip", "netns", "list"]).splitlines() if line.strip()]


def owner_alive(name):
    """True if the process that created fixture namespace `name` still runs (same start time)."""
    m = NAME_RE.match(name)
    return bool(m) and proc_start_time(int(m.group(1))) == int(m.group(2))


def delete_namespace(name):
    """Kill what runs inside `name` (our test programs, tcpdump), then delete it.

    Deleting a namespace only drops its name: processes still inside keep it (and its veth)
    alive, so they go first. The kernel destroys the veth pair and bridge with the namespace.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = [int(p) for p in sh(["ip", "netns", "pids", name], check=False).split()]
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 2
        while pids and time.monotonic() < deadline:
            pids = [p for p in pids if os.path.exists(f"/proc/{p}")]
            time.sleep(0.05)
        if not pids:
            break
    sh(["ip", "netns", "delete", name], check=False)


def delete_run(run_id):
    """Delete every namespace of run `run_id` (the `<pid>-<start>-<rand>` part of the names)."""
    for name in list_namespaces():
        if name.startswith(f"{PREFIX}-{run_id}-") and NAME_RE.match(name):
            delete_namespace(name)


def cleanup_stale():
    """Delete fixture namespaces whose owner process is dead (a SIGKILLed run's debris).

    Only names that match the fixture's pattern are considered, and a namespace whose owner
    still runs (another suite on this host) is left alone. Returns the names deleted.
    """
    gone = []
    for name in list_namespaces():
        if NAME_RE.match(name) and not owner_alive(name):
            delete_namespace(name)
            gone.append(name)
    return gone


class Host:
    """One simulated host: namespace `ns`, its link `ifname`, and its addresses."""

    def __init__(self, role, ns, ifname, ipv4, ipv6):
        self.role, self.ns, self.ifname, self.ipv4, self.ipv6 = role, ns, ifname, ipv4, ipv6

    def __repr__(self):
        return f"Host({self.role}: {self.ns} {self.ifname} {self.ipv4} {self.ipv6})"


class Fixture:
    """N namespaces (2: veth pair; 3: bridge in its own namespace), set up on enter, deleted
    on exit. `owner_pid` names the process whose death makes the namespaces stale (default:
    this one; the CLI's `up` uses the session leader)."""

    def __init__(self, hosts=2, mtu=1500, owner_pid=None, cleanup_stale_first=True):
        if hosts not in (2, 3):
            raise ValueError("hosts must be 2 (veth pair) or 3 (bridge)")
        self.n, self.mtu = hosts, mtu
        self.cleanup_stale_first = cleanup_stale_first
        owner = owner_pid or os.getpid()
        start = proc_start_time(owner)
        if start is None:
            raise ValueError(f"owner process {owner} does not exist")
        self.run_id = f"{owner}-{start}-{random.getrandbits(24):06x}"
        # 10.199.X.0/24 and a random ULA /64: unique per run so captures and logs of parallel
        # runs do not look alike (the namespaces keep them apart anyway).
        x = random.randint(1, 254)
        self.net4 = ipaddress.ip_network(f"10.199.{x}.0/24")
        gid = random.getrandbits(40)
        self.net6 = ipaddress.ip_network(
            f"fd{gid >> 32:02x}:{(gid >> 16) & 0xffff:x}:{gid & 0xffff:x}:1::/64")
        self.hosts = []
        self.bridge_ns = None
        self._created = []
        self._captures = []
        self._old_handlers = {}

    # --- names -------------------------------------------------------------------------------
    def ns_name(self, role):
        return f"{PREFIX}-{self.run_id}-{role}"

    def namespaces(self):
        """Every namespace this run created (hosts and bridge)."""
        return list(self._created)

    # --- setup / teardown --------------------------------------------------------------------
    def up(self):
        """Create everything; on any failure delete what was created and re-raise."""
        require()
        if self.cleanup_stale_first:
            for name in cleanup_stale():
                log(f"deleted stale namespace {name} (owner dead)")
        try:
            self._build()
        except BaseException:
            self.down()
            raise
        return self

    def _add_ns(self, role):
        name = self.ns_name(role)
        p = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True,
                           timeout=CMD_TIMEOUT)
        if p.returncode != 0:
            if "ermission" in p.stderr or "not permitted" in p.stderr:
                raise Skip(f"cannot create network namespaces here: {p.stderr.strip()}")
            raise RuntimeError(f"ip netns add {name}: {p.stderr.strip()}")
        self._created.append(name)
        # No DAD: addresses are usable at once (no 1-2 s wait, no "tentative" races).
        self.ns_sh(name, ["sysctl", "-q", "-w", "net.ipv6.conf.all.accept_dad=0",
                          "net.ipv6.conf.default.accept_dad=0"])
        self.ns_sh(name, ["ip", "link", "set", "lo", "up"])
        return name

    def _build(self):
        roles = ROLES[:self.n]
        names = [self._add_ns(r) for r in roles]
        if self.n == 2:
            # The pair is created inside namespace a with its peer moved straight into b: the
            # root namespace never sees either end.
            self.ns_sh(names[0], ["ip", "link", "add", "veth0", "mtu", str(self.mtu), "type",
                                  "veth", "peer", "name", "veth0", "mtu", str(self.mtu),
                                  "netns", names[1]])
        else:
            self.bridge_ns = br = self._add_ns("br")
            # The bridge namespace only switches frames: no IPv6 of its own (no RS/ND noise).
            self.ns_sh(br, ["sysctl", "-q", "-w", "net.ipv6.conf.all.disable_ipv6=1",
                            "net.ipv6.conf.default.disable_ipv6=1"])
            # No IGMP snooping: without a querier it could hold multicast back.
            self.ns_sh(br, ["ip", "link", "add", "br0", "mtu", str(self.mtu), "type", "bridge",
                            "mcast_snooping", "0"])
            for r, name in zip(roles, names):
                self.ns_sh(br, ["ip", "link", "add", f"port-{r}", "mtu", str(self.mtu), "type",
                                "veth", "peer", "name", "veth0", "mtu", str(self.mtu),
                                "netns", name])
                self.ns_sh(br, ["ip", "link", "set", f"port-{r}", "master", "br0", "up"])
            self.ns_sh(br, ["ip", "link", "set", "br0", "up"])
        for i, (r, name) in enumerate(zip(roles, names)):
            v4 = str(self.net4.network_address + i + 1)
            v6 = str(self.net6.network_address + i + 1)
            self.ns_sh(name, ["ip", "addr", "add", f"{v4}/{self.net4.prefixlen}", "dev", "veth0"])
            self.ns_sh(name, ["ip", "-6", "addr", "add", f"{v6}/{self.net6.prefixlen}", "dev",
                              "veth0", "nodad"])
            self.ns_sh(name, ["ip", "link", "set", "veth0", "up"])
            # IPv4 multicast needs a route to leave without IP_MULTICAST_IF (no default route).
            self.ns_sh(name, ["ip", "route", "add", "224.0.0.0/4", "dev", "veth0"])
            self.hosts.append(Host(r, name, "veth0", v4, v6))
        for h in self.hosts:
            self._wait_ready(h)

    def _wait_ready(self, host):
        """Bounded wait until the link is up and no address is tentative (DAD is off, but the
        link-local address may have been added before the sysctl reached the interface)."""
        deadline = time.monotonic() + 10
        while True:
            link = self.ns_sh(host.ns, ["ip", "-o", "link", "show", host.ifname])
            tentative = self.ns_sh(host.ns, ["ip", "-6", "-o", "addr", "show", "tentative"])
            if "LOWER_UP" in link and not tentative.strip():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host}: link not ready after 10 s: {link.strip()} "
                                   f"{tentative.strip()}")
            time.sleep(0.05)

    def down(self):
        """Delete every namespace of this run (processes inside are killed first; captures
        still running are stopped with SIGINT before, so their pcap files are complete)."""
        while self._captures:
            self._captures.pop().stop()
        while self._created:
            delete_namespace(self._created.pop())
        self.hosts = []

    def __enter__(self):
        # SIGTERM/SIGINT become exceptions so the `with` unwinds through __exit__ (main thread
        # only: Python delivers signals there).
        if threading_is_main():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old_handlers[sig] = signal.signal(sig, _raise_on_signal)
        try:
            return self.up()
        except BaseException:
            self._restore_signals()
            raise

    def __exit__(self, *exc):
        # A second signal must not interrupt the teardown half-way.
        if threading_is_main():
            for sig in self._old_handlers:
                signal.signal(sig, signal.SIG_IGN)
        try:
            self.down()
        finally:
            self._restore_signals()
        return False

    def _restore_signals(self):
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers = {}

    # --- running things inside ---------------------------------------------------------------
    @staticmethod
    def exec_argv(ns, argv):
        """`argv` run inside namespace `ns` (`ip netns exec` execs it: same pid, signals
        reach the program)."""
        return ["ip", "netns", "exec", ns, *argv]

    def ns_sh(self, ns, argv, check=True, input=None):
        return sh(self.exec_argv(ns, argv), check=check, input=input)

    def popen(self, host, argv, **kw):
        """Start `argv` inside `host`'s namespace; returns the subprocess.Popen."""
        return subprocess.Popen(self.exec_argv(_ns(host), argv), **kw)

    def run(self, host, argv, timeout=60, **kw):
        """Run `argv` inside `host`'s namespace to the end (bounded); CompletedProcess."""
        return subprocess.run(self.exec_argv(_ns(host), argv), timeout=timeout, **kw)

    def capture(self, host, path, bpf=None):
        """tcpdump on `host`'s link writing `path` (start() it, or use `with`); see Capture.
        One still running when the fixture goes down is stopped then."""
        cap = Capture(self, host, path, bpf)
        self._captures.append(cap)
        return cap

    def drop_udp(self, host, percent, ports=(UDP_ROCE_PORT, UDP_ROCE_PORT)):
        """Install a random-drop rule in `host`'s namespace; see DropRule."""
        return DropRule(self, host, percent, ports)

    def vanish(self, host):
        """Delete `host`'s namespace now, as a host that dies: what runs inside is killed, and
        the kernel removes its links with it (a veth pair's other end too)."""
        name = _ns(host)
        delete_namespace(name)
        if name in self._created:
            self._created.remove(name)

    def has_link(self, host):
        """True while `host`'s link exists (in its namespace, which must exist)."""
        return subprocess.run(self.exec_argv(host.ns, ["ip", "link", "show", host.ifname]),
                              capture_output=True, timeout=CMD_TIMEOUT).returncode == 0

    def env(self):
        """Shell-friendly description: NETNS_RUN, NETNS_A, NETNS_IP_A, NETNS_IP6_A, ..."""
        out = {"NETNS_RUN": self.run_id, "NETNS_MTU": str(self.mtu)}
        for h in self.hosts:
            r = h.role.upper()
            out.update({f"NETNS_{r}": h.ns, f"NETNS_IF_{r}": h.ifname,
                        f"NETNS_IP_{r}": h.ipv4, f"NETNS_IP6_{r}": h.ipv6})
        if self.bridge_ns:
            out["NETNS_BRIDGE"] = self.bridge_ns
        return out


def _ns(host):
    return host.ns if isinstance(host, Host) else host


def threading_is_main():
    return threading.current_thread() is threading.main_thread()


class Terminated(Exception):
    """SIGTERM arrived while a Fixture was up (raised so that the `with` block unwinds)."""


def _raise_on_signal(signum, frame):
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(f"signal {signum}")


class Capture:
    """tcpdump on one namespace's link, writing a pcap; stopped with SIGINT so it flushes.

    Use as a context manager or call start()/stop(). start() returns once tcpdump says it
    listens, so no packet sent afterwards is missed. `--immediate-mode` hands every packet to
    tcpdump at once (without it, packets still waiting in the kernel's capture ring when SIGINT
    arrives are counted as "received by filter" but never written), `-U` writes each packet
    at once, and `-Z root` keeps tcpdump from dropping to a user that cannot write `path`;
    `-s`/`-B` size its ring for bursts (see `start`).
    """

    def __init__(self, fx, host, path, bpf=None):
        self.fx, self.host, self.path, self.bpf = fx, host, path, bpf
        self.proc = None
        self.stderr = ""

    def start(self):
        require("tcpdump", "ethtool")
        # A veth carries a segmented UDP send (UDP GSO, what rdmashim sends bursts with) as
        # one packet and a tap shows it so; with segmentation off on every link the kernel
        # cuts it before the device, and the capture holds the datagrams a wire would carry.
        for h in self.fx.hosts:
            self.fx.ns_sh(h.ns, ["ethtool", "-K", h.ifname, "tx-udp-segmentation", "off"])
        # Immediate mode makes libpcap use fixed-size ring slots sized for the snapshot length:
        # with the default (262144 bytes) and buffer (2 MiB) the ring holds 8 packets and a
        # burst is mostly dropped. Frames here are at most a 9000-byte MTU's.
        argv = ["tcpdump", "-i", self.host.ifname, "-w", self.path, "-U", "-n", "-Z", "root",
                "--immediate-mode", "-s", "9100", "-B", "32768"]
        if self.bpf:
            argv.append(self.bpf)
        self.proc = self.fx.popen(self.host, argv, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        # tcpdump prints "listening on <if>" once the capture is open; bounded by a timer.
        timer = _kill_later(self.proc, 10)
        try:
            line = self.proc.stderr.readline()
        finally:
            timer.cancel()
        if "listening on" not in line:
            self.proc.wait()
            raise RuntimeError(f"tcpdump did not start: {line.strip()} {self.proc.stderr.read()}")
        return self

    def stop(self):
        """SIGINT, then wait (bounded); returns tcpdump's summary (packets captured...)."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                _, err = self.proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                _, err = self.proc.communicate()
            self.stderr = err
        return self.stderr

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def _kill_later(proc, seconds):
    t = threading.Timer(seconds, lambda: proc.poll() is None and proc.kill())
    t.daemon = True
    t.start()
    return t


class DropRule:
    """An nftables table in one namespace that drops `percent`% of UDP packets to or from the
    ports lo..hi (default 4791, RoCEv2), chosen at random per packet (`numgen random mod 100`).

    This replaces netem, which this kernel lacks. The rule sits in the input and output hooks
    of that namespace only, so each packet crossing it meets it once. remove() deletes the
    table; deleting the namespace would too.
    """

    def __init__(self, fx, host, percent, ports):
        if not 0 <= percent <= 100:
            raise ValueError("percent must be 0..100")
        self.fx, self.host, self.percent = fx, host, int(percent)
        lo, hi = ports
        self.ports = str(lo) if lo == hi else f"{lo}-{hi}"
        self.table = f"{PREFIX}_drop_{random.getrandbits(24):06x}"
        self.installed = False

    def install(self):
        require("nft")
        p, t = self.ports, self.table
        rule = f"numgen random mod 100 < {self.percent} counter drop"
        script = (f"table inet {t} {{\n"
                  f"  chain input {{ type filter hook input priority 0; policy accept;\n"
                  f"    udp dport {p} {rule}\n    udp sport {p} {rule}\n  }}\n"
                  f"  chain output {{ type filter hook output priority 0; policy accept;\n"
                  f"    udp dport {p} {rule}\n    udp sport {p} {rule}\n  }}\n}}\n")
        self.fx.ns_sh(self.host.ns, ["nft", "-f", "-"], input=script)
        self.installed = True
        return self

    def dropped(self):
        """Packets dropped so far (sum of the rules' counters)."""
        out = self.fx.ns_sh(self.host.ns, ["nft", "list", "table", "inet", self.table])
        return sum(int(n) for n in re.findall(r"counter packets (\d+)", out))

    def remove(self):
        if self.installed:
            self.fx.ns_sh(self.host.ns, ["nft", "delete", "table", "inet", self.table],
                          check=False)
            self.installed = False

    def __enter__(self):
        return self.install()

    def __exit__(self, *exc):
        self.remove()
        return False


def pair_env(fx):
    """What tests/acceptance/run.py needs to run its pair across namespaces:
    (server_prefix_argv, client_prefix_argv, server_ip, client_ip).

    Prepend a prefix to a program's argv to run it in that host's namespace. The server is
    host a, the client host b. Environment meant for the program only (LD_PRELOAD,
    LD_LIBRARY_PATH, LD_DEBUG) is best passed after the prefix through `env VAR=value`, so that
    `ip` itself does not load the preloaded library or show up in LD_DEBUG output.
    """
    a, b = fx.hosts[0], fx.hosts[1]
    return Fixture.exec_argv(a.ns, []), Fixture.exec_argv(b.ns, []), a.ipv4, b.ipv4


# --- CLI ---------------------------------------------------------------------------------------
def main(argv=None):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("up", "run"):
        p = sub.add_parser(name)
        p.add_argument("--hosts", type=int, default=2, choices=(2, 3))
        p.add_argument("--mtu", type=int, default=1500)
        if name == "up":
            # Not the parent: under `x=$(fixture.py up | ...)` that is a subshell that exits
            # at once. The session leader (the terminal's shell, the CI job) lives on.
            p.add_argument("--owner", type=int, default=os.getsid(0),
                           help="pid whose death makes the namespaces stale (default: the "
                                "session leader); `down RUN_ID` deletes them earlier")
        else:
            p.add_argument("command", nargs="+", help="run in the root namespace, NETNS_* set")
    sub.add_parser("down").add_argument("run_id")
    sub.add_parser("cleanup", help="delete namespaces of dead owners")
    sub.add_parser("list")
    args = ap.parse_args(argv)
    try:
        require()
        if args.cmd == "up":
            fx = Fixture(args.hosts, args.mtu, owner_pid=args.owner).up()
            for k, v in fx.env().items():
                print(f"{k}={v}")
            return 0
        if args.cmd == "run":
            try:
                with Fixture(args.hosts, args.mtu) as fx:
                    return subprocess.run(args.command, env={**os.environ, **fx.env()}).returncode
            except Terminated:
                return 128 + signal.SIGTERM
            except KeyboardInterrupt:
                return 128 + signal.SIGINT
        if args.cmd == "down":
            delete_run(args.run_id)
        elif args.cmd == "cleanup":
            for name in cleanup_stale():
                print(f"deleted {name}")
        elif args.cmd == "list":
            for name in list_namespaces():
                if NAME_RE.match(name):
                    print(f"{name} owner {'alive' if owner_alive(name) else 'dead'}")
        return 0
    except Skip as e:
        print(f"SKIP: {e}")
        return SKIP


if __name__ == "__main__":
    sys.exit(main())
