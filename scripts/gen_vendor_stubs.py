#!/usr/bin/env python3
"""Vendor library stubs for the drop-in folder: libmlx5.so.1 and libefa.so.1.

Debian's perftest binaries (ib_send_bw, ...) are linked (BIND_NOW) against libmlx5.so.1 and
libefa.so.1 as well as libibverbs.so.1/librdmacm.so.1, and UCX's libuct_ib.so against
libmlx5.so.1. The system vendor libraries need 61
symbols of libibverbs' private provider node IBVERBS_PRIVATE_34, which the drop-in
libibverbs.so.1 does not have, so with LD_LIBRARY_PATH=<build>/dropin perftest would not even
start. The stubs built from this script take their place in <build>/dropin: same SONAMEs, the
functions perftest imports at the version nodes it imports them at, and every one of them fails
cleanly in its documented convention (NULL with errno = EOPNOTSUPP, or EOPNOTSUPP returned as
an errno value). The soft device is neither an mlx5 nor an EFA device, and perftest calls these
only on vendor-specific paths (mlx5 DEVX/crypto/AES-XTS options, EFA SRD), so a run on the soft
device never reaches them. They link against libc only (no libibverbs, so no private node).

The prototypes come from the system headers <infiniband/mlx5dv.h> and <infiniband/efadv.h>
(libibverbs-dev): the generated C includes them, so a signature that disagrees with the header
does not compile. No code is taken from rdma-core.

  gen_vendor_stubs.py generate <lib> <out.c> <out.map>   # lib: mlx5 | efa (meson runs this)
  gen_vendor_stubs.py imports [binary ...]               # what binaries import (default: perftest's, UCX's and libfabric's)
  gen_vendor_stubs.py check --build-dir build            # the table vs the imports vs the built stubs

Set RDMASHIM_STUB_TRACE=1 to have a stub print one line on stderr when it is called.
"""

import argparse
import glob
import os
import re
import subprocess
import sys

SKIP = 77
EOPNOTSUPP_NULL = "null"     # return NULL, errno = EOPNOTSUPP
EOPNOTSUPP_RET = "errno"     # return EOPNOTSUPP (the function returns an errno value)
EOPNOTSUPP_MINUS1 = "minus1"  # return -1, errno = EOPNOTSUPP
FALSE = "false"              # a predicate: not this vendor's device
VOID = "void"                # nothing to release: the object cannot exist

