#!/usr/bin/env python3
"""Runs one acceptance scenario (tests/acceptance/programs.py) on rdmashim in one mode.

  run.py <scenario> <mode> [--build-dir build]     # one run, as `meson test acc-<scenario>-<mode>`
  run.py --list                                    # scenarios, ports, commands, xfail status
  run.py all preload --repeat 3 --no-xfail         # every scenario, 3 times, real verdicts
  run.py <scenario> <mode> --netns                 # server and client in two network namespaces

Modes:
  preload  LD_PRELOAD=<build>/librdmashim.so; the system libraries are still loaded (the
           programs' DT_NEEDED) but every call binds to the preloaded library first.
  dropin   LD_LIBRARY_PATH=<build>/dropin; proves that the system librdmacm/libibverbs, the
           rdma-core provider plugins and the system vendor libraries (libmlx5, libefa, ...) are
           NOT loaded: LD_TRACE_LOADED_OBJECTS of both binaries, LD_DEBUG=libs of every process
           (sees dlopen too) and /proc/<pid>/maps of the running server.

The server starts first; the client starts once the server is ready (a TCP listen probe for
side-channel programs, else a short wait) and is started again while its output says the server
is not listening yet. Every program runs in its own process group under a timeout; a server that
never exits by itself is killed once the client is done. RDMASHIM_PROVIDER=soft.

--netns (root; tests/netns/fixture.py): the server runs in namespace a, the client in namespace
b, joined by a veth pair; `{host}` is a's address, `{local}` the program's own, `{gid}` the GID
index of the program's own IPv4 address. The mode's variables go after the `ip netns exec`
prefix through `env`, so `ip` itself neither preloads the library nor writes LD_DEBUG files.
Readiness reads /proc/<server pid>/net/tcp* (the server's namespace). The xfail modes are
`preload-netns` and `dropin-netns`.

Expected failures: tests/acceptance/xfail.txt lists `<scenario> <mode> <issue>`. A listed
scenario that fails prints `XFAIL ... (issue N)` and exits 0; one that passes prints `XPASS` and
exits 1, so the line gets removed at once. --no-xfail reports the real verdict.
Exit status: 0 pass (or XFAIL), 1 fail (or XPASS), 77 skipped (a program is missing).
"""

import argparse
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import programs  # noqa: E402
import placement  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import sanitizer_env  # noqa: E402

# The load checks are shared with run-pair.py (which stays the rdma_server/rdma_client runner
# of scripts/demo and of the c-tests' relink pair).
_spec = importlib.util.spec_from_file_location("run_pair", os.path.join(HERE, "run-pair.py"))
run_pair = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run_pair)

SKIP = 77
MODES = ("preload", "dropin")
# xfail.txt's mode column: a mode, or a mode run across network namespaces.
XFAIL_MODES = MODES + tuple(m + "-netns" for m in MODES)
XFAIL_FILE = os.path.join(HERE, "xfail.txt")
# What the drop-in folder replaces: these sonames must come from <build>/dropin, never from
# the system (a system vendor library would drag in rdma-core's provider interface).
DROPIN_SONAMES = ("librdmacm.so.1", "libibverbs.so.1", "libmlx5.so.1", "libefa.so.1")
SYSTEM_RDMA_RE = re.compile(
    r"^lib(rdmacm|ibverbs|mlx4|mlx5|efa|mana|hns|bnxt_re|cxgb4|erdma|irdma|qedr|rxe|siw|vmw_pvrdma"
    r"|ocrdma|ipathverbs|hfi1verbs|mthca)\.so(\.|$)")


def log(msg):
    print(f"run: {msg}", flush=True)


