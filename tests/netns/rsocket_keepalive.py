#!/usr/bin/env python3
"""c-tests/rsocket_keepalive.c across two network namespaces: the parent (server, host a) keeps
idle rsocket connections to a forked child that moved itself into host b's namespace
(RoCEv2 over UDP), turns SO_KEEPALIVE on with TCP_KEEPIDLE 1 s, then SIGSTOPs the child. Only
the keepalive messages can find out that the peer went silent; the blocked rrecv and rpoll
must return (ECONNRESET) instead of waiting forever.

  rsocket_keepalive.py PATH/TO/rsocket_keepalive

Root only (the fixture): exits 77 with the reason otherwise.
"""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "scripts"))
import fixture  # noqa: E402
import sanitizer_env  # noqa: E402

TIMEOUT = 150


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    try:
        fixture.require()
    except fixture.Skip as e:
        print(f"SKIP: {e}")
        return fixture.SKIP
    prog = os.path.abspath(sys.argv[1])
    env = ["env", "RDMASHIM_PROVIDER=soft"]
    pre = sanitizer_env.runtime_preload(os.path.dirname(os.path.dirname(prog)))
    if pre:
        env.append("LD_PRELOAD=" + " ".join(pre))
    with fixture.Fixture(hosts=2) as fx:
        sp, _, sip, _ = fixture.pair_env(fx)
        peer_ns = fx.hosts[1].ns
        try:
            r = subprocess.run(sp + env + [prog, peer_ns, sip], capture_output=True,
                               text=True, timeout=TIMEOUT)
            out, rc = r.stdout + r.stderr, r.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"{e.stdout or ''}{e.stderr or ''}(timeout {TIMEOUT} s)", "timeout"
    print(f"--- rsocket_keepalive {peer_ns} {sip}: exit {rc} ---\n{out}")
    ok = rc == 0 and "ok" in out.split()
    print(f"rsocket_keepalive.py: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
