#!/usr/bin/env python3
"""UCX over the soft device through `rdmashim run` (issue 12, deliverable 1 and its first
acceptance item), with Debian's unmodified ucx-utils:

1. `rdmashim run -- ucx_info -d` lists rc_verbs and ud_verbs on soft0:1, in preload and drop-in
   mode; without the device view (--no-device-view) it lists neither, as before this work;
2. `ucx_perftest` tag_lat, tag_bw and ucp_put_bw pass (both sides exit 0 and print their final
   figures) over UCX_TLS=rc_verbs,ud_verbs (UCX's rc_verbs needs ud_verbs as the auxiliary
   transport that sets it up, as on hardware: see 4) and over UCX_TLS=ud_verbs, in both modes, and
   UCX's own log shows the endpoint lanes on rc_verbs/soft0:1 or ud_verbs/soft0:1, not on
   shared memory or TCP;
3. as an unprivileged user (nobody, through setpriv; root only) the view comes from a user
   namespace: ucx_info -d lists rc_verbs on soft0:1; and where user namespaces are
   unavailable (nobody in a user namespace of our own whose user.max_user_namespaces is 0),
   rdmashim says so in one line and shows the view by interposition (librdmashim-view.so):
   the program sees it, ucx_info -d lists rc_verbs on soft0:1, its exit status is kept;
   without root this case is `--device-view interpose`, which every mode also runs: the view
   matches devinfo, ucx_info -d lists both transports, ucx_perftest tag_bw passes over
   rc_verbs,ud_verbs, and the launcher keeps the program's exit status or signal and removes
   its view directory afterwards;
4. with UCX_TLS=rc_verbs alone, ucx_perftest either passes or stops at UCX's own wireup rule
   ("no auxiliary transport": rc_verbs connects endpoint to endpoint, and UCX exchanges those
   addresses over a connect-to-interface transport such as ud_verbs), never at anything else;
5. the view says what the verbs calls say: node_guid, link_layer and every GID with its type
   are those `rdmashim devinfo` prints;
6. the host is untouched: /sys/class/infiniband{,_verbs} and /dev/infiniband exist (or not)
   as before, and no mount appeared at /sys/class, /dev or under them in our namespace.

Usage: ucx_view.py --build-dir BUILD
"""
import argparse
import ipaddress
import os
import re
import shutil
import socket
import subprocess
import sys
import time

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def clean_env(**extra):
    env = dict(os.environ)
    for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "RDMASHIM_PROVIDER"):
        env.pop(k, None)
    env.update(extra)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ucx_info(tool, mode, *opts, user=None):
    cmd = [tool, "run", "--mode", mode, *opts, "--", "ucx_info", "-d"]
    if user:
        cmd = ["setpriv", "--reuid", user, "--regid", user, "--clear-groups"] + cmd
    r = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, timeout=60)
    # ucx_info -d prints "#      Transport: <tl>" then "#         Device: <dev>".
    return set(re.findall(r"Transport: (\S+)\s*\n#\s+Device: (\S+)", r.stdout)), r


