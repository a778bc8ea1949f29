"""Shared parsing for the conformance scripts: clause ids in the page programs, the
page -> clause -> test -> status table of docs/CONFORMANCE.md, and xfail.txt."""

import glob
import os
import re
import subprocess

CLAUSE_RE = re.compile(r'\bCLAUSE(?:_BLOCKED|_ID)?\s*\(\s*"([^"]+)"')
ROW_RE = re.compile(r"^\|\s*([A-Za-z0-9_]+)\((\d)\)\s*\|\s*`([^`]+)`\s*\|(.*)\|\s*`([^`]+)`\s*\|\s*([^|]+?)\s*\|\s*$")
STATUS_RE = re.compile(r"^(pass|FAIL|xfail #(\d+)|xfail \(no issue\))$")
NOT_PAGES = {"clause", "cmhelp"}


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


def installed_man3_pages():
    """Section-3 pages of librdmacm-dev (dpkg), else the rdma_* pages in /usr/share/man/man3."""
    files = []
    try:
        r = subprocess.run(["dpkg", "-L", "librdmacm-dev"], capture_output=True, text=True)
        if r.returncode == 0:
            files = [l for l in r.stdout.splitlines() if "/man3/" in l and re.search(r"\.3(\.gz)?$", l)]
    except OSError:
        pass
    if not files:
        files = glob.glob("/usr/share/man/man3/rdma_*.3*")
    pages = set()
    for f in files:
        base = os.path.basename(f)
        base = re.sub(r"\.gz$", "", base)
        pages.add(re.sub(r"\.3$", "", base))
    return sorted(pages)
