/* rsocket(7): the socket-like r* API over RDMA: stream and datagram sockets, rpoll/rselect
 * on rsockets and ordinary descriptors alike, O_NONBLOCK/MSG_DONTWAIT, SOL_RDMA options,
 * names, riomap/riowrite, shutdown and close. Both ends use rsockets (loopback). */
#include "cmhelp.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <unistd.h>
#include <rdma/rsocket.h>

struct acceptor {
	int lfd, fd;
	volatile int done;
};

static void *accept_thread(void *arg)
{
	struct acceptor *a = arg;
	a->fd = raccept(a->lfd, NULL, NULL);
	__atomic_store_n(&a->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* A connected stream pair over `sa` (an IPv4 or IPv6 address): *c the connecting end, *s the
 * accepted one; *l the listener (closed by the caller). Returns 0 on success. */
static int stream_pair(const struct sockaddr *sa, socklen_t len, int *l, int *c, int *s)
{
	*l = rsocket(sa->sa_family, SOCK_STREAM, 0);
	*c = *s = -1;
	if (*l < 0 || rbind(*l, sa, len) || rlisten(*l, 4))
		return -1;
	struct acceptor acc = { .lfd = *l, .fd = -1 };
	pthread_t th;
	if (pthread_create(&th, NULL, accept_thread, &acc))
		return -1;
	*c = rsocket(sa->sa_family, SOCK_STREAM, 0);
	int r = *c >= 0 ? rconnect(*c, sa, len) : -1;
	long long end = h_now_ms() + H_WAIT_MS;
	while (!__atomic_load_n(&acc.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
		h_sleep_ms(2);
	if (!__atomic_load_n(&acc.done, __ATOMIC_SEQ_CST)) {
		pthread_detach(th);
		return -1;
	}
	pthread_join(th, NULL);
	*s = acc.fd;
	return r == 0 && *s >= 0 ? 0 : -1;
}

static void close_all(int a, int b, int c)
{
	if (a >= 0)
		rclose(a);
	if (b >= 0)
		rclose(b);
	if (c >= 0)
		rclose(c);
}

int main(int argc, char **argv)
{
	conf_begin("rsocket.7", argc, argv);
	/* rpoll and rselect take ordinary descriptors too (a pipe). */
	int pf[2];
	int pi = pipe(pf);
	struct pollfd pp = { .fd = pf[0], .events = POLLIN };
	int before = pi == 0 ? rpoll(&pp, 1, 0) : -2;
	if (pi == 0 && write(pf[1], "x", 1) != 1)
		pi = -1;
	pp.revents = 0;
	int after = pi == 0 ? rpoll(&pp, 1, 1000) : -2;
	CLAUSE("RPOLL-FD", before == 0 && after == 1 && (pp.revents & POLLIN), "rpoll on a pipe: %d before, %d after "
	       "a write (revents 0x%x)", before, after, pp.revents);
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(pf[0], &rs);
	struct timeval tv = { 1, 0 };
	int sel = pi == 0 ? rselect(pf[0] + 1, &rs, NULL, NULL, &tv) : -2;
	CLAUSE("RSELECT-FD", sel == 1 && FD_ISSET(pf[0], &rs), "rselect on a readable pipe: %d", sel);
	if (pi == 0) {
		close(pf[0]);
		close(pf[1]);
	}

	/* SOCK_STREAM: rsocket, rbind, rlisten, rconnect/raccept, rsend/rrecv both ways. */
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));
	errno = 0;
	int l = rsocket(AF_INET, SOCK_STREAM, 0);
	int e = errno;
	int sq = 64;
	int so = l >= 0 ? rsetsockopt(l, SOL_RDMA, RDMA_SQSIZE, &sq, sizeof sq) : -2;
	CLAUSE("SOL-RDMA", so == 0, "rsocket %d (%s); rsetsockopt(SOL_RDMA, RDMA_SQSIZE) %d", l, conf_errname(e), so);
	/* riomap needs RDMA_IOMAPSIZE on both ends before the connection */
	int one = 1;
	if (l >= 0)
		rsetsockopt(l, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof one);
	int ok = l >= 0 && rbind(l, (struct sockaddr *)&a, sizeof a) == 0 && rlisten(l, 4) == 0;
	struct acceptor acc = { .lfd = l, .fd = -1 };
	pthread_t th;
	int started = ok && pthread_create(&th, NULL, accept_thread, &acc) == 0;
	int c = ok ? rsocket(AF_INET, SOCK_STREAM, 0) : -1;
	if (c >= 0)
		rsetsockopt(c, SOL_RDMA, RDMA_IOMAPSIZE, &one, sizeof one);
	int conn = c >= 0 ? rconnect(c, (struct sockaddr *)&a, sizeof a) : -2;
	if (started) {
		long long end = h_now_ms() + H_WAIT_MS;
		while (!__atomic_load_n(&acc.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
			h_sleep_ms(2);
		if (__atomic_load_n(&acc.done, __ATOMIC_SEQ_CST))
			pthread_join(th, NULL);
		else
			pthread_detach(th);
	}
	char buf[64] = "";
	ssize_t sn = conn == 0 && acc.fd >= 0 ? rsend(c, "stream data", 12, 0) : -2;
	ssize_t rn = sn == 12 ? rrecv(acc.fd, buf, sizeof buf, 0) : -2;
	ssize_t sn2 = rn == 12 ? rsend(acc.fd, "reply", 6, 0) : -2;
	char buf2[16] = "";
	ssize_t rn2 = sn2 == 6 ? rrecv(c, buf2, sizeof buf2, 0) : -2;
	CLAUSE("STREAM", rn == 12 && strcmp(buf, "stream data") == 0 && rn2 == 6 && strcmp(buf2, "reply") == 0,
	       "listen %d, connect %d, accept fd %d; send %zd, recv %zd, reply %zd/%zd (%s)", ok, conn, acc.fd, sn, rn,
	       sn2, rn2, conf_errname(errno));
	/* names */
	struct sockaddr_in me, peer;
	socklen_t ml = sizeof me, pl = sizeof peer;
	int g1 = conn == 0 ? rgetsockname(c, (struct sockaddr *)&me, &ml) : -2;
	int g2 = conn == 0 ? rgetpeername(c, (struct sockaddr *)&peer, &pl) : -2;
	CLAUSE("NAMES", g1 == 0 && g2 == 0 && peer.sin_port == htons(conf_port(0)) && me.sin_family == AF_INET &&
	       me.sin_port != 0, "rgetsockname %d, rgetpeername %d (peer port %u)", g1, g2, g2 == 0 ? ntohs(peer.sin_port) : 0);
	/* O_NONBLOCK (rfcntl) and MSG_DONTWAIT: nothing to read is -1/EAGAIN. */
	int fl = conn == 0 ? rfcntl(c, F_GETFL) : -1;
	int nb = fl >= 0 ? rfcntl(c, F_SETFL, fl | O_NONBLOCK) : -2;
	errno = 0;
	ssize_t r1 = nb == 0 ? rrecv(c, buf, sizeof buf, 0) : -2;
	int e1 = errno;
	errno = 0;
	ssize_t r2 = acc.fd >= 0 ? rrecv(acc.fd, buf, sizeof buf, MSG_DONTWAIT) : -2;
	int e2 = errno;
	CLAUSE("NONBLOCK", r1 == -1 && e1 == EAGAIN && r2 == -1 && e2 == EAGAIN,
	       "O_NONBLOCK rrecv %zd (%s); MSG_DONTWAIT rrecv %zd (%s)", r1, conf_errname(e1), r2, conf_errname(e2));
	/* rpoll on an rsocket: readable once data is there. */
	struct pollfd rp = { .fd = c, .events = POLLIN };
	int p0 = conn == 0 ? rpoll(&rp, 1, 0) : -2;
	ssize_t s3 = acc.fd >= 0 ? rsend(acc.fd, "poll me", 8, 0) : -2;
	rp.revents = 0;
	int p1 = s3 == 8 ? rpoll(&rp, 1, H_WAIT_MS) : -2;
	CLAUSE("RPOLL-RSOCKET", p0 == 0 && p1 == 1 && (rp.revents & POLLIN), "rpoll: %d before, %d after data", p0, p1);
	if (p1 == 1)
		rrecv(c, buf, sizeof buf, 0);
	/* riomap / riowrite: direct placement into the peer's mapped buffer. */
	static char target[4096] __attribute__((aligned(4096)));
	off_t off = -2;
	size_t iw = 0;
	if (acc.fd >= 0) {
		off = riomap(acc.fd, target, sizeof target, PROT_WRITE, 0, -1);
		if (off != -1)
			iw = riowrite(c, "placed", 7, off, 0);
		long long end = h_now_ms() + 1000;
		while (iw == 7 && strcmp(target, "placed") != 0 && h_now_ms() < end)
			h_sleep_ms(1);
		if (off != -1)
			riounmap(acc.fd, target, sizeof target);
	}
	CLAUSE("RIOMAP", off >= 0 && iw == 7 && strcmp(target, "placed") == 0, "riomap offset %lld, riowrite %zu (%s)",
	       (long long)off, iw, conf_errname(errno));
	/* rshutdown / rclose: the peer reads end of stream. */
	int sh = conn == 0 ? rshutdown(c, SHUT_RDWR) : -2;
	ssize_t eof = acc.fd >= 0 ? rrecv(acc.fd, buf, sizeof buf, 0) : -2;
	int cl = c >= 0 ? rclose(c) : -2;
	CLAUSE("CLOSE", sh == 0 && eof == 0 && cl == 0, "rshutdown %d, peer rrecv %zd (want 0), rclose %d", sh, eof, cl);
	if (acc.fd >= 0)
		rclose(acc.fd);
	if (l >= 0)
		rclose(l);

	/* IPv6: the same stream over ::1, with IPv6 names. */
	{
		struct sockaddr_in6 a6;
		h_sin6(&a6, "::1", conf_port(3));
		int l6, c6, s6;
		int pr = stream_pair((struct sockaddr *)&a6, sizeof a6, &l6, &c6, &s6);
		char b6[16] = "";
		ssize_t n6 = pr == 0 ? rsend(c6, "over v6", 8, 0) : -2;
		ssize_t m6 = n6 == 8 ? rrecv(s6, b6, sizeof b6, 0) : -2;
		struct sockaddr_in6 p6;
		socklen_t pl6 = sizeof p6;
		int g6 = pr == 0 ? rgetpeername(c6, (struct sockaddr *)&p6, &pl6) : -2;
		CLAUSE("IPV6", m6 == 8 && strcmp(b6, "over v6") == 0 && g6 == 0 && p6.sin6_family == AF_INET6 &&
		       pl6 == sizeof p6 && p6.sin6_port == htons(conf_port(3)),
		       "pair %d, send %zd, recv %zd, rgetpeername %d (family %d, len %u) (%s)", pr, n6, m6, g6,
		       g6 == 0 ? p6.sin6_family : -1, (unsigned)pl6, conf_errname(errno));
		close_all(c6, s6, l6);
	}

	/* MSG_PEEK returns the data without consuming it; end of stream after rshutdown(SHUT_WR)
	 * comes after every byte sent before it, and the half-closed side still receives. */
	{
		struct sockaddr_in a4;
		h_sin(&a4, "127.0.0.1", conf_port(4));
		int l4, c4, s4;
		int pr = stream_pair((struct sockaddr *)&a4, sizeof a4, &l4, &c4, &s4);
		char pk[16] = "", rd[16] = "";
		ssize_t sn4 = pr == 0 ? rsend(c4, "peekaboo", 9, 0) : -2;
		ssize_t p1 = sn4 == 9 ? rrecv(s4, pk, sizeof pk, MSG_PEEK) : -2;
		ssize_t r1 = p1 > 0 ? rrecv(s4, rd, sizeof rd, 0) : -2;
		CLAUSE("MSG-PEEK", p1 == 9 && r1 == 9 && strcmp(pk, "peekaboo") == 0 && strcmp(rd, "peekaboo") == 0,
		       "send %zd, peek %zd (\"%s\"), then recv %zd (\"%s\")", sn4, p1, pk, r1, rd);

		static char big[50000]; /* less than the peer's first receive window: one thread sends it all, then reads */
		for (size_t i = 0; i < sizeof big; i++)
			big[i] = (char)(i * 7);
		ssize_t sb = pr == 0 ? rsend(c4, big, sizeof big, 0) : -2;
		int sh = sb == (ssize_t)sizeof big ? rshutdown(c4, SHUT_WR) : -2;
		static char got[sizeof big + 16];
		size_t total = 0;
		ssize_t r = 1;
		while (pr == 0 && r > 0 && total < sizeof got)
			total += (r = rrecv(s4, got + total, sizeof got - total, 0)) > 0 ? (size_t)r : 0;
		int same = total == sizeof big && memcmp(big, got, sizeof big) == 0;
		ssize_t back = r == 0 ? rsend(s4, "still", 6, 0) : -2;
		char bk[8] = "";
		ssize_t rb = back == 6 ? rrecv(c4, bk, sizeof bk, 0) : -2;
		CLAUSE("END-OF-STREAM", sh == 0 && same && r == 0 && rb == 6 && strcmp(bk, "still") == 0,
		       "send %zd, rshutdown(SHUT_WR) %d, peer read %zu bytes (%s), then %zd; reply on the open "
		       "direction %zd/%zd", sb, sh, total, same ? "identical" : "different", r, back, rb);

		/* rpoll timeouts: nothing to read on an idle rsocket (c4: its peer still sends) mixed with an idle pipe: 0 after
		 * at least the timeout; then the pipe alone becomes readable and is reported. */
		int pp[2];
		int okp = pipe(pp) == 0;
		struct pollfd m[2] = { { .fd = c4, .events = POLLIN }, { .fd = okp ? pp[0] : -1, .events = POLLIN } };
		long long t0 = h_now_ms();
		int z = pr == 0 && okp ? rpoll(m, 2, 300) : -2;
		long long waited = h_now_ms() - t0;
		if (okp && write(pp[1], "x", 1) != 1)
			okp = 0;
		m[0].revents = m[1].revents = 0;
		int one = okp ? rpoll(m, 2, H_WAIT_MS) : -2;
		int zero = pr == 0 ? rpoll(m, 1, 0) : -2;
		CLAUSE("RPOLL-TIMEOUT", z == 0 && waited >= 290 && one == 1 && (m[1].revents & POLLIN) && m[0].revents == 0 &&
		       zero == 0, "idle rpoll(300 ms) %d after %lld ms; pipe readable: %d (revents 0x%x/0x%x); rpoll(0) %d",
		       z, waited, one, m[0].revents, m[1].revents, zero);
		if (okp) {
			close(pp[0]);
			close(pp[1]);
		}
		close_all(c4, s4, l4);
	}

	/* rconnect to a port nobody listens on: ECONNREFUSED, as connect(2). */
	{
		struct sockaddr_in nob;
		h_sin(&nob, "127.0.0.1", conf_port(5));
		int cr = rsocket(AF_INET, SOCK_STREAM, 0);
		errno = 0;
		int rc = cr >= 0 ? rconnect(cr, (struct sockaddr *)&nob, sizeof nob) : -2;
		int ec = errno;
		CLAUSE("ECONNREFUSED", rc == -1 && ec == ECONNREFUSED, "rconnect to an unused port: %d (%s)", rc,
		       conf_errname(ec));
		if (cr >= 0)
			rclose(cr);
	}

	/* SOCK_DGRAM: rsendto / rrecvfrom between two bound datagram rsockets. */
	struct sockaddr_in da, db;
	h_sin(&da, "127.0.0.1", conf_port(1));
	h_sin(&db, "127.0.0.1", conf_port(2));
	int u1 = rsocket(AF_INET, SOCK_DGRAM, 0), u2 = rsocket(AF_INET, SOCK_DGRAM, 0);
	ok = u1 >= 0 && u2 >= 0 && rbind(u1, (struct sockaddr *)&da, sizeof da) == 0 &&
	     rbind(u2, (struct sockaddr *)&db, sizeof db) == 0;
	ssize_t ds = ok ? rsendto(u1, "datagram", 9, 0, (struct sockaddr *)&db, sizeof db) : -2;
	struct sockaddr_in from;
	socklen_t fl2 = sizeof from;
	struct pollfd up = { .fd = u2, .events = POLLIN };
	int ready = ds == 9 ? rpoll(&up, 1, H_WAIT_MS) : -2;
	ssize_t dr = ready == 1 ? rrecvfrom(u2, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl2) : -2;
	CLAUSE("DGRAM", dr == 9 && strcmp(buf, "datagram") == 0 && from.sin_port == htons(conf_port(1)),
	       "rsocket %d/%d, rsendto %zd, ready %d, rrecvfrom %zd (%s)", u1, u2, ds, ready, dr, conf_errname(errno));
	/* ... and back: the answer (and the ones after it) go over UD once each side has the
	 * other's QPN; every datagram keeps its boundaries and its source address. */
	int back_ok = dr == 9;
	for (int i = 0; back_ok && i < 20; i++) {
		char m[32], got[32] = "";
		snprintf(m, sizeof m, "reply %d", i);
		struct sockaddr_in src;
		socklen_t sl = sizeof src;
		ssize_t bs = rsendto(u2, m, strlen(m) + 1, 0, (struct sockaddr *)&da, sizeof da);
		struct pollfd bp = { .fd = u1, .events = POLLIN };
		int br = bs > 0 ? rpoll(&bp, 1, H_WAIT_MS) : -2;
		ssize_t bn = br == 1 ? rrecvfrom(u1, got, sizeof got, 0, (struct sockaddr *)&src, &sl) : -2;
		back_ok = bn == (ssize_t)strlen(m) + 1 && strcmp(got, m) == 0 && src.sin_port == htons(conf_port(2));
		if (!back_ok)
			fprintf(stderr, "reply %d: send %zd, rpoll %d, recv %zd \"%s\" (%s)\n", i, bs, br, bn, got,
				conf_errname(errno));
	}
	CLAUSE("DGRAM-REPLY", back_ok, "twenty datagrams answered from the receiver to the sender's address");
	if (u1 >= 0)
		rclose(u1);
	if (u2 >= 0)
		rclose(u2);
	return conf_end();
}
