#!/usr/bin/env python3
"""conf-build: builds every conformance program before the conformance tests run.

  build.py --build-dir DIR -- TARGET...

Runs the conformance suite's first test (meson priority 1000, alone): clears
<build>/conformance-results (the per-test outputs conf-summary reads), then `ninja -k 0` on all
targets, so that one page that does not compile leaves every other page built. A page whose
program failed to build fails its own tests (run.py tries once more and prints the compiler
output); this test fails too and lists them. ninja runs under the lock run.py uses.
"""

import argparse
import fcntl
import os
import re
import shutil
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        print("build.py: missing '--' before the targets", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--ninja", default=os.environ.get("NINJA") or shutil.which("ninja") or "ninja")
    args = ap.parse_args(argv[:split])
    build_dir = os.path.abspath(args.build_dir)
    targets = [os.path.relpath(os.path.abspath(t), build_dir) for t in argv[split + 1:]]

    results = os.path.join(build_dir, "conformance-results")
    if os.path.isdir(results):
        for name in os.listdir(results):
            if name.endswith(".txt"):
                os.remove(os.path.join(results, name))
    os.makedirs(results, exist_ok=True)

    with open(os.path.join(results, ".ninja.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cmd = [args.ninja, "-C", build_dir, "-k", "0"] + targets
        print(f"+ ninja -C {build_dir} -k 0 <{len(targets)} conformance programs>", flush=True)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    failed = sorted(set(re.findall(r"^FAILED: (\S+)", r.stdout, re.M)))
    if r.returncode != 0:
        print(r.stdout, end="")
        print(f"build.py: FAIL: {len(failed)} build step(s) failed: {' '.join(failed) or '(see above)'}")
        print("build.py: the pages whose programs did not build fail their own tests; the rest run.")
        return 1
    built = sum(1 for t in targets if os.path.exists(os.path.join(build_dir, t)))
    print(f"build.py: {built} of {len(targets)} conformance programs are built")
    return 0


if __name__ == "__main__":
    sys.exit(main())