def read_xfail(path=XFAIL_FILE):
    """{(scenario, mode): issue} from xfail.txt (`<scenario> <mode> <issue>`, # comments)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3 or parts[1] not in XFAIL_MODES or not parts[2].isdigit():
                raise SystemExit(f"{path}:{n}: expected '<scenario> <mode> <issue>', got {line!r}")
            if programs.by_name(parts[0]) is None:
                raise SystemExit(f"{path}:{n}: unknown scenario {parts[0]!r}")
            out[(parts[0], parts[1])] = int(parts[2])
    return out


def classify(paths, build_dir):
    """(ours, system_rdma) among loaded object paths."""
    ours, system = [], []
    for p in paths:
        if run_pair.is_ours(p, build_dir):
            ours.append(p)
        elif SYSTEM_RDMA_RE.match(os.path.basename(p)) or run_pair.PROVIDER_RE.search(p):
            system.append(p)
    return ours, system


def which(prog):
    return prog if os.path.isabs(prog) else shutil.which(prog)


def tcp_listening(port, pid=None):
    """True if some socket listens on TCP `port` (any address), from /proc/net/tcp{,6}, or from
    /proc/<pid>/net/tcp{,6} (the network namespace of process `pid`)."""
    base = f"/proc/{pid}/net" if pid else "/proc/net"
    for name in (f"{base}/tcp", f"{base}/tcp6"):
        try:
            with open(name) as f:
                next(f)
                for line in f:
                    parts = line.split()
                    if len(parts) > 3 and parts[3] == "0A" and int(parts[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            pass
    return False


def port_free(port):
    """True if `port` is free for a TCP listener (127.0.0.1 and the wildcard) and no abstract
    unix socket (rdmashim's CM rendezvous) has it in its name."""
    import socket
    for addr in ("127.0.0.1", "0.0.0.0"):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.bind((addr, port))
        except OSError:
            return False
        finally:
            s.close()
    try:
        with open("/proc/net/unix") as f:
            if any(f"/{port}/" in line for line in f):
                return False
    except OSError:
        pass
    return True


def pick_port(sc, mode, fixed):
    """The scenario's table port with --fixed-ports, else a random free one (several suites on
    one host, e.g. two checkouts, must not meet on a fixed port)."""
    if not sc.port:
        return 0
    if fixed:
        return sc.port_for(mode)
    import random
    for _ in range(100):
        port = random.randint(20000, 59999)
        if port_free(port) and port_free(port + 1):
            return port
    raise RuntimeError("no free port found")


class HostLock:
    """flock() on $TMPDIR/rdmashim-acceptance-<name>.lock, waiting at most `wait` seconds."""

    def __init__(self, name, wait=120.0):
        self.name, self.wait, self.fd = name, wait, None

    def __enter__(self):
        import fcntl
        if not self.name:
            return self
        path = os.path.join(tempfile.gettempdir(), f"rdmashim-acceptance-{self.name}.lock")
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        deadline = time.monotonic() + self.wait
        said = False
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() > deadline:
                    log(f"note: {path} still held after {self.wait:.0f} s; running anyway")
                    return self
                if not said:
                    log(f"waiting for {path} (another run uses the same fixed port/group)")
                    said = True
                time.sleep(0.2)

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)   # releases the lock
        return False


