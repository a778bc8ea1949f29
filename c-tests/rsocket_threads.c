/* c-tests/rsocket_threads.c: one stream rsocket used by two threads at once, as rsocket(7)
 * allows (one sending, one receiving), on both ends of a connection: four threads move 8 MB
 * each way in chunks of varying sizes; every byte is checked against its position's pattern.
 * A lost wake-up (a thread asleep while the other took its completion event) shows as a hang
 * (the meson timeout), a protocol slip as a wrong byte. Then both ends shut down: each reader
 * gets end of stream after exactly the bytes sent. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <rdma/rsocket.h>

#define TOTAL (8u << 20)

struct side {
	int fd;
	unsigned seed;       /* pattern of what this side sends */
	unsigned peer_seed;  /* pattern of what it receives */
	size_t received;
	int recv_err, send_err;
	int eof;
};

static unsigned char pattern(unsigned seed, size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13 ^ seed);
}

static void *sender(void *arg)
{
	struct side *s = arg;
	static __thread unsigned char buf[70000];
	size_t off = 0, step = 1;
	while (off < TOTAL) {
		size_t n = (step * 7919) % sizeof buf + 1;
		if (n > TOTAL - off)
			n = TOTAL - off;
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(s->seed, off + i);
		ssize_t r = rsend(s->fd, buf, n, 0);
		if (r <= 0) {
			s->send_err = errno;
			return NULL;
		}
		off += (size_t)r;
		step++;
	}
	if (rshutdown(s->fd, SHUT_WR))
		s->send_err = errno;
	return NULL;
}

static void *receiver(void *arg)
{
	struct side *s = arg;
	static __thread unsigned char buf[50000];
	size_t step = 1;
	for (;;) {
		size_t want = (step++ * 104729) % sizeof buf + 1;
		ssize_t r = rrecv(s->fd, buf, want, 0);
		if (r < 0) {
			s->recv_err = errno;
			return NULL;
		}
		if (r == 0) {
			s->eof = 1;
			return NULL;
		}
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] != pattern(s->peer_seed, s->received + (size_t)i)) {
				fprintf(stderr, "byte %zu differs\n", s->received + (size_t)i);
				s->recv_err = EILSEQ;
				return NULL;
			}
		}
		s->received += (size_t)r;
	}
}

struct acc {
	int lfd, fd;
};

static void *acceptor(void *arg)
{
	struct acc *a = arg;
	a->fd = raccept(a->lfd, NULL, NULL);
	return NULL;
}

int main(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof sa;
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || rbind(l, (struct sockaddr *)&sa, sizeof sa) || rlisten(l, 1) ||
	    rgetsockname(l, (struct sockaddr *)&sa, &len)) {
		perror("listen");
		return 1;
	}
	struct acc a = { .lfd = l, .fd = -1 };
	pthread_t at;
	pthread_create(&at, NULL, acceptor, &a);
	int c = rsocket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || rconnect(c, (struct sockaddr *)&sa, sizeof sa)) {
		perror("rconnect");
		return 1;
	}
	pthread_join(at, NULL);
	if (a.fd < 0) {
		perror("raccept");
		return 1;
	}
	struct side cs = { .fd = c, .seed = 0x11, .peer_seed = 0x5a };
	struct side ss = { .fd = a.fd, .seed = 0x5a, .peer_seed = 0x11 };
	pthread_t t[4];
	pthread_create(&t[0], NULL, sender, &cs);
	pthread_create(&t[1], NULL, receiver, &cs);
	pthread_create(&t[2], NULL, sender, &ss);
	pthread_create(&t[3], NULL, receiver, &ss);
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	int ok = 1;
	struct side *sides[2] = { &cs, &ss };
	for (int i = 0; i < 2; i++) {
		struct side *s = sides[i];
		printf("%s: sent %s (%s), received %zu bytes (%s), end of stream %s\n", i ? "server" : "client",
		       s->send_err ? "failed" : "all", strerror(s->send_err), s->received, strerror(s->recv_err),
		       s->eof ? "yes" : "no");
		ok &= !s->send_err && !s->recv_err && s->eof && s->received == TOTAL;
	}
	rclose(c);
	rclose(a.fd);
	rclose(l);
	printf("%s\n", ok ? "PASS" : "FAIL");
	return ok ? 0 : 1;
}
