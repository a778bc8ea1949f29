#!/usr/bin/env python3
"""Builds the rdmashim staticlib with cargo for meson.

Meson calls this from a custom_target. It runs `cargo build` (release profile by default) with
the target directory inside the meson build directory, copies the resulting `librdmashim.a` to
the path meson expects, and rewrites cargo's dep-info file (`librdmashim.d`) into a Makefile-style
depfile naming that output, so that ninja reruns cargo whenever a Rust source (or Cargo.toml /
Cargo.lock) changes.
"""

import argparse
import os
import shutil
import subprocess
import sys


def parse_dep_info(path):
    """Returns the prerequisites listed in cargo's Makefile-style dep-info file."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # Join continuation lines, then take everything after the first unescaped ': ' of the
    # first rule (cargo writes one rule: `<artifact>: <dep> <dep> ...`).
    text = text.replace("\\\n", " ")
    deps = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        # Find the rule separator, skipping escaped colons/spaces in the target path.
        i = 0
        sep = -1
        while i < len(line):
            c = line[i]
            if c == "\\":
                i += 2
                continue
            if c == ":" and (i + 1 == len(line) or line[i + 1] in " \t"):
                sep = i
                break
            i += 1
        if sep < 0:
            continue
        rest = line[sep + 1:]
        # Split on unescaped whitespace.
        cur = []
        j = 0
        while j < len(rest):
            c = rest[j]
            if c == "\\" and j + 1 < len(rest):
                cur.append(rest[j + 1])
                j += 2
                continue
            if c in " \t":
                if cur:
                    deps.append("".join(cur))
                    cur = []
            else:
                cur.append(c)
            j += 1
        if cur:
            deps.append("".join(cur))
        break  # only the first rule names the artifact's inputs
    return deps


def escape_make(path):
    return path.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cargo", default=os.environ.get("CARGO", "cargo"))
    ap.add_argument("--manifest-path", required=True)
    ap.add_argument("--target-dir", required=True)
    ap.add_argument("--profile", default="release")
    ap.add_argument("--crate", default="rdmashim", help="library crate name (lib<crate>.a)")
    ap.add_argument("--bin", help="build this binary target instead of the library")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="set for cargo (read by option_env! in the crate)")
    ap.add_argument("--output", required=True, help="where meson wants the staticlib")
    ap.add_argument("--depfile", required=True)
    ap.add_argument("--sanitizer", choices=("none", "address", "thread"), default="none",
                    help="build the library instrumented by this sanitizer (RUSTC_BOOTSTRAP=1 "
                         "-Zsanitizer on the stable toolchain; the host target is named so that "
                         "build scripts stay uninstrumented)")
    ap.add_argument("extra", nargs="*", help="extra cargo arguments (after --)")
    args = ap.parse_args()

    manifest = os.path.abspath(args.manifest_path)
    target_dir = os.path.abspath(args.target_dir)
    src_root = os.path.dirname(manifest)

    env = dict(os.environ)
    env["CARGO_TARGET_DIR"] = target_dir
    # Let cargo's own colour/progress logic decide; meson runs us in the console pool.
    for kv in args.env:
        name, _, value = kv.partition("=")
        env[name] = value
    cmd = [
        args.cargo, "build",
        "--manifest-path", manifest,
        "--target-dir", target_dir,
    ] + (["--bin", args.bin] if args.bin else ["--lib"])
    triple_dir = []
    if args.sanitizer != "none":
        host = subprocess.run([os.environ.get("RUSTC", "rustc"), "-vV"], capture_output=True,
                              text=True, check=True).stdout
        triple = next(line.split()[1] for line in host.splitlines() if line.startswith("host:"))
        env["RUSTC_BOOTSTRAP"] = "1"
        env["RUSTFLAGS"] = (env.get("RUSTFLAGS", "") + f" -Zsanitizer={args.sanitizer}"
                            " -Cforce-frame-pointers=yes").strip()
        cmd += ["--target", triple]
        triple_dir = [triple]
    if args.profile == "release":
        cmd.append("--release")
    elif args.profile != "dev":
        cmd += ["--profile", args.profile]
    cmd += args.extra

    print("+ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, cwd=src_root, env=env)
    if r.returncode != 0:
        return r.returncode

    profile_dir = "debug" if args.profile == "dev" else args.profile
    artifact = args.bin if args.bin else f"lib{args.crate}"
    built = os.path.join(target_dir, *triple_dir, profile_dir,
                         artifact if args.bin else f"{artifact}.a")
    dep_info = os.path.join(target_dir, *triple_dir, profile_dir, f"{artifact}.d")
    if not os.path.exists(built):
        print(f"cargo_wrapper: cargo did not produce {built}", file=sys.stderr)
        return 1

    out = os.path.abspath(args.output)
    tmp = out + ".tmp"
    shutil.copy2(built, tmp)
    os.replace(tmp, out)
    # copy2 keeps cargo's mtime; make sure ninja sees the output as newer than its inputs.
    os.utime(out, None)

    deps = []
    if os.path.exists(dep_info):
        deps = parse_dep_info(dep_info)
    # Manifest and lockfile changes (new dependencies, profile changes) must rebuild too.
    for extra in ("Cargo.toml", "Cargo.lock"):
        p = os.path.join(src_root, extra)
        if os.path.exists(p):
            deps.append(p)
    seen = set()
    uniq = []
    for d in deps:
        d = os.path.abspath(os.path.join(src_root, d))
        if d not in seen:
            seen.add(d)
            uniq.append(d)
    with open(args.depfile, "w", encoding="utf-8") as f:
        f.write(escape_make(args.output) + ":")
        for d in uniq:
            f.write(" \\\n  " + escape_make(d))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
