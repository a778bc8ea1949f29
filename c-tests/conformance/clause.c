/* The clause harness: see clause.h. */
#include "clause.h"

#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#ifndef CONF_SRCDIR
#define CONF_SRCDIR "."
#endif

struct xfail {
	char clause[64];
	char issue[16];
};

static const char *g_page = "?";
static char g_mode[32] = "manual";
static struct xfail g_xfail[256];
static int g_nxfail;
static int g_bad;
static uint16_t g_port_base;
static const char *volatile g_last = "(none)";
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

const char *conf_page(void)
{
	return g_page;
}

int conf_native(void)
{
	return strcmp(g_mode, "native") == 0;
}

const char *conf_errname(int e)
{
	static __thread char buf[4][24];
	static __thread int slot;
	const char *n = e > 0 ? strerrorname_np(e) : NULL;
	if (n)
		return n;
	char *b = buf[slot++ & 3];
	snprintf(b, sizeof buf[0], "errno %d", e);
	return b;
}

static void on_alarm(int sig)
{
	(void)sig;
	char msg[256];
	int n = snprintf(msg, sizeof msg, "# TIMEOUT: %s stopped by its alarm; last clause reported: %s\n"
			 "BAIL %s: timed out\n", g_page, g_last, g_page);
	if (n > 0 && write(STDOUT_FILENO, msg, (size_t)n) < 0)
		_exit(3);
	_exit(2);
}

static void load_xfail(void)
{
	const char *path = getenv("CONF_XFAIL");
	char def[4096];
	if (!path || !*path) {
		snprintf(def, sizeof def, "%s/xfail.txt", CONF_SRCDIR);
		path = def;
	}
	FILE *f = fopen(path, "r");
	if (!f) {
		conf_note("no xfail list at %s", path);
		return;
	}
	char line[1024];
	while (fgets(line, sizeof line, f)) {
		char page[128], clause[64], issue[16];
		if (line[0] == '#' || sscanf(line, "%127s %63s %15s", page, clause, issue) != 3)
			continue;
		if (strcmp(page, g_page) != 0 || g_nxfail >= (int)(sizeof g_xfail / sizeof g_xfail[0]))
			continue;
		snprintf(g_xfail[g_nxfail].clause, sizeof g_xfail[0].clause, "%s", clause);
		snprintf(g_xfail[g_nxfail].issue, sizeof g_xfail[0].issue, "%s", issue);
		g_nxfail++;
	}
	fclose(f);
}

static const struct xfail *find_xfail(const char *clause)
{
	if (conf_native())
		return NULL;
	for (int i = 0; i < g_nxfail; i++)
		if (strcmp(g_xfail[i].clause, clause) == 0)
			return &g_xfail[i];
	return NULL;
}

/* Which libraries are mapped, and where the process's rdma_create_id/ibv_alloc_pd bind. */
static void note_loading(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (f) {
		char line[4096], seen[16][1024];
		int nseen = 0;
		while (fgets(line, sizeof line, f)) {
			char *p = strchr(line, '/');
			if (!p)
				continue;
			p[strcspn(p, "\n")] = 0;
			if (!strstr(p, "librdmacm") && !strstr(p, "libibverbs") && !strstr(p, "librdmashim"))
				continue;
			int dup = 0;
			for (int i = 0; i < nseen; i++)
				dup |= strcmp(seen[i], p) == 0;
			if (dup || nseen >= 16)
				continue;
			snprintf(seen[nseen++], sizeof seen[0], "%s", p);
			conf_note("map %s", p);
		}
		fclose(f);
	}
	Dl_info info;
	if (dladdr((void *)rdma_create_id, &info) && info.dli_fname)
		conf_note("bind rdma_create_id %s", info.dli_fname);
	if (dladdr((void *)ibv_alloc_pd, &info) && info.dli_fname)
		conf_note("bind ibv_alloc_pd %s", info.dli_fname);
}

void conf_begin(const char *page, int argc, char **argv)
{
	g_page = page;
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *m = getenv("CONF_MODE");
	if (m && *m)
		snprintf(g_mode, sizeof g_mode, "%s", m);
	const char *t = getenv("CONF_TIMEOUT");
	int secs = t ? atoi(t) : 0;
	signal(SIGALRM, on_alarm);
	alarm(secs > 0 ? (unsigned)secs : 20);
	signal(SIGPIPE, SIG_IGN);

	const char *p = getenv("CONF_PORT");
	long base = p ? strtol(p, NULL, 10) : 0;
	if (base <= 0 && argc > 1)
		base = strtol(argv[1], NULL, 10);
	if (base <= 0 || base > 65535 - 32) {
		uint32_t h = 2166136261u;
		for (const char *c = page; *c; c++)
			h = (h ^ (uint8_t)*c) * 16777619u;
		base = 10000 + (long)(h % 280) * 32;
	}
	g_port_base = (uint16_t)base;
	load_xfail();
	conf_note("page %s, mode %s, ports %u..%u, %d expected failure(s) listed", page, g_mode,
		  g_port_base, g_port_base + 31, g_nxfail);
	note_loading();
}

uint16_t conf_port(int k)
{
	return (uint16_t)(g_port_base + (k & 31));
}

void conf_note(const char *fmt, ...)
{
	char buf[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&g_lock);
	printf("# %s\n", buf);
	fflush(stdout);
	pthread_mutex_unlock(&g_lock);
}

int conf_check(const char *clause, int ok, const char *file, int line, const char *fmt, ...)
{
	int saved = errno;
	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	const struct xfail *x = find_xfail(clause);
	char issue[40] = "";
	if (x)
		snprintf(issue, sizeof issue, strcmp(x->issue, "-") == 0 ? " (no issue)" : " (issue %s)",
			 x->issue);
	pthread_mutex_lock(&g_lock);
	g_last = clause;
	if (ok && !x) {
		printf("PASS %s %s\n", g_page, clause);
	} else if (ok) {
		printf("XPASS %s %s%s: listed in xfail.txt but passes now; remove it from xfail.txt and "
		       "mark the row in docs/CONFORMANCE.md as pass\n", g_page, clause, issue);
		g_bad = 1;
	} else if (x) {
		printf("XFAIL %s %s%s: %s [%s:%d]\n", g_page, clause, issue, msg, base, line);
	} else {
		printf("FAIL %s %s: %s [%s:%d]\n", g_page, clause, msg, base, line);
		g_bad = 1;
	}
	fflush(stdout);
	pthread_mutex_unlock(&g_lock);
	errno = saved;
	return ok;
}

int conf_skip(const char *reason)
{
	alarm(0);
	conf_note("SKIP %s: %s", g_page, reason);
	fflush(stdout);
	return 77;
}

int conf_end(void)
{
	alarm(0);
	conf_note("end of %s: %s", g_page, g_bad ? "failed" : "ok");
	fflush(stdout);
	return g_bad ? 1 : 0;
}
