#!/usr/bin/env python3
"""Runs an RDMA CM server/client pair (by default Debian's unmodified /usr/bin/rdma_server and
/usr/bin/rdma_client) on rdmashim and checks that both succeed.

Modes:
  preload  LD_PRELOAD=<build>/librdmashim.so; the system libraries are still loaded (they are
           the programs' DT_NEEDED) but every call binds to the preloaded library.
  dropin   LD_LIBRARY_PATH=<build>/dropin; proves that the system librdmacm/libibverbs (and
           rdma-core's provider plugins) are NOT loaded: by LD_TRACE_LOADED_OBJECTS on both
           binaries, by LD_DEBUG=libs of both processes (which also sees dlopen) and by
           /proc/<pid>/maps of the running server.
  direct   no environment tricks: for programs linked against librdmashim.so itself (the
           c-tests); proves the same as dropin with librdmashim.so in place of the drop-ins.

The server starts first; the client is retried a few times while the server is not listening
yet. Both run under a timeout. RDMASHIM_PROVIDER is set to `soft` (see --provider).
Exit status: 0 pass, 1 fail, 77 skipped (a program is missing).
"""

import argparse
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SKIP = 77
RDMA_LIB_RE = re.compile(r"^lib(rdmacm|ibverbs)\.so(\.|$)")
PROVIDER_RE = re.compile(r"(^|/)libibverbs/|-rdmav\d+\.so")


class Narrator:
    def __init__(self, enabled):
        self.enabled = enabled

    def say(self, msg):
        if self.enabled:
            print(f"==> {msg}", flush=True)


def log(msg):
    print(f"run-pair: {msg}", flush=True)


def free_port(host):
    """A TCP port that is free right now on host and on the wildcard address."""
    for _ in range(50):
        port = random.randint(20000, 59999)
        ok = True
        for addr in {host, "0.0.0.0"}:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.bind((addr, port))
            except OSError:
                ok = False
            finally:
                s.close()
        if ok:
            return port
    raise RuntimeError("no free port found")


def is_ours(path, build_dir):
    real = os.path.realpath(path)
    return real.startswith(os.path.realpath(build_dir) + os.sep)


def classify(paths, build_dir):
    """Splits loaded object paths into (ours, system_rdma)."""
    ours, system = [], []
    for p in paths:
        base = os.path.basename(p)
        if is_ours(p, build_dir):
            ours.append(p)
        elif RDMA_LIB_RE.match(base) or PROVIDER_RE.search(p):
            system.append(p)
    return ours, system


