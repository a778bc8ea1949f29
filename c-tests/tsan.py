#!/usr/bin/env python3
"""Runs C thread tests against the Rust library built with ThreadSanitizer.

The library is built with `-Zsanitizer=thread` (RUSTC_BOOTSTRAP=1 on the stable toolchain) and
`-Zbuild-std`, so that the Rust standard library is instrumented too: without it, the contended
path of `std::sync::Mutex` (compiled into the uninstrumented std) acquires the lock where TSan
cannot see it, and every structure a Mutex protects is reported as a data race (hundreds of
false reports per run). -Zbuild-std needs the rust-src component (`rustup component add
rust-src`, which scripts/deps does); without it the test is skipped with that reason.

The C program is compiled with `cc -fsanitize=thread` and linked with the staticlib and the
toolchain's own TSan runtime (compiler-rt, `librustc-*_rt.tsan.a`): GCC's libtsan lacks entry
points the Rust compiler's instrumentation calls (`__tsan_memcpy`). Any report fails the test
(halt_on_error); suppressions, if ever needed, go in c-tests/tsan.supp with a reason per line.

Usage: tsan.py --src-root DIR --build-dir DIR --cc CC PROGRAM.c...
"""

import argparse
import glob
import os
import subprocess
import sys

TARGET = "x86_64-unknown-linux-gnu"
NATIVE_LIBS = ["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"]


def skip(why):
    print(f"SKIP: {why}")
    sys.exit(77)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src-root", required=True)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--cc", required=True)
    ap.add_argument("programs", nargs="+")
    a = ap.parse_args()

    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True,
                             check=True).stdout.strip()
    if not os.path.isfile(os.path.join(sysroot, "lib/rustlib/src/rust/library/Cargo.lock")):
        skip("rust-src is not installed (rustup component add rust-src): -Zbuild-std needs it")
    rts = glob.glob(os.path.join(sysroot, f"lib/rustlib/{TARGET}/lib/librustc-*_rt.tsan.a"))
    if not rts:
        skip(f"the toolchain ships no TSan runtime for {TARGET}")

    out = os.path.join(a.build_dir, "tsan")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ)
    env.update({
        "RUSTC_BOOTSTRAP": "1",
        "RUSTFLAGS": "-Zsanitizer=thread",
        "CARGO_TARGET_DIR": os.path.join(a.build_dir, "tsan-target"),
        "CARGO_TERM_COLOR": "never",
    })
    print("building the TSan library (with -Zbuild-std; the first build takes a few minutes)",
          flush=True)
    subprocess.run(["cargo", "build", "-Zbuild-std", "--release", "--lib", "--target", TARGET,
                    "--manifest-path", os.path.join(a.src_root, "Cargo.toml")],
                   env=env, check=True)
    lib = os.path.join(a.build_dir, "tsan-target", TARGET, "release", "librdmashim.a")

    supp = os.path.join(a.src_root, "c-tests", "tsan.supp")
    opts = "halt_on_error=1 exitcode=66 second_deadlock_stack=1"
    if os.path.isfile(supp):
        opts += f" suppressions={supp}"
    failed = 0
    for prog in a.programs:
        name = os.path.splitext(os.path.basename(prog))[0]
        obj = os.path.join(out, name + ".o")
        exe = os.path.join(out, name)
        subprocess.run([a.cc, "-fsanitize=thread", "-g", "-O1",
                        "-I", os.path.join(a.src_root, "include"), "-c", prog, "-o", obj],
                       check=True)
        subprocess.run([a.cc, "-o", exe, obj, lib, "-Wl,--whole-archive", rts[0],
                        "-Wl,--no-whole-archive"] + NATIVE_LIBS, check=True)
        run_env = dict(os.environ, TSAN_OPTIONS=opts, RDMASHIM_PROVIDER="soft")
        print(f"running {name} under ThreadSanitizer", flush=True)
        r = subprocess.run([exe], env=run_env, timeout=600)
        if r.returncode != 0:
            print(f"FAIL {name}: exit status {r.returncode}"
                  + (" (ThreadSanitizer report)" if r.returncode == 66 else ""))
            failed += 1
        else:
            print(f"ok {name}: no ThreadSanitizer report")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
