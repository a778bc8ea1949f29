/*
 * One-sided operations on the same host without the target's CPU (issue 11, the direct path):
 *
 * 1. A target process registers 8 pages with remote rights and then only ever blocks in
 *    read() on a pipe: it never polls. One WRITE and one READ go through the copy path (the
 *    target's progress thread executes them and grants the region).
 * 2. The target is stopped (SIGSTOP, confirmed by waitpid). A WRITE, a READ and a FETCH_ADD
 *    must still complete successfully, with the right data: nothing of the target runs, so
 *    only the direct path can complete them (the copy path would wait for the target).
 * 3. After SIGCONT the target checks its memory: the WRITE's bytes and the atomic's sum.
 *    Then order across the switch from the ring to the direct path: with the target stopped
 *    again, a WRITE with immediate of page 6 ('Z'; never direct: it needs the target's
 *    receive, so it waits in the ring), then a READ of page 6 and a WRITE of 'B' to page 6
 *    (both direct-capable) are posted. Nothing may complete while the target is stopped (the
 *    READ and WRITE wait for the ring to drain rather than overtake it); after SIGCONT all
 *    three complete in order, the READ returns 'Z' and the target's page holds 'B'.
 * 4. The target deregisters the region (ibv_dereg_mr). A WRITE from us, whose library holds
 *    the grant, must complete with IBV_WC_REM_ACCESS_ERR, and the target's memory must be
 *    untouched.
 * Also: a child the target forks after registering writes all over the region; the target's
 * memory must not change (fork gives a child a private copy, the direct path included).
 * Every wait is bounded (alarm() turns a hang into a failure).
 * Built with -DDIRECT_PATH_IOVA (test direct_path_iova, issue 13), both regions are registered
 * with ibv_reg_mr_iova at iovas other than their addresses, and every address posted (remote
 * and local) is an iova: the direct path, too, addresses the target's region in iova space.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rc_pair.h"

#define PAGES 8
#define LEN (PAGES * 4096)
#define WAIT_MS 10000

struct hello {
	uint32_t qpn;
	uint32_t rkey;
	uint64_t addr;
};

static void xread(int fd, void *p, size_t n)
{
	CHECK(read(fd, p, n) == (ssize_t)n, "pipe read");
}

static void xwrite(int fd, const void *p, size_t n)
{
	CHECK(write(fd, p, n) == (ssize_t)n, "pipe write");
}

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_REMOTE_ATOMIC;

#ifdef DIRECT_PATH_IOVA
/* Page-aligned iovas far from any heap address. */
#define TARGET_IOVA 0x4000000000ull
#define LOCAL_IOVA 0x8000000000ull
static struct ibv_mr *reg(void *buf, uint64_t iova)
{
	return ibv_reg_mr_iova(pd, buf, LEN, iova, ACCESS);
}
#else
#define TARGET_IOVA 0
#define LOCAL_IOVA 0
static struct ibv_mr *reg(void *buf, uint64_t iova)
{
	(void)iova;
	return ibv_reg_mr(pd, buf, LEN, ACCESS);
}
#endif

/* The local buffer, and how an SGE addresses its byte p. */
static unsigned char *mine;
static void *L(unsigned char *p)
{
	return LOCAL_IOVA ? (void *)(uintptr_t)(LOCAL_IOVA + (uint64_t)(p - mine)) : (void *)p;
}

static unsigned char expected(size_t i)
{
	return (unsigned char)(i * 7 + 3);
}

