#!/usr/bin/env python3
"""conf-table: fails if docs/CONFORMANCE.md's page -> clause -> test -> status table, the
conformance programs and xfail.txt disagree.

  check_table.py --doc docs/CONFORMANCE.md --tests c-tests/conformance --xfail XFAIL --pages P...

Checks:
  * every section-3 man page of librdmacm-dev (dpkg -L) and every generic one of libibverbs-dev
    (vendor pages mlx5dv_*, mlx4dv_*, efadv_*, manadv_*, hns* excluded; an alias page, a symlink
    or `.so` page such as ibv_dereg_mr, counts as the page it points at) has a program
    <page>.c and is in the meson page list (--pages), or is named in the paragraph "Pages
    without a program yet" of the doc (and then has no program); every program is in the
    list; every listed page has a program;
  * every clause a program declares (CLAUSE("ID", ...)) has a row, and every row names a clause
    its page's program declares, and the program file in its Test column;
  * the Status column is one of: pass | FAIL | xfail #N | xfail (no issue), and says
    "xfail ..." exactly for the clauses xfail.txt lists, with the same issue;
  * xfail.txt names only declared clauses, each once.
Exit 0 when consistent, 1 otherwise (every problem is printed).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import conftable  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--doc", required=True)
    ap.add_argument("--tests", required=True)
    ap.add_argument("--xfail", required=True)
    ap.add_argument("--pages", nargs="+", required=True)
    args = ap.parse_args()

    problems = []
    files = conftable.test_files(args.tests)
    listed = list(args.pages)

    man = conftable.installed_man3_pages()
    if not man:
        problems.append("could not list the man pages of librdmacm-dev (dpkg -L librdmacm-dev)")
    ibv = conftable.installed_ibverbs_pages()
    if not ibv:
        problems.append("could not list the man pages of libibverbs-dev (dpkg -L libibverbs-dev)")
    aliases = {a: p for p, al in ibv.items() for a in al}
    pending = conftable.pending_pages(args.doc)
    for p in pending:
        if p not in ibv and p not in man:
            problems.append(f"'Pages without a program yet' names {p}(3), which is no installed page"
                            + (f" (it is an alias of {aliases[p]}(3))" if p in aliases else ""))
        if p in files or p in listed:
            problems.append(f"'Pages without a program yet' names {p}(3), which has a program now: "
                            "remove it from that paragraph")
    for p in man + sorted(ibv):
        if p in pending:
            continue
        if p not in files:
            problems.append(f"man page {p}(3) has no test program c-tests/conformance/{p}.c "
                            "(nor is it in the doc's 'Pages without a program yet')")
        if p not in listed:
            problems.append(f"man page {p}(3) is not in the page lists of c-tests/conformance/meson.build")
    for p in files:
        if p in aliases:
            problems.append(f"c-tests/conformance/{p}.c: {p}(3) is an alias page of {aliases[p]}(3); "
                            f"its clauses belong in {aliases[p]}.c")
    for p in listed:
        if p not in files:
            problems.append(f"page {p} is listed in meson.build but c-tests/conformance/{p}.c does not exist")
    for p in files:
        if p not in listed:
            problems.append(f"c-tests/conformance/{p}.c is not in conf_pages of meson.build (it never runs)")

    declared = {p: conftable.declared_clauses(path) for p, path in files.items()}
    for p, cl in declared.items():
        if not cl:
            problems.append(f"{p}.c declares no clause")

    rows = conftable.table_rows(args.doc)
    if not rows:
        problems.append(f"{args.doc}: no table rows found")
    seen = {}
    for page, clause, summary, test, status, line in rows:
        key = (page, clause)
        where = f"{os.path.basename(args.doc)}:{line}"
        if key in seen:
            problems.append(f"{where}: duplicate row for {page} {clause} (first at line {seen[key]})")
            continue
        seen[key] = line
        if page not in declared:
            problems.append(f"{where}: row for page {page}, which has no test program")
        elif clause not in declared[page]:
            problems.append(f"{where}: row {page} {clause} has no clause in {page}.c")
        if os.path.basename(test) != f"{page}.c":
            problems.append(f"{where}: row {page} {clause} names test {test}, expected {page}.c")
        if not summary:
            problems.append(f"{where}: row {page} {clause} has no summary")
        if not conftable.STATUS_RE.match(status):
            problems.append(f"{where}: row {page} {clause}: status '{status}' is not one of "
                            "pass | FAIL | xfail #N | xfail (no issue)")
    for page, cl in declared.items():
        for c in cl:
            if (page, c) not in seen:
                problems.append(f"{page}.c: clause {c} has no row in {os.path.basename(args.doc)}")

    xf = conftable.xfail_entries(args.xfail)
    for (page, clause), (issue, reason) in xf.items():
        if page not in declared or clause not in declared[page]:
            problems.append(f"xfail.txt: {page} {clause} is not a clause of any test program")
        if issue != "-" and not issue.isdigit():
            problems.append(f"xfail.txt: {page} {clause}: issue '{issue}' is neither a number nor '-'")
        if not reason:
            problems.append(f"xfail.txt: {page} {clause}: no reason given")
    for page, clause, summary, test, status, line in rows:
        x = xf.get((page, clause))
        where = f"{os.path.basename(args.doc)}:{line}"
        if x:
            want = "xfail (no issue)" if x[0] == "-" else f"xfail #{x[0]}"
            if status != want:
                problems.append(f"{where}: {page} {clause} is in xfail.txt (issue {x[0]}), so its status "
                                f"must be '{want}', not '{status}'")
        elif status.startswith("xfail"):
            problems.append(f"{where}: {page} {clause} says '{status}' but xfail.txt does not list it")

    nclauses = sum(len(c) for c in declared.values())
    if problems:
        for p in problems:
            print(f"check_table: FAIL: {p}")
        print(f"check_table: {len(problems)} problem(s)")
        return 1
    print(f"check_table: OK: {len(man)} librdmacm and {len(ibv)} libibverbs man pages (section 3; "
          f"{len(pending)} without a program yet), {len(files)} test programs, "
          f"{nclauses} clauses, {len(rows)} table rows, {len(xf)} expected failures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
