/*
 * c-tests/badinput/rsocket_bad.c: the rsocket functions librdmashim exports (<rdma/rsocket.h>),
 * called with invalid and closed descriptors and NULL pointers.
 *
 * Stream rsockets are implemented; SOCK_DGRAM and the iomap calls are not yet (ENOSYS /
 * EOPNOTSUPP). Each case checks a clean failure in the function's convention, as the socket call
 * it mirrors (rsocket(7)): -1 with errno, and for riowrite, which "behaves similar to rwrite"
 * but returns a size_t, (size_t)-1 with errno. On a descriptor that is not an rsocket the errno
 * is EBADF (ENOSYS/EINVAL accepted). rpoll and rselect must behave as poll(2) and select(2) on
 * ordinary descriptors.
 */
#include "badinput.h"

#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <rdma/rsocket.h>

static char buf[64];

/* A descriptor number that was open and is closed now (a destroyed object). */
static int closed_fd(void)
{
	int p[2];

	if (pipe(p))
		return -1;
	close(p[0]);
	close(p[1]);
	return p[0];
}

/* The descriptors every rsocket call is tried with: -1, an ordinary open one (a duplicate of
 * stderr: not an rsocket), a closed one, and a number nobody opened. */
static int bad_fds[4];
static int nbad;

static int setup_fds(void)
{
	nbad = 0;
	bad_fds[nbad++] = -1;
	/* The open one first, so that the closed number is not reused by it. */
	if ((bad_fds[nbad++] = dup(STDERR_FILENO)) < 0)
		return -1;
	if ((bad_fds[nbad++] = closed_fd()) < 0)
		return -1;
	bad_fds[nbad++] = 4000;
	return 0;
}

#define RS_ERRS ENOSYS, EBADF, EINVAL

/* Runs the following block once per bad descriptor, named `fd` (failures show which). */
#define FOR_EACH_BAD_FD(fd)                                                          \
	REQUIRE(setup_fds() == 0);                                                   \
	for (int bi_i_ = 0, fd = -1;                                                 \
	     bi_i_ < nbad ? (fd = bad_fds[bi_i_], bi_set_context("fd %d", fd))       \
			  : bi_clear_context();                                      \
	     bi_i_++)

static void case_rsocket(void)
{
	EXPECT_M1(rsocket(-1, -1, -1), EAFNOSUPPORT, EINVAL);
	EXPECT_M1(rsocket(AF_UNIX, SOCK_STREAM, 0), EAFNOSUPPORT);
	EXPECT_M1(rsocket(AF_INET, SOCK_STREAM, IPPROTO_UDP), EOPNOTSUPP, EPROTONOSUPPORT);
	/* A live, unconnected stream rsocket with bad arguments. */
	int s = rsocket(AF_INET, SOCK_STREAM, 0);
	REQUIRE(s >= 0);
	struct sockaddr_in a;
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	EXPECT_M1(rbind(s, NULL, sizeof(a)), EFAULT, EINVAL);
	EXPECT_M1(rbind(s, (struct sockaddr *)&a, 1), EINVAL);
	EXPECT_M1(rconnect(s, NULL, 0), EFAULT, EINVAL);
	EXPECT_M1(rrecv(s, buf, sizeof(buf), MSG_DONTWAIT), ENOTCONN);
	EXPECT_M1(rsend(s, buf, sizeof(buf), 0), ENOTCONN);
	EXPECT_M1(rsend(s, NULL, sizeof(buf), 0), EFAULT);
	EXPECT_M1(rgetpeername(s, (struct sockaddr *)&a, NULL), ENOTCONN, EFAULT);
	EXPECT_M1(rgetsockname(s, NULL, NULL), EFAULT);
	EXPECT_M1(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, NULL, sizeof(int)), EFAULT);
	EXPECT_M1(rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, buf, 1), EINVAL);
	EXPECT_M1(rgetsockopt(s, SOL_SOCKET, SO_ERROR, NULL, NULL), EFAULT, EINVAL);
	EXPECT_M1(rshutdown(s, SHUT_RDWR), ENOTCONN);
	EXPECT_M1(raccept(s, NULL, NULL), EINVAL);
	EXPECT_M1(rreadv(s, NULL, -1), EINVAL);
	EXPECT_EQ(rclose(s), 0);
	EXPECT_M1(rclose(s), EBADF);
}

static void case_rbind(void)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rbind(fd, NULL, 0), RS_ERRS);
		EXPECT_M1(rbind(fd, (struct sockaddr *)&a, sizeof(a)), RS_ERRS);
	}
}

static void case_rlisten(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rlisten(fd, 4), RS_ERRS);
	}
}

static void case_raccept(void)
{
	socklen_t len = 0;

	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(raccept(fd, NULL, NULL), RS_ERRS);
		EXPECT_M1(raccept(fd, NULL, &len), RS_ERRS);
	}
}

static void case_rconnect(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rconnect(fd, NULL, 0), RS_ERRS);
	}
}

static void case_rshutdown(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rshutdown(fd, SHUT_RDWR), RS_ERRS);
	}
}

static void case_rclose(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rclose(fd), RS_ERRS);
	}
	/* The ordinary descriptor is not an rsocket: rclose must not have closed it. */
	CHECK(fcntl(bad_fds[1], F_GETFD) >= 0);
}

static void case_rrecv(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rrecv(fd, NULL, sizeof(buf), 0), RS_ERRS);
		EXPECT_M1(rrecv(fd, buf, sizeof(buf), MSG_DONTWAIT), RS_ERRS);
	}
}

static void case_rrecvfrom(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rrecvfrom(fd, NULL, sizeof(buf), 0, NULL, NULL), RS_ERRS);
	}
}