def debug_hung(proc, who):
    """Before a hung program is killed: its threads' backtraces (gdb, if installed), and an
    fflush(0) inside it so the output it has buffered reaches the log. Returns text for the log."""
    gdb = shutil.which("gdb")
    if not gdb or proc.poll() is not None:
        return ""
    try:
        r = subprocess.run([gdb, "-p", str(proc.pid), "-batch", "-nx",
                            "-ex", "set pagination off", "-ex", "thread apply all bt 25",
                            "-ex", "call (int)fflush(0)"],
                           capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (subprocess.TimeoutExpired, OSError) as e:
        return f"--- {who} (pid {proc.pid}) hung; gdb failed: {e} ---\n"
    keep = [line for line in r.stdout.splitlines()
            if re.match(r"^(Thread |#\d+ )", line)
            and not re.match(r"^#\d+\s+(0x[0-9a-f]+ in )?(std|core|alloc)::", line)]
    return (f"--- {who} (pid {proc.pid}) hung: backtraces (gdb) ---\n" + "\n".join(keep) + "\n") if keep else ""


def kill_group(proc):
    """Ends a process this script started (its own process group), returns its exit status."""
    if proc.poll() is None:
        for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
    else:
        # The leader is gone; make sure nothing it started lingers.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return proc.returncode


def shell_line(env_changes, argv):
    return " ".join([f"{k}={v}" for k, v in env_changes.items()] + argv)


# Every scenario: the drop-in vendor stubs (libmlx5.so.1, libefa.so.1) must never be called on
# the soft device, except the probes a scenario names (`stub_probes`: "is this device yours?",
# which the stub answers no); run with RDMASHIM_STUB_TRACE=1 they say so when they are.
def global_forbid(scenario):
    allowed = "".join(rf"(?!{re.escape(f)}\(\))" for f in scenario.stub_probes)
    return [("both", rf"^rdmashim: \S+ stub: {allowed}")]


def check_output(who, text, scenario):
    """Problems with `text` (the output of `who`) against the scenario's expect/forbid lines."""
    problems = []
    for item in scenario.expect:
        w, rx = item[0], item[1]
        count = item[2] if len(item) > 2 else None
        if w not in (who, "both"):
            continue
        n = len(re.findall(rx, text, re.M))
        if count is None and n == 0:
            problems.append(f"{who}: no line matching /{rx}/")
        elif count is not None and n != count:
            problems.append(f"{who}: {n} lines match /{rx}/, want {count}")
    for w, rx in scenario.forbid + global_forbid(scenario):
        if w not in (who, "both"):
            continue
        m = re.search(rx, text, re.M)
        if m:
            line = text[text.rfind("\n", 0, m.start()) + 1:].split("\n", 1)[0]
            problems.append(f"{who}: forbidden line /{rx}/: {line.strip()!r}")
    return problems


def mode_env(mode, build_dir):
    """(env, changes shown to the user, problems)."""
    env = dict(os.environ)
    env["RDMASHIM_PROVIDER"] = "soft"
    # `meson test` puts the build directories of the libraries a test depends on into
    # LD_LIBRARY_PATH (build/dropin included). Drop them: each mode sets exactly what it tests.
    real_build = os.path.realpath(build_dir) + os.sep
    kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
            if p and not (os.path.realpath(p) + os.sep).startswith(real_build)]
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("LD_PRELOAD", None)
    changes = {"RDMASHIM_PROVIDER": "soft"}
    problems = []
    if mode == "preload":
        lib = os.path.join(build_dir, "librdmashim.so")
        if not os.path.exists(lib):
            problems.append(f"{lib} does not exist (build first)")
        changes["LD_PRELOAD"] = lib
        if kept:
            env["LD_LIBRARY_PATH"] = ":".join(kept)
    else:
        d = os.path.join(build_dir, "dropin")
        for n in ("librdmacm.so.1", "libibverbs.so.1"):
            if not os.path.exists(os.path.join(d, n)):
                problems.append(f"{os.path.join(d, n)} does not exist (build first)")
        changes["LD_LIBRARY_PATH"] = ":".join([d] + kept)
        changes["RDMASHIM_STUB_TRACE"] = "1"    # a vendor stub that is called says so
    # Diagnostics asked for by the caller reach the programs in every placement.
    for k in ("RDMASHIM_NET_DEBUG", "RDMASHIM_FAULTS"):
        if k in os.environ:
            changes[k] = os.environ[k]
    env.update(changes)
    # A sanitizer build (build-asan): its runtime must be loaded first, and the programs' own
    # leaks are not ours (lsan-programs.supp says how they are told apart).
    if sanitizer_env.runtime_preload(build_dir):
        sanitizer_env.with_runtime(env, build_dir)
        changes["LD_PRELOAD"] = env["LD_PRELOAD"]
        supp = os.path.join(HERE, "lsan-programs.supp")
        env["LSAN_OPTIONS"] = f"suppressions={supp}:malloc_context_size=2:print_suppressions=0"
    return env, changes, problems


