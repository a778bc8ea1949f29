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
	if (u1 >= 0)
		rclose(u1);
	if (u2 >= 0)
		rclose(u2);
	return conf_end();
}
