#!/usr/bin/env python3
"""Passthrough to the system's rdma-core (issue 12, deliverable 5), with no RDMA hardware here:
RDMASHIM_NATIVE_LIBDIR points rdmashim's native provider at <build>/dropin, a second copy of our
own libibverbs.so.1 and librdmacm.so.1, which stands in for the system libraries. rdmashim loads
it with dlmopen (its own namespace), so every call the program makes is forwarded to the copy,
which runs the soft provider itself.

In preload mode (LD_PRELOAD=<build>/librdmashim.so) and drop-in mode
(LD_LIBRARY_PATH=<build>/dropin):

1. c-tests/native_forward.c with RDMASHIM_PROVIDER=native: the objects are the stand-in's (the
   ops the program's inlined calls jump through lie in the stand-in's mapping, not in the
   library the program's calls bound to: no hop on the data path), and data moves through the
   inlined calls, the exported formerly inline symbols, completion events on the channel fd,
   the extended API and an rdma_cm id;
2. Debian's unmodified ibv_devinfo lists soft0, and the pairs rdma_server/rdma_client, rping
   (-V, 10 pings) and ibv_rc_pingpong -e pass with RDMASHIM_PROVIDER=native;
3. RDMASHIM_PROVIDER=auto (and unset) with the stand-in, which lists a device, forwards
   (native_forward native), also through `rdmashim run --provider auto`; with
   RDMASHIM_NATIVE_LIBDIR at the system's libibverbs, which lists no device on this machine,
   the soft provider serves the program itself (native_forward soft);
4. (preload) RDMASHIM_TRACE traces each forwarded call once: the stand-in does not trace again;
   the program's data-path calls (inlined through the context's ops, and exported) are traced
   once each too: the context's ops are then rdmashim's traced trampolines, and so are the
   extended API's (ibv_wr_* of the ibv_qp_ex, ibv_start_poll of the ibv_cq_ex); so are those of
   rdma_server/rdma_client, whose contexts and QPs librdmacm makes;
5. RDMASHIM_PROVIDER=native with a directory that has no libibverbs.so.1: no devices and one
   line on stderr that says why, never a silent fallback to the soft device;
6. RDMASHIM_PROVIDER=both lists the stand-in's device and then our own soft0: native_forward
   both moves data on each with its own objects; Debian's ibv_devinfo lists both;
   ibv_rc_pingpong (the first device: the stand-in's) and rdma_server/rdma_client (librdmacm,
   ours) pass; traced, each call of both devices is one line (and of soft0 alone, with
   RDMASHIM_PROVIDER=soft); with no library, one line on stderr and soft0 alone.

Usage: passthrough.py --build-dir BUILD --program NATIVE_FORWARD
"""
import argparse
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

failures = []
# What a client says when its server does not listen yet.
NOT_READY = re.compile(r"REJECTED|Couldn't connect|rdma_connect|refused|unreachable", re.I)


def fail(what):
    failures.append(what)
    print(f"FAIL {what}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def mode_env(mode, build, **extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "RDMASHIM_PROVIDER", "RDMASHIM_TRACE",
                        "RDMASHIM_NATIVE_LIBDIR")}
    if mode == "preload":
        env["LD_PRELOAD"] = os.path.join(build, "librdmashim.so")
    else:
        env["LD_LIBRARY_PATH"] = os.path.join(build, "dropin")
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def run(name, cmd, env, timeout=60):
    r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout, r.stderr


def listening(pid, port):
    """True once an rdma_cm listener on `port` exists in `pid`'s network namespace (rdmashim's
    rendezvous socket, the stand-in's included)."""
    try:
        with open(f"/proc/{pid}/net/unix") as f:
            return any("@rdmashim/cm/" in line and f"/{port}/" in line for line in f)
    except OSError:
        return False


