/* c-tests/rsocket_keepalive.c: SO_KEEPALIVE + TCP_KEEPIDLE on stream rsockets detect a dead
 * peer, as librdmacm's keepalive messages do.
 *
 *   rsocket_keepalive                   # same host: options, live peer, SIGKILLed peer
 *   rsocket_keepalive NETNS SERVER_IP   # the child in namespace NETNS: a silent peer
 *                                       # (root; tests/netns/rsocket_keepalive.py runs it)
 *
 * The parent listens; a forked child connects twice and echoes one message on the first
 * connection. The parent turns keepalive on (idle 1 s) on both, stays idle for 3 s (keepalive
 * messages flow; the connection must still carry a checked echo afterwards). Then the peer
 * goes away while one thread blocks in rrecv on the first connection and another in rpoll on
 * the second; both must return instead of blocking forever.
 *  - Across namespaces (RoCEv2 over UDP) the child is SIGSTOPped: a peer whose host hangs or
 *    vanishes, which sends no disconnect and acknowledges nothing. Only keepalive traffic can
 *    notice (the connections are idle): its write fails after the RC retries, and rrecv gives
 *    -1 with ECONNRESET; rpoll POLLERR or POLLHUP, then rrecv fails (or reads end of stream).
 *  - On one host the child is SIGKILLed: the shared-memory link sees the peer's process go
 *    (as the kernel's CM sends a DREQ for a dead process), so the readers end at once, with
 *    end of stream or ECONNRESET. (A stopped process on the same host still takes writes into
 *    its ring: there, as on one host with librdmacm, nothing ever times out.)
 * alarm() turns a hang into a failure; the time taken is printed, not asserted. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rsocket.h>
#include "rlisten.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
    exit(1); } } while (0)

static struct sockaddr_in addr;
static pid_t child_pid;

/* A stopped child would hold the test's output open forever: every way out kills it. */
static void kill_child(void)
{
	if (child_pid > 0)
		kill(child_pid, SIGKILL);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: timed out (a blocked call never returned)\n";
	kill_child();
	if (write(2, m, sizeof m - 1) < 0)
		_exit(1);
	_exit(1);
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int dial(void)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || rconnect(fd, (struct sockaddr *)&addr, sizeof addr))
		return -1;
	return fd;
}

static const char *netns; /* the child's namespace (cross-namespace mode) */

/* The child runs the peer as a fresh program (exec), in namespace NETNS if one was given: a
 * forked child of a threaded process must not allocate before exec (the sanitizer tree's
 * allocator may have been locked by another thread at fork), and a fresh process carries no
 * state of the parent's. Inherited rsockets in a forked child are rsocket_fork's subject. */
static void child(void)
{
	char port[16], ip[INET_ADDRSTRLEN];
	if (netns) {
		char path[256];
		snprintf(path, sizeof path, "/run/netns/%s", netns);
		int nfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nfd < 0 || setns(nfd, CLONE_NEWNET))
			_exit(9);
	}
	if (!inet_ntop(AF_INET, &addr.sin_addr, ip, sizeof ip))
		_exit(9);
	snprintf(port, sizeof port, "%u", ntohs(addr.sin_port));
	execl("/proc/self/exe", "rsocket_keepalive", "--peer", ip, port, (char *)NULL);
	_exit(9);
}

static void peer(void)
{
	int a = dial(), b = dial();
	if (a < 0 || b < 0) {
		perror("child: rconnect");
		_exit(11);
	}
	char msg[64];
	size_t got = 0;
	while (got < sizeof msg) {
		ssize_t r = rrecv(a, msg + got, sizeof msg - got, 0);
		if (r <= 0)
			_exit(12);
		got += (size_t)r;
	}
	if (rsend(a, msg, sizeof msg, 0) != (ssize_t)sizeof msg)
		_exit(13);
	for (;;)
		pause(); /* stopped, then killed */
}

struct waiter {
	int fd;
	int poll; /* 1: rpoll first */
	int ret, err;
	short revents;
	double took;
};

static void *wait_dead(void *arg)
{
	struct waiter *w = arg;
	double t0 = now();
	char c;
	if (w->poll) {
		struct pollfd p = { .fd = w->fd, .events = POLLIN };
		int n = rpoll(&p, 1, -1);
		w->revents = n == 1 ? p.revents : 0;
	}
	errno = 0;
	w->ret = (int)rrecv(w->fd, &c, 1, 0);
	w->err = errno;
	w->took = now() - t0;
	return NULL;
}

