/* bench helper: what UDP alone takes for a 64-byte ping-pong across the veth that
 * `bench/run --netns` measures rdmashim on. Both sides busy-poll a non-blocking socket, as
 * rdmashim's application threads do, so the figure is the kernel's path (send, veth, receive)
 * and nothing else: the floor under any RoCEv2-over-UDP provider on this machine.
 *
 * With "ack", every message travels with a second, 20-byte datagram in the same sendmmsg
 * (after the message), and each side waits for both before it answers. That is the shape of
 * an RC ping-pong in which every SEND is signaled: the answer carries the ACK of the request
 * beside it (an ACK is a packet of its own in RoCEv2; it cannot ride inside the answer).
 *
 * Usage: udp_pingpong -s PORT                      server: answers until told to stop
 *        udp_pingpong -c ADDR PORT N SIZE [ack]    client: N round trips of SIZE bytes
 * The client prints "<µs> usec one way" (half the mean round trip); exit status 0, or 1 on any
 * failure. The client says hello until the server answers (so neither waits on a lost first
 * datagram), and either side gives up after 20 s without a datagram. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { HELLO = 'H', DATA = 'D', ACK = 'A', QUIT = 'Q', ACK_LEN = 20, MAX = 65000 };

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* The message (and, with `ack`, the ACK-sized datagram after it) to `to`, in one call: a
 * segmented send (UDP_SEGMENT: one trip down the stack for both, the ACK as the shorter last
 * segment), as rdmashim sends them, or two datagrams in one sendmmsg where that is refused. */
static int send_msg(int s, const char *buf, size_t len, int ack, struct sockaddr_in *to)
{
	static char both[MAX + ACK_LEN];
	static int no_gso;
	size_t total = len + (ack ? ACK_LEN : 0);
	memcpy(both, buf, len);
	both[len] = ACK;
	if (ack && !no_gso) {
		char cb[CMSG_SPACE(sizeof(uint16_t))] = { 0 };
		struct iovec v = { both, total };
		struct msghdr h = { .msg_name = to, .msg_namelen = sizeof *to, .msg_iov = &v,
				    .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof cb };
		struct cmsghdr *c = CMSG_FIRSTHDR(&h);
		uint16_t seg = len;
		c->cmsg_level = IPPROTO_UDP;
		c->cmsg_type = UDP_SEGMENT;
		c->cmsg_len = CMSG_LEN(sizeof seg);
		memcpy(CMSG_DATA(c), &seg, sizeof seg);
		if (sendmsg(s, &h, 0) == (ssize_t)total)
			return 0;
		no_gso = 1;
	}
	struct iovec iov[2] = { { both, len }, { both + len, ACK_LEN } };
	struct mmsghdr m[2];
	memset(m, 0, sizeof m);
	for (int i = 0; i < 2; i++) {
		m[i].msg_hdr.msg_name = to;
		m[i].msg_hdr.msg_namelen = sizeof *to;
		m[i].msg_hdr.msg_iov = &iov[i];
		m[i].msg_hdr.msg_iovlen = 1;
	}
	unsigned n = ack ? 2 : 1;
	return sendmmsg(s, m, n, 0) == (int)n ? 0 : -1;
}

/* Busy-polls for what waits at `s`: its length, with `*seg` the length of each datagram in it
 * (UDP_GRO may hand over a burst in one buffer), or -1 after 20 s without one. */
static ssize_t recv_spin(int s, char *buf, struct sockaddr_in *from, size_t *seg)
{
	double give_up = now_s() + 20;
	for (unsigned i = 0;; i++) {
		char cb[CMSG_SPACE(sizeof(int))];
		struct iovec v = { buf, MAX };
		struct msghdr h = { .msg_name = from, .msg_namelen = sizeof *from, .msg_iov = &v,
				    .msg_iovlen = 1, .msg_control = cb, .msg_controllen = sizeof cb };
		ssize_t r = recvmsg(s, &h, MSG_DONTWAIT);
		if (r >= 0) {
			*seg = r;
			for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
				if (c->cmsg_level == IPPROTO_UDP && c->cmsg_type == UDP_GRO) {
					int g;
					memcpy(&g, CMSG_DATA(c), sizeof g);
					if (g > 0)
						*seg = g;
				}
			return r;
		}
		if (errno != EAGAIN && errno != EINTR)
			return -1;
		if ((i & 4095) == 0 && now_s() > give_up)
			return -1;
	}
}

