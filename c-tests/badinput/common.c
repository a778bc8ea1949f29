/* c-tests/badinput: the harness shared by the bad-input programs (see badinput.h). */
#include "badinput.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *current = "?";
static int failures;
static char context[128];

int bi_set_context(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(context, sizeof(context), fmt, ap);
	va_end(ap);
	return 1;
}

int bi_clear_context(void)
{
	context[0] = 0;
	return 0;
}

void bi_fail(const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	failures++;
	printf("FAIL %s: %s:%d: ", current, file, line);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	if (context[0])
		printf(" [%s]", context);
	printf("\n");
	fflush(stdout);
}

int bi_errno_in(int e, const int *list)
{
	for (; *list; list++)
		if (*list == e)
			return 1;
	return 0;
}

const char *bi_errname(int e)
{
	static char buf[4][32];
	static int slot;
	const char *n = e > 0 ? strerrorname_np(e) : NULL;

	if (e == 0)
		return "0";
	if (n)
		return n;
	slot = (slot + 1) % 4;
	snprintf(buf[slot], sizeof(buf[slot]), "%d", e);
	return buf[slot];
}

const char *bi_errs_str(const int *list)
{
	static char buf[256];
	size_t len = 0;

	buf[0] = 0;
	for (; *list && len < sizeof(buf); list++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", len ? " or " : "",
					bi_errname(*list));
	return buf;
}

void *bi_sym(const char *name)
{
	Dl_info info;
	void *p = dlsym(RTLD_DEFAULT, name);

	if (!p) {
		bi_fail(__FILE__, __LINE__, "symbol %s is not exported", name);
		return NULL;
	}
	if (!dladdr(p, &info) || !info.dli_fname || !strstr(info.dli_fname, "rdmashim")) {
		bi_fail(__FILE__, __LINE__, "symbol %s comes from %s, not librdmashim", name,
			info.dli_fname ? info.dli_fname : "?");
		return NULL;
	}
	return p;
}

/* Async-signal-safe: a crash or a timeout inside a case is reported as that case's failure. */
static void say(const char *s)
{
	ssize_t r = write(STDOUT_FILENO, s, strlen(s));
	(void)r;
}

static void on_crash(int sig)
{
	char num[16];
	int i = (int)sizeof(num) - 1;
	int v = sig;

	num[i] = 0;
	do {
		num[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v && i > 0);
	say("FAIL ");
	say(current);
	say(": crashed with signal ");
	say(num + i);
	say("\n");
	signal(sig, SIG_DFL);
	raise(sig);
}

static void on_alarm(int sig)
{
	(void)sig;
	say("FAIL ");
	say(current);
	say(": timed out (the call blocked)\n");
	_exit(3);
}

static int run_one(const struct bi_case *c)
{
	static const int crash_signals[] = { SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL };
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_crash;
	sa.sa_flags = SA_RESETHAND;
	for (size_t i = 0; i < sizeof(crash_signals) / sizeof(crash_signals[0]); i++)
		sigaction(crash_signals[i], &sa, NULL);
	sa.sa_handler = on_alarm;
	sa.sa_flags = 0;
	sigaction(SIGALRM, &sa, NULL);

	current = c->name;
	failures = 0;
	alarm(BI_TIMEOUT_S);
	c->run();
	alarm(0);
	if (failures) {
		fflush(stdout);
		return 1;
	}
	printf("ok %s\n", c->name);
	fflush(stdout);
	return 0;
}

/* The library must be the one under test: librdmashim, not rdma-core's libraries. */
static int check_library(void)
{
	static const char *const probe[] = { "ibv_open_device", "rdma_create_id" };

	for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
		Dl_info info;
		void *p = dlsym(RTLD_DEFAULT, probe[i]);

		if (p && dladdr(p, &info) && info.dli_fname && strstr(info.dli_fname, "rdmashim"))
			continue;
		printf("FAIL %s: %s does not come from librdmashim (%s)\n", current, probe[i],
		       p && dladdr(p, &info) && info.dli_fname ? info.dli_fname : "not found");
		return 0;
	}
	return 1;
}

int bi_main(int argc, char **argv, const struct bi_case *cases, size_t ncases)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CASE | --list | --all\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(argv[1], "--list")) {
		for (size_t i = 0; i < ncases; i++)
			printf("%s\n", cases[i].name);
		return 0;
	}
	if (!strcmp(argv[1], "--all")) {
		int bad = 0;

		for (size_t i = 0; i < ncases; i++) {
			int st;
			pid_t pid;

			fflush(stdout);
			pid = fork();
			if (pid == 0) {
				current = cases[i].name;
				_exit(check_library() ? run_one(&cases[i]) : 1);
			}
			if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
			    WEXITSTATUS(st) != 0) {
				bad++;
				if (pid > 0 && WIFSIGNALED(st))
					printf("(%s killed by signal %d)\n", cases[i].name,
					       WTERMSIG(st));
			}
		}
		printf("%zu cases, %d failed\n", ncases, bad);
		return bad ? 1 : 0;
	}
	for (size_t i = 0; i < ncases; i++) {
		if (strcmp(argv[1], cases[i].name))
			continue;
		current = cases[i].name;
		if (!check_library())
			return 1;
		return run_one(&cases[i]);
	}
	fprintf(stderr, "%s: unknown case '%s' (--list shows them)\n", argv[0], argv[1]);
	return 2;
}