static void keepalive_on(int fd)
{
	int on = 1, idle = 1, v = 0;
	socklen_t len = sizeof v;
	CHECK(rsetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0, "SO_KEEPALIVE");
	CHECK(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0, "TCP_KEEPIDLE");
	CHECK(rgetsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &v, &len) == 0 && v == 1, "get SO_KEEPALIVE %d", v);
	len = sizeof v;
	CHECK(rgetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &v, &len) == 0 && v == 1, "get TCP_KEEPIDLE %d", v);
	int bad = 0;
	CHECK(rsetsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &bad, sizeof bad) == -1 && errno == EINVAL,
	      "TCP_KEEPIDLE 0 accepted");
}

int main(int argc, char **argv)
{
	if (argc == 4 && !strcmp(argv[1], "--peer")) {
		addr.sin_family = AF_INET;
		addr.sin_port = htons((uint16_t)atoi(argv[3]));
		if (inet_pton(AF_INET, argv[2], &addr.sin_addr) != 1)
			return 2;
		peer();
	}
	if (argc != 1 && argc != 3) {
		fprintf(stderr, "usage: %s [NETNS SERVER_IP]\n", argv[0]);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	signal(SIGALRM, on_alarm);
	alarm(90);
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (argc == 3) {
		netns = argv[1];
		CHECK(inet_pton(AF_INET, argv[2], &addr.sin_addr) == 1, "address %s", argv[2]);
	}
	int l = rlisten_on(&addr, 4);

	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0)
		child();
	child_pid = pid;
	atexit(kill_child);

	int a = raccept(l, NULL, NULL), b = raccept(l, NULL, NULL);
	CHECK(a >= 0 && b >= 0, "raccept");
	keepalive_on(a);
	keepalive_on(b);

	/* Idle across several keepalive intervals: the live peer takes them silently. */
	sleep(3);
	char out[64], in[64];
	for (size_t i = 0; i < sizeof out; i++)
		out[i] = (char)(i * 7 + 3);
	CHECK(rsend(a, out, sizeof out, 0) == (ssize_t)sizeof out, "rsend");
	size_t got = 0;
	while (got < sizeof in) {
		ssize_t r = rrecv(a, in + got, sizeof in - got, 0);
		CHECK(r > 0, "echo rrecv %zd", r);
		got += (size_t)r;
	}
	CHECK(memcmp(in, out, sizeof in) == 0, "echo differs");
	printf("live peer: echo intact after 3 s of keepalives\n");
	fflush(stdout);

	struct waiter wa = { .fd = a, .poll = 0 }, wb = { .fd = b, .poll = 1 };
	pthread_t ta, tb;
	CHECK(pthread_create(&ta, NULL, wait_dead, &wa) == 0, "thread");
	CHECK(pthread_create(&tb, NULL, wait_dead, &wb) == 0, "thread");
	usleep(200 * 1000); /* let both block */
	CHECK(kill(pid, netns ? SIGSTOP : SIGKILL) == 0, "kill");
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	if (netns)
		CHECK(kill(pid, SIGKILL) == 0, "kill");
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	child_pid = 0;
	CHECK(WIFSIGNALED(status), "child ended otherwise (status %d) before it was killed", status);
	printf("rrecv: %d errno %d (%s) after %.1f s\n", wa.ret, wa.err, strerror(wa.err), wa.took);
	printf("rpoll: revents 0x%x, then rrecv %d errno %d after %.1f s\n", wb.revents, wb.ret,
	       wb.err, wb.took);
	if (netns)
		CHECK(wa.ret == -1 && wa.err == ECONNRESET, "blocked rrecv gave %d errno %d", wa.ret,
		      wa.err);
	else
		CHECK(wa.ret == 0 || (wa.ret == -1 && wa.err == ECONNRESET), "blocked rrecv gave %d "
		      "errno %d", wa.ret, wa.err);
	CHECK(wb.revents & (POLLERR | POLLHUP), "rpoll revents 0x%x", wb.revents);
	CHECK(wb.ret == 0 || (wb.ret == -1 && wb.err == ECONNRESET), "rrecv after rpoll: %d errno %d",
	      wb.ret, wb.err);
	rclose(a);
	rclose(b);
	rclose(l);
	printf("ok\n");
	return 0;
}
