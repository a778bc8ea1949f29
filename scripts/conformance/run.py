#!/usr/bin/env python3
"""Runs one man-page conformance program (c-tests/conformance/<page>.c) in one loading mode and
judges it.

  run.py --mode MODE --build-dir DIR --page PAGE --binary EXE --source SRC [--port N]

Modes (the program is the same C file built two ways, see c-tests/conformance/meson.build):
  relink   built against include/ (our rdma_verbs.h) and linked to librdmashim.so: run as is.
  asan     the relink build with -fsanitize=address,undefined.
  preload  built against the system headers and -lrdmacm -libverbs; run with
           LD_PRELOAD=<build>/librdmashim.so on top of the system rdma-core.
  dropin   the same binary, run with LD_LIBRARY_PATH=<build>/dropin (no system rdma-core).
  native   the same binary on the system rdma-core itself: only where the host has an RDMA
           device (/sys/class/infiniband); elsewhere SKIPPED (exit 77), never passed.

`meson test` puts the build directories into LD_LIBRARY_PATH; they are removed first, so each
mode loads exactly what it claims (the program prints "# map"/"# bind" notes, checked here).

Verdict: the program's own exit status (1 on FAIL or XPASS), plus: every clause id the source
declares (CLAUSE("ID", ...)) must have been reported, the loading mode must be proven, and in
asan mode the sanitizers must be silent. The output is also saved to
<build>/conformance-results/<page>.<mode>.txt for the summary (conf-summary).
Exit status: 0 pass, 1 fail, 77 skipped.
"""

import argparse
import fcntl
import glob
import os
import random
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftable  # noqa: E402

SKIP = 77
LINE_RE = re.compile(r"^(PASS|FAIL|XFAIL|XPASS) (\S+) ([^\s:]+)")


def log(msg):
    print(f"run.py: {msg}", flush=True)


def strip_build_paths(value, build_dir):
    real = os.path.realpath(build_dir) + os.sep
    kept = [p for p in value.split(":") if p and not (os.path.realpath(p) + os.sep).startswith(real)]
    return ":".join(kept)