static void case_rrecvmsg(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rrecvmsg(fd, NULL, 0), RS_ERRS);
	}
}

static void case_rsend(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rsend(fd, NULL, sizeof(buf), 0), RS_ERRS);
		EXPECT_M1(rsend(fd, buf, sizeof(buf), MSG_DONTWAIT), RS_ERRS);
	}
}

static void case_rsendto(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rsendto(fd, NULL, sizeof(buf), 0, NULL, 0), RS_ERRS);
	}
}

static void case_rsendmsg(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rsendmsg(fd, NULL, 0), RS_ERRS);
	}
}

static void case_rread(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rread(fd, NULL, sizeof(buf)), RS_ERRS);
	}
}

static void case_rreadv(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rreadv(fd, NULL, 1), RS_ERRS);
		EXPECT_M1(rreadv(fd, NULL, -1), RS_ERRS);
	}
}

static void case_rwrite(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rwrite(fd, NULL, sizeof(buf)), RS_ERRS);
	}
}

static void case_rwritev(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rwritev(fd, NULL, 1), RS_ERRS);
		EXPECT_M1(rwritev(fd, NULL, -1), RS_ERRS);
	}
}

static void case_rgetpeername(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rgetpeername(fd, NULL, NULL), RS_ERRS);
	}
}

static void case_rgetsockname(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rgetsockname(fd, NULL, NULL), RS_ERRS);
	}
}

static void case_rsetsockopt(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rsetsockopt(fd, SOL_SOCKET, SO_REUSEADDR, NULL, sizeof(int)), RS_ERRS);
		EXPECT_M1(rsetsockopt(fd, SOL_RDMA, RDMA_SQSIZE, NULL, 0), RS_ERRS);
	}
}

static void case_rgetsockopt(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rgetsockopt(fd, SOL_SOCKET, SO_ERROR, NULL, NULL), RS_ERRS);
	}
}

static void case_rfcntl(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(rfcntl(fd, F_GETFL), RS_ERRS);
		EXPECT_M1(rfcntl(fd, F_SETFL, O_NONBLOCK), RS_ERRS);
	}
}

static void case_riomap(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(riomap(fd, NULL, sizeof(buf), PROT_WRITE, 0, -1), RS_ERRS);
	}
}

static void case_riounmap(void)
{
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_M1(riounmap(fd, NULL, sizeof(buf)), RS_ERRS);
	}
}

static void case_riowrite(void)
{
	/* Nothing written: (size_t)-1 with errno, as rwrite's -1 (rdma-core returns it too). */
	FOR_EACH_BAD_FD(fd)
	{
		EXPECT_VAL(riowrite(fd, buf, sizeof(buf), 0, 0), (size_t)-1, RS_ERRS);
		EXPECT_VAL(riowrite(fd, NULL, sizeof(buf), 0, 0), (size_t)-1, RS_ERRS);
	}
}

static void case_rpoll(void)
{
	struct pollfd p;
	struct rlimit rl;
	int fd = closed_fd();

	REQUIRE(fd >= 0);
	/* poll(2): a NULL array of one entry is EFAULT; of none, a plain timeout. */
	EXPECT_M1(rpoll(NULL, 1, 0), EFAULT);
	EXPECT_EQ(rpoll(NULL, 0, 0), 0);
	/* A closed descriptor is reported with POLLNVAL, not an error. */
	p.fd = fd;
	p.events = POLLIN;
	p.revents = 0;
	EXPECT_EQ(rpoll(&p, 1, 0), 1);
	CHECK(p.revents & POLLNVAL);
	/* A negative descriptor is ignored. */
	p.fd = -1;
	p.revents = 0;
	EXPECT_EQ(rpoll(&p, 1, 0), 0);
	/* More entries than descriptors allowed: EINVAL. */
	REQUIRE(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 30))
		EXPECT_M1(rpoll(&p, (nfds_t)rl.rlim_cur + 1, 0), EINVAL);
}

static void case_rselect(void)
{
	struct timeval tv = { 0, 0 };
	fd_set rd;
	int fd = closed_fd();

	REQUIRE(fd >= 0);
	/* select(2): a negative count or an invalid timeout is EINVAL; a closed descriptor in a
	 * set is EBADF; no sets and a zero timeout return 0. */
	EXPECT_M1(rselect(-1, NULL, NULL, NULL, &tv), EINVAL);
	tv.tv_usec = -1;
	EXPECT_M1(rselect(0, NULL, NULL, NULL, &tv), EINVAL);
	tv.tv_usec = 0;
	FD_ZERO(&rd);
	FD_SET(fd, &rd);
	EXPECT_M1(rselect(fd + 1, &rd, NULL, NULL, &tv), EBADF);
	EXPECT_EQ(rselect(0, NULL, NULL, NULL, &tv), 0);
}

static const struct bi_case cases[] = {
	BI_CASE(rsocket),
	BI_CASE(rbind),
	BI_CASE(rlisten),
	BI_CASE(raccept),
	BI_CASE(rconnect),
	BI_CASE(rshutdown),
	BI_CASE(rclose),
	BI_CASE(rrecv),
	BI_CASE(rrecvfrom),
	BI_CASE(rrecvmsg),
	BI_CASE(rsend),
	BI_CASE(rsendto),
	BI_CASE(rsendmsg),
	BI_CASE(rread),
	BI_CASE(rreadv),
	BI_CASE(rwrite),
	BI_CASE(rwritev),
	BI_CASE(rgetpeername),
	BI_CASE(rgetsockname),
	BI_CASE(rsetsockopt),
	BI_CASE(rgetsockopt),
	BI_CASE(rfcntl),
	BI_CASE(riomap),
	BI_CASE(riounmap),
	BI_CASE(riowrite),
	BI_CASE(rpoll),
	BI_CASE(rselect),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
