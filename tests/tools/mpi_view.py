#!/usr/bin/env python3
"""Open MPI over the soft device through `rdmashim run` (issue 12, the Open MPI acceptance
item), with Debian's unmodified openmpi-bin (4.1.4, which runs over UCX) and netpipe-openmpi:
two-rank jobs on one host (`mpirun -np 2 --mca pml ucx --mca osc ucx`, the shared-memory and TCP
BTLs switched off), in preload and drop-in mode, over UCX_TLS=rc_verbs,ud_verbs,self and over
UCX_TLS=ud_verbs,self:

1. NPopenmpi (MPI_Send/MPI_Recv) with NetPIPE's integrity check: -i fills every message with
   0, 1, 2, ... and the receiver exits -1 at the first wrong word; -I gives each side distinct
   send and receive buffers, so what a rank checks is memory only the network wrote;
2. NPopenmpi2 (MPI-2 one-sided) with MPI_Put and the integrity check (-i), and with MPI_Get
   (-g), which NetPIPE cannot check: its get mode reads the peer's buffer before the peer has
   written the pattern, and fails `-g -i` with the initial 'aaaa' on shared memory as well;
3. every run exits 0 and reaches its last message size; UCX's own log (UCX_LOG_LEVEL=info,
   `ep_cfg[N]: tag(rc_verbs/soft0:1)`, `rma(rc_verbs/soft0:1)`) shows each rank's endpoint to
   its peer on rc_verbs/soft0:1 or ud_verbs/soft0:1 only, for tags and (NPopenmpi2) for RMA,
   and no lane anywhere on posix, sysv, cma, knem, xpmem or tcp;
4. drop-in: the ranks load our libibverbs/librdmacm/libmlx5 stubs, no system one;
5. with `--device-view interpose` (the view where no mount namespace can be made), NPopenmpi
   with the integrity check passes in both modes: mpirun's ranks see the device through
   librdmashim-view.so as well.

Debian's NPopenmpi2 passes NULL for MPI_INFO_NULL to MPI_Win_create, which Open MPI refuses
(MPI_ERR_INFO) with or without rdmashim; tests/tools/mpi_info_null.c, compiled here and
preloaded, passes MPI_INFO_NULL instead (see that file).

Usage: mpi_view.py --build-dir BUILD
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

failures = []
HERE = os.path.dirname(os.path.abspath(__file__))
ALLOWED = ("rc_verbs/soft0:1", "ud_verbs/soft0:1", "self/memory0")
TMP = None  # this run's temporary directory


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def clean_env(**extra):
    env = dict(os.environ)
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "RDMASHIM_PROVIDER"):
        env.pop(k, None)
    # Open MPI refuses to start as root without both.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.update(extra)
    return env


def descendants(pid):
    children = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(d))
        except (ValueError, OSError, IndexError):
            pass
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def run(cmd, env, timeout, cwd=None):
    """(exit status or None on timeout, output). On timeout the whole tree goes: mpirun's ranks
    are not necessarily in its process group."""
    # cwd: NetPIPE writes its np.out into the working directory.
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True, cwd=cwd)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out
    except subprocess.TimeoutExpired:
        for pid in descendants(p.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        out, _ = p.communicate()
        return None, out


def mpirun(tool, mode, tls, prog, args, env, logs=None, view="auto"):
    """mpirun's exit status and output; with logs (a directory), each rank's UCX log goes to a
    file of its own there: in mpirun's output the two ranks' lines can interleave."""
    log = ["-x", f"UCX_LOG_FILE={logs}/ucx.%p.log"] if logs else []
    cmd = [tool, "run", "--mode", mode, "--device-view", view, "--", "mpirun", "--allow-run-as-root", "--oversubscribe",
           "-np", "2", "--mca", "pml", "ucx", "--mca", "osc", "ucx",
           "--mca", "btl", "^openib,vader,tcp",
           "-x", f"UCX_TLS={tls}", "-x", "UCX_LOG_LEVEL=info", *log, prog, *args]
    return run(cmd, env, 300, cwd=TMP)


def peer_lanes(logs):
    """{rank's log: [(kind, [lanes])]} of the endpoints UCX made to another worker. An endpoint
    with a self/ lane is a rank's endpoint to itself (self reaches only its own worker); and
    all lanes seen, for the check that nothing else appears."""
    peers, every = {}, set()
    for name in sorted(os.listdir(logs)):
        with open(os.path.join(logs, name), errors="replace") as f:
            text = f.read()
        for cfg in re.findall(r"ucp_worker\.c:\d+\s+UCX\s+INFO\s+ep_cfg\[\d+\]: (.*)", text):
            groups = [(k, v.split()) for k, v in re.findall(r"(\w+)\(([^)]*)\)", cfg)]
            lanes = [l for _, ls in groups for l in ls]
            every.update(lanes)
            if not any(l.startswith("self/") for l in lanes):
                peers.setdefault(name, []).extend(groups)
    return peers, every


def netpipe(tool, mode, tls, prog, args, last, env, rma=False, integrity=False, view="auto"):
    what = f"{prog} {' '.join(args)} over UCX_TLS={tls} ({mode}, device view {view})"
    logs = tempfile.mkdtemp(prefix="ucx-logs-", dir=TMP)
    rc, out = mpirun(tool, mode, tls, prog, args, env, logs, view)
    sizes = [int(s) for s in re.findall(r"^\s*\d+:\s+(\d+) bytes", out, re.M)]
    check(rc == 0 and sizes and sizes[-1] == last,
          f"{what}: exits 0 after its last size, {last} bytes "
          f"({'timed out' if rc is None else f'exit {rc}'}, last {sizes[-1:] or 'none'})")
    if integrity:
        passed = len(re.findall(r"Integrity check passed", out))
        check(passed == len(sizes) and "Integrity check failed" not in out,
              f"{what}: NetPIPE's integrity check passed at every size ({passed}/{len(sizes)})")
    peers, every = peer_lanes(logs)
    tl = tls.split(",")[0]
    kinds = ("tag", "rma") if rma else ("tag",)
    on_soft = len(peers) == 2 and all(
        any(k.startswith(kind) and ls and all(l == f"{tl}/soft0:1" or l == "ud_verbs/soft0:1"
                                              for l in ls) for k, ls in groups)
        for groups in peers.values() for kind in kinds)
    stray = sorted(l for l in every if l not in ALLOWED)
    shown = sorted({f"{k}({' '.join(ls)})" for g in peers.values() for k, ls in g})
    check(on_soft and not stray,
          f"{what}: both ranks' endpoints to their peer are on {tl}/soft0:1 "
          f"({'/'.join(kinds)}: {shown}; other lanes: {stray or 'none'})")
    if rc != 0 or not on_soft or stray:
        print(out[-3000:])
        print(f"UCX's endpoints per rank: {peers}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    tool = os.path.join(os.path.abspath(a.build_dir), "rdmashim")
    for prog, pkg in (("mpirun", "openmpi-bin"), ("NPopenmpi", "netpipe-openmpi"),
                      ("NPopenmpi2", "netpipe-openmpi")):
        if not shutil.which(prog):
            print(f"SKIP: {prog} is not installed (Debian: {pkg})")
            return 77
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        print("SKIP: no C compiler for tests/tools/mpi_info_null.c (Debian: gcc)")
        return 77
    probe = subprocess.run([tool, "run", "--", "true"], env=clean_env(), capture_output=True,
                           text=True, timeout=60)
    if "running without the device view" in probe.stderr:
        # UCX finds devices in sysfs only: without the view there is nothing to run over.
        print("SKIP: this machine gives no device view: " + probe.stderr.strip())
        return 77
    if "device view by interposition" in probe.stderr:
        print("note: no mount namespace here: every run has the interposed view")
    global TMP
    tmp = TMP = tempfile.mkdtemp(prefix="rdmashim-mpi-")
    try:
        fix = os.path.join(tmp, "mpi_info_null.so")
        subprocess.run([cc, "-shared", "-fPIC", "-o", fix, os.path.join(HERE, "mpi_info_null.c"),
                        "-ldl"], check=True, timeout=120)
        # `rdmashim run` puts librdmashim.so in front of an LD_PRELOAD it is given.
        env = clean_env(LD_PRELOAD=fix)
        for mode in ("preload", "dropin"):
            for tls in ("rc_verbs,ud_verbs,self", "ud_verbs,self"):
                # UD is slow on the same host (docs/ACCEPTANCE.md, UCX): smaller one-sided runs.
                big = 1 << 20 if tls.startswith("rc") else 1 << 18
                # With -i the sizes are 5, 7, 9, 13, ..., 2^k + 1, 1.5 * 2^k + 1: u = 2^k + 1 is one.
                last = (1 << 20) + 1
                netpipe(tool, mode, tls, "NPopenmpi", ["-i", "-I", "-n", "20", "-u", str(last)],
                        last, env, integrity=True)
                netpipe(tool, mode, tls, "NPopenmpi2", ["-i", "-n", "20", "-u", str(big + 1)],
                        big + 1, env, rma=True, integrity=True)
                # Without -i NetPIPE adds +-3 bytes around each size: the last is u + 3.
                netpipe(tool, mode, tls, "NPopenmpi2", ["-g", "-n", "20", "-u", str(big)],
                        big + 3, env, rma=True)
            # The ranks (mpirun's children) see the device through librdmashim-view.so too.
            netpipe(tool, mode, "rc_verbs,ud_verbs,self", "NPopenmpi",
                    ["-i", "-I", "-n", "20", "-u", str((1 << 16) + 1)], (1 << 16) + 1, env,
                    integrity=True, view="interpose")
            if mode == "dropin":
                # The loader's own account of what the ranks (and UCX's libuct_ib) loaded.
                rc, out = mpirun(tool, mode, "rc_verbs,ud_verbs,self", "NPopenmpi",
                                 ["-n", "5", "-u", "1024"], clean_env(LD_DEBUG="files"))
                inits = re.findall(r"calling init: (\S*lib(?:ibverbs|rdmacm|mlx5)\.so\S*)", out)
                ours = os.path.join(os.path.dirname(tool), "dropin") + "/"
                check(rc == 0 and len(inits) >= 2 and all(p.startswith(ours) for p in inits),
                      f"drop-in: the ranks load our libibverbs/librdmacm/libmlx5 stubs, "
                      f"no system one ({sorted(set(inits))})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