def static_load_check(binaries, mode, env, build_dir):
    problems, notes = [], []
    for prog in binaries:
        libs, out = run_pair.trace_loaded(prog, env)
        ours, system = classify(list(libs.values()), build_dir)
        name = os.path.basename(prog)
        if mode == "preload":
            if not any(os.path.basename(p).startswith("librdmashim.so") for p in ours):
                problems.append(f"{name}: LD_TRACE_LOADED_OBJECTS does not show librdmashim.so from {build_dir}")
        else:
            for soname in DROPIN_SONAMES:
                p = libs.get(soname)
                if soname == "libibverbs.so.1" and p is None:
                    problems.append(f"{name}: {soname} not among its loaded objects")
                elif p is not None and not run_pair.is_ours(p, build_dir):
                    problems.append(f"{name}: {soname} resolves to {p}, not to {build_dir}/dropin")
            if system:
                problems.append(f"{name}: system RDMA libraries would be loaded: {' '.join(system)}")
            if "not found" in out:
                problems.append(f"{name}: unresolved libraries:\n{out}")
            notes.append(f"{name}: " + ", ".join(f"{k} => {v}" for k, v in libs.items()
                                                 if run_pair.is_ours(v, build_dir)))
        if problems:
            notes.append(f"--- LD_TRACE_LOADED_OBJECTS {prog} ---\n{out}")
    return problems, notes


def runtime_load_check(loaded, mode, build_dir):
    problems, lines = [], []
    for who, paths in loaded.items():
        if not paths:
            continue
        ours, system = classify(paths, build_dir)
        lines.append(f"{who}: rdmashim: {' '.join(ours) or '-'}; system RDMA: {' '.join(system) or 'none'}")
        if mode == "dropin":
            if system:
                problems.append(f"{who}: system RDMA libraries were loaded: {' '.join(system)}")
            # (librdmacm.so.1 only where the program needs it: the static check has seen to it.)
            if not any(os.path.basename(p).startswith("libibverbs.so") for p in ours):
                problems.append(f"{who}: libibverbs.so* from {build_dir} was not loaded")
        elif not any(os.path.basename(p).startswith("librdmashim.so") for p in ours):
            problems.append(f"{who}: librdmashim.so was not loaded")
    return problems, lines


def known_failure(sc, client_out, server_out):
    """What a failed run hit that is the program's own doing (programs.py), as (what, regex),
    or None: a known race in the client's output (`rerun_on`), or a failure of the program's
    own measurement in either side's (`rerun_on_own_failure`)."""
    known = [("the client hit a known race of the program", sc.rerun_on, client_out),
             ("the program failed in a known way of its own", sc.rerun_on_own_failure,
              client_out + "\n" + server_out)]
    return next(((what, rx) for what, rx, text in known if rx and re.search(rx, text, re.M)),
                None)


