"""Shared parsing for the conformance scripts: clause ids in the page programs, the
page -> clause -> test -> status table of docs/CONFORMANCE.md, and xfail.txt."""

import glob
import os
import re
import subprocess

CLAUSE_RE = re.compile(r'\bCLAUSE(?:_BLOCKED|_ID)?\s*\(\s*"([^"]+)"')
ROW_RE = re.compile(r"^\|\s*([A-Za-z0-9_]+)\((\d)\)\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*$")
STATUS_RE = re.compile(r"^(pass|FAIL|xfail #(\d+)|xfail \(no issue\))$")
NOT_PAGES = {"clause", "cmhelp", "ibvhelp"}


def page_id(name, section):
    """rdma_accept(3) -> rdma_accept; rdma_cm(7) -> rdma_cm.7 (the test file stem)."""
    return name if section == "3" else f"{name}.{section}"


def page_title(page):
    """rdma_accept -> rdma_accept(3); rdma_cm.7 -> rdma_cm(7)."""
    m = re.match(r"^(.*)\.(\d)$", page)
    return f"{m.group(1)}({m.group(2)})" if m else f"{page}(3)"


def declared_clauses(source):
    """Clause ids a page program declares, in order of first appearance (comments stripped)."""
    with open(source, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    seen = []
    for c in CLAUSE_RE.findall(text):
        if c not in seen:
            seen.append(c)
    return seen


def test_files(tests_dir):
    """{page: path} of the page programs in c-tests/conformance."""
    out = {}
    for path in glob.glob(os.path.join(tests_dir, "*.c")):
        stem = os.path.basename(path)[:-2]
        if stem not in NOT_PAGES:
            out[stem] = path
    return out


def table_rows(doc):
    """[(page, clause, summary, test, status, line_no)] of the table in docs/CONFORMANCE.md."""
    rows = []
    with open(doc, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            m = ROW_RE.match(line.rstrip("\n"))
            if m:
                rows.append((page_id(m.group(1), m.group(2)), m.group(3), m.group(4).strip(),
                             m.group(5), m.group(6), n))
    return rows


def xfail_entries(path):
    """{(page, clause): (issue, reason)}; issue is a number as text or '-'."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            parts = line.split(None, 3)
            if len(parts) < 3:
                continue
            out[(parts[0], parts[1])] = (parts[2], parts[3].strip() if len(parts) > 3 else "")
    return out


VENDOR_RE = re.compile(r"^(mlx5dv|mlx4dv|efadv|manadv|hns)")


def _man3_files(package):
    try:
        r = subprocess.run(["dpkg", "-L", package], capture_output=True, text=True)
    except OSError:
        return []
    if r.returncode != 0:
        return []
    return [l for l in r.stdout.splitlines() if "/man3/" in l and re.search(r"\.3(\.gz)?$", l)]


def _stem(path):
    return re.sub(r"\.3$", "", re.sub(r"\.gz$", "", os.path.basename(path)))


def _alias_target(path):
    """The page a man3 file stands for: itself, or the page its symlink or `.so` line names."""
    if os.path.islink(path):
        return _stem(os.readlink(path))
    try:
        if path.endswith(".gz"):
            import gzip
            with gzip.open(path, "rt", errors="replace") as f:
                first = f.readline()
        else:
            with open(path, errors="replace") as f:
                first = f.readline()
    except OSError:
        return _stem(path)
    m = re.match(r"^\.so\s+(\S+)", first)
    return _stem(m.group(1)) if m else _stem(path)


def installed_man3_pages():
    """Section-3 pages of librdmacm-dev (dpkg), else the rdma_* pages in /usr/share/man/man3."""
    files = _man3_files("librdmacm-dev")
    if not files:
        files = glob.glob("/usr/share/man/man3/rdma_*.3*")
    return sorted({_stem(f) for f in files})


def installed_ibverbs_pages():
    """The generic (non-vendor) section-3 pages of libibverbs-dev, each alias page (a symlink or
    a `.so` page) folded into the page it points at: {page: [aliases]}. Falls back to the
    ibv_* pages in /usr/share/man/man3."""
    files = _man3_files("libibverbs-dev")
    if not files:
        files = glob.glob("/usr/share/man/man3/ibv_*.3*")
    pages = {}
    for f in files:
        stem = _stem(f)
        if VENDOR_RE.match(stem):
            continue
        target = _alias_target(f)
        pages.setdefault(target, [])
        if target != stem:
            pages[target].append(stem)
    return {p: sorted(a) for p, a in sorted(pages.items())}


def pending_pages(doc):
    """The pages docs/CONFORMANCE.md lists as not covered yet: the `name(3)` names on the lines
    of the paragraph that starts with "Pages without a program yet"."""
    out = []
    inside = False
    with open(doc, encoding="utf-8") as f:
        for line in f:
            if line.startswith("Pages without a program yet"):
                inside = True
            elif inside and not line.strip():
                break
            if inside:
                out += re.findall(r"`([A-Za-z0-9_]+)\(3\)`", line)
    return out
