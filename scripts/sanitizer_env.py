"""The sanitizer runtime a build's librdmashim.so needs (meson -Dsanitize_library=address or
thread), for the programs that load it.

Debian's programs and our C tests are not instrumented, so the runtime would otherwise come
after libc in the library list, which ASan and TSan refuse: they must be preloaded first.
"""

import os
import re
import shutil
import subprocess


def runtime_preload(build_dir):
    """Paths to put first in LD_PRELOAD: the sanitizer runtime librdmashim.so was linked with,
    or [] for an ordinary build."""
    lib = os.path.join(build_dir, "librdmashim.so")
    readelf = shutil.which("readelf")
    if not readelf or not os.path.exists(lib):
        return []
    out = subprocess.run([readelf, "-d", lib], capture_output=True, text=True).stdout
    runtimes = re.findall(r"NEEDED\)\s+Shared library: \[(lib[at]san\.so[.\d]*)\]", out)
    paths = []
    for name in runtimes:
        cc = shutil.which("gcc") or shutil.which("cc")
        p = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True,
                           text=True).stdout.strip() if cc else name
        paths.append(os.path.realpath(p) if os.path.isabs(p) else name)
    return paths


def with_runtime(env, build_dir):
    """`env` with the runtime prepended to LD_PRELOAD (unchanged for ordinary builds)."""
    pre = runtime_preload(build_dir)
    if pre:
        rest = [p for p in env.get("LD_PRELOAD", "").split() if p]
        env["LD_PRELOAD"] = " ".join(pre + rest)
    return env