def trace_loaded(binary, env):
    """`ldd`-like: DT_NEEDED resolution of binary under env, as {soname: path}."""
    e = dict(env)
    e["LD_TRACE_LOADED_OBJECTS"] = "1"
    e.pop("LD_DEBUG", None)
    r = subprocess.run([binary], env=e, capture_output=True, text=True, timeout=30)
    libs = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^\s*(\S+)\s+=>\s+(\S+)\s+\(", line)
        if m:
            libs[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^\s*(/\S+)\s+\(", line)
        if m:
            libs[os.path.basename(m.group(1))] = m.group(1)
    return libs, r.stdout + r.stderr


def lddebug_loaded(prefix):
    """Objects whose initialisers ran, from LD_DEBUG=libs output files `prefix.<pid>`."""
    paths = []
    d = os.path.dirname(prefix)
    base = os.path.basename(prefix)
    for name in sorted(os.listdir(d)):
        if not name.startswith(base + "."):
            continue
        with open(os.path.join(d, name), errors="replace") as f:
            for line in f:
                m = re.search(r"calling init: (/\S+)", line)
                if m and m.group(1) not in paths:
                    paths.append(m.group(1))
    return paths


def maps_loaded(pid):
    paths = []
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    p = parts[5].strip()
                    if p.endswith(" (deleted)"):
                        p = p[: -len(" (deleted)")]
                    if p not in paths:
                        paths.append(p)
    except OSError:
        return None
    return paths


def nm_undefined(binary, nm):
    """Undefined symbol names of binary (regular symtab, else the dynamic one)."""
    names = set()
    for args in ([nm, binary], [nm, "-D", binary]):
        r = subprocess.run(args, capture_output=True, text=True)
        for line in r.stdout.splitlines():
            m = re.match(r"^\s*(?:[0-9a-fA-F]+)?\s*U\s+(\S+)$", line)
            if m:
                names.add(m.group(1).split("@", 1)[0])
        if r.returncode == 0 and names:
            break
    return names


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def stop(proc):
    """Ends a process this script started (its own process group) if it still runs."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=["preload", "dropin", "direct"])
    ap.add_argument("--build-dir", default=os.environ.get("MESON_BUILD_ROOT", "build"))
    ap.add_argument("--server", default="/usr/bin/rdma_server")
    ap.add_argument("--client", default="/usr/bin/rdma_client")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="extra server argument (repeatable), e.g. --server-arg=-s --server-arg=127.0.0.1")
    ap.add_argument("--host", default="127.0.0.1", help="address the client connects to (-s)")
    ap.add_argument("--port", type=int, help="port (-p); default: a random free one")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds for each program")
    ap.add_argument("--retries", type=int, default=5, help="client attempts while the server is not ready")
    ap.add_argument("--expect", default=None,
                    help="line both outputs must contain (regex); default 'end 0' for Debian's programs")
    ap.add_argument("--provider", default="soft", help="RDMASHIM_PROVIDER value")
    ap.add_argument("--require-undefined", action="append", default=[], metavar="SYM",
                    help="symbol that must be undefined (nm 'U') in both binaries")
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--narrate", action="store_true", help="explain each step in plain words")
    args = ap.parse_args()
    say = Narrator(args.narrate).say

    build_dir = os.path.abspath(args.build_dir)
    for prog in (args.server, args.client):
        if not (os.path.isfile(prog) and os.access(prog, os.X_OK)):
            log(f"SKIP: {prog} is not an executable file")
            return SKIP
    expect = args.expect
    if expect is None:
        default_progs = {"/usr/bin/rdma_server", "/usr/bin/rdma_client"}
        expect = r"end 0\s*$" if {args.server, args.client} <= default_progs else None

    env = dict(os.environ)
    env["RDMASHIM_PROVIDER"] = args.provider
    # `meson test` puts the build directories of the libraries a test depends on into
    # LD_LIBRARY_PATH (build/dropin included). Drop them: each mode sets exactly what it tests.
    kept = [p for p in env.get("LD_LIBRARY_PATH", "").split(":")
            if p and not (os.path.realpath(p) + os.sep).startswith(os.path.realpath(build_dir) + os.sep)]
    if kept:
        env["LD_LIBRARY_PATH"] = ":".join(kept)
    else:
        env.pop("LD_LIBRARY_PATH", None)
    problems = []

    if args.mode == "preload":
        lib = os.path.join(build_dir, "librdmashim.so")
        if not os.path.exists(lib):
            log(f"FAIL: {lib} does not exist (build first)")
            return 1
        env["LD_PRELOAD"] = lib
        say(f"Mode preload: the programs stay unmodified; LD_PRELOAD={lib} makes every "
            "rdma_*/ibv_* call bind to rdmashim before the system libraries.")
    elif args.mode == "dropin":
        d = os.path.join(build_dir, "dropin")
        for n in ("librdmacm.so.1", "libibverbs.so.1"):
            if not os.path.exists(os.path.join(d, n)):
                log(f"FAIL: {os.path.join(d, n)} does not exist (build first)")
                return 1
        env["LD_LIBRARY_PATH"] = d + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        env.pop("LD_PRELOAD", None)
        say(f"Mode dropin: LD_LIBRARY_PATH={d} replaces librdmacm.so.1 and libibverbs.so.1 "
            "with rdmashim's; the system ones must not be loaded at all.")
    else:
        env.pop("LD_PRELOAD", None)
        say("Mode direct: the programs are linked against librdmashim.so itself.")
    # A sanitizer build (build-asan): its runtime must be loaded first.
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
    import sanitizer_env
    sanitizer_env.with_runtime(env, build_dir)

    # --- symbol check (c-tests) -----------------------------------------------------------
    for prog in (args.server, args.client):
        if args.require_undefined:
            und = nm_undefined(prog, args.nm)
            missing = [s for s in args.require_undefined if s not in und]
            if missing:
                problems.append(f"{prog}: not undefined (nm 'U') in the binary: {' '.join(missing)}"
                                " (inlined from a header instead of calling the library?)")
            else:
                say(f"{os.path.basename(prog)} calls {', '.join(args.require_undefined)} "
                    "through the library (undefined in the binary), not inlined.")

    # --- static load check -------------------------------------------------------------------
    trace_out = {}
    for prog in (args.server, args.client):
        libs, out = trace_loaded(prog, env)
        trace_out[prog] = out
        paths = list(libs.values())
        ours, system = classify(paths, build_dir)
        name = os.path.basename(prog)
        if args.mode == "preload":
            if not any(os.path.basename(p).startswith("librdmashim.so") for p in ours):
                problems.append(f"{name}: LD_TRACE_LOADED_OBJECTS does not show librdmashim.so from {build_dir}")
        elif args.mode == "dropin":
            for soname in ("librdmacm.so.1", "libibverbs.so.1"):
                p = libs.get(soname)
                if p is None:
                    problems.append(f"{name}: {soname} not among its loaded objects")
                elif not is_ours(p, build_dir):
                    problems.append(f"{name}: {soname} resolves to {p}, not to {build_dir}/dropin")
            if system:
                problems.append(f"{name}: system RDMA libraries would be loaded: {' '.join(system)}")
        else:
            if not any(os.path.basename(p).startswith("librdmashim.so") for p in ours):
                problems.append(f"{name}: not linked against librdmashim.so from {build_dir}")
            if system:
                problems.append(f"{name}: system RDMA libraries would be loaded: {' '.join(system)}")
        if args.mode != "preload" and not problems:
            say(f"{name} resolves its libraries to: "
                + ", ".join(f"{k} => {v}" for k, v in libs.items() if is_ours(v, build_dir)))

    if problems:
        for p in problems:
            log(f"FAIL: {p}")
        for prog, out in trace_out.items():
            print(f"--- LD_TRACE_LOADED_OBJECTS {prog} ---\n{out}", end="")
        return 1

    # --- run the pair ------------------------------------------------------------------------
    port = args.port or free_port(args.host)
    tmp = tempfile.mkdtemp(prefix="rdmashim-pair-")
    server_log = os.path.join(tmp, "server.out")
    srv_env = dict(env, LD_DEBUG="libs", LD_DEBUG_OUTPUT=os.path.join(tmp, "server.lddebug"))
    server_cmd = [args.server, "-p", str(port)] + args.server_arg
    say(f"Starting the server: {' '.join(server_cmd)} (RDMASHIM_PROVIDER={args.provider})")
    log("server: " + " ".join(server_cmd))
    with open(server_log, "wb") as so:
        server = subprocess.Popen(server_cmd, env=srv_env, stdout=so, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    server_maps = None
    client_runs = []
    server_rc = None
    try:
        # Give the server a moment to load and listen, and look at what it has mapped.
        time.sleep(0.5)
        server_maps = maps_loaded(server.pid)

        client_cmd = [args.client, "-s", args.host, "-p", str(port)]
        for attempt in range(1, args.retries + 1):
            remaining = args.timeout - (time.monotonic() - t0)
            if remaining <= 1:
                break
            say(f"Starting the client (attempt {attempt}): {' '.join(client_cmd)}")
            log(f"client attempt {attempt}: " + " ".join(client_cmd))
            cl_env = dict(env, LD_DEBUG="libs",
                          LD_DEBUG_OUTPUT=os.path.join(tmp, f"client{attempt}.lddebug"))
            try:
                r = subprocess.run(client_cmd, env=cl_env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   timeout=min(args.timeout, remaining))
                rc, out = r.returncode, r.stdout.decode(errors="replace")
            except subprocess.TimeoutExpired as e:
                rc = "timeout"
                out = (e.stdout or b"").decode(errors="replace")
            client_runs.append((attempt, rc, out))
            ok = rc == 0 and (expect is None or re.search(expect, out, re.M))
            if ok:
                break
            if server.poll() is not None:
                break  # the server gave up; retrying cannot help
            if attempt < args.retries:
                say("The client failed; the server may not be listening yet, retrying in a second.")
                time.sleep(1.0)

        remaining = max(1.0, args.timeout - (time.monotonic() - t0))
        try:
            server_rc = server.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            server_rc = "timeout"
    finally:
        stop(server)
    server_out = read(server_log)

    # --- verdict -----------------------------------------------------------------------------
    last = client_runs[-1] if client_runs else (0, "not run", "")
    client_ok = last[1] == 0 and (expect is None or re.search(expect, last[2], re.M))
    server_ok = server_rc == 0 and (expect is None or re.search(expect, server_out, re.M))
    if not client_ok:
        problems.append(f"client failed (exit {last[1]}" + (f", no line matching '{expect}')" if expect else ")"))
    if not server_ok:
        problems.append(f"server failed (exit {server_rc}" + (f", no line matching '{expect}')" if expect else ")"))

    # Runtime proof of which libraries were loaded (including anything dlopen()ed).
    loaded = {"server": lddebug_loaded(os.path.join(tmp, "server.lddebug"))}
    if client_runs:
        loaded["client"] = lddebug_loaded(os.path.join(tmp, f"client{last[0]}.lddebug"))
    if server_maps:
        loaded["server /proc/pid/maps"] = server_maps
    else:
        log("note: the server exited before its /proc/<pid>/maps could be read")
    for who, paths in loaded.items():
        ours, system = classify(paths, build_dir)
        if args.mode in ("dropin", "direct"):
            if system:
                problems.append(f"{who}: system RDMA libraries were loaded: {' '.join(system)}")
            want = ["librdmacm.so", "libibverbs.so"] if args.mode == "dropin" else ["librdmashim.so"]
            for w in want:
                if paths and not any(os.path.basename(p).startswith(w) for p in ours):
                    problems.append(f"{who}: {w}* from {build_dir} was not loaded")
        elif args.mode == "preload" and paths:
            if not any(os.path.basename(p).startswith("librdmashim.so") for p in ours):
                problems.append(f"{who}: librdmashim.so was not loaded")

    shutil.rmtree(tmp, ignore_errors=True)

    print(f"--- server ({' '.join(server_cmd)}) exit {server_rc} ---")
    print(server_out, end="" if server_out.endswith("\n") or not server_out else "\n")
    for attempt, rc, out in client_runs:
        print(f"--- client attempt {attempt} exit {rc} ---")
        print(out, end="" if out.endswith("\n") or not out else "\n")
    print("--- loaded objects ---")
    for who, paths in loaded.items():
        ours, system = classify(paths, build_dir)
        print(f"{who}: rdmashim: {' '.join(ours) or '-'}; system RDMA: {' '.join(system) or 'none'}")

    if problems:
        for p in problems:
            log(f"FAIL: {p}")
        say("Something went wrong; the outputs above say what.")
        return 1
    say(f"Both programs finished successfully on rdmashim ({args.mode} mode): the client connected "
        "to the server, they exchanged a message over the software RDMA provider, and both "
        "reported 'end 0'." if expect else
        f"Both programs finished successfully on rdmashim ({args.mode} mode).")
    log(f"PASS ({args.mode}, port {port})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
