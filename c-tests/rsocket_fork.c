/* c-tests/rsocket_fork.c: fork() in a process that uses rsockets.
 *
 * The parent holds a connected pair (A, B: both ends in this process) and two threads stream
 * A->B, every byte checked, from before the first fork until after the last: the main thread
 * forks 6 children meanwhile. As with librdmacm,
 * a child may not use its parent's rsockets: here they are not rsockets in the child (EBADF),
 * rclose lets go of the child's descriptors and leaves the parent's connection alone. Each
 * child then makes and uses rsockets of its own (a listener and a connected pair, 256 KiB
 * each way, checked) and ends: by exit() after closing the inherited sockets, by _exit() with
 * them still open, or by SIGKILL from the parent. The parent's stream must end intact (every
 * byte sent read back, then end of stream after A's SHUT_WR); B->A still carries a checked
 * message. alarm() turns a hang into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rsocket.h>
#include "rlisten.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d (%s): ", __FILE__, __LINE__, \
    who); fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, \
    strerror(errno)); exit(1); } } while (0)

#define CHILD_BYTES (48u << 10) /* one thread sends, then receives: less than a buffer */
#define CHILDREN 6

static const char *who = "parent";
static int in_child;

/* LeakSanitizer's hook (sanitizer/lsan_interface.h), only consulted in the sanitizer build: no
 * leak check at a child's exit(). The parent's objects that a forked child inherits and may not
 * use (the CM's and the engine's state of the parent's generation, not only its rsockets) are
 * unreachable there by design; the parent's own exit is still checked. */
int __lsan_is_turned_off(void);
int __lsan_is_turned_off(void)
{
	return in_child;
}

static unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)(((i * 2654435761u) >> 13) ^ seed);
}

/* A connected pair through a fresh listener on 127.0.0.1; the listener stays in *lp. */
static void make_pair(int *lp, int *a, int *b)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int l = rlisten_on(&addr, 1);
	*a = rsocket(AF_INET, SOCK_STREAM, 0);
	CHECK(*a >= 0, "rsocket");
	/* Non-blocking connect: the same thread accepts. */
	CHECK(rfcntl(*a, F_SETFL, O_NONBLOCK) == 0, "O_NONBLOCK");
	int r = rconnect(*a, (struct sockaddr *)&addr, sizeof addr);
	CHECK(r == 0 || errno == EINPROGRESS, "rconnect");
	*b = raccept(l, NULL, NULL);
	CHECK(*b >= 0, "raccept");
	struct pollfd p = { .fd = *a, .events = POLLOUT };
	CHECK(rpoll(&p, 1, 20000) == 1, "connect did not complete");
	CHECK(rfcntl(*a, F_SETFL, 0) == 0, "blocking");
	*lp = l;
}

static void send_all(int fd, unsigned seed, size_t total, size_t base)
{
	static __thread unsigned char buf[40000];
	size_t off = 0, step = 1;
	while (off < total) {
		size_t n = (step++ * 7919) % sizeof buf + 1;
		if (n > total - off)
			n = total - off;
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(seed, base + off + i);
		ssize_t r = rsend(fd, buf, n, 0);
		CHECK(r > 0, "rsend at %zu", off);
		off += (size_t)r;
	}
}

static void recv_all(int fd, unsigned seed, size_t total)
{
	static __thread unsigned char buf[30000];
	size_t off = 0;
	while (off < total) {
		size_t n = total - off < sizeof buf ? total - off : sizeof buf;
		ssize_t r = rrecv(fd, buf, n, 0);
		CHECK(r > 0, "rrecv at %zu of %zu: %zd", off, total, r);
		for (ssize_t i = 0; i < r; i++)
			CHECK(buf[i] == pattern(seed, off + (size_t)i), "byte %zu differs", off + (size_t)i);
		off += (size_t)r;
	}
}

static int A, B;
static int notify_fd = -1;

static int forks_done; /* __atomic: read by the streamer */
static size_t streamed, drained;