def ensure_built(binary, sources, build_dir):
    """Builds the program if it is missing or older than its sources (conf-build normally did it).
    ninja runs under a lock so that parallel tests never run two ninjas in one build tree."""
    def stale():
        if not os.path.exists(binary):
            return True
        mtime = os.path.getmtime(binary)
        return any(os.path.exists(s) and os.path.getmtime(s) > mtime for s in sources)

    if not stale():
        return True
    lock_path = os.path.join(build_dir, "conformance-results", ".ninja.lock")
    os.makedirs(os.path.dirname(lock_path), exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stale():
            return True
        target = os.path.relpath(binary, build_dir)
        r = subprocess.run(["ninja", "-C", build_dir, target], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            print(r.stdout, end="")
            log(f"FAIL: building {target} failed (the other pages are not affected)")
            return False
    return True


def ports_in_use():
    """RDMA CM ports held right now by rdmashim processes on this host (their rendezvous
    sockets are abstract unix sockets named rdmashim/cm/<ps>/<port>/<ip>)."""
    used = set()
    try:
        with open("/proc/net/unix") as f:
            for line in f:
                m = re.search(r"rdmashim/cm/[0-9a-f]+/(\d+)/", line)
                if m:
                    used.add(int(m.group(1)))
    except OSError:
        pass
    return used


def free_base(base):
    """base if none of its 32 ports is held by another process, else a free base elsewhere."""
    used = ports_in_use()
    if not base or not any(p in used for p in range(base, base + 32)):
        return base
    for _ in range(100):
        b = random.randrange(20000, 32000 - 32, 32)
        if not any(p in used for p in range(b, b + 32)):
            log(f"ports {base}..{base + 31} are in use on this host; this run uses {b}..{b + 31}")
            return b
    return base


def has_rdma_device():
    return bool(glob.glob("/sys/class/infiniband/*"))


def check_loading(mode, notes, build_dir):
    """Problems with the '# map' / '# bind' notes for this mode (empty list: proven)."""
    build = os.path.realpath(build_dir) + os.sep
    maps = [n[len("map "):] for n in notes if n.startswith("map ")]
    binds = dict(n[len("bind "):].split(" ", 1) for n in notes if n.startswith("bind ") and " " in n[5:])

    def ours(p):
        return os.path.realpath(p).startswith(build)

    system = [p for p in maps if not ours(p) and re.search(r"/lib(rdmacm|ibverbs)\.so", p)]
    shim = [p for p in maps if ours(p) and "librdmashim.so" in p]
    dropin = [p for p in maps if ours(p) and re.search(r"/dropin/lib(rdmacm|ibverbs)\.so", p)]
    problems = []
    if not binds:
        problems.append("the program printed no '# bind' notes")
        return problems
    if mode in ("relink", "asan"):
        if not shim:
            problems.append("librdmashim.so from the build directory is not mapped")
        if system:
            problems.append("system RDMA libraries are mapped: " + " ".join(system))
        for fn, path in binds.items():
            if "librdmashim.so" not in path:
                problems.append(f"{fn} binds to {path}, not librdmashim.so")
    elif mode == "preload":
        if not shim:
            problems.append("the preloaded librdmashim.so is not mapped")
        if not system:
            problems.append("the system librdmacm/libibverbs are not mapped underneath (not a real preload run?)")
        for fn, path in binds.items():
            if "librdmashim.so" not in path:
                problems.append(f"{fn} binds to {path}, not to the preloaded librdmashim.so")
    elif mode == "dropin":
        if system:
            problems.append("system RDMA libraries are mapped: " + " ".join(system))
        if not dropin:
            problems.append("the drop-in libraries from <build>/dropin are not mapped")
        for fn, path in binds.items():
            if not ours(path) or "/dropin/" not in path:
                problems.append(f"{fn} binds to {path}, not to <build>/dropin")
    elif mode == "native":
        if shim or dropin:
            problems.append("rdmashim libraries are mapped in native mode")
        for fn, path in binds.items():
            if ours(path):
                problems.append(f"{fn} binds to {path}, not to the system rdma-core")
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mode", required=True, choices=["relink", "asan", "preload", "dropin", "native"])
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--page", required=True)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--dep", action="append", default=[], help="other sources the binary depends on")
    ap.add_argument("--xfail", required=True)
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=20, help="seconds (the program's own alarm)")
    args = ap.parse_args()

    build_dir = os.path.abspath(args.build_dir)
    results = os.path.join(build_dir, "conformance-results")
    os.makedirs(results, exist_ok=True)
    result_file = os.path.join(results, f"{args.page}.{args.mode}.txt")

    def save(text, verdict):
        with open(result_file, "w", encoding="utf-8") as f:
            f.write(text)
            f.write(f"#verdict {verdict}\n")

    if args.mode == "native" and not has_rdma_device():
        msg = "SKIP: no RDMA device on this host (/sys/class/infiniband is empty); native rdma-core mode not run"
        log(msg)
        save(f"# {msg}\n", "skip")
        return SKIP

    if not ensure_built(args.binary, [args.source] + args.dep, build_dir):
        save("# build failed\n", "fail")
        return 1

    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = strip_build_paths(env.get("LD_LIBRARY_PATH", ""), build_dir)
    env.pop("LD_PRELOAD", None)
    env["CONF_MODE"] = args.mode
    env["CONF_XFAIL"] = os.path.abspath(args.xfail)
    env["CONF_TIMEOUT"] = str(args.timeout)
    if args.port:
        env["CONF_PORT"] = str(free_base(args.port) if args.mode != "native" else args.port)
    if args.mode == "native":
        env.pop("RDMASHIM_PROVIDER", None)
    else:
        env["RDMASHIM_PROVIDER"] = "soft"
    if args.mode == "preload":
        env["LD_PRELOAD"] = os.path.join(build_dir, "librdmashim.so")
    elif args.mode == "dropin":
        d = os.path.join(build_dir, "dropin")
        env["LD_LIBRARY_PATH"] = d + (":" + env["LD_LIBRARY_PATH"] if env["LD_LIBRARY_PATH"] else "")
    elif args.mode == "asan":
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:exitcode=86:detect_odr_violation=0"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1:exitcode=87"
    if not env["LD_LIBRARY_PATH"]:
        env.pop("LD_LIBRARY_PATH")

    def run_once():
        try:
            r = subprocess.run([args.binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               stdin=subprocess.DEVNULL, timeout=args.timeout + 10)
            return r.returncode, r.stdout.decode(errors="replace"), r.stderr.decode(errors="replace")
        except subprocess.TimeoutExpired as e:
            return ("timeout", (e.stdout or b"").decode(errors="replace"),
                    (e.stderr or b"").decode(errors="replace"))

    rc, out, err = run_once()
    if rc not in (0, SKIP) and any(l.startswith("FAIL ") and "EADDRINUSE" in l for l in out.splitlines()):
        # Something else on the host (another checkout's suite, a program with a random port)
        # holds one of the page's ports: once more, on another range.
        base = random.randrange(20000, 32000 - 32, 32)
        log(f"a port of the range {args.port or '(default)'} was in use; running again on ports {base}..{base + 31}")
        env["CONF_PORT"] = str(base)
        rc, out, err = run_once()

    print(out, end="" if out.endswith("\n") or not out else "\n")
    if err:
        print("--- stderr ---")
        print(err, end="" if err.endswith("\n") else "\n")

    if rc == SKIP:
        log(f"SKIP {args.page} [{args.mode}]: the program skipped itself (see its '# SKIP' note)")
        save(out, "skip")
        return SKIP
    problems = []
    if rc != 0:
        problems.append(f"the program exited with {rc}"
                        + (" (FAIL or XPASS lines above)" if rc == 1 else ""))
    notes = [l[2:] for l in out.splitlines() if l.startswith("# ")]
    problems += check_loading(args.mode, notes, build_dir)
    reported = {m.group(3) for m in map(LINE_RE.match, out.splitlines()) if m}
    declared = conftable.declared_clauses(args.source)
    missing = [c for c in declared if c not in reported]
    if missing:
        problems.append("clauses declared in the source but never reported: " + " ".join(missing))
    undeclared = sorted(c for c in reported if c not in declared)
    if undeclared:
        problems.append("clauses reported but not declared in the source (so without a table row): "
                        + " ".join(undeclared))
    if args.mode == "asan" and re.search(r"ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer", err):
        problems.append("the sanitizers reported errors (stderr above)")

    extra = "".join(f"#problem {p}\n" for p in problems)
    save(out + extra, "fail" if problems else "pass")
    counts = {}
    for line in out.splitlines():
        m = LINE_RE.match(line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    summary = ", ".join(f"{counts.get(k, 0)} {k}" for k in ("PASS", "XFAIL", "FAIL", "XPASS"))
    if problems:
        for p in problems:
            log(f"FAIL: {p}")
        log(f"{args.page} [{args.mode}]: {summary}")
        return 1
    log(f"PASS {args.page} [{args.mode}]: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