/* The target: answers commands on `in` with one byte ('y' or 'n') on `out`. */
static void target(int in, int out)
{
	open_first_device();
	unsigned char *buf = aligned_alloc(4096, LEN);
	CHECK(buf, "alloc");
	for (size_t i = 0; i < LEN; i++)
		buf[i] = expected(i);
	struct ibv_mr *mr = reg(buf, TARGET_IOVA);
	CHECK(mr, "reg_mr");

	pid_t kid = fork();
	CHECK(kid >= 0, "fork");
	if (kid == 0) {
		memset(buf, 'X', LEN);
		_exit(0);
	}
	int st;
	CHECK(waitpid(kid, &st, 0) == kid && WIFEXITED(st), "fork child");
	for (size_t i = 0; i < LEN; i++)
		CHECK(buf[i] == expected(i), "a forked child's writes reached its parent at byte %zu", i);

	struct end e = make_end(4);
	struct hello h = { e.qp->qp_num, mr->rkey, TARGET_IOVA ? TARGET_IOVA : (uintptr_t)buf }, peer;
	xwrite(out, &h, sizeof h);
	xread(in, &peer, sizeof peer);
	to_rts(e.qp, peer.qpn, ACCESS, 7, 7, 14, 1);
	post_recv(e.qp, buf + 7 * 4096, 64, mr->lkey, 1); /* for the WRITE with immediate (3b) */
	xwrite(out, "y", 1);

	unsigned char snapshot[LEN];
	for (;;) {
		char c;
		if (read(in, &c, 1) != 1)
			exit(0);
		char ok = 'y';
		if (c == 'C') { /* the stopped phase's WRITE (page 2: 'W') and FETCH_ADD (page 4) */
			for (size_t i = 2 * 4096; i < 3 * 4096; i++)
				if (buf[i] != 'W')
					ok = 'n';
			uint64_t v, orig;
			memcpy(&v, buf + 4 * 4096, 8);
			unsigned char o[8];
			for (int i = 0; i < 8; i++)
				o[i] = expected(4 * 4096 + i);
			memcpy(&orig, o, 8);
			if (v != orig + 10)
				ok = 'n';
		} else if (c == 'B') { /* the ordered WRITE (page 6: 'B') */
			for (size_t i = 6 * 4096; i < 7 * 4096; i++)
				if (buf[i] != 'B')
					ok = 'n';
		} else if (c == 'D') {
			ok = ibv_dereg_mr(mr) == 0 ? 'y' : 'n';
			memcpy(snapshot, buf, LEN);
		} else if (c == 'U') {
			ok = memcmp(snapshot, buf, LEN) == 0 ? 'y' : 'n';
		}
		xwrite(out, &ok, 1);
	}
}

static char ask(int to, int from, char c)
{
	char r = 0;
	xwrite(to, &c, 1);
	xread(from, &r, 1);
	return r;
}

static void expect(struct ibv_cq *cq, enum ibv_wc_status want, const char *what)
{
	struct ibv_wc wc = wait_wc(cq, WAIT_MS);
	CHECK((int)wc.status != -1, "%s: no completion within %d ms", what, WAIT_MS);
	CHECK(wc.status == want, "%s: %s, expected %s", what, ibv_wc_status_str(wc.status),
	      ibv_wc_status_str(want));
}

static pid_t target_pid;

/* A failure (CHECK exits) must not leave the target stopped behind us. */
static void kill_target(void)
{
	if (target_pid > 0)
		kill(target_pid, SIGKILL);
}