def run_scenario(sc, mode, build_dir, timeout_cap=None, fixed_ports=False, place=None):
    """Runs the scenario once. Returns (status, problems, (last client output, server output));
    status is 'pass', 'fail' or 'skip'."""
    place = place or placement.Placement()
    netns = place.fx is not None
    if sc.rerun_on and sanitizer_env.runtime_preload(build_dir):
        # The known race of the program (programs.py) needs the server slower than the client;
        # under AddressSanitizer the server's set-up is slow enough that the client wins nearly
        # every time, so the pair cannot run here. The ordinary tree runs it.
        log(f"SKIP: {sc.name} hits the program's own race (rerun_on) nearly every time under "
            "a sanitizer; it runs in the ordinary tree")
        return "skip", [], ("", "")
    # Fresh namespaces have every port free: the table's ports are used there.
    port = pick_port(sc, mode, fixed_ports or netns)
    tmp = tempfile.mkdtemp(prefix=f"rdmashim-acc-{sc.name}-{mode}-")
    files = sc.prepare(tmp) if sc.prepare else {}
    server_argv = place.argv(sc, "server", port, files)
    client_argv = place.argv(sc, "client", port, files)
    binaries = []
    for argv in (server_argv, client_argv):
        path = which(argv[0])
        if not path or not os.access(path, os.X_OK):
            log(f"SKIP: {argv[0]} is not installed")
            shutil.rmtree(tmp, ignore_errors=True)
            return "skip", [], ""
        argv[0] = path
        if path not in binaries:
            binaries.append(path)
    timeout = min(sc.timeout, timeout_cap) if timeout_cap else sc.timeout

    env, changes, problems = mode_env(mode, build_dir)
    if problems:
        shutil.rmtree(tmp, ignore_errors=True)
        return "fail", problems, ("", "")
    env.update(sc.env)
    changes.update(sc.env)
    log(f"scenario {sc.name} ({sc.title}), mode {mode}" + (" across namespaces" if netns else ""))
    print(f"server: {shell_line(changes, [os.path.basename(server_argv[0])] + server_argv[1:])}")
    print(f"client: {shell_line(changes, [os.path.basename(client_argv[0])] + client_argv[1:])}")
    sys.stdout.flush()

    problems, notes = static_load_check(binaries, mode, env, build_dir)
    for n in notes:
        print(n)
    if problems:
        shutil.rmtree(tmp, ignore_errors=True)
        return "fail", problems, ("", "")

    server_out = os.path.join(tmp, "server.out")
    t0 = time.monotonic()
    def launch(which, argv, lddebug, out):
        """Starts one program: here with the mode's environment, or in its namespace with the
        mode's variables after the prefix (the Popen environment stays without them)."""
        variables = dict(changes, LD_DEBUG="libs", LD_DEBUG_OUTPUT=lddebug)
        penv = dict(env, LD_DEBUG="libs", LD_DEBUG_OUTPUT=lddebug)
        if netns:
            penv = {k: v for k, v in env.items() if k not in variables}
        return subprocess.Popen(place.popen_argv(which, argv, variables), env=penv, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)

    with open(server_out, "wb") as so:
        server = launch("server", server_argv, os.path.join(tmp, "server.lddebug"), so)
    listen_pid = server.pid if netns else None
    server_maps = None
    attempts = []          # (attempt, exit, output, seconds)
    hung_notes = []        # backtraces of programs that ran into their timeout
    server_rc = None
    server_killed = False
    try:
        # --- readiness ---------------------------------------------------------------------
        if sc.ready == "tcp":
            deadline = time.monotonic() + min(10.0, timeout)
            while time.monotonic() < deadline and server.poll() is None \
                    and not tcp_listening(port, listen_pid):
                time.sleep(0.02)
            if server.poll() is None and not tcp_listening(port, listen_pid):
                log(f"note: the server does not listen on TCP port {port} after 10 s; starting the client anyway")
        else:
            deadline = time.monotonic() + sc.ready_wait
            while time.monotonic() < deadline and server.poll() is None:
                time.sleep(0.02)
        if server.poll() is None:
            server_maps = run_pair.maps_loaded(server.pid)

        # --- client (retried while the server is not listening yet) -------------------------
        for attempt in range(1, sc.retries + 1):
            if server.poll() is not None and attempt > 1:
                break
            cl_out = os.path.join(tmp, f"client{attempt}.out")
            c0 = time.monotonic()
            with open(cl_out, "wb") as co:
                client = launch("client", client_argv,
                                os.path.join(tmp, f"client{attempt}.lddebug"), co)
                try:
                    rc = client.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                    hung_notes.append(debug_hung(client, "client"))
                    if server.poll() is None:
                        hung_notes.append(debug_hung(server, "server"))
                finally:
                    kill_group(client)
            out = run_pair.read(cl_out)
            attempts.append((attempt, rc, out, time.monotonic() - c0))
            if rc == 0 or not sc.not_ready or not re.search(sc.not_ready, out, re.M):
                break
            if server.poll() is not None or attempt == sc.retries:
                break
            log(f"client attempt {attempt} says the server is not listening yet; retrying")
            time.sleep(0.5)

        # --- server ------------------------------------------------------------------------
        client_ok = attempts and attempts[-1][1] == 0
        if sc.server_exits:
            # After a failed client the server rarely finishes; do not wait the whole timeout
            # (and hardly at all after a known race that leaves the server waiting forever).
            if client_ok:
                grace = max(1.0, timeout - (time.monotonic() - t0))
            elif sc.rerun_on and attempts and re.search(sc.rerun_on, attempts[-1][2], re.M):
                grace = 0.3
            else:
                grace = 3.0
            try:
                server_rc = server.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                server_rc = "timeout"
                if client_ok:
                    hung_notes.append(debug_hung(server, "server"))
        else:
            time.sleep(0.2)
            server_rc = server.poll()
            if server_rc is None:
                server_killed = True
    finally:
        kill_group(server)
    elapsed = time.monotonic() - t0

    # --- verdict ---------------------------------------------------------------------------
    problems = []
    srv_text = run_pair.read(server_out)
    if server_killed:
        srv_status = "still running, killed (as expected)"
    else:
        srv_status = f"exit {server_rc}"
    print(f"--- server ({' '.join(server_argv)}) {srv_status} ---")
    print(srv_text, end="" if srv_text.endswith("\n") or not srv_text else "\n")
    for attempt, rc, out, secs in attempts:
        print(f"--- client attempt {attempt} ({' '.join(client_argv)}) exit {rc}, {secs:.2f} s ---")
        print(out, end="" if out.endswith("\n") or not out else "\n")

    if not attempts:
        problems.append(f"the server ended (exit {server_rc}) before the client could start")
    else:
        rc, out = attempts[-1][1], attempts[-1][2]
        if rc != 0:
            problems.append(f"client: exit {rc}" + (f" (timeout {timeout:.0f} s)" if rc == "timeout" else ""))
        problems += check_output("client", out, sc)
    if sc.server_exits:
        if server_rc != 0:
            problems.append(f"server: exit {server_rc}")
    elif not server_killed:
        problems.append(f"server: exited by itself ({server_rc}), but it should run until killed")
    problems += check_output("server", srv_text, sc)
    if sc.check and attempts and attempts[-1][1] == 0:
        problems += sc.check(srv_text, attempts[-1][2])
    if sc.verify and attempts and attempts[-1][1] == 0:
        problems += sc.verify(files)

    loaded = {"server": run_pair.lddebug_loaded(os.path.join(tmp, "server.lddebug"))}
    if attempts:
        loaded["client"] = run_pair.lddebug_loaded(os.path.join(tmp, f"client{attempts[-1][0]}.lddebug"))
    if server_maps:
        loaded["server /proc/pid/maps"] = server_maps
    lp, lines = runtime_load_check(loaded, mode, build_dir)
    problems += lp
    for note in hung_notes:
        print(note, end="")
    print("--- loaded objects ---")
    for line in lines:
        print(line)
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"{sc.name} {mode}: {elapsed:.2f} s")
    client_text = attempts[-1][2] if attempts else ""
    return ("fail" if problems else "pass"), problems, (client_text, srv_text)


