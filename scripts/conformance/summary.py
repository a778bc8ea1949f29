#!/usr/bin/env python3
"""conf-summary: the clause counts of the conformance run, per loading mode and per issue.

  summary.py --build-dir DIR --xfail XFAIL --doc DOC --pages P...

Runs last (meson priority -100, alone, verbose) and reads the outputs run.py saved for each
conformance test in <build>/conformance-results/<page>.<mode>.txt. Prints, for each mode, how
many clauses pass, how many are expected failures (and against which issue), how many fail, and
the pages not run; then every failing clause, and rows of docs/CONFORMANCE.md whose status the
run contradicts. Informational: exits 0 (each conformance test fails on its own).
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftable  # noqa: E402

MODES = ["relink", "preload", "dropin", "native", "asan"]
LINE_RE = re.compile(r"^(PASS|FAIL|XFAIL|XPASS) (\S+) ([^\s:]+)(.*)$")
RANK = {"PASS": 0, "XFAIL": 1, "XPASS": 2, "FAIL": 3}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--xfail", required=True)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--pages", nargs="+", required=True)
    args = ap.parse_args()

    results = os.path.join(os.path.abspath(args.build_dir), "conformance-results")
    xf = conftable.xfail_entries(args.xfail)
    rows = {(p, c): s for p, c, _, _, s, _ in conftable.table_rows(args.doc)}
    tests_dir = os.path.dirname(args.xfail)
    declared = {}
    for p in args.pages:
        src = os.path.join(tests_dir, p + ".c")
        declared[p] = conftable.declared_clauses(src) if os.path.exists(src) else []
    total = sum(len(v) for v in declared.values())

    print(f"conformance: {len(args.pages)} pages, {total} clauses "
          f"({len(xf)} listed as expected failures in xfail.txt)")
    print(f"{'mode':8} {'pages run':>9} {'pass':>6} {'xfail':>6} {'fail':>6} {'xpass':>6} {'missing':>8}"
          "   expected failures by issue")
    failures = []
    contradictions = set()
    any_result = False
    for mode in MODES:
        status = {}  # (page, clause) -> (worst, text)
        ran = skipped = 0
        verdict_fail = []
        for p in args.pages:
            path = os.path.join(results, f"{p}.{mode}.txt")
            if not os.path.exists(path):
                continue
            any_result = True
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
            if "#verdict skip" in text:
                skipped += 1
                continue
            ran += 1
            if "#verdict fail" in text:
                probs = [l[len("#problem "):] for l in text.splitlines() if l.startswith("#problem ")]
                verdict_fail.append((p, probs))
            for line in text.splitlines():
                m = LINE_RE.match(line)
                if not m:
                    continue
                kind, page, clause, rest = m.groups()
                key = (page, clause)
                old = status.get(key)
                if old is None or RANK[kind] > RANK[old[0]]:
                    status[key] = (kind, rest.lstrip(": ").strip())
        if ran == 0 and skipped == 0:
            print(f"{mode:8} {'-':>9}   (not run)")
            continue
        if ran == 0:
            print(f"{mode:8} {'0':>9}   SKIPPED ({skipped} pages: no RDMA device, never counted as passed)")
            continue
        counts = {k: 0 for k in RANK}
        by_issue = {}
        for key, (kind, text) in status.items():
            counts[kind] += 1
            if kind == "XFAIL":
                issue = xf.get(key, ("?", ""))[0]
                by_issue[issue] = by_issue.get(issue, 0) + 1
            if kind in ("FAIL", "XPASS"):
                failures.append((mode, key, kind, text))
            doc = rows.get(key)
            if doc == "pass" and kind != "PASS":
                contradictions.add((key, doc, kind))
            if doc == "FAIL" and kind == "PASS":
                contradictions.add((key, doc, kind))
        ran_pages = [p for p in args.pages if os.path.exists(os.path.join(results, f"{p}.{mode}.txt"))]
        missing = sum(1 for p in ran_pages for c in declared[p] if (p, c) not in status)
        issues = ", ".join(("no issue (rsockets)" if i == "-" else f"issue {i}") + f": {n}"
                           for i, n in sorted(by_issue.items(), key=lambda kv: (kv[0] == "-", kv[0])))
        print(f"{mode:8} {ran:>9} {counts['PASS']:>6} {counts['XFAIL']:>6} {counts['FAIL']:>6} "
              f"{counts['XPASS']:>6} {missing:>8}   {issues or '-'}")
        for p, probs in verdict_fail:
            for pr in probs:
                if not pr.startswith("the program exited with 1"):
                    failures.append((mode, (p, "-"), "PROBLEM", pr))
    if not any_result:
        print("conformance: no results yet (run the conformance suite: meson test --suite conformance)")
        return 0
    if failures:
        print("\nfailing clauses (FAIL: the library differs from the page; XPASS: flip xfail.txt):")
        grouped = {}
        for mode, (page, clause), kind, text in failures:
            g = grouped.setdefault((kind, page, clause), [[], text])
            g[0].append(mode)
        for (kind, page, clause), (modes, text) in grouped.items():
            where = page if clause == "-" else f"{page} {clause}"
            print(f"  {kind:7} {where} [{' '.join(modes)}]: {text}")
    if contradictions:
        print("\ndocs/CONFORMANCE.md rows the run contradicts:")
        for (page, clause), doc, kind in sorted(contradictions):
            print(f"  {page} {clause}: the table says {doc}, the run says {kind}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