int main(void)
{
	alarm(120);
	int down[2], up[2];
	CHECK(pipe(down) == 0 && pipe(up) == 0, "pipe");
	pid_t t = fork();
	CHECK(t >= 0, "fork");
	if (t == 0) {
		close(down[1]);
		close(up[0]);
		target(down[0], up[1]);
		exit(0);
	}
	target_pid = t;
	atexit(kill_target);
	close(down[0]);
	close(up[1]);
	int to = down[1], from = up[0];

	open_first_device();
	mine = aligned_alloc(4096, LEN);
	CHECK(mine, "alloc");
	memset(mine, 0, LEN);
	struct ibv_mr *mr = reg(mine, LOCAL_IOVA);
	CHECK(mr, "reg_mr");
	struct hello peer;
	xread(from, &peer, sizeof peer);
	struct end e = make_end(4);
	struct hello h = { e.qp->qp_num, 0, 0 };
	xwrite(to, &h, sizeof h);
	to_rts(e.qp, peer.qpn, ACCESS, 7, 7, 14, 1);
	char r;
	xread(from, &r, 1);
	CHECK(r == 'y', "target not ready");

	/* 1. The copy path, while the target runs: it grants the region. */
	memset(mine, 'w', 64);
	CHECK(post(e.qp, IBV_WR_RDMA_WRITE, L(mine), 64, mr->lkey, peer.addr, peer.rkey, 1) == 0, "post");
	expect(e.cq, IBV_WC_SUCCESS, "first WRITE");
	CHECK(post(e.qp, IBV_WR_RDMA_READ, L(mine + 4096), 64, mr->lkey, peer.addr + 4096, peer.rkey, 2) == 0,
	      "post");
	expect(e.cq, IBV_WC_SUCCESS, "first READ");

	/* 2. The target stopped. */
	CHECK(kill(t, SIGSTOP) == 0, "SIGSTOP");
	int st;
	CHECK(waitpid(t, &st, WUNTRACED) == t && WIFSTOPPED(st), "target not stopped");
	memset(mine + 2 * 4096, 'W', 4096);
	CHECK(post(e.qp, IBV_WR_RDMA_WRITE, L(mine + 2 * 4096), 4096, mr->lkey, peer.addr + 2 * 4096, peer.rkey, 3) ==
		      0,
	      "post");
	expect(e.cq, IBV_WC_SUCCESS, "WRITE to a stopped target");
	CHECK(post(e.qp, IBV_WR_RDMA_READ, L(mine + 3 * 4096), 4096, mr->lkey, peer.addr + 3 * 4096, peer.rkey, 4) ==
		      0,
	      "post");
	expect(e.cq, IBV_WC_SUCCESS, "READ from a stopped target");
	for (size_t i = 3 * 4096; i < 4 * 4096; i++)
		CHECK(mine[i] == expected(i), "READ from a stopped target: byte %zu is %u", i, mine[i]);
	CHECK(post(e.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, L(mine + 5 * 4096), 8, mr->lkey, peer.addr + 4 * 4096,
		   peer.rkey, 5) == 0,
	      "post");
	expect(e.cq, IBV_WC_SUCCESS, "FETCH_ADD on a stopped target");
	for (size_t i = 0; i < 8; i++)
		CHECK(mine[5 * 4096 + i] == expected(4 * 4096 + i), "FETCH_ADD's original value, byte %zu", i);
	printf("ok WRITE, READ and FETCH_ADD completed while the target was stopped\n");

	/* 3. */
	CHECK(kill(t, SIGCONT) == 0, "SIGCONT");
	CHECK(ask(to, from, 'C') == 'y', "the target's memory lacks the WRITE or the FETCH_ADD");
	printf("ok the target's memory holds the WRITE and the FETCH_ADD\n");

	/* 3b. A ring request outstanding: direct-capable requests behind it wait, in order. */
	CHECK(kill(t, SIGSTOP) == 0, "SIGSTOP");
	CHECK(waitpid(t, &st, WUNTRACED) == t && WIFSTOPPED(st), "target not stopped");
	memset(mine + 6 * 4096, 0, 4096);
	memset(mine + 7 * 4096, 'B', 4096);
	unsigned char *zs = mine + 4096; /* page 1 of ours: the 'Z' bytes */
	memset(zs, 'Z', 4096);
	CHECK(post(e.qp, IBV_WR_RDMA_WRITE_WITH_IMM, L(zs), 4096, mr->lkey, peer.addr + 6 * 4096, peer.rkey, 20) ==
		      0,
	      "post");
	CHECK(post(e.qp, IBV_WR_RDMA_READ, L(mine + 6 * 4096), 4096, mr->lkey, peer.addr + 6 * 4096, peer.rkey, 21) ==
		      0,
	      "post");
	CHECK(post(e.qp, IBV_WR_RDMA_WRITE, L(mine + 7 * 4096), 4096, mr->lkey, peer.addr + 6 * 4096, peer.rkey,
		   22) == 0,
	      "post");
	struct ibv_wc early = wait_wc(e.cq, 300);
	CHECK((int)early.status == -1, "wr %llu completed while the ring request before it could not",
	      (unsigned long long)early.wr_id);
	CHECK(kill(t, SIGCONT) == 0, "SIGCONT");
	for (uint64_t id = 20; id <= 22; id++) {
		struct ibv_wc wc = wait_wc(e.cq, WAIT_MS);
		CHECK((int)wc.status != -1, "wr %llu: no completion within %d ms", (unsigned long long)id, WAIT_MS);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == id, "wr %llu: %s, expected wr %llu to succeed",
		      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), (unsigned long long)id);
	}
	for (size_t i = 6 * 4096; i < 7 * 4096; i++)
		CHECK(mine[i] == 'Z', "the READ overtook the WRITE before it or saw the one after it: byte %zu is %u",
		      i, mine[i]);
	CHECK(ask(to, from, 'B') == 'y', "the target's page lacks the WRITE posted after the READ");
	printf("ok requests behind a ring request waited for it, then completed in order\n");

	/* 4. Deregistered: the grant we hold no longer reaches the memory. */
	CHECK(ask(to, from, 'D') == 'y', "dereg_mr");
	memset(mine, 'Z', 4096);
	CHECK(post(e.qp, IBV_WR_RDMA_WRITE, L(mine), 4096, mr->lkey, peer.addr, peer.rkey, 6) == 0, "post");
	expect(e.cq, IBV_WC_REM_ACCESS_ERR, "WRITE after the target's ibv_dereg_mr");
	CHECK(ask(to, from, 'U') == 'y', "the target's memory changed after ibv_dereg_mr");
	printf("ok after ibv_dereg_mr: IBV_WC_REM_ACCESS_ERR and the memory untouched\n");

	close(to);
	CHECK(waitpid(t, &st, 0) == t && WIFEXITED(st) && WEXITSTATUS(st) == 0, "target failed");
	target_pid = 0;
	printf("PASS\n");
	return 0;
}
