/* ibv_dereg_mr revokes a peer's access before it returns, even for an RDMA WRITE or READ that
 * is landing at that moment: once the call returns, the program may reuse or unmap the memory.
 *
 * Each round connects two RC QPs of this process, starts a 1 MiB RDMA WRITE (or READ) against
 * a region of the target, waits until its first bytes have moved, and deregisters the region
 * right then, while the rest of the message is in flight:
 *   - WRITE: the region is zeroed after ibv_dereg_mr returns, and must stay zero (a byte that
 *     lands later is a write into memory the program owns again);
 *   - READ: the region is unmapped after ibv_dereg_mr returns (a byte read later faults).
 * And through a type 2 memory window: the window is invalidated (IBV_WR_LOCAL_INV) while the
 * WRITE through it lands, then the region deregistered and zeroed; it must stay zero.
 * The request completes either successfully (it was all done before the deregistration) or
 * with IBV_WC_REM_ACCESS_ERR, never hangs. Regions on a MAP_SHARED mapping take the copy path
 * (the target's provider copies each segment); private ones may take the direct path. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include "rc_pair.h"

#define LEN (1u << 20)
#define ROUNDS 40

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_MW_BIND;

enum op { WRITE, READ, WINDOW };
static const char *const OP[] = { "WRITE", "READ", "WRITE through a window" };

/* Posts a local operation (a bind or an invalidation) on `e` and waits for its completion:
 * success, or (if `may_flush`) flushed because the QP went to the error state meanwhile. */
static enum ibv_wc_status local_op(struct end *e, struct ibv_send_wr *wr, const char *what, int may_flush)
{
	struct ibv_send_wr *bad;
	wr->send_flags = IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(e->qp, wr, &bad) == 0, "post %s", what);
	struct ibv_wc wc = wait_wc(e->cq, 10000);
	CHECK(wc.status == IBV_WC_SUCCESS || (may_flush && wc.status == IBV_WC_WR_FLUSH_ERR),
	      "%s: status %d", what, (int)wc.status);
	return wc.status;
}

static void *map(int shared)
{
	void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, (shared ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS,
		       -1, 0);
	CHECK(p != MAP_FAILED, "mmap");
	return p;
}

/* Waits until byte `at` of `p` is not zero (the operation has started to move data), or the
 * request completed (then returns its completion); a deadline guards against a hang. */
static int started(volatile unsigned char *p, size_t at, struct ibv_cq *cq, struct ibv_wc *wc)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (p[at] != 0)
			return 1;
		int n = ibv_poll_cq(cq, 1, wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return 0;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 10, "the operation never started");
	}
}

static void check_status(struct ibv_wc wc, const char *what, int round)
{
	CHECK(wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_REM_ACCESS_ERR,
	      "%s round %d: status %d (%s), expected success or a remote access error", what, round,
	      (int)wc.status, wc.status == (enum ibv_wc_status)-1 ? "none within 10 s" :
	      ibv_wc_status_str(wc.status));
}

/* One round; returns whether the deregistration cut the operation short. */
static int round_trip(int round, int shared, enum op op)
{
	int read = op == READ;
	struct end a, b;
	pair(&a, &b, ACCESS, 7);
	unsigned char *local = map(0), *target = map(shared);
	memset(read ? target : local, 0xa5, LEN);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, LEN, ACCESS);
	struct ibv_mr *tmr = ibv_reg_mr(pd, target, LEN, ACCESS);
	CHECK(lmr && tmr, "reg_mr");

	uint32_t rkey = tmr->rkey;
	struct ibv_mw *mw = NULL;
	if (op == WINDOW) {
		mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		CHECK(mw, "alloc_mw");
		rkey = ibv_inc_rkey(mw->rkey);
		struct ibv_send_wr wr = { .wr_id = 2, .opcode = IBV_WR_BIND_MW };
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = rkey;
		wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = tmr, .addr = (uintptr_t)target,
			.length = LEN, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
		local_op(&b, &wr, "bind_mw", 0);
	}
	CHECK(post(a.qp, read ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE, local, LEN, lmr->lkey,
		   (uintptr_t)target, rkey, 1) == 0, "post_send");
	struct ibv_wc wc;
	/* The first bytes moved: those of the region (WRITE) or of the local buffer (READ). */
	int in_flight = started(read ? local : target, 0, a.cq, &wc);
	if (op == WINDOW) {
		/* Once the invalidation completes, the window's key reaches nothing: the region is
		 * the MR's alone again, and may be deregistered. If the WRITE's refusal moved the
		 * target's QP to the error state first, the invalidation was flushed and may not have
		 * run: deallocating the window invalidates it. */
		struct ibv_send_wr wr = { .wr_id = 3, .opcode = IBV_WR_LOCAL_INV, .invalidate_rkey = rkey };
		if (local_op(&b, &wr, "local_inv", 1) != IBV_WC_SUCCESS) {
			CHECK(ibv_dealloc_mw(mw) == 0, "dealloc_mw");
			mw = NULL;
		}
	}
	CHECK(ibv_dereg_mr(tmr) == 0, "dereg_mr (errno %d)", errno);
	if (read)
		CHECK(munmap(target, LEN) == 0, "munmap"); /* a later read of it faults */
	else
		memset(target, 0, LEN); /* the program reuses the memory */
	if (in_flight)
		wc = wait_wc(a.cq, 10000);
	check_status(wc, OP[op], round);
	if (!read) {
		for (size_t i = 0; i < LEN; i++)
			CHECK(target[i] == 0, "%s round %d (%s): byte %zu landed after ibv_dereg_mr returned",
			      OP[op], round, shared ? "shared" : "private", i);
		CHECK(munmap(target, LEN) == 0, "munmap");
	}
	if (wc.status == IBV_WC_SUCCESS && read)
		for (size_t i = 0; i < LEN; i++)
			CHECK(local[i] == 0xa5, "READ round %d: byte %zu wrong", round, i);

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy_cq");
	CHECK(ibv_dereg_mr(lmr) == 0, "dereg_mr");
	CHECK(!mw || ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	munmap(local, LEN);
	return wc.status != IBV_WC_SUCCESS;
}

int main(void)
{
	alarm(240);
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	CHECK(l && n > 0, "no device");
	ctx = ibv_open_device(l[0]);
	ibv_free_device_list(l);
	CHECK(ctx, "open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	for (enum op op = WRITE; op <= WINDOW; op++)
		for (int shared = 1; shared >= 0; shared--) {
			int cut = 0;
			for (int r = 0; r < ROUNDS; r++)
				cut += round_trip(r, shared, op);
			/* How often the revocation caught the operation mid-way (context only). */
			printf("%s, %s region: %d of %d rounds cut short\n", OP[op],
			       shared ? "shared" : "private", cut, ROUNDS);
		}
	CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "close_device");
	printf("ok\n");
	return 0;
}