def run_pair(tool, mode, env, args, view="auto"):
    """ucx_perftest ARGS as server and client through `rdmashim run`: (client, server output,
    server exit status)."""
    base = [tool, "run", "--mode", mode, "--device-view", view, "--", "ucx_perftest", *args,
            "-p", str(free_port())]
    server = subprocess.Popen(base, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
    try:
        for _ in range(50):
            client = subprocess.run(base + ["127.0.0.1"], env=env, capture_output=True,
                                    text=True, timeout=120)
            # Connection refused: the server is not listening yet (its side channel is TCP).
            if client.returncode == 0 or server.poll() is not None \
                    or "Connection refused" not in client.stdout + client.stderr:
                break
            time.sleep(0.2)
        out, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return client, out, server.returncode


def perftest(tool, mode, tls, test, view="auto"):
    env = clean_env(UCX_TLS=tls, UCX_NET_DEVICES="soft0:1", UCX_LOG_LEVEL="info")
    client, out, server_rc = run_pair(tool, mode, env, ["-t", test, "-n", "2000", "-s", "4096"],
                                      view)
    text = client.stdout + client.stderr
    tl = tls.split(",")[0]
    what = f"{test} over UCX_TLS={tls} ({mode}, device view {view})"
    check(client.returncode == 0 and server_rc == 0 and "Final:" in client.stdout,
          f"{what}: both sides exit 0 with final figures")
    lanes = re.findall(r"ep_cfg\[\d+\]: (.*)", text + out)
    on_soft = any(f"{tl}/soft0:1" in l for l in lanes)
    elsewhere = any(re.search(r"(posix|sysv|cma|tcp|self)/", l) for l in lanes)
    check(on_soft and not elsewhere, f"{what}: UCX's lanes are on {tl}/soft0:1 ({lanes[:2]})")
    if client.returncode != 0 or server_rc != 0:
        print(text[-2000:])
        print(out[-2000:])


def perftest_rc_alone(tool, mode):
    """UCX_TLS=rc_verbs with no auxiliary transport: UCX's wireup refuses, or it passes."""
    env = clean_env(UCX_TLS="rc_verbs", UCX_NET_DEVICES="soft0:1")
    client, out, _ = run_pair(tool, mode, env, ["-t", "tag_lat", "-n", "1000"])
    text = client.stdout + client.stderr + out
    passed = client.returncode == 0 and "Final:" in client.stdout
    aux = "no auxiliary transport" in text
    check(passed or aux, f"tag_lat over UCX_TLS=rc_verbs alone ({mode}): "
          + ("passes" if passed else "UCX's wireup asks for an auxiliary transport (ud_verbs)"
             if aux else "fails for another reason"))
    if not (passed or aux):
        print(text[-2000:])


def view_matches_devinfo(tool, view):
    """The view's node_guid, link_layer and GIDs against `rdmashim devinfo`."""
    info = subprocess.run([tool, "devinfo"], env=clean_env(), capture_output=True, text=True,
                          timeout=60).stdout
    d = "/sys/class/infiniband/soft0"
    script = (f"cat {d}/node_guid {d}/ports/1/link_layer; "
              f"for f in {d}/ports/1/gids/*; do i=${{f##*/}}; "
              f"t=$(cat {d}/ports/1/gid_attrs/types/$i 2>/dev/null); echo \"gid $i $(cat $f) $t\"; done")
    r = subprocess.run([tool, "run", "--device-view", view, "--", "sh", "-c", script],
                       env=clean_env(), capture_output=True, text=True, timeout=60)
    lines = r.stdout.splitlines()
    guid = re.search(r"node_guid:\s+(\S+)", info)
    link = re.search(r"link_layer:\s+(\S+)", info)
    check(len(lines) >= 2 and guid and lines[0] == guid.group(1) and link
          and lines[1] == link.group(1),
          f"the view's node_guid and link_layer are devinfo's ({view}: {lines[:2]})")
    want = {int(i): (ipaddress.IPv6Address(g), t)
            for i, g, t in re.findall(r"GID\[\s*(\d+)\]:\s+([^,\s]+), (.+)", info)}
    got = {}
    for l in lines[2:]:
        m = re.match(r"gid (\d+) (\S+) ?(.*)$", l)
        if m and ipaddress.IPv6Address(m.group(2)) != ipaddress.IPv6Address("::"):
            got[int(m.group(1))] = (ipaddress.IPv6Address(m.group(2)), m.group(3))
    check(want and got == want,
          f"the view's GIDs and their types are devinfo's ({view}: {len(want)} GIDs)")
    if got != want:
        print("devinfo:", want, "\nview:", got)


NO_USERNS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
r, w = os.pipe()
r2, w2 = os.pipe()
pid = os.fork()
if pid == 0:
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        os._exit(90)
    os.write(w, b"x")
    os.read(r2, 1)
    os.setresgid(0, 0, 0)
    os.setresuid(0, 0, 0)
    with open("/proc/sys/user/max_user_namespaces", "w") as f:
        f.write("0")  # this namespace's own limit: the host's is untouched
    os.setgroups([])
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    os.execvp(sys.argv[1], sys.argv[1:])
os.read(r, 1)
for m in ("uid_map", "gid_map"):
    with open(f"/proc/{pid}/{m}", "w") as f:
        f.write("0 0 70000")
os.write(w2, b"x")
_, st = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(st))
"""


def without_userns(tool):
    """As nobody in a user namespace whose user.max_user_namespaces is 0 (root only): no mount
    namespace can be made, so rdmashim says so in one line and shows the view by interposition:
    the program sees the device, and so does UCX."""
    prog = "test -e /sys/class/infiniband/soft0 && test -c /dev/infiniband/uverbs0 && exit 7"
    r = subprocess.run([sys.executable, "-c", NO_USERNS, tool, "run", "--", "sh", "-c", prog],
                       env=clean_env(), capture_output=True, text=True, timeout=60)
    said = [l for l in r.stderr.splitlines() if l.startswith("rdmashim:")]
    check(r.returncode == 7 and len(said) == 1 and "device view by interposition" in said[0]
          and "max_user_namespaces" in said[0],
          f"where user namespaces are unavailable the program sees the view by interposition, "
          f"exit status kept, one line on stderr saying why ({r.returncode}, {said})")
    if r.returncode != 7:
        print(r.stderr[-2000:])
    r = subprocess.run([sys.executable, "-c", NO_USERNS, tool, "run", "--", "ucx_info", "-d"],
                       env=clean_env(), capture_output=True, text=True, timeout=60)
    found = set(re.findall(r"Transport: (\S+)\s*\n#\s+Device: (\S+)", r.stdout))
    check(("rc_verbs", "soft0:1") in found,
          "where user namespaces are unavailable ucx_info -d (as nobody) lists rc_verbs on soft0:1")


def interposed_launcher(tool):
    """`--device-view interpose`: the program's exit status and the signal that ends it are the
    launcher's; the view directory is gone afterwards, also when the program was killed."""
    import tempfile
    tmp = tempfile.mkdtemp(prefix="rdmashim-tmp-")
    env = clean_env(TMPDIR=tmp)
    run = [tool, "run", "--device-view", "interpose", "--", "sh", "-c"]
    r = subprocess.run(run + ["test -e /sys/class/infiniband/soft0 && exit 7"], env=env,
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 7 and not os.listdir(tmp),
          f"interposed view: the program sees the device, its exit status (7) is ours, and the "
          f"view directory is removed ({r.returncode}, left: {os.listdir(tmp)})")
    r = subprocess.run(run + ["kill -TERM $$"], env=env, capture_output=True, text=True,
                       timeout=60)
    check(r.returncode == -15 and not os.listdir(tmp),
          f"interposed view: a program killed by SIGTERM ends the launcher by SIGTERM, view "
          f"directory removed ({r.returncode}, left: {os.listdir(tmp)})")
    p = subprocess.Popen(run + ["echo up; exec sleep 30"], env=env, stdout=subprocess.PIPE,
                         text=True)
    p.stdout.readline()
    p.terminate()  # to the launcher alone: it passes it on
    rc = p.wait(timeout=30)
    check(rc == -15 and not os.listdir(tmp),
          f"interposed view: SIGTERM to the launcher reaches the program, view directory "
          f"removed ({rc}, left: {os.listdir(tmp)})")
    shutil.rmtree(tmp, ignore_errors=True)


