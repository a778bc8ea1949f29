/* ibv_import_device/ibv_import_pd across processes (ibv_import_pd(3): the command fd "can be
 * shared between processes"; a PD has one object whatever the number of handles): a child given
 * a duplicate of the parent's cmd_fd imports the device and the PD, and the kernel's rules hold
 * between the two processes:
 *   - the owner's ibv_dealloc_pd gives EBUSY while the child has an MR on its import;
 *   - the child's ibv_dealloc_pd of its import destroys the owner's object too (the owner's
 *     ibv_reg_mr then fails with EINVAL);
 *   - the owner's ibv_dealloc_pd of a PD the child holds (unused) succeeds, and by the time it
 *     returns the child's import is refused (EINVAL) and cannot be imported again;
 *   - two imports of one PD in the child are one protection domain, and once the child lets go,
 *     the owner deallocates the PD;
 *   - a forged descriptor (a memfd with the same content as cmd_fd) imports nothing: EOPNOTSUPP;
 *   - when the owner exits, an importer's handles are refused (EINVAL) within a few seconds.
 * The two processes take turns over a socketpair. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "cmd_fd_child.h"

static int failures;
#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (cond) {                                                                        \
			printf("ok   ");                                                               \
		} else {                                                                           \
			printf("FAIL ");                                                               \
			failures++;                                                                \
		}                                                                                  \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
		fflush(stdout);                                                                    \
	} while (0)

struct handles {
	uint32_t pd[3];
};

/* One step of the turn-taking: a byte each way. */
static void say(int sock, char c)
{
	if (write(sock, &c, 1) != 1) {
		perror("write");
		exit(2);
	}
}

static char hear(int sock)
{
	char c = 0;
	if (read(sock, &c, 1) != 1) {
		printf("FAIL the other process went away\n");
		exit(2);
	}
	return c;
}

static int send_fd(int sock, int fd, const void *data, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { (void *)data, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	return sendmsg(sock, &m, 0) == (ssize_t)len ? 0 : -1;
}

static int recv_fd(int sock, void *data, size_t len)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = { data, len };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	if (recvmsg(sock, &m, 0) != (ssize_t)len)
		return -1;
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	if (!c || c->cmsg_type != SCM_RIGHTS)
		return -1;
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof fd);
	return fd;
}

static struct ibv_context *open_soft(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	struct ibv_context *ctx = list && n > 0 ? ibv_open_device(list[0]) : NULL;
	if (list)
		ibv_free_device_list(list);
	return ctx;
}

static char buf[4096];

/* ibv_reg_mr on `pd`; 0 if it worked, else the errno. */
static int try_reg(struct ibv_pd *pd)
{
	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (mr) {
		ibv_dereg_mr(mr);
		return 0;
	}
	return errno ? errno : -1;
}