static void *streamer(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&forks_done, __ATOMIC_ACQUIRE)) {
		send_all(A, 0x5a, 1u << 20, streamed);
		streamed += 1u << 20;
	}
	CHECK(rshutdown(A, SHUT_WR) == 0, "rshutdown");
	return NULL;
}

static void *drainer(void *arg)
{
	(void)arg;
	static unsigned char buf[30000];
	for (;;) {
		ssize_t r = rrecv(B, buf, sizeof buf, 0);
		CHECK(r >= 0, "rrecv at %zu", drained);
		if (r == 0)
			return NULL;
		for (ssize_t i = 0; i < r; i++)
			CHECK(buf[i] == pattern(0x5a, drained + (size_t)i), "byte %zu differs",
			      drained + (size_t)i);
		drained += (size_t)r;
	}
}

static void child(int n, int listener)
{
	static char name[32];
	snprintf(name, sizeof name, "child %d", n);
	who = name;
	in_child = 1;
	int fds[3] = { A, B, listener };
	char c = 0;
	/* The parent's sockets are not this process's rsockets. */
	for (int i = 0; i < 3; i++) {
		errno = 0;
		CHECK(rsend(fds[i], &c, 1, MSG_DONTWAIT) == -1 && errno == EBADF, "inherited rsend");
	}
	if (n % 3 != 1)
		for (int i = 0; i < 3; i++)
			CHECK(rclose(fds[i]) == 0, "rclose of an inherited rsocket");
	int l, a, b;
	make_pair(&l, &a, &b);
	send_all(a, (unsigned)n, CHILD_BYTES, 0);
	recv_all(b, (unsigned)n, CHILD_BYTES);
	send_all(b, (unsigned)n + 100, CHILD_BYTES, 0);
	recv_all(a, (unsigned)n + 100, CHILD_BYTES);
	switch (n % 3) {
	case 0: /* tidy */
		CHECK(rclose(a) == 0 && rclose(b) == 0 && rclose(l) == 0, "rclose");
		exit(0);
	case 1: /* inherited and own sockets still open */
		_exit(0);
	default: /* killed by the parent while holding its own connection */
		CHECK(write(notify_fd, "k", 1) == 1, "notify");
		for (;;)
			pause();
	}
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	alarm(240);
	int l;
	make_pair(&l, &A, &B);
	pthread_t ts, td;
	CHECK(pthread_create(&ts, NULL, streamer, NULL) == 0, "thread");
	CHECK(pthread_create(&td, NULL, drainer, NULL) == 0, "thread");
	for (int n = 0; n < CHILDREN; n++) {
		int pfd[2];
		CHECK(pipe(pfd) == 0, "pipe");
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			close(pfd[0]);
			notify_fd = pfd[1]; /* "k" when its own traffic is done (then it waits to be killed) */
			child(n, l);
		}
		close(pfd[1]);
		int status;
		if (n % 3 == 2) {
			char k;
			CHECK(read(pfd[0], &k, 1) == 1, "child %d ended before it was killed", n);
			CHECK(kill(pid, SIGKILL) == 0, "kill");
		}
		close(pfd[0]);
		CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
		if (n % 3 == 2)
			CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "child %d: status 0x%x", n,
			      status);
		else
			CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child %d failed (0x%x)", n,
			      status);
		printf("child %d: own rsockets worked; ended %s\n", n,
		       n % 3 == 0 ? "by exit()" : n % 3 == 1 ? "by _exit() with sockets open" : "by SIGKILL");
	}
	__atomic_store_n(&forks_done, 1, __ATOMIC_RELEASE);
	pthread_join(ts, NULL);
	pthread_join(td, NULL);
	CHECK(drained == streamed, "%zu bytes sent, %zu read", streamed, drained);
	printf("parent: %zu bytes streamed across %d forks, intact\n", streamed, CHILDREN);
	send_all(B, 0x33, 4096, 0);
	recv_all(A, 0x33, 4096);
	CHECK(rclose(A) == 0 && rclose(B) == 0 && rclose(l) == 0, "rclose");
	printf("ok\n");
	return 0;
}
