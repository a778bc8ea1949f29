#!/usr/bin/env python3
"""The `rdmashim` command (issue 12, deliverable 2), checked against Debian's own tools:

1. every subcommand answers --help (exit 0, its usage), and bad use exits 2 with the usage;
2. `rdmashim devinfo` prints exactly what Debian's `ibv_devinfo -v` prints for the soft device
   under LD_PRELOAD, and what it prints in drop-in mode through `rdmashim run --mode dropin`;
3. `rdmashim doctor` exits 0 here, every line starts with ok/note/problem, and it names the
   library, the loopback GID ::ffff:127.0.0.1 on lo (index 0) and each check;
4. `rdmashim run` in preload and drop-in modes: Debian's unmodified rdma_server/rdma_client
   pair ends with "end 0" on both sides; `ibv_devinfo -l` lists soft0; the program's exit
   status (7, or 128+signal as the shell shows a signal) comes back; a missing program gives
   127; --faults and --provider reach the program's environment.

Usage: rdmashim_cmd.py --build-dir BUILD
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def clean_env():
    env = dict(os.environ)
    # meson puts build directories on LD_LIBRARY_PATH; each mode sets its own.
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "RDMASHIM_PROVIDER", "RDMASHIM_FAULTS"):
        env.pop(k, None)
    return env


def run(cmd, env=None, timeout=60):
    return subprocess.run(cmd, env=env or clean_env(), capture_output=True, text=True,
                          timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def helps(tool):
    for sub in ([], ["run"], ["devinfo"], ["doctor"]):
        r = run([tool] + sub + ["--help"])
        check(r.returncode == 0 and "usage: rdmashim" in r.stdout,
              f"rdmashim {' '.join(sub + ['--help'])} prints its usage")
    r = run([tool, "frobnicate"])
    check(r.returncode == 2 and "unknown command" in r.stderr, "an unknown command exits 2")
    r = run([tool, "run", "--mode", "sideways", "--", "true"])
    check(r.returncode == 2 and "--mode must be" in r.stderr, "a bad --mode exits 2")
    r = run([tool])
    check(r.returncode == 2 and "usage" in r.stderr, "no command exits 2 with the usage")


def devinfo(tool, build):
    ours = run([tool, "devinfo"])
    check(ours.returncode == 0 and ours.stdout.startswith("hca_id:\tsoft0\n"),
          "rdmashim devinfo describes soft0")
    env = clean_env()
    env["LD_PRELOAD"] = os.path.join(build, "librdmashim.so")
    ref = run(["ibv_devinfo", "-v"], env=env)
    check(ref.returncode == 0 and ref.stdout == ours.stdout,
          "rdmashim devinfo is ibv_devinfo -v (preload), line for line")
    if ref.stdout != ours.stdout:
        import difflib
        sys.stdout.writelines(difflib.unified_diff(ref.stdout.splitlines(True),
                                                   ours.stdout.splitlines(True),
                                                   "ibv_devinfo -v", "rdmashim devinfo"))
    drop = run([tool, "run", "--mode", "dropin", "--", "ibv_devinfo", "-v"])
    check(drop.returncode == 0 and drop.stdout == ours.stdout,
          "rdmashim devinfo is ibv_devinfo -v through rdmashim run --mode dropin")


def doctor(tool):
    r = run([tool, "doctor"])
    lines = r.stdout.splitlines()
    check(r.returncode == 0, f"rdmashim doctor exits 0 (got {r.returncode})")
    body = lines[:-1]
    check(all(l.split(" ", 1)[0] in ("ok", "note", "problem") for l in body) and body,
          "every doctor line starts with ok, note or problem")
    for topic in ("library:", "provider:", "shared memory:", "abstract unix sockets:",
                  "ptrace rules", "memlock limit:", "user namespaces:", "UDP port 4791"):
        check(any(topic in l for l in body), f"doctor reports {topic.rstrip(':')}")
    check(any(l.startswith("ok       GID[0] ::ffff:127.0.0.1:") and " on lo " in l for l in body),
          "doctor names GID[0] ::ffff:127.0.0.1 on lo")
    print(r.stdout)


def pair(tool, mode):
    port = str(free_port())
    server = subprocess.Popen([tool, "run", "--mode", mode, "--", "rdma_server", "-p", port],
                              env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        client = None
        for _ in range(50):
            client = run([tool, "run", "--mode", mode, "--", "rdma_client", "-s", "127.0.0.1",
                          "-p", port], timeout=30)
            if "end 0" in client.stdout or server.poll() is not None:
                break
            # The server may not listen yet: rdma_client then fails to resolve a route.
            import time
            time.sleep(0.1)
        out, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    check(client is not None and client.returncode == 0 and "end 0" in client.stdout,
          f"rdma_client through rdmashim run --mode {mode} ends with 'end 0'")
    check(server.returncode == 0 and "end 0" in out,
          f"rdma_server through rdmashim run --mode {mode} ends with 'end 0'")


def runs(tool):
    for mode in ("preload", "dropin"):
        r = run([tool, "run", "--mode", mode, "--", "ibv_devinfo", "-l"])
        check(r.returncode == 0 and "soft0" in r.stdout, f"ibv_devinfo -l lists soft0 ({mode})")
        pair(tool, mode)
    r = run([tool, "run", "--", "sh", "-c", "exit 7"])
    check(r.returncode == 7, f"the program's exit status comes back (7, got {r.returncode})")
    r = run([tool, "run", "--", "sh", "-c", "kill -TERM $$"])
    check(r.returncode == -15, f"a program killed by SIGTERM is seen so (got {r.returncode})")
    r = run([tool, "run", "--", "/nonexistent/program"])
    check(r.returncode == 127, f"a missing program gives 127 (got {r.returncode})")
    r = run([tool, "run", "--faults", "drop=0.5", "--provider", "soft", "--", "sh", "-c",
             'echo "$RDMASHIM_FAULTS $RDMASHIM_PROVIDER $LD_PRELOAD"'])
    check(r.stdout.startswith("drop=0.5 soft /") and "librdmashim.so" in r.stdout,
          "--faults, --provider and the preload reach the program")
    r = run([tool, "run", "--provider", "bogus", "--", "ibv_devinfo", "-l"])
    check("soft0" not in r.stdout and "no RDMA devices" in r.stderr + r.stdout,
          "--provider bogus leaves the program with no device, and says so")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    tool = os.path.join(build, "rdmashim")
    if not os.path.exists(tool):
        print(f"FAIL: {tool} was not built")
        return 1
    for prog in ("ibv_devinfo", "rdma_server", "rdma_client"):
        if not shutil.which(prog):
            print(f"SKIP: {prog} is not installed (ibverbs-utils, rdmacm-utils)")
            return 77
    helps(tool)
    devinfo(tool, build)
    doctor(tool)
    runs(tool)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