def list_scenarios(xfail):
    for sc in programs.SCENARIOS:
        status = []
        for mode in XFAIL_MODES:
            issue = xfail.get((sc.name, mode))
            status.append(f"{mode}:{'xfail(issue %d)' % issue if issue else 'pass'}")
        print(f"{sc.name:22} issue {sc.issue}  ports {sc.port_for('preload') or '-'}/{sc.port_for('dropin') or '-'}  "
              f"{' '.join(status)}")
        print(f"    server: {' '.join(sc.argv('server', sc.port_for('preload')))}")
        print(f"    client: {' '.join(sc.argv('client', sc.port_for('preload')))}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario", nargs="?", help="scenario name (see --list), or 'all'")
    ap.add_argument("mode", nargs="?", choices=MODES + ("both",))
    ap.add_argument("--build-dir", default=os.environ.get("MESON_BUILD_ROOT", "build"))
    ap.add_argument("--list", action="store_true", help="list the scenarios and exit")
    ap.add_argument("--names", action="store_true", help="print the scenario names (for meson)")
    ap.add_argument("--fixed-ports", action="store_true",
                    help="use the ports of programs.py (preload: port, dropin: port+1) instead of random free ones")
    ap.add_argument("--repeat", type=int, default=1, help="run each scenario this many times")
    ap.add_argument("--no-xfail", action="store_true", help="ignore xfail.txt: report real verdicts")
    ap.add_argument("--xfail-file", default=XFAIL_FILE, help="the expected-failure list (default: %(default)s)")
    ap.add_argument("--netns", action="store_true",
                    help="run the server and the client in two network namespaces (root)")
    ap.add_argument("--timeout-cap", type=float, default=None,
                    help="cap every program's timeout (seconds); xfail scenarios use 15 s")
    args = ap.parse_args()

    if args.names:
        print("\n".join(s.name for s in programs.SCENARIOS))
        return 0
    xfail = read_xfail(args.xfail_file)
    if args.list:
        list_scenarios(xfail)
        return 0
    if not args.scenario or not args.mode:
        ap.error("need <scenario> <mode> (or --list)")
    if args.scenario == "all":
        scenarios = programs.SCENARIOS
    else:
        sc = programs.by_name(args.scenario)
        if sc is None:
            ap.error(f"unknown scenario {args.scenario!r}; run.py --list shows them")
        scenarios = [sc]
    modes = MODES if args.mode == "both" else (args.mode,)
    build_dir = os.path.abspath(args.build_dir)

    results = []    # (scenario, mode, run, verdict)
    reruns = []     # scenarios rerun after a known race
    for sc in scenarios:
        for mode in modes:
            xmode = mode + ("-netns" if args.netns else "")
            issue = None if args.no_xfail else xfail.get((sc.name, xmode))
            cap = args.timeout_cap
            if issue is not None:
                # An expected failure often hangs; do not spend the full timeout on it.
                cap = min(cap or 15.0, 15.0)
            for n in range(1, args.repeat + 1):
                for rerun in range(sc.reruns + 1):
                    if args.netns:
                        status, problems, outs = placement.run_netns(
                            lambda place: run_scenario(sc, mode, build_dir, cap, place=place))
                    else:
                        with HostLock(sc.host_lock):
                            status, problems, outs = run_scenario(sc, mode, build_dir, cap,
                                                                  args.fixed_ports)
                    known = known_failure(sc, *outs) if status == "fail" else None
                    if known is None or rerun == sc.reruns:
                        break
                    for p in problems:
                        log(f"FAIL: {p}")
                    log(f"RERUN {sc.name} {mode}: {known[0]} (/{known[1]}/), see programs.py; "
                        "running the scenario again")
                    reruns.append(f"{sc.name} {mode}")
                for p in problems:
                    log(f"FAIL: {p}")
                tag = f"{sc.name} {xmode}" + (f" (run {n})" if args.repeat > 1 else "")
                if status == "skip":
                    verdict = "SKIP"
                elif issue is not None:
                    verdict = "XFAIL" if status == "fail" else "XPASS"
                    if verdict == "XFAIL":
                        log(f"XFAIL {tag}: fails as expected (issue {issue})")
                    else:
                        log(f"XPASS {tag}: passes, but xfail.txt says it fails (issue {issue}); "
                            "remove its line from tests/acceptance/xfail.txt")
                else:
                    verdict = "PASS" if status == "pass" else "FAIL"
                    log(f"{verdict} {tag}")
                results.append((sc.name, xmode, n, verdict))
    if len(results) > 1:
        print("\n=== summary ===")
        for name, mode, n, verdict in results:
            print(f"{verdict:6} {name} {mode}" + (f" run {n}" if args.repeat > 1 else ""))
    if reruns:
        log(f"{len(reruns)} rerun(s) after a known failure of the program itself: {', '.join(reruns)}")
    verdicts = {r[3] for r in results}
    if verdicts & {"FAIL", "XPASS"}:
        return 1
    if verdicts == {"SKIP"}:
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
