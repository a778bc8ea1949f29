/* c-tests/preload_fork.c: a forking TCP server and its clients, plain socket calls only (no
 * RDMA header, not linked with rdmashim), for Debian's librspreload in its fork mode
 * (RDMAV_FORK_SAFE=1; tests/rspreload.py fork runs it).
 *
 * In fork mode the preload makes every stream socket a kernel TCP socket first; on its first
 * read or write the connection becomes an rsocket (the server's side listens on an rsocket at
 * the same port and tells the client over TCP; the client connects to it and both close the
 * TCP connection). So the server may fork per connection before any RDMA state exists.
 *
 * A server process accepts CLIENTS connections and forks a child per connection; each child
 * reads 2 MiB, checks every byte, then writes 2 MiB back. CLIENTS client processes do the
 * opposite at once. Both ends then check that their socket is an rsocket: getsockopt at
 * librdmacm's SOL_RDMA level (RDMA_SQSIZE) only succeeds on one (the kernel says
 * ENOPROTOOPT), so without the preload's conversion the test fails. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define SOL_RDMA_LEVEL 0x10000 /* rdma/rsocket.h: SOL_RDMA; RDMA_SQSIZE is 0 */
#define CLIENTS 3
#define BYTES (2u << 20)

static unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)(((i * 2654435761u) >> 13) ^ seed);
}

static int fail(const char *who, const char *what)
{
	fprintf(stderr, "FAIL %s: %s (errno %d %s)\n", who, what, errno, strerror(errno));
	return 1;
}

static int is_rsocket(int fd)
{
	int v = 0;
	socklen_t len = sizeof v;
	return getsockopt(fd, SOL_RDMA_LEVEL, 0, &v, &len) == 0 && v > 0;
}

static int recv_check(int fd, unsigned seed)
{
	static unsigned char buf[65536];
	size_t off = 0;
	while (off < BYTES) {
		size_t n = BYTES - off < sizeof buf ? BYTES - off : sizeof buf;
		ssize_t r = recv(fd, buf, n, 0);
		if (r <= 0)
			return -1;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern(seed, off + (size_t)i)) {
				errno = EBADMSG;
				return -1;
			}
		off += (size_t)r;
	}
	return 0;
}

static int send_pattern(int fd, unsigned seed)
{
	static unsigned char buf[BYTES];
	for (size_t i = 0; i < BYTES; i++)
		buf[i] = pattern(seed, i);
	size_t off = 0;
	while (off < BYTES) {
		ssize_t r = send(fd, buf + off, BYTES - off, 0);
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

/* One connection on the server's side, in its own forked process. */
static int serve(int fd)
{
	unsigned char seed;
	/* The first read converts the connection (the preload's server side). */
	if (recv(fd, &seed, 1, MSG_WAITALL) != 1)
		return fail("server child", "read the client's seed");
	if (recv_check(fd, seed))
		return fail("server child", "read the client's bytes");
	if (send_pattern(fd, seed + 1u))
		return fail("server child", "write");
	if (!is_rsocket(fd))
		return fail("server child", "the connection is not an rsocket (still TCP)");
	close(fd);
	return 0;
}

static int server(int l)
{
	for (int i = 0; i < CLIENTS; i++) {
		int fd = accept(l, NULL, NULL);
		if (fd < 0)
			return fail("server", "accept");
		pid_t pid = fork();
		if (pid < 0)
			return fail("server", "fork");
		if (pid == 0) {
			close(l);
			_exit(serve(fd));
		}
		close(fd);
	}
	int bad = 0;
	for (int i = 0; i < CLIENTS; i++) {
		int st;
		if (wait(&st) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
			bad++;
	}
	return bad ? fail("server", "a child failed") : 0;
}

static int client(const struct sockaddr_in *addr, unsigned char seed)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return fail("client", "socket");
	if (connect(fd, (const struct sockaddr *)addr, sizeof *addr))
		return fail("client", "connect");
	/* The first write converts the connection (the preload's client side). */
	if (send(fd, &seed, 1, 0) != 1)
		return fail("client", "write the seed");
	if (send_pattern(fd, seed))
		return fail("client", "write");
	if (recv_check(fd, seed + 1u))
		return fail("client", "read the server's bytes");
	char c;
	if (recv(fd, &c, 1, 0) != 0)
		return fail("client", "no end of stream after the server's bytes");
	if (!is_rsocket(fd))
		return fail("client", "the connection is not an rsocket (still TCP)");
	close(fd);
	return 0;
}

int main(void)
{
	alarm(120);
	setvbuf(stdout, NULL, _IOLBF, 0);
	struct sockaddr_in addr = { .sin_family = AF_INET };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int l = socket(AF_INET, SOCK_STREAM, 0);
	int on = 1;
	if (l < 0 || setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) ||
	    bind(l, (struct sockaddr *)&addr, sizeof addr) || listen(l, CLIENTS))
		return fail("main", "listen");
	socklen_t len = sizeof addr;
	if (getsockname(l, (struct sockaddr *)&addr, &len))
		return fail("main", "getsockname");
	pid_t srv = fork();
	if (srv < 0)
		return fail("main", "fork");
	if (srv == 0)
		_exit(server(l));
	close(l);
	pid_t cl[CLIENTS];
	for (int i = 0; i < CLIENTS; i++) {
		cl[i] = fork();
		if (cl[i] < 0)
			return fail("main", "fork");
		if (cl[i] == 0)
			_exit(client(&addr, (unsigned char)(0x40 + 2 * i)));
	}
	int bad = 0, st;
	for (int i = 0; i < CLIENTS; i++)
		if (waitpid(cl[i], &st, 0) != cl[i] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "client %d failed (status 0x%x)\n", i, st);
			bad++;
		}
	if (waitpid(srv, &st, 0) != srv || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "server failed (status 0x%x)\n", st);
		bad++;
	}
	if (bad)
		return 1;
	printf("%d connections through a forking server: %u bytes each way, checked; every end "
	       "an rsocket\n", CLIENTS, BYTES);
	printf("ok\n");
	return 0;
}
