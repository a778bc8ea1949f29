#!/usr/bin/env python3
"""Checks the ctypes structures of rdma.py against the installed rdma-core headers: compiles a
C program that prints sizeof and offsetof for every structure and field rdma.py declares, and
compares. Exit 0 when all agree; prints each difference otherwise. Needs a C compiler (CC,
default cc) and the libibverbs/librdmacm development headers."""

import ctypes
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rdma  # noqa: E402


def expected():
    """name -> value as ctypes computes it: 'S' for sizeof, 'S.f' for offsetof."""
    out = {}
    for name, cls in rdma.LAYOUTS.items():
        out[name] = ctypes.sizeof(cls)
        for f in cls._fields_:
            if not f[0].startswith("_"):
                out[f"{name}.{f[0]}"] = getattr(cls, f[0]).offset
    return out


def c_source(names):
    lines = ["#include <stddef.h>", "#include <stdio.h>", "#include <rdma/rdma_cma.h>",
             "#include <infiniband/verbs.h>", "int main(void)", "{"]
    for n in names:
        if "." in n:
            s, f = n.split(".")
            lines.append(f'\tprintf("{n} %zu\\n", offsetof(struct {s}, {f}));')
        else:
            lines.append(f'\tprintf("{n} %zu\\n", sizeof(struct {n}));')
    lines += ["\treturn 0;", "}"]
    return "\n".join(lines) + "\n"


def main():
    want = expected()
    with tempfile.TemporaryDirectory() as d:
        src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
        with open(src, "w") as f:
            f.write(c_source(want))
        subprocess.run([os.environ.get("CC", "cc"), "-o", exe, src], check=True)
        got = dict(line.rsplit(" ", 1) for line in
                   subprocess.run([exe], check=True, capture_output=True, text=True)
                   .stdout.splitlines())
    bad = [f"{n}: ctypes {v}, C {got.get(n)}" for n, v in want.items() if str(v) != got.get(n)]
    for b in bad:
        print("layout mismatch:", b)
    print(f"check_layout: {len(want) - len(bad)} of {len(want)} sizes and offsets agree")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
