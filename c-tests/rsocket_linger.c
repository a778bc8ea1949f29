/* c-tests/rsocket_linger.c: SO_LINGER on stream rsockets and what rclose does.
 *
 * librdmacm only stores SO_LINGER (no timed wait, no abortive close); rdmashim keeps what was
 * set and reports it back. rclose always shuts the connection down gracefully: every byte sent
 * before it reaches the peer, then end of stream, whatever the linger setting (even {1, 0},
 * which on a TCP socket would reset the connection and drop unsent data).
 *
 * For each setting (default, {1, 5}, {1, 0}, {0, 0}) the parent sends 2 MiB (far more than the
 * peer's receive buffer, so most of it is still queued or in flight) and rcloses at once; a
 * child reads until end of stream and checks the count and every byte.
 *
 * The child is this program run afresh (fork, then exec at once): a forked copy of a threaded
 * process must not allocate before exec, since under the sanitizer tree's AddressSanitizer
 * (GCC 12) another thread may have held the allocator's lock at the moment of fork, and the
 * child's first allocation then waits forever (seen in CI). Inherited rsockets in a forked
 * child are rsocket_fork's subject. */
#include <errno.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <rdma/rsocket.h>
#include "rlisten.h"

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); \
    exit(1); } } while (0)

#define TOTAL (2u << 20)

static unsigned char pattern(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 11);
}

/* The reader: 0 if it read exactly TOTAL correct bytes and then end of stream. */
static int reader(struct sockaddr_in *addr)
{
	int fd = rsocket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0 || rconnect(fd, (struct sockaddr *)addr, sizeof *addr))
		return 2;
	static unsigned char buf[65536];
	size_t total = 0;
	for (;;) {
		ssize_t r = rrecv(fd, buf, sizeof buf, 0);
		if (r < 0) {
			fprintf(stderr, "reader: rrecv: %s after %zu bytes\n", strerror(errno), total);
			return 3;
		}
		if (r == 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != pattern(total + (size_t)i)) {
				fprintf(stderr, "reader: byte %zu differs\n", total + (size_t)i);
				return 4;
			}
		total += (size_t)r;
	}
	rclose(fd);
	if (total != TOTAL) {
		fprintf(stderr, "reader: %zu bytes, expected %u\n", total, TOTAL);
		return 5;
	}
	return 0;
}

static void one(int l, struct sockaddr_in *addr, const struct linger *set, const char *name)
{
	char port[16];
	snprintf(port, sizeof port, "%u", ntohs(addr->sin_port));
	pid_t pid = fork();
	CHECK(pid >= 0, "fork");
	if (pid == 0) {
		execl("/proc/self/exe", "rsocket_linger", "--reader", port, (char *)NULL);
		_exit(6);
	}
	int fd = raccept(l, NULL, NULL);
	CHECK(fd >= 0, "raccept");
	struct linger lg = { 0, 0 };
	socklen_t len = sizeof lg;
	if (set) {
		CHECK(rsetsockopt(fd, SOL_SOCKET, SO_LINGER, set, sizeof *set) == 0, "set SO_LINGER");
		CHECK(rgetsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, &len) == 0, "get SO_LINGER");
		CHECK(len == sizeof lg && !!lg.l_onoff == !!set->l_onoff &&
		      (!set->l_onoff || lg.l_linger == set->l_linger),
		      "SO_LINGER reads back {%d, %d}", lg.l_onoff, lg.l_linger);
		struct linger shorty;
		CHECK(rsetsockopt(fd, SOL_SOCKET, SO_LINGER, &shorty, 4) == -1 && errno == EINVAL,
		      "a short SO_LINGER was accepted");
	}
	static unsigned char buf[TOTAL];
	for (size_t i = 0; i < TOTAL; i++)
		buf[i] = pattern(i);
	size_t off = 0;
	while (off < TOTAL) {
		ssize_t r = rsend(fd, buf + off, TOTAL - off, 0);
		CHECK(r > 0, "rsend");
		off += (size_t)r;
	}
	CHECK(rclose(fd) == 0, "rclose");
	int status;
	CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: reader failed (status 0x%x)", name,
	      status);
	printf("%s: rclose delivered all %u bytes, then end of stream\n", name, TOTAL);
}

int main(int argc, char **argv)
{
	struct sockaddr_in addr = { .sin_family = AF_INET };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (argc == 3 && !strcmp(argv[1], "--reader")) {
		alarm(60); /* a reader that never sees end of stream fails, not hangs */
		addr.sin_port = htons((uint16_t)atoi(argv[2]));
		return reader(&addr);
	}
	alarm(120);
	int l = rlisten_on(&addr, 4);

	struct linger on5 = { 1, 5 }, on0 = { 1, 0 }, off = { 0, 0 };
	one(l, &addr, NULL, "default");
	one(l, &addr, &on5, "linger {1, 5}");
	one(l, &addr, &on0, "linger {1, 0}");
	one(l, &addr, &off, "linger {0, 0}");
	rclose(l);
	printf("ok\n");
	return 0;
}