def host_state():
    """What the view covers, as this (the host's) mount namespace sees it: whether the device
    directories exist, and the mounts at or under /sys/class and /dev (other mounts are left
    out: other programs on a shared machine may mount elsewhere meanwhile)."""
    with open("/proc/self/mountinfo") as f:
        points = sorted(l.split()[4] for l in f)
    covered = [p for p in points if p in ("/sys/class", "/dev") or p.startswith("/sys/class/")
               or p.startswith("/dev/infiniband")]
    return (os.path.exists("/sys/class/infiniband"), os.path.exists("/sys/class/infiniband_verbs"),
            os.path.exists("/dev/infiniband"), covered)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", required=True)
    a = ap.parse_args()
    tool = os.path.join(os.path.abspath(a.build_dir), "rdmashim")
    for prog in ("ucx_info", "ucx_perftest"):
        if not shutil.which(prog):
            print(f"SKIP: {prog} is not installed (Debian: ucx-utils)")
            return 77
    probe = subprocess.run([tool, "run", "--device-view", "mount", "--", "true"],
                           env=clean_env(), capture_output=True, text=True, timeout=60)
    views = ["mount", "interpose"]
    if "running without the device view" in probe.stderr:
        # No namespace for us here (user namespaces disabled, a seccomp policy, root without
        # CAP_SYS_ADMIN): the view comes by interposition only.
        print("note: no mount namespace here, so the interposed view only: " + probe.stderr.strip())
        views = ["interpose"]
    before = host_state()
    for view in views:
        view_matches_devinfo(tool, view)
    interposed_launcher(tool)
    for mode in ("preload", "dropin"):
        for view in views:
            found, r = ucx_info(tool, mode, "--device-view", view)
            check(("rc_verbs", "soft0:1") in found and ("ud_verbs", "soft0:1") in found,
                  f"ucx_info -d lists rc_verbs and ud_verbs on soft0:1 ({mode}, device view {view})")
            if "rdmashim: running without the device view" in r.stderr:
                print(r.stderr)
        if mode == "dropin":
            # The loader's own account of what ucx_info (and UCX's libuct_ib) loaded.
            r = subprocess.run([tool, "run", "--mode", mode, "--", "ucx_info", "-d"],
                               env=clean_env(LD_DEBUG="files"), capture_output=True, text=True,
                               timeout=60)
            inits = re.findall(r"calling init: (\S*lib(?:ibverbs|rdmacm|mlx5)\.so\S*)", r.stderr)
            ours = os.path.join(os.path.dirname(tool), "dropin") + "/"
            check(len(inits) >= 2 and all(p.startswith(ours) for p in inits),
                  f"drop-in: UCX loads our libibverbs/librdmacm/libmlx5 stubs, no system one ({inits})")
        bare, _ = ucx_info(tool, mode, "--no-device-view")
        check(not any(dev.startswith("soft0") for _, dev in bare),
              f"without the device view UCX finds no RDMA device ({mode})")
        for tls in ("rc_verbs,ud_verbs", "ud_verbs"):
            for test in ("tag_lat", "tag_bw", "ucp_put_bw"):
                perftest(tool, mode, tls, test)
        perftest(tool, mode, "rc_verbs,ud_verbs", "tag_bw", view="interpose")
        perftest_rc_alone(tool, mode)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        # nobody may not reach the build tree (a clone in a private directory): a copy it can.
        import tempfile
        pub = tempfile.mkdtemp(prefix="rdmashim-view-")
        os.chmod(pub, 0o755)
        build = os.path.dirname(tool)
        for f in os.listdir(build):
            src = os.path.join(build, f)
            if (f == "rdmashim" or f.startswith("librdmashim")) and os.path.isfile(src):
                shutil.copy2(os.path.join(build, f), pub, follow_symlinks=True)
        found, r = ucx_info(os.path.join(pub, "rdmashim"), "preload", user="65534")
        without_userns(os.path.join(pub, "rdmashim"))
        shutil.rmtree(pub, ignore_errors=True)
        check(("rc_verbs", "soft0:1") in found,
              "as user nobody (a user namespace gives the view) ucx_info -d lists rc_verbs on soft0:1")
        if ("rc_verbs", "soft0:1") not in found:
            print(r.stderr[-2000:])
    else:
        print("note: not root, so the unprivileged-user case ran as this user above")
    after = host_state()
    check(before == after, f"the host's device directories and mounts are unchanged ({after})")
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
