#!/usr/bin/env python3
"""Consistency checks of the bad-input tests (c-tests/badinput/meson.build runs them).

  badinput.py list-check --program EXE NAME... [--program EXE NAME...]
      Each program's `--list` output must be exactly the case names meson.build registers for
      it (a case added to a program but not to meson.build would never run, and a name in
      meson.build without a case would fail as "unknown case").

  badinput.py coverage --nm NM --lib LIBRARY -- NAME...
      Every function LIBRARY exports (nm -D --defined-only, types T/W/i, version suffix
      stripped) must have a case among NAMEs, and every NAME must be an exported function.
"""

import subprocess
import sys


def fail(msg):
    print(f"FAIL: {msg}", flush=True)
    return 1


def parse_programs(argv):
    """[--program EXE NAME...]... -> [(exe, [names])]"""
    programs = []
    for a in argv:
        if a == "--program":
            programs.append([None, []])
        elif not programs:
            raise SystemExit(f"list-check: expected --program before {a!r}")
        elif programs[-1][0] is None:
            programs[-1][0] = a
        else:
            programs[-1][1].append(a)
    return programs


def list_check(argv):
    bad = 0
    total = 0
    for exe, names in parse_programs(argv):
        r = subprocess.run([exe, "--list"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            bad += fail(f"{exe} --list exited with {r.returncode}:\n{r.stdout}")
            continue
        listed = r.stdout.split()
        total += len(listed)
        dup = sorted({n for n in listed if listed.count(n) > 1})
        if dup:
            bad += fail(f"{exe}: duplicate cases: {' '.join(dup)}")
        missing = sorted(set(listed) - set(names))
        extra = sorted(set(names) - set(listed))
        if missing:
            bad += fail(f"{exe} has cases that c-tests/badinput/meson.build does not register: "
                        + " ".join(missing))
        if extra:
            bad += fail(f"c-tests/badinput/meson.build registers cases that {exe} does not "
                        "have: " + " ".join(extra))
        if not missing and not extra and not dup:
            print(f"ok {exe}: {len(listed)} cases")
    if not bad:
        print(f"ok: {total} cases, lists in sync")
    return 1 if bad else 0


def coverage(argv):
    if "--" not in argv:
        raise SystemExit("coverage: missing '--' before the case names")
    split = argv.index("--")
    opts, names = argv[:split], argv[split + 1:]
    nm = lib = None
    it = iter(opts)
    for a in it:
        if a == "--nm":
            nm = next(it)
        elif a == "--lib":
            lib = next(it)
        else:
            raise SystemExit(f"coverage: unknown option {a!r}")
    if not nm or not lib:
        raise SystemExit("coverage: --nm and --lib are required")
    r = subprocess.run([nm, "-D", "--defined-only", lib], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        return fail(f"{nm} -D --defined-only {lib} failed:\n{r.stderr}")
    exported = set()
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "W", "i"):
            exported.add(parts[2].split("@")[0])
    if not exported:
        return fail(f"no exported functions found in {lib}")
    bad = 0
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        bad += fail("case names registered twice: " + " ".join(dup))
    uncovered = sorted(exported - set(names))
    unknown = sorted(set(names) - exported)
    if uncovered:
        bad += fail(f"{len(uncovered)} exported functions have no bad-input case:\n  "
                    + "\n  ".join(uncovered))
    if unknown:
        bad += fail(f"{len(unknown)} cases name functions {lib} does not export:\n  "
                    + "\n  ".join(unknown))
    if not bad:
        print(f"ok: all {len(exported)} exported functions have a case")
    return 1 if bad else 0


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("list-check", "coverage"):
        print(__doc__, file=sys.stderr)
        return 2
    if sys.argv[1] == "list-check":
        return list_check(sys.argv[2:])
    return coverage(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