def pair(name, server, client, env, expect_out=None, port=None):
    """Runs a server and a client; both must exit 0 (and the client print expect_out). With
    `port` (an rdma_cm server's), the client starts once the server listens, so that it is not
    tried again (a trace would count its attempts' calls too)."""
    srv = subprocess.Popen(server, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
    out = ""
    deadline = time.monotonic() + 10
    while port and not listening(srv.pid, port) and srv.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        for _ in range(40):           # the client tries again until the server listens
            rc, out, err = run(name, client, env)
            out += err
            if rc == 0 or not NOT_READY.search(out):
                break
            time.sleep(0.25)
        srv_out, _ = srv.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv_out, _ = srv.communicate()
        fail(f"{name}: timed out")
        return
    if rc != 0 or srv.returncode != 0:
        fail(f"{name}: client exit {rc}, server exit {srv.returncode}\n--- client\n{out}"
             f"--- server\n{srv_out}")
    elif expect_out and expect_out not in out:
        fail(f"{name}: the client did not print {expect_out!r}:\n{out}")
    else:
        print(f"ok   {name}", flush=True)


def check_traced_data_path(label, out, lines):
    """The data-path calls native_forward says it made (inlined and exported) are each in the
    trace exactly once."""
    m = re.search(r"^data-path calls: (.*)$", out, re.M)
    made = dict(zip(*[iter(m.group(1).split())] * 2)) if m else {}
    counted = {name: sum(1 for ln in lines if f" {name}(" in ln) for name in made}
    if not made or any(int(made[k]) != counted[k] for k in made):
        fail(f"{label} of the data path: the program made {made or '(no count printed)'}, "
             f"the trace has {counted}")
    else:
        print(f"ok   {label}: the data path's calls, inlined and exported, each once: {made}",
              flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--program", required=True, help="the built c-tests/native_forward")
    args = ap.parse_args()
    build = os.path.abspath(args.build_dir)
    prog = os.path.abspath(args.program)
    stand_in = os.path.join(build, "dropin")
    stand_in_verbs = os.path.join(stand_in, "libibverbs.so.1")
    native = {"RDMASHIM_PROVIDER": "native", "RDMASHIM_NATIVE_LIBDIR": stand_in}
    system_dir = f"/usr/lib/{os.uname().machine}-linux-gnu"

    for mode in ("preload", "dropin"):
        # 1. the objects, the data path, events, the extended API, the CM
        cases = [("native", native, "native"),
                 ("auto", {"RDMASHIM_PROVIDER": "auto", "RDMASHIM_NATIVE_LIBDIR": stand_in},
                  "native"),
                 ("unset", {"RDMASHIM_NATIVE_LIBDIR": stand_in}, "native")]
        if os.path.exists(os.path.join(system_dir, "libibverbs.so.1")):
            cases.append(("auto, no device in the native library",
                          {"RDMASHIM_PROVIDER": "auto", "RDMASHIM_NATIVE_LIBDIR": system_dir},
                          "soft"))
        for label, extra, want in cases:
            rc, out, err = run(label, [prog, stand_in_verbs, want], mode_env(mode, build, **extra))
            if rc != 0:
                fail(f"{mode}: native_forward, RDMASHIM_PROVIDER {label}: exit {rc}\n{out}{err}")
            else:
                print(f"ok   {mode}: native_forward, RDMASHIM_PROVIDER {label} ({want})", flush=True)

        # 2. unmodified programs
        env = mode_env(mode, build, **native)
        rc, out, err = run("ibv_devinfo", ["ibv_devinfo"], env)
        if rc != 0 or "hca_id:\tsoft0" not in out:
            fail(f"{mode}: ibv_devinfo through the stand-in: exit {rc}\n{out}{err}")
        else:
            print(f"ok   {mode}: ibv_devinfo lists soft0 through the stand-in", flush=True)
        port = str(free_port())
        pair(f"{mode}: rdma_server/rdma_client", ["rdma_server", "-p", port],
             ["rdma_client", "-s", "127.0.0.1", "-p", port], env, "rdma_client: end 0")
        port = str(free_port())
        pair(f"{mode}: rping -V -C 10",
             ["rping", "-s", "-a", "127.0.0.1", "-p", port, "-v"],
             ["rping", "-c", "-a", "127.0.0.1", "-p", port, "-C", "10", "-V", "-v"], env,
             "ping data: rdma-ping-9")
        port = str(free_port())
        pair(f"{mode}: ibv_rc_pingpong -e", ["ibv_rc_pingpong", "-g", "0", "-e", "-n", "200",
                                             "-p", port],
             ["ibv_rc_pingpong", "-g", "0", "-e", "-n", "200", "-p", port, "127.0.0.1"], env,
             "200 iters in")

    # 3b. through the launcher: `rdmashim run` (auto) forwards to the stand-in, which lists a
    # device, and then shows the program no device view of its own
    tool = os.path.join(build, "rdmashim")
    if os.path.exists(tool):
        for mode in ("preload", "dropin"):
            env = {k: v for k, v in os.environ.items()
                   if k not in ("LD_PRELOAD", "LD_LIBRARY_PATH", "RDMASHIM_PROVIDER")}
            env["RDMASHIM_NATIVE_LIBDIR"] = stand_in
            cmd = [tool, "run", "--mode", mode, "--provider", "auto", "--", prog,
                   stand_in_verbs, "native"]
            rc, out, err = run("rdmashim run", cmd, env)
            if rc != 0:
                fail(f"rdmashim run --mode {mode} --provider auto: exit {rc}\n{out}{err}")
            else:
                print(f"ok   rdmashim run --mode {mode} --provider auto forwards to the stand-in",
                      flush=True)
    else:
        fail(f"{tool} was not built")

    # 4. one trace line per forwarded call
    with tempfile.TemporaryDirectory() as tmp:
        trace = os.path.join(tmp, "trace")
        env = mode_env("preload", build, RDMASHIM_TRACE=trace, **native)
        rc, out, err = run("trace", [prog, stand_in_verbs, "native"], env)
        lines = open(trace).read().splitlines() if os.path.exists(trace) else []
        opens = [ln for ln in lines if " ibv_open_device(" in ln]
        pds = [ln for ln in lines if " ibv_alloc_pd(" in ln]
        if rc != 0 or len(opens) != 1 or len(pds) != 1:
            fail(f"trace: exit {rc}, {len(opens)} ibv_open_device and {len(pds)} ibv_alloc_pd "
                 f"lines (want 1 each):\n" + "\n".join(lines[:20]) + f"\n{out}{err}")
        else:
            print(f"ok   trace: {len(lines)} lines, each forwarded call once", flush=True)
        # The data path: the program's inlined calls (through the context's ops) and its calls
        # of the exported symbols, each traced exactly once.
        check_traced_data_path("trace", out, lines)
        # An unmodified pair whose contexts librdmacm opens itself (rdma_create_ep, and the QP
        # rdma_get_request makes): each side posts one receive and one send, inlined.
        trace = os.path.join(tmp, "pair-trace")
        port = str(free_port())
        pair("trace: rdma_server/rdma_client", ["rdma_server", "-p", port],
             ["rdma_client", "-s", "127.0.0.1", "-p", port],
             mode_env("preload", build, RDMASHIM_TRACE=trace, **native), "rdma_client: end 0",
             port=port)
        lines = open(trace).read().splitlines() if os.path.exists(trace) else []
        posts = {name: sum(1 for ln in lines if f" {name}(" in ln)
                 for name in ("ibv_post_send", "ibv_post_recv")}
        if posts != {"ibv_post_send": 2, "ibv_post_recv": 2}:
            fail(f"trace of rdma_server/rdma_client's inlined posts: {posts}, want 2 of each")
        else:
            print(f"ok   trace: rdma_server/rdma_client's inlined posts, one line each: {posts}",
                  flush=True)

    # 5. no native library: no devices, one line, no soft fallback
    with tempfile.TemporaryDirectory() as empty:
        for mode in ("preload", "dropin"):
            env = mode_env(mode, build, RDMASHIM_PROVIDER="native", RDMASHIM_NATIVE_LIBDIR=empty)
            rc, out, err = run("no library", ["ibv_devices"], env)
            said = [ln for ln in err.splitlines() if "RDMASHIM_PROVIDER=native" in ln]
            if "soft0" in out or len(said) != 1 or "libibverbs.so.1" not in said[0]:
                fail(f"{mode}: native without a library: stdout {out!r}, stderr {err!r}")
            else:
                print(f"ok   {mode}: native without a library: no device; {said[0]}", flush=True)

    # 6. both: the native library's devices, then ours
    both = {"RDMASHIM_PROVIDER": "both", "RDMASHIM_NATIVE_LIBDIR": stand_in}
    for mode in ("preload", "dropin"):
        env = mode_env(mode, build, **both)
        rc, out, err = run("both", [prog, stand_in_verbs, "both"], env)
        if rc != 0:
            fail(f"{mode}: native_forward both: exit {rc}\n{out}{err}")
        else:
            print(f"ok   {mode}: native_forward both (the stand-in's device, then ours)", flush=True)
        rc, out, err = run("ibv_devinfo", ["ibv_devinfo"], env)
        if rc != 0 or out.count("hca_id:\tsoft0") != 2:
            fail(f"{mode}: ibv_devinfo with both: exit {rc}, want two devices\n{out}{err}")
        else:
            print(f"ok   {mode}: ibv_devinfo lists two devices with both", flush=True)
        port = str(free_port())
        pair(f"{mode}: both: ibv_rc_pingpong (the stand-in's device)",
             ["ibv_rc_pingpong", "-g", "0", "-n", "200", "-p", port],
             ["ibv_rc_pingpong", "-g", "0", "-n", "200", "-p", port, "127.0.0.1"], env,
             "200 iters in")
        port = str(free_port())
        pair(f"{mode}: both: rdma_server/rdma_client (our CM)", ["rdma_server", "-p", port],
             ["rdma_client", "-s", "127.0.0.1", "-p", port], env, "rdma_client: end 0", port=port)
    with tempfile.TemporaryDirectory() as tmp:
        # Traced: both devices' calls, forwarded and ours, each once; and the soft provider's
        # alone (our exported formerly inline calls go through the objects' own traced ops).
        for label, provider, devices in (("both, traced", "both", 2), ("soft, traced", "soft", 1)):
            trace = os.path.join(tmp, provider)
            env = mode_env("preload", build, RDMASHIM_TRACE=trace, RDMASHIM_PROVIDER=provider,
                           RDMASHIM_NATIVE_LIBDIR=stand_in)
            rc, out, err = run(label, [prog, stand_in_verbs, provider], env)
            lines = open(trace).read().splitlines() if os.path.exists(trace) else []
            opens = [ln for ln in lines if " ibv_open_device(" in ln]
            if rc != 0 or len(opens) != devices:
                fail(f"{label}: exit {rc}, {len(opens)} ibv_open_device lines (want {devices})\n"
                     f"{out}{err}")
            else:
                check_traced_data_path(label, out, lines)
    with tempfile.TemporaryDirectory() as empty:
        env = mode_env("preload", build, RDMASHIM_PROVIDER="both", RDMASHIM_NATIVE_LIBDIR=empty)
        rc, out, err = run("both, no library", ["ibv_devices"], env)
        said = [ln for ln in err.splitlines() if "RDMASHIM_PROVIDER=both" in ln]
        if rc != 0 or out.count("soft0") != 1 or len(said) != 1:
            fail(f"both without a library: exit {rc}, stdout {out!r}, stderr {err!r}")
        else:
            print(f"ok   both without a library: soft0 alone; {said[0]}", flush=True)

    print(f"\n{'FAIL' if failures else 'ok'}: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    if not shutil.which("rdma_server") or not shutil.which("ibv_rc_pingpong"):
        print("SKIP: rdmacm-utils and ibverbs-utils are needed (scripts/deps installs them)")
        sys.exit(77)
    sys.exit(main())