/* Waits for a message (and its ACK datagram, with `ack`); the message's kind, or -1. */
static int recv_msg(int s, char *buf, int ack, struct sockaddr_in *from, size_t *len)
{
	static char got[MAX];
	int kind = 0, acked = !ack;
	while (!kind || !acked) {
		size_t seg;
		ssize_t r = recv_spin(s, got, from, &seg);
		if (r <= 0)
			return -1;
		for (size_t at = 0; at < (size_t)r; at += seg) {
			size_t n = (size_t)r - at < seg ? (size_t)r - at : seg;
			if (got[at] == ACK) {
				acked = 1;
				continue;
			}
			kind = got[at];
			memcpy(buf, got + at, n);
			*len = n;
			if (kind != DATA)
				return kind;  /* hello and quit come alone */
		}
	}
	return kind;
}

/* A socket that takes a burst of datagrams as one buffer where the kernel can (UDP_GRO), as
 * rdmashim's sockets do. */
static int udp_socket(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0), on = 1;
	if (s >= 0)
		setsockopt(s, IPPROTO_UDP, UDP_GRO, &on, sizeof on);
	return s;
}

static int server(int port)
{
	int s = udp_socket();
	struct sockaddr_in me = { .sin_family = AF_INET, .sin_port = htons(port) };
	static char buf[MAX];
	if (s < 0 || bind(s, (struct sockaddr *)&me, sizeof me)) {
		perror("udp_pingpong: bind");
		return 1;
	}
	for (int ack = 0;;) {
		struct sockaddr_in from;
		size_t len;
		int kind = recv_msg(s, buf, ack, &from, &len);
		if (kind < 0) {
			fprintf(stderr, "udp_pingpong: no datagram for 20 s\n");
			return 1;
		}
		if (kind == QUIT)
			return 0;
		if (kind == HELLO)
			ack = len > 1 && buf[1] == ACK;  /* the client says how it sends */
		if (send_msg(s, buf, len, kind == DATA && ack, &from)) {
			perror("udp_pingpong: send");
			return 1;
		}
	}
}

static int client(const char *addr, int port, long n, size_t size, int ack)
{
	int s = udp_socket();
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(port) }, from;
	static char buf[MAX];
	size_t len;
	if (s < 0 || inet_pton(AF_INET, addr, &to.sin_addr) != 1 || n <= 0 || size < 1 ||
	    size > MAX) {
		fprintf(stderr, "udp_pingpong: bad address, count or size\n");
		return 1;
	}
	/* Hello until answered: the server may not have bound its port yet. */
	char hello[2] = { HELLO, ack ? ACK : 0 };
	double give_up = now_s() + 20;
	for (;;) {
		if (sendto(s, hello, 2, 0, (struct sockaddr *)&to, sizeof to) != 2 ||
		    now_s() > give_up) {
			fprintf(stderr, "udp_pingpong: the server did not answer\n");
			return 1;
		}
		double wait = now_s() + 0.05;
		ssize_t r = -1;
		while (now_s() < wait &&
		       (r = recvfrom(s, buf, MAX, MSG_DONTWAIT, NULL, NULL)) < 0)
			;
		if (r > 0 && buf[0] == HELLO)
			break;
	}
	memset(buf, 0, size);
	double t0 = 0;
	for (long i = 0; i <= n; i++) {
		if (i == 1)
			t0 = now_s();  /* the first round trip warms both sides up */
		buf[0] = DATA;
		int kind = send_msg(s, buf, size, ack, &to) ? -1 : HELLO;
		while (kind == HELLO)  /* the answer to a hello sent twice */
			kind = recv_msg(s, buf, ack, &from, &len);
		if (kind != DATA || len != size) {
			fprintf(stderr, "udp_pingpong: round trip %ld failed\n", i);
			return 1;
		}
	}
	double us = (now_s() - t0) * 1e6 / n / 2;
	char quit = QUIT;
	for (int i = 0; i < 3; i++)  /* a datagram may be lost; the server ends on the first */
		sendto(s, &quit, 1, 0, (struct sockaddr *)&to, sizeof to);
	printf("%.2f usec one way\n", us);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "-s"))
		return server(atoi(argv[2]));
	if ((argc == 6 || argc == 7) && !strcmp(argv[1], "-c"))
		return client(argv[2], atoi(argv[3]), strtol(argv[4], NULL, 10),
			      strtoul(argv[5], NULL, 10), argc == 7 && !strcmp(argv[6], "ack"));
	fprintf(stderr, "usage: udp_pingpong -s PORT | -c ADDR PORT N SIZE [ack]\n");
	return 1;
}
