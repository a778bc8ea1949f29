/*
 * c-tests/conformance: the clause harness shared by the man-page conformance tests.
 *
 * One program per man page (<page>.c). Every testable sentence of the page is a clause with a
 * short id ("RET-0", "EV-ESTABLISHED", ...); docs/CONFORMANCE.md has one row per clause with our
 * own one-line summary of the sentence. A program evaluates each clause it declares with
 *
 *     CLAUSE("RET-0", rc == 0, "rdma_bind_addr returned %d (errno %d)", rc, errno);
 *
 * which prints one line:
 *
 *     PASS  <page> <clause>
 *     FAIL  <page> <clause>: <message> [file:line]
 *     XFAIL <page> <clause> (issue N): <message>       clause listed in xfail.txt, still failing
 *     XPASS <page> <clause> (issue N): ...             listed in xfail.txt but passes: flip it!
 *
 * The program exits 1 if any FAIL or XPASS was printed, else 0. Lines starting with '#' are
 * notes (the runner reads the "# map" and "# bind" notes to prove the loading mode).
 *
 * Environment (set by scripts/conformance/run.py; all optional when run by hand):
 *   CONF_MODE     relink | preload | dropin | native | asan (default: manual). In native mode
 *                 (real rdma-core) xfail.txt is ignored: the reference must pass every clause.
 *   CONF_XFAIL    path of xfail.txt (default: the one next to the sources).
 *   CONF_PORT     first port of this program's range of 32 (default: derived from the page
 *                 name, or argv[1]).
 *   CONF_TIMEOUT  seconds before the alarm stops the program (default 20).
 */
#ifndef CONF_CLAUSE_H
#define CONF_CLAUSE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Starts the program for `page`: alarm, xfail list, port range, loading-mode notes. */
void conf_begin(const char *page, int argc, char **argv);

/* Ends the program: returns the exit status (1 if any FAIL or XPASS, else 0). */
int conf_end(void);

/* Reports one clause. Returns `ok` so that callers can chain on it. */
int conf_check(const char *clause, int ok, const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

#define CLAUSE(id, cond, ...) conf_check((id), !!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* A clause id kept in a variable or table (so that the scripts find it in the source). */
#define CLAUSE_ID(id) (id)

/* A clause that could not be evaluated because its setup failed: reported as failing. */
#define CLAUSE_BLOCKED(id, why) conf_check((id), 0, __FILE__, __LINE__, "not evaluated: %s", (why))

/* The whole page cannot run in this mode: prints "# SKIP <reason>"; returns 77 for main to
 * return (the runner reports the test as skipped, never as passed). */
int conf_skip(const char *reason);

/* Prints "# <text>" (thread-safe). */
void conf_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Port k (0..31) of this program's range, host byte order. */
uint16_t conf_port(int k);

/* 1 when running on real rdma-core (CONF_MODE=native). */
int conf_native(void);

/* The page name given to conf_begin. */
const char *conf_page(void);

/* Name of an errno value ("EINVAL"), or its number as text (static buffer per call site). */
const char *conf_errname(int e);

#endif