static int child(int fd, int sock)
{
	alarm(60);
	struct handles h;
	if (read(sock, &h, sizeof h) != sizeof h)
		return 2;
	struct ibv_context *ic = ibv_import_device(fd);
	CHECK(ic != NULL, "child: ibv_import_device of the parent's cmd_fd (%s)", strerror(errno));
	if (!ic)
		return 1;

	/* The owner cannot destroy a PD the child uses; the child's dealloc destroys it for all. */
	struct ibv_pd *ip1 = ibv_import_pd(ic, h.pd[0]);
	CHECK(ip1 && ip1->handle == h.pd[0] && ip1->context == ic, "child: ibv_import_pd (%s)",
	      strerror(errno));
	struct ibv_mr *mr = ip1 ? ibv_reg_mr(ip1, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	CHECK(mr != NULL, "child: ibv_reg_mr on the imported PD");
	say(sock, '1');
	hear(sock);
	if (mr)
		ibv_dereg_mr(mr);
	int rc = ip1 ? ibv_dealloc_pd(ip1) : -1;
	CHECK(rc == 0, "child: ibv_dealloc_pd of its import, nothing using it: %d", rc);
	say(sock, '3');

	/* The owner destroys a PD the child holds: the import is refused once that returned. */
	hear(sock);
	struct ibv_pd *ip2 = ibv_import_pd(ic, h.pd[1]);
	CHECK(ip2 != NULL, "child: ibv_import_pd of a second PD (%s)", strerror(errno));
	say(sock, '5');
	hear(sock);
	int e = ip2 ? try_reg(ip2) : -1;
	CHECK(e == EINVAL, "child: ibv_reg_mr on the import after the owner's dealloc: %s", strerror(e));
	if (ip2)
		ibv_unimport_pd(ip2);
	errno = 0;
	struct ibv_pd *again = ibv_import_pd(ic, h.pd[1]);
	CHECK(!again && errno == EINVAL, "child: importing the destroyed PD again: %p (%s)", (void *)again,
	      strerror(errno));

	/* Two imports are one domain: an MR registered through one serves the other's QPs; both
	 * let go, the owner deallocates. */
	struct ibv_pd *ia = ibv_import_pd(ic, h.pd[2]);
	struct ibv_pd *ib = ibv_import_pd(ic, h.pd[2]);
	CHECK(ia && ib && ia != ib && ia->handle == ib->handle, "child: two imports of one PD");
	struct ibv_mr *m2 = ia ? ibv_reg_mr(ia, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	rc = ib ? ibv_dealloc_pd(ib) : -1;
	CHECK(m2 && rc == EBUSY, "child: dealloc of one import while an MR was registered through the other: %d",
	      rc);
	if (m2)
		ibv_dereg_mr(m2);
	if (ia)
		ibv_unimport_pd(ia);
	if (ib)
		ibv_unimport_pd(ib);
	say(sock, '7');

	/* A forged descriptor: a memfd holding what cmd_fd holds. */
	char token[128];
	ssize_t n = pread(ic->cmd_fd, token, sizeof token, 0); /* `fd` is the context's now */
	int forged = memfd_create("forged", MFD_CLOEXEC);
	CHECK(n > 0 && forged >= 0 && write(forged, token, n) == n, "child: a forged memfd with cmd_fd's content");
	errno = 0;
	struct ibv_context *fc = ibv_import_device(forged);
	CHECK(!fc && errno == EOPNOTSUPP, "child: ibv_import_device of the forged descriptor: %p (%s)",
	      (void *)fc, strerror(errno));
	if (fc)
		ibv_close_device(fc);
	else
		close(forged);

	/* The child owns a PD the parent imports; then the child exits. */
	struct ibv_context *own = open_soft();
	struct ibv_pd *pd4 = own ? ibv_alloc_pd(own) : NULL;
	int dupfd = own ? dup(own->cmd_fd) : -1;
	uint32_t h4 = pd4 ? pd4->handle : 0;
	CHECK(pd4 && dupfd >= 0 && send_fd(sock, dupfd, &h4, sizeof h4) == 0, "child: sends its own cmd_fd");
	hear(sock); /* the parent imported it */
	ibv_close_device(ic);
	return failures ? 1 : 0; /* exits with the PD alive */
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--child") == 0)
		return child(atoi(argv[2]), atoi(argv[3]));
	alarm(90);
	struct ibv_context *ctx = open_soft();
	if (!ctx) {
		printf("SKIP: no device\n");
		return 77;
	}
	struct ibv_pd *pd[3];
	struct handles h;
	for (int i = 0; i < 3; i++) {
		pd[i] = ibv_alloc_pd(ctx);
		if (!pd[i]) {
			printf("FAIL ibv_alloc_pd\n");
			return 1;
		}
		h.pd[i] = pd[i]->handle;
	}
	int sock;
	pid_t pid = start_child(argv[0], ctx->cmd_fd, &sock);
	if (pid < 0) {
		perror("start the child");
		return 1;
	}
	if (write(sock, &h, sizeof h) != sizeof h)
		return 1;

	hear(sock);
	int rc = ibv_dealloc_pd(pd[0]);
	CHECK(rc == EBUSY, "owner: ibv_dealloc_pd while the child has an MR on its import: %d", rc);
	say(sock, '2');
	hear(sock);
	int e = try_reg(pd[0]);
	CHECK(e == EINVAL, "owner: ibv_reg_mr after the child's dealloc destroyed the PD: %s", strerror(e));

	say(sock, '4');
	hear(sock);
	rc = ibv_dealloc_pd(pd[1]);
	CHECK(rc == 0, "owner: ibv_dealloc_pd of a PD the child holds, unused: %d", rc);
	say(sock, '6');

	hear(sock);
	rc = ibv_dealloc_pd(pd[2]);
	CHECK(rc == 0, "owner: ibv_dealloc_pd after the child let go of both imports: %d", rc);

	/* The child's own PD, imported here; then the child exits. */
	uint32_t h4 = 0;
	int cfd = recv_fd(sock, &h4, sizeof h4);
	struct ibv_context *ic = cfd >= 0 ? ibv_import_device(cfd) : NULL;
	struct ibv_pd *ip4 = ic ? ibv_import_pd(ic, h4) : NULL;
	CHECK(ip4 && try_reg(ip4) == 0, "owner: imports the child's device and PD, and registers on it (%s)",
	      strerror(errno));
	say(sock, '8');
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's checks (status %d)",
	      st);
	/* The owner is gone: nothing tells us when, so look for up to 5 s. */
	e = 0;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		e = ip4 ? try_reg(ip4) : EINVAL;
		if (e)
			break;
		usleep(10000);
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while (t.tv_sec - t0.tv_sec < 5);
	CHECK(e == EINVAL, "owner: ibv_reg_mr on the import of the exited child's PD: %s", strerror(e));
	if (ip4)
		ibv_unimport_pd(ip4);
	if (ic)
		ibv_close_device(ic);
	ibv_close_device(ctx);
	printf(failures ? "FAILED\n" : "PASSED\n");
	return failures ? 1 : 0;
}
