#!/usr/bin/env python3
"""c-tests/peer_death.c across two network namespaces (issue 8): the peer (`peer_death serve`)
in namespace a, the survivor in b, connected through the CM over RoCEv2/UDP; 1 MiB SENDs, RDMA
WRITEs or RDMA READs stream from b to a, and mid-transfer the peer

  kill       is SIGKILLed (send, write, read), or
  vanish     loses its namespace: everything in a is killed and `ip netns del` removes a, so
             the veth pair goes, and with it b's interface, address and route (b's sends then
             fail with ENETUNREACH/EADDRNOTAVAIL...; that must count as loss) (write, read).

The survivor (peer_death itself) checks one completion per request (successes, then
IBV_WC_RETRY_EXC_ERR, then only IBV_WC_WR_FLUSH_ERR) and a CM event (DISCONNECTED /
TIMEWAIT_EXIT / UNREACHABLE) within the QP's timeout x retries plus a margin, then tears down
without hanging; here its exit status, and a bound on its run time, decide.

  peer_death.py PATH/TO/peer_death [SCENARIO...]     # e.g. kill-write vanish-read

Root only (the fixture): exits 77 with the reason otherwise.
"""

import os
import queue
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import fixture  # noqa: E402
import sanitizer_env  # noqa: E402

PORT = "18519"
SCENARIOS = ["kill-send", "kill-write", "kill-read", "vanish-send", "vanish-write",
             "vanish-read"]
STEP = 60        # seconds for any one step (start, "kill now", the survivor's end): never a hang


def lines_of(proc):
    """A queue of `proc`'s output lines (None at EOF), read by a thread so waits are bounded."""
    q = queue.Queue()

    def pump():
        for line in proc.stdout:
            q.put(line)
        q.put(None)
    threading.Thread(target=pump, daemon=True).start()
    return q


def wait_line(q, prefix, out):
    """Collect lines into `out` until one starts with `prefix` (True) or EOF/STEP (False)."""
    deadline = time.monotonic() + STEP
    while True:
        try:
            line = q.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return False
        if line is None:
            return False
        out.append(line)
        if line.startswith(prefix):
            return True


def stop(proc):
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def run(prog, scenario):
    how, op = scenario.split("-")
    env = ["env", "RDMASHIM_PROVIDER=soft"]
    # A sanitizer build's library needs its runtime first in the library list (the program is
    # <build>/c-tests/peer_death).
    pre = sanitizer_env.runtime_preload(os.path.dirname(os.path.dirname(prog)))
    if pre:
        env.append("LD_PRELOAD=" + " ".join(pre))
    sout, cout, notes = [], [], []
    ok = False
    with fixture.Fixture(hosts=2) as fx:
        a, b = fx.hosts[0], fx.hosts[1]
        srv = fx.popen(a, env + [prog, "serve", a.ipv4, PORT], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
        sq = lines_of(srv)
        cli = cq = None
        try:
            if not wait_line(sq, "port ", sout):
                notes.append("the peer did not start listening")
                return False
            cli = fx.popen(b, env + [prog, op, a.ipv4, PORT], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            cq = lines_of(cli)
            if not wait_line(cq, "kill now", cout):
                notes.append("the survivor never asked for the kill")
                return False
            # The peer dies first (a host's processes die with it); the survivor measures
            # from here. Then, for vanish, the namespace goes while the survivor's retries run.
            t_kill = time.monotonic()
            srv.kill()
            srv.wait()
            cli.stdin.write("dead\n")
            cli.stdin.flush()
            if how == "vanish":
                fx.vanish(a)
                # The veth pair goes with a's namespace (the kernel tears it down shortly
                # after): b's end must vanish too, or this was no more than a kill.
                deadline = time.monotonic() + STEP
                while fx.has_link(b) and time.monotonic() < deadline:
                    time.sleep(0.02)
                gone = not fx.has_link(b)
                notes.append(f"b's {b.ifname} " + (
                    f"vanished {1000 * (time.monotonic() - t_kill):.0f} ms after the kill"
                    if gone else "is still there"))
            t0 = time.monotonic()
            while cli.poll() is None and time.monotonic() - t0 < STEP:
                time.sleep(0.05)
            if cli.poll() is None:
                notes.append(f"the survivor still runs {STEP} s after the peer died (hang)")
                return False
            ok = cli.returncode == 0 and (how != "vanish" or gone)
            return ok
        finally:
            for p in (cli, srv):
                if p:
                    stop(p)
            # Whatever the threads still hold (the rest of the output).
            for q, out in ((sq, sout), (cq, cout)):
                while q is not None:
                    try:
                        line = q.get(timeout=1)
                    except queue.Empty:
                        break
                    if line is None:
                        break
                    out.append(line)
            print(f"--- {scenario}: peer (a) ---\n{''.join(sout)}"
                  f"--- {scenario}: survivor (b), exit {cli.returncode if cli else '-'} ---\n"
                  f"{''.join(cout)}" + "".join(f"note: {n}\n" for n in notes)
                  + f"peer_death.py {scenario}: {'PASS' if ok else 'FAIL'}", flush=True)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    prog = os.path.abspath(sys.argv[1])
    wanted = sys.argv[2:] or SCENARIOS
    for s in wanted:
        if s not in SCENARIOS:
            raise SystemExit(f"unknown scenario {s} (known: {' '.join(SCENARIOS)})")
    try:
        fixture.require()
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    failed = [s for s in wanted if not run(prog, s)]
    print(f"peer_death.py: {'FAIL: ' + ' '.join(failed) if failed else 'all pass'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