# (version node, return type, name, parameters, convention). The conventions are those of the
# man pages (mlx5dv_*(3), efadv_*(3)).
LIBS = {
    "mlx5": {
        "soname": "libmlx5.so.1",
        "header": "infiniband/mlx5dv.h",
        "node_prefix": "MLX5_",
        "functions": [
            ("MLX5_1.3", "struct ibv_qp *", "mlx5dv_create_qp",
             [("struct ibv_context *", "context"), ("struct ibv_qp_init_attr_ex *", "qp_attr"),
              ("struct mlx5dv_qp_init_attr *", "mlx5_qp_attr")], EOPNOTSUPP_NULL),
            ("MLX5_1.7", "struct ibv_context *", "mlx5dv_open_device",
             [("struct ibv_device *", "device"), ("struct mlx5dv_context_attr *", "attr")],
             EOPNOTSUPP_NULL),
            ("MLX5_1.7", "int", "mlx5dv_devx_general_cmd",
             [("struct ibv_context *", "context"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_RET),
            ("MLX5_1.10", "struct mlx5dv_mkey *", "mlx5dv_create_mkey",
             [("struct mlx5dv_mkey_init_attr *", "mkey_init_attr")], EOPNOTSUPP_NULL),
            ("MLX5_1.10", "int", "mlx5dv_destroy_mkey",
             [("struct mlx5dv_mkey *", "mkey")], EOPNOTSUPP_RET),
            ("MLX5_1.10", "struct mlx5dv_qp_ex *", "mlx5dv_qp_ex_from_ibv_qp_ex",
             [("struct ibv_qp_ex *", "qp")], EOPNOTSUPP_NULL),
            ("MLX5_1.21", "int", "mlx5dv_crypto_login",
             [("struct ibv_context *", "context"), ("struct mlx5dv_crypto_login_attr *", "login_attr")],
             EOPNOTSUPP_RET),
            ("MLX5_1.21", "struct mlx5dv_dek *", "mlx5dv_dek_create",
             [("struct ibv_context *", "context"), ("struct mlx5dv_dek_init_attr *", "init_attr")],
             EOPNOTSUPP_NULL),
            ("MLX5_1.21", "int", "mlx5dv_dek_destroy",
             [("struct mlx5dv_dek *", "dek")], EOPNOTSUPP_RET),
            # What UCX's libuct_ib.so imports (its mlx5 transports; the soft device is not one).
            ("MLX5_1.1", "struct ibv_cq_ex *", "mlx5dv_create_cq",
             [("struct ibv_context *", "context"), ("struct ibv_cq_init_attr_ex *", "cq_attr"),
              ("struct mlx5dv_cq_init_attr *", "mlx5_cq_attr")], EOPNOTSUPP_NULL),
            ("MLX5_1.2", "int", "mlx5dv_init_obj",
             [("struct mlx5dv_obj *", "obj"), ("uint64_t", "obj_type")], EOPNOTSUPP_RET),
            ("MLX5_1.7", "struct mlx5dv_devx_uar *", "mlx5dv_devx_alloc_uar",
             [("struct ibv_context *", "context"), ("uint32_t", "flags")], EOPNOTSUPP_NULL),
            ("MLX5_1.7", "void", "mlx5dv_devx_free_uar",
             [("struct mlx5dv_devx_uar *", "devx_uar")], VOID),
            ("MLX5_1.7", "struct mlx5dv_devx_obj *", "mlx5dv_devx_obj_create",
             [("struct ibv_context *", "context"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_NULL),
            ("MLX5_1.7", "int", "mlx5dv_devx_obj_destroy",
             [("struct mlx5dv_devx_obj *", "obj")], EOPNOTSUPP_RET),
            ("MLX5_1.7", "int", "mlx5dv_devx_obj_modify",
             [("struct mlx5dv_devx_obj *", "obj"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_RET),
            ("MLX5_1.7", "int", "mlx5dv_devx_obj_query",
             [("struct mlx5dv_devx_obj *", "obj"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_RET),
            ("MLX5_1.7", "struct mlx5dv_devx_umem *", "mlx5dv_devx_umem_reg",
             [("struct ibv_context *", "ctx"), ("void *", "addr"), ("size_t", "size"),
              ("uint32_t", "access")], EOPNOTSUPP_NULL),
            ("MLX5_1.7", "int", "mlx5dv_devx_umem_dereg",
             [("struct mlx5dv_devx_umem *", "umem")], EOPNOTSUPP_RET),
            ("MLX5_1.8", "int", "mlx5dv_devx_qp_modify",
             [("struct ibv_qp *", "qp"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_RET),
            ("MLX5_1.8", "int", "mlx5dv_devx_qp_query",
             [("struct ibv_qp *", "qp"), ("const void *", "in"), ("size_t", "inlen"),
              ("void *", "out"), ("size_t", "outlen")], EOPNOTSUPP_RET),
            ("MLX5_1.8", "bool", "mlx5dv_is_supported",
             [("struct ibv_device *", "device")], FALSE),
            ("MLX5_1.11", "struct mlx5dv_devx_event_channel *", "mlx5dv_devx_create_event_channel",
             [("struct ibv_context *", "context"),
              ("enum mlx5dv_devx_create_event_channel_flags", "flags")], EOPNOTSUPP_NULL),
            ("MLX5_1.11", "void", "mlx5dv_devx_destroy_event_channel",
             [("struct mlx5dv_devx_event_channel *", "event_channel")], VOID),
            ("MLX5_1.11", "ssize_t", "mlx5dv_devx_get_event",
             [("struct mlx5dv_devx_event_channel *", "event_channel"),
              ("struct mlx5dv_devx_async_event_hdr *", "event_data"),
              ("size_t", "event_resp_len")], EOPNOTSUPP_MINUS1),
            ("MLX5_1.11", "int", "mlx5dv_devx_subscribe_devx_event",
             [("struct mlx5dv_devx_event_channel *", "event_channel"),
              ("struct mlx5dv_devx_obj *", "obj"), ("uint16_t", "events_sz"),
              ("uint16_t *", "events_num"), ("uint64_t", "cookie")], EOPNOTSUPP_RET),
        ],
    },
    "efa": {
        "soname": "libefa.so.1",
        "header": "infiniband/efadv.h",
        "node_prefix": "EFA_",
        "functions": [
            ("EFA_1.1", "int", "efadv_query_device",
             [("struct ibv_context *", "ibvctx"), ("struct efadv_device_attr *", "attr"),
              ("uint32_t", "inlen")], EOPNOTSUPP_RET),
            ("EFA_1.1", "struct ibv_qp *", "efadv_create_qp_ex",
             [("struct ibv_context *", "ibvctx"), ("struct ibv_qp_init_attr_ex *", "attr_ex"),
              ("struct efadv_qp_init_attr *", "efa_attr"), ("uint32_t", "inlen")], EOPNOTSUPP_NULL),
            # What libfabric's efa provider imports (libfabric.so.1 links libefa.so.1).
            ("EFA_1.1", "int", "efadv_query_ah",
             [("struct ibv_ah *", "ibvah"), ("struct efadv_ah_attr *", "attr"),
              ("uint32_t", "inlen")], EOPNOTSUPP_RET),
            ("EFA_1.2", "struct ibv_cq_ex *", "efadv_create_cq",
             [("struct ibv_context *", "ibvctx"), ("struct ibv_cq_init_attr_ex *", "attr_ex"),
              ("struct efadv_cq_init_attr *", "efa_attr"), ("uint32_t", "inlen")], EOPNOTSUPP_NULL),
            ("EFA_1.2", "struct efadv_cq *", "efadv_cq_from_ibv_cq_ex",
             [("struct ibv_cq_ex *", "ibvcqx")], EOPNOTSUPP_NULL),
        ],
    },
}


def node_key(node):
    """MLX5_1.10 -> (1, 10), for ordering the nodes."""
    return tuple(int(x) for x in node.split("_", 1)[1].split("."))


def nodes_of(lib):
    return sorted({f[0] for f in LIBS[lib]["functions"]}, key=node_key)


def gen_c(lib):
    spec = LIBS[lib]
    out = [
        f"/* Generated by scripts/gen_vendor_stubs.py for {spec['soname']} -- do not edit.",
        " * Every function fails cleanly: the soft RDMA device is not a vendor device. */",
        "#include <errno.h>",
        "#include <stdbool.h>",
        "#include <stddef.h>",
        "#include <stdint.h>",
        "#include <stdio.h>",
        "#include <stdlib.h>",
        f"#include <{spec['header']}>",
        "",
        "#define STUB_EXPORT __attribute__((visibility(\"default\")))",
        "",
        "static void stub_trace(const char *fn)",
        "{",
        "\tconst char *t = getenv(\"RDMASHIM_STUB_TRACE\");",
        "",
        "\tif (t && *t && *t != '0')",
        f"\t\tfprintf(stderr, \"rdmashim: {spec['soname']} stub: %s() fails (not a vendor device)\\n\", fn);",
        "}",
        "",
    ]
    for node, ret, name, params, conv in spec["functions"]:
        plist = ", ".join(f"{t}{'' if t.endswith('*') else ' '}{n}" for t, n in params) or "void"
        out.append(f"/* {name}@@{node} */")
        out.append(f"STUB_EXPORT {ret}{'' if ret.endswith('*') else ' '}{name}({plist})")
        out.append("{")
        for _, n in params:
            out.append(f"\t(void){n};")
        out.append(f"\tstub_trace(\"{name}\");")
        if conv == EOPNOTSUPP_NULL:
            out.append("\terrno = EOPNOTSUPP;")
            out.append("\treturn NULL;")
        elif conv == EOPNOTSUPP_RET:
            out.append("\treturn EOPNOTSUPP;")
        elif conv == EOPNOTSUPP_MINUS1:
            out.append("\terrno = EOPNOTSUPP;")
            out.append("\treturn -1;")
        elif conv == FALSE:
            out.append("\treturn false;")
        elif conv == VOID:
            pass
        else:
            raise SystemExit(f"unknown convention {conv!r} for {name}")
        out.append("}")
        out.append("")
    return "\n".join(out)


def gen_map(lib):
    spec = LIBS[lib]
    out = [f"/* Generated by scripts/gen_vendor_stubs.py for {spec['soname']} -- do not edit. */"]
    prev = None
    for i, node in enumerate(nodes_of(lib)):
        out.append(f"{node} {{")
        out.append("\tglobal:")
        for f in spec["functions"]:
            if f[0] == node:
                out.append(f"\t\t{f[2]};")
        if i == 0:
            out.append("\tlocal: *;")
        out.append("}" + (f" {prev};" if prev else ";"))
        prev = node
    return "\n".join(out) + "\n"


def write_if_changed(path, text):
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except OSError:
        pass
    with open(path, "w") as f:
        f.write(text)


def dynsyms(path, objdump):
    """[(name, version, defined, default)] from objdump -T."""
    r = subprocess.run([objdump, "-T", path], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{objdump} -T {path} failed: {r.stderr.strip()}")
    out = []
    for line in r.stdout.splitlines():
        parts = line.split()
        if len(parts) < 4 or not re.match(r"^[0-9a-fA-F]{8,}$", parts[0]):
            continue
        name = parts[-1]
        ver = parts[-2]
        defined = "*UND*" not in parts
        default = not ver.startswith("(")
        out.append((name, ver.strip("()"), defined, default))
    return out


def importers():
    """perftest's binaries, UCX's verbs modules (libuct_ib, libuct_rdmacm) and libfabric (its
    verbs and efa providers are built in): what must load."""
    try:
        r = subprocess.run(["dpkg", "-L", "perftest"], capture_output=True, text=True)
        bins = [p for p in r.stdout.split() if p.startswith("/usr/bin/") and os.path.isfile(p)]
    except OSError:
        bins = []
    if not bins:
        bins = sorted(glob.glob("/usr/bin/ib_*_lat") + glob.glob("/usr/bin/ib_*_bw"))
    bins += sorted(glob.glob("/usr/lib/*/ucx/libuct_ib.so.0") + glob.glob("/usr/lib/*/ucx/libuct_rdmacm.so.0"))
    bins += sorted(glob.glob("/usr/lib/*/libfabric.so.1"))
    out = []
    for b in bins:
        with open(b, "rb") as f:
            if f.read(4) == b"\x7fELF":
                out.append(b)
    return out


def imports(binaries, objdump):
    """{lib: {(name, node): [binary, ...]}} of MLX5_*/EFA_* imports."""
    found = {lib: {} for lib in LIBS}
    for b in binaries:
        for name, ver, defined, _ in dynsyms(b, objdump):
            if defined:
                continue
            for lib, spec in LIBS.items():
                if ver.startswith(spec["node_prefix"]):
                    found[lib].setdefault((name, ver), []).append(os.path.basename(b))
    return found


def cmd_imports(args):
    bins = args.binaries or importers()
    for lib, syms in imports(bins, args.objdump).items():
        print(f"{LIBS[lib]['soname']}:")
        for (name, ver), who in sorted(syms.items(), key=lambda kv: (node_key(kv[0][1]), kv[0][0])):
            print(f"  {name}@{ver}  ({len(who)} binaries)")
    return 0


def cmd_check(args):
    ok = True

    def report(good, msg):
        nonlocal ok
        ok = ok and good
        print(f"[{'OK' if good else 'FAIL'}] {msg}")

    bins = importers()
    if not bins:
        print("SKIP: perftest is not installed")
        return SKIP
    want = imports(bins, args.objdump)
    for lib, spec in LIBS.items():
        table = {(f[2], f[0]) for f in spec["functions"]}
        imported = set(want[lib])
        report(imported <= table,
               f"{spec['soname']}: every import of perftest, UCX and libfabric is in the stub table"
               + ("" if imported <= table else ": missing " + ", ".join(f"{n}@{v}" for n, v in sorted(imported - table))))
        if table - imported:
            print(f"[note] {spec['soname']}: in the table but imported by no perftest, UCX or libfabric binary: "
                  + ", ".join(f"{n}@{v}" for n, v in sorted(table - imported)))
        path = os.path.join(args.build_dir, "dropin", spec["soname"])
        if not os.path.exists(path):
            report(False, f"{path} does not exist (build first)")
            continue
        syms = dynsyms(path, args.objdump)
        exported = {(n, v) for n, v, d, default in syms if d and default and v != "Base" and n != v}
        report(exported == table,
               f"{path} exports exactly the table at its nodes"
               + ("" if exported == table else f": extra {sorted(exported - table)}, missing {sorted(table - exported)}"))
        r = subprocess.run([args.objdump, "-p", path], capture_output=True, text=True)
        soname = re.search(r"^\s*SONAME\s+(\S+)", r.stdout, re.M)
        needed = re.findall(r"^\s*NEEDED\s+(\S+)", r.stdout, re.M)
        report(soname is not None and soname.group(1) == spec["soname"],
               f"{path}: SONAME {soname.group(1) if soname else None}")
        rdma = [n for n in needed if re.match(r"lib(ibverbs|rdmacm|mlx5|efa)\.", n)]
        report(not rdma, f"{path}: NEEDED {' '.join(needed)} (no RDMA library, so no IBVERBS_PRIVATE_*)")
        undef_private = [(n, v) for n, v, d, _ in syms if not d and v.startswith("IBVERBS")]
        report(not undef_private, f"{path}: no libibverbs imports")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("generate", help="write the stub C source and its version script")
    g.add_argument("lib", choices=sorted(LIBS))
    g.add_argument("out_c")
    g.add_argument("out_map")
    i = sub.add_parser("imports", help="list the MLX5_*/EFA_* imports of binaries")
    i.add_argument("binaries", nargs="*")
    i.add_argument("--objdump", default="objdump")
    c = sub.add_parser("check", help="compare the table, perftest's imports and the built stubs")
    c.add_argument("--build-dir", default="build")
    c.add_argument("--objdump", default="objdump")
    args = ap.parse_args()
    if args.cmd == "generate":
        write_if_changed(args.out_c, gen_c(args.lib))
        write_if_changed(args.out_map, gen_map(args.lib))
        return 0
    if args.cmd == "imports":
        return cmd_imports(args)
    return cmd_check(args)


if __name__ == "__main__":
    sys.exit(main())
