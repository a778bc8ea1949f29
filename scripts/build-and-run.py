#!/usr/bin/env python3
"""Builds some ninja targets, then runs a command: for tests whose programs are not built by
default (c-tests/), so that a program that does not compile or link fails its own test instead
of the whole build.

  build-and-run.py --build-dir DIR [--ninja NINJA] TARGET... -- COMMAND [ARG...]

TARGETs are output paths (absolute, or relative to DIR). Exit status: COMMAND's, or 1 if the
build failed.
"""

import argparse
import os
import shutil
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        print("build-and-run.py: missing '--' before the command", file=sys.stderr)
        return 2
    split = argv.index("--")
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--ninja", default=os.environ.get("NINJA") or shutil.which("ninja") or "ninja")
    ap.add_argument("targets", nargs="+")
    args = ap.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        print("build-and-run.py: no command after '--'", file=sys.stderr)
        return 2

    build_dir = os.path.abspath(args.build_dir)
    targets = [os.path.relpath(os.path.abspath(t), build_dir) for t in args.targets]
    cmd = [args.ninja, "-C", build_dir] + targets
    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        print(r.stdout, end="")
        print(f"build-and-run.py: FAIL: building {' '.join(targets)} failed", flush=True)
        return 1
    sys.stdout.flush()
    env = dict(os.environ)
    # A sanitizer build (build-asan): a test program linked with librdmashim.so must load the
    # sanitizer runtime first. Python runners (run-pair.py) do that for their own children.
    if not os.path.basename(command[0]).startswith("python"):
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import sanitizer_env
        sanitizer_env.with_runtime(env, build_dir)
    return subprocess.run(command, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
