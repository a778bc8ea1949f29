#!/usr/bin/env python3
"""RDMASHIM_TRACE (issue 12, deliverable 3) on Debian's unmodified rdma_server/rdma_client.

In preload and drop-in mode, the pair of the acceptance scenario `rdma-server-client`
(tests/acceptance/programs.py, run with run.py's environment per mode) runs with
RDMASHIM_TRACE pointing at one file per side, and the traces must show:

1. every line well formed (`TIME TID name(args) = result [-> outs] [errno=E] <Nus>`, or a
   follow-up `TIME TID   wc ...` / `cm_event ...` line, or a `TIME TID # ...` note of the
   library's own, such as the data path a region takes): no two lines interleaved;
2. each side's calls in the programs' order (librdmacm/examples/rdma_server.c, rdma_client.c).
   rdma-core's <rdma/rdma_verbs.h> inlines rdma_reg_msgs, rdma_post_recv, rdma_post_send,
   rdma_get_*_comp and rdma_dereg_mr into the programs, so those appear as the verbs calls they
   make: ibv_reg_mr, ibv_post_recv, ibv_post_send, the ibv_poll_cq/ibv_req_notify_cq/
   ibv_get_cq_event/ibv_ack_cq_events loop (left out of the comparison) and ibv_dereg_mr;
     server: rdma_getaddrinfo rdma_create_ep rdma_listen rdma_get_request ibv_query_qp
             ibv_reg_mr(1-2) ibv_post_recv rdma_accept [wc RECV] ibv_post_send [wc SEND]
             rdma_disconnect ibv_dereg_mr(1-2) rdma_destroy_ep rdma_destroy_ep rdma_freeaddrinfo
     client: rdma_getaddrinfo rdma_create_ep ibv_reg_mr(1-2) ibv_post_recv rdma_connect
             ibv_post_send [wc SEND] [wc RECV] rdma_disconnect ibv_dereg_mr(1-2)
             rdma_destroy_ep rdma_freeaddrinfo
   every one of them successful, the completions IBV_WC_SUCCESS with 16 bytes, and the
   arguments decoded (RDMA_PS_TCP, RAI_PASSIVE, IBV_ACCESS_LOCAL_WRITE, IBV_WR_SEND);
3. with the variable unset (and set empty) nothing is traced, and the pair still succeeds;
4. a path that cannot be opened gives one line on stderr, no trace, and the pair succeeds;
5. RDMASHIM_TRACE=stderr (and `-`) traces to standard error;
6. (preload) rping, the asynchronous CM: each rdma_get_cm_event line is followed by the event it
   delivered, and the events come in the CM's order;
7. `rdmashim run --trace FILE` (preload) traces as the variable does.

Usage: trace_pair.py --build-dir BUILD
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
sys.path.insert(0, os.path.join(HERE, "..", "acceptance"))
import programs  # noqa: E402
import placement  # noqa: E402
import run as acc  # noqa: E402  (run.py: mode_env, pick_port, which, kill_group)

SKIP = 77
STAMP = r"\d\d:\d\d:\d\d\.\d{6} +\d+ "
CALL_RE = re.compile(r"^" + STAMP + r"(\w+)\((.*)\) = (\S+)( ->.*?)?( errno=\w+)? <[\d.]+us>$")
FOLLOW_RE = re.compile(r"^" + STAMP + r"  (wc|cm_event|async_event) (.*)$")
NOTE_RE = re.compile(r"^" + STAMP + r"# (.*)$")  # the library's own decisions (data paths)
LOOP = {"ibv_poll_cq", "ibv_req_notify_cq", "ibv_get_cq_event", "ibv_ack_cq_events"}
TWICE = {"ibv_reg_mr", "ibv_dereg_mr"}   # once more when the device has no inline data
EXPECTED = {
    "server": ["rdma_getaddrinfo", "rdma_create_ep", "rdma_listen", "rdma_get_request",
               "ibv_query_qp", "ibv_reg_mr", "ibv_post_recv", "rdma_accept", "wc:IBV_WC_RECV",
               "ibv_post_send", "wc:IBV_WC_SEND", "rdma_disconnect", "ibv_dereg_mr",
               "rdma_destroy_ep", "rdma_destroy_ep", "rdma_freeaddrinfo"],
    "client": ["rdma_getaddrinfo", "rdma_create_ep", "ibv_reg_mr", "ibv_post_recv",
               "rdma_connect", "ibv_post_send", "wc:IBV_WC_SEND", "wc:IBV_WC_RECV",
               "rdma_disconnect", "ibv_dereg_mr", "rdma_destroy_ep", "rdma_freeaddrinfo"],
}
# (side, function, text its arguments or outputs must contain)
DECODED = [
    ("server", "rdma_getaddrinfo", "ai_flags=RAI_PASSIVE"),
    ("both", "rdma_getaddrinfo", "ai_port_space=RDMA_PS_TCP"),
    ("both", "rdma_create_ep", "-> id=0x"),
    ("server", "rdma_get_request", "-> id=0x"),
    ("server", "ibv_query_qp", "mask=IBV_QP_CAP"),
    ("both", "ibv_reg_mr", "access=IBV_ACCESS_LOCAL_WRITE"),
    ("both", "ibv_post_send", "opcode=IBV_WR_SEND"),
    ("both", "ibv_post_recv", "num_sge=1 length=16"),
]

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def scenario(name="rdma-server-client"):
    return next(s for s in programs.SCENARIOS if s.name == name)


def run_pair(build, mode, server_extra, client_extra, wrap=None, cwd=None,
             name="rdma-server-client"):
    """Runs the pair once; (server exit, server output, client exit, client output). The
    outputs hold stdout and stderr. `*_extra` are added to (None values: removed from) each
    side's environment; `wrap(argv)` may put a launcher in front of the programs; both run in
    `cwd`."""
    sc = scenario(name)
    env, _, problems = acc.mode_env(mode, build)
    if problems:
        return "not run", "\n".join(problems), "not run", ""
    env.pop("RDMASHIM_TRACE", None)
    place = placement.Placement()
    port = acc.pick_port(sc, mode, False)
    argv = {w: place.argv(sc, w, port) for w in ("server", "client")}
    for w in argv:
        argv[w][0] = acc.which(argv[w][0])
        if wrap:
            argv[w] = wrap(argv[w])

    def side_env(extra):
        e = dict(env)
        for k, v in extra.items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        return e

    server = subprocess.Popen(argv["server"], env=side_env(server_extra), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True, text=True, cwd=cwd)
    try:
        time.sleep(sc.ready_wait)
        crc, cout = "not run", ""
        for _ in range(sc.retries):
            try:
                r = subprocess.run(argv["client"], env=side_env(client_extra), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, timeout=sc.timeout, cwd=cwd)
                crc, cout = r.returncode, r.stdout
            except subprocess.TimeoutExpired as e:
                crc, cout = "timeout", e.stdout or ""
            if crc == 0 or not re.search(sc.not_ready, cout, re.M) or server.poll() is not None:
                break
            time.sleep(0.5)
        try:
            sout, _ = server.communicate(timeout=sc.timeout)
            src = server.returncode
        except subprocess.TimeoutExpired:
            src, sout = "timeout", ""
    finally:
        acc.kill_group(server)
    return src, sout, crc, cout


def pair_ok(what, res, name="rdma-server-client"):
    """Both sides exit 0 and print what the acceptance scenario expects (run.py's check)."""
    src, sout, crc, cout = res
    sc = scenario(name)
    bad = acc.check_output("server", sout, sc)
    ok = check(src == 0 and not bad, f"{what}: the server succeeds (exit {src}) {bad or ''}")
    bad = acc.check_output("client", cout, sc)
    ok &= check(crc == 0 and not bad, f"{what}: the client succeeds (exit {crc}) {bad or ''}")
    if not ok:
        print(f"--- server ---\n{sout}--- client ---\n{cout}")
    return ok


def parse(text):
    """[(kind, name, line)]: kind 'call' (name: the function) or 'wc'/'cm_event' (name: the
    completion's opcode / the event), and the lines that match neither."""
    items, bad = [], []
    for line in text.splitlines():
        m = CALL_RE.match(line)
        if m:
            items.append(("call", m.group(1), line))
            continue
        m = FOLLOW_RE.match(line)
        if m:
            key = re.search(r"(?:opcode|event)=(\w+)", m.group(2))
            items.append((m.group(1), key.group(1) if key else "?", line))
            continue
        m = NOTE_RE.match(line)
        if m:
            items.append(("note", m.group(1).split(" ", 1)[0], line))
            continue
        bad.append(line)
    return items, bad


def sequence(items):
    """The calls outside the completion loop and the completions, runs of TWICE collapsed."""
    seq = []
    for kind, name, _ in items:
        if kind == "call" and name in LOOP or kind == "note":
            continue
        key = name if kind == "call" else f"{kind}:{name}"
        if seq and seq[-1] == key and key in TWICE:
            continue
        seq.append(key)
    return seq


def check_trace(mode, side, text):
    items, bad = parse(text)
    check(items and not bad, f"{mode} {side}: {len(items)} trace lines, all well formed"
          + (f" (not: {bad[:3]!r})" if bad else ""))
    seq = sequence(items)
    if not check(seq == EXPECTED[side], f"{mode} {side}: the calls in the program's order"):
        print(f"  want {EXPECTED[side]}\n  got  {seq}")
    calls = [line for kind, name, line in items if kind == "call" and name not in LOOP]
    failed = [line for line in calls if " errno=" in line or re.search(r"\) = (-1|0x0) ", line)]
    check(not failed, f"{mode} {side}: every call of the program succeeded"
          + (f" (not: {failed[:2]!r})" if failed else ""))
    wcs = [line for kind, _, line in items if kind == "wc"]
    check(len(wcs) == 2 and all("status=IBV_WC_SUCCESS" in w and "byte_len=16" in w for w in wcs),
          f"{mode} {side}: two successful 16-byte completions")
    for who, fn, text_ in DECODED:
        if who in (side, "both"):
            lines = [line for kind, name, line in items if kind == "call" and name == fn]
            check(any(text_ in line for line in lines), f"{mode} {side}: {fn} shows {text_}")


def traced(build, mode, tmp):
    files = {w: os.path.join(tmp, f"{mode}-{w}.trace") for w in ("server", "client")}
    res = run_pair(build, mode, {"RDMASHIM_TRACE": files["server"]},
                   {"RDMASHIM_TRACE": files["client"]})
    if not pair_ok(f"{mode}, traced to files", res):
        return
    for side in ("server", "client"):
        text = open(files[side]).read() if os.path.exists(files[side]) else ""
        check_trace(mode, side, text)
        if not text:
            continue
        # The program's own output is untouched by tracing.
        out = res[1] if side == "server" else res[3]
        check(not any(CALL_RE.match(line) for line in out.splitlines()),
              f"{mode} {side}: no trace line in the program's own output")


def untraced(build, mode, tmp):
    os.makedirs(tmp, exist_ok=True)
    for value in (None, ""):
        cwd_before = set(os.listdir(tmp))
        res = run_pair(build, mode, {"RDMASHIM_TRACE": value}, {"RDMASHIM_TRACE": value},
                       cwd=tmp)
        label = "unset" if value is None else "empty"
        if pair_ok(f"{mode}, RDMASHIM_TRACE {label}", res):
            lines = (res[1] + res[3]).splitlines()
            check(not any(CALL_RE.match(line) or FOLLOW_RE.match(line) for line in lines)
                  and "RDMASHIM_TRACE" not in res[1] + res[3],
                  f"{mode}, RDMASHIM_TRACE {label}: nothing traced, nothing said")
            check(set(os.listdir(tmp)) == cwd_before,
                  f"{mode}, RDMASHIM_TRACE {label}: no file written where the programs ran")


def bad_path(build, mode, tmp):
    bad = os.path.join(tmp, "no-such-dir", "x.trace")
    res = run_pair(build, mode, {"RDMASHIM_TRACE": bad}, {"RDMASHIM_TRACE": bad})
    if pair_ok(f"{mode}, RDMASHIM_TRACE={bad}", res):
        for side, out in (("server", res[1]), ("client", res[3])):
            said = [line for line in out.splitlines() if "RDMASHIM_TRACE" in line]
            check(len(said) == 1 and "cannot open" in said[0],
                  f"{mode} {side}: one line on stderr about the bad path ({said!r})")
            check(not any(CALL_RE.match(line) for line in out.splitlines()),
                  f"{mode} {side}: and no trace")
        check(not os.path.exists(os.path.dirname(bad)), f"{mode}: nothing created")


def to_stderr(build, mode):
    res = run_pair(build, mode, {"RDMASHIM_TRACE": "-"}, {"RDMASHIM_TRACE": "stderr"})
    if pair_ok(f"{mode}, RDMASHIM_TRACE=- / stderr", res):
        for side, out in (("server", res[1]), ("client", res[3])):
            items, _ = parse(out)
            names = [n for k, n, _ in items if k == "call"]
            check("rdma_getaddrinfo" in names and "rdma_disconnect" in names,
                  f"{mode} {side}: the trace went to stderr")


def cm_events(build, tmp):
    """rping (asynchronous CM): every rdma_get_cm_event is followed by the event it delivered."""
    files = {w: os.path.join(tmp, f"rping-{w}.trace") for w in ("server", "client")}
    res = run_pair(build, "preload", {"RDMASHIM_TRACE": files["server"]},
                   {"RDMASHIM_TRACE": files["client"]}, name="rping")
    if not pair_ok("rping, traced", res, name="rping"):
        return
    want = {"server": ["RDMA_CM_EVENT_CONNECT_REQUEST", "RDMA_CM_EVENT_ESTABLISHED",
                       "RDMA_CM_EVENT_DISCONNECTED"],
            "client": ["RDMA_CM_EVENT_ADDR_RESOLVED", "RDMA_CM_EVENT_ROUTE_RESOLVED",
                       "RDMA_CM_EVENT_ESTABLISHED"]}
    for side in ("server", "client"):
        text = open(files[side]).read() if os.path.exists(files[side]) else ""
        items, bad = parse(text)
        check(items and not bad, f"rping {side}: {len(items)} trace lines, all well formed")
        # A successful rdma_get_cm_event, then its event line (written with it).
        pairs = [(a, b) for a, b in zip(items, items[1:])
                 if a[0] == "call" and a[1] == "rdma_get_cm_event" and " errno=" not in a[2]]
        check(pairs and all(b[0] == "cm_event" and "status=0 id=0x" in b[2] for _, b in pairs),
              f"rping {side}: each rdma_get_cm_event is followed by its event")
        events = [n for k, n, _ in items if k == "cm_event"]
        check(events[:len(want[side])] == want[side],
              f"rping {side}: the events {want[side]} in order (got {events})")
        check(any(k == "wc" and "opcode=IBV_WC_RDMA_READ" in line for k, _, line in items)
              if side == "server" else True, f"rping {side}: RDMA READ completions decoded")
        # rping registers its buffers with remote rights: the trace says which path each takes.
        check(any(k == "note" and re.search(r"# region 0x[0-9a-f]+\+\d+: .*(direct|copy) path", line)
                  for k, _, line in items), f"rping {side}: the data path of its regions")


def launcher(build, tmp):
    tool = os.path.join(build, "rdmashim")
    if not os.path.exists(tool):
        check(False, f"{tool} was built")
        return
    files = {w: os.path.join(tmp, f"run-{w}.trace") for w in ("server", "client")}

    def wrap(argv):
        side = "server" if "rdma_server" in argv[0] else "client"
        return [tool, "run", "--trace", files[side], "--"] + argv

    res = run_pair(build, "preload", {"LD_PRELOAD": None}, {"LD_PRELOAD": None}, wrap=wrap)
    if pair_ok("rdmashim run --trace FILE", res):
        for side in ("server", "client"):
            text = open(files[side]).read() if os.path.exists(files[side]) else ""
            seq = sequence(parse(text)[0])
            check(seq == EXPECTED[side], f"rdmashim run --trace: the {side}'s calls in order")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--mode", action="append", choices=acc.MODES,
                    help="only this mode (repeatable); default both")
    a = ap.parse_args()
    build = os.path.abspath(a.build_dir)
    for prog in ("rdma_server", "rdma_client"):
        if not shutil.which(prog):
            print(f"SKIP: {prog} is not installed (rdmacm-utils)")
            return SKIP
    tmp = tempfile.mkdtemp(prefix="rdmashim-trace-")
    try:
        for mode in a.mode or acc.MODES:
            traced(build, mode, tmp)
            untraced(build, mode, os.path.join(tmp, "quiet-" + mode))
            bad_path(build, mode, tmp)
            to_stderr(build, mode)
        cm_events(build, tmp)
        launcher(build, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
