/* ibv_dereg_mr ends every access to the memory before it returns, even one that is landing at
 * that moment: once the call returns, the program may reuse or unmap the memory.
 *
 * Each round connects two RC QPs of this process, starts a 1 MiB operation, waits until its
 * first bytes have moved, and right then deregisters the region the rest of it is going to or
 * coming from:
 *   - WRITE: the target's region, zeroed after ibv_dereg_mr returns; it must stay zero (a byte
 *     that lands later is a write into memory the program owns again);
 *   - READ: the target's region, unmapped after ibv_dereg_mr returns (a byte read later faults);
 *   - WRITE through a type 2 memory window: the window is invalidated (IBV_WR_LOCAL_INV) while
 *     the WRITE lands, then the region deregistered and zeroed; it must stay zero;
 *   - SEND: the receiver's own receive buffer (a program tearing down while a message lands),
 *     zeroed after ibv_dereg_mr; it must stay zero, and the receive fails (IBV_WC_LOC_PROT_ERR);
 *   - READ into a local buffer: the requester's own, zeroed after ibv_dereg_mr; it must stay zero;
 *   - SEND and WRITE from a local buffer: the requester's own source, unmapped after ibv_dereg_mr
 *     (a byte read later faults); the request fails (IBV_WC_LOC_PROT_ERR) or was all sent, and
 *     a receive completes successfully only with the whole message.
 * Each request completes successfully (it was all done before the deregistration) or with the
 * error the man pages give for it, and never hangs. Regions on a MAP_SHARED mapping take the copy
 * path (the target's provider copies each segment); private ones may take the direct path. */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>
#include "rc_pair.h"

#define LEN (1u << 20)
#define ROUNDS 40

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
			  IBV_ACCESS_MW_BIND;

enum op { WRITE, READ, WINDOW, SEND, READ_LOCAL, SEND_FROM, WRITE_FROM };
static const char *const OP[] = { "WRITE", "READ", "WRITE through a window", "SEND into a receive",
				  "READ into a local buffer", "SEND from a local buffer",
				  "WRITE from a local buffer" };

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

/* The requester's status: success, or the error the deregistration gives it. */
static void check_status(struct ibv_wc wc, enum op op, int round)
{
	enum ibv_wc_status cut = op == SEND				    ? IBV_WC_REM_OP_ERR :
				 op == READ_LOCAL || op == SEND_FROM || op == WRITE_FROM ? IBV_WC_LOC_PROT_ERR :
										   IBV_WC_REM_ACCESS_ERR;
	CHECK(wc.status == IBV_WC_SUCCESS || wc.status == cut,
	      "%s round %d: status %d (%s), expected success or %s", OP[op], round, (int)wc.status,
	      wc.status == (enum ibv_wc_status)-1 ? "none within 10 s" : ibv_wc_status_str(wc.status),
	      ibv_wc_status_str(cut));
}

static void binds(struct end *b, struct ibv_mw *mw, uint32_t rkey, struct ibv_mr *mr, void *addr)
{
	struct ibv_send_wr wr = { .wr_id = 2, .opcode = IBV_WR_BIND_MW };
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info = (struct ibv_mw_bind_info){ .mr = mr, .addr = (uintptr_t)addr, .length = LEN,
							  .mw_access_flags = IBV_ACCESS_REMOTE_WRITE };
	local_op(b, &wr, "bind_mw", 0);
}

/* One round; returns whether the deregistration cut the operation short. */
static int round_trip(int round, int shared, enum op op)
{
	struct end a, b;
	pair(&a, &b, ACCESS, 7);
	/* `gone` is the region deregistered mid-way: the target's, or the requester's own. A
	 * source's target is shared too, so that a WRITE from it takes the ring. */
	int source_gone = op == SEND_FROM || op == WRITE_FROM;
	int local_gone = op == READ_LOCAL || source_gone;
	unsigned char *local = map(local_gone && shared), *target = map((!local_gone || source_gone) && shared);
	int from_target = op == READ || op == READ_LOCAL;
	memset(from_target ? target : local, 0xa5, LEN);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, LEN, ACCESS);
	struct ibv_mr *tmr = ibv_reg_mr(pd, target, LEN, ACCESS);
	CHECK(lmr && tmr, "reg_mr");
	unsigned char *gone = local_gone ? local : target;
	struct ibv_mr **gone_mr = local_gone ? &lmr : &tmr;

	uint32_t rkey = tmr->rkey;
	struct ibv_mw *mw = NULL;
	if (op == WINDOW) {
		mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
		CHECK(mw, "alloc_mw");
		rkey = ibv_inc_rkey(mw->rkey);
		binds(&b, mw, rkey, tmr, target);
	}
	int sends = op == SEND || op == SEND_FROM;
	if (sends)
		post_recv(b.qp, target, LEN, tmr->lkey, 9);
	enum ibv_wr_opcode wop = sends ? IBV_WR_SEND : from_target ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
	CHECK(post(a.qp, wop, local, LEN, lmr->lkey, (uintptr_t)target, rkey, 1) == 0, "post_send");
	struct ibv_wc wc;
	/* The first bytes moved: those of the region (WRITE, SEND) or of the local buffer (READ). */
	int in_flight = started(from_target ? local : target, 0, a.cq, &wc);
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
	CHECK(ibv_dereg_mr(*gone_mr) == 0, "dereg_mr (errno %d)", errno);
	*gone_mr = NULL;
	if (op == READ || source_gone)
		CHECK(munmap(gone, LEN) == 0, "munmap"); /* a later read of it faults */
	else
		memset(gone, 0, LEN); /* the program reuses the memory */
	if (in_flight)
		wc = wait_wc(a.cq, 10000);
	check_status(wc, op, round);
	if (op == SEND) {
		struct ibv_wc r = wait_wc(b.cq, 10000);
		CHECK(r.wr_id == 9 && (r.status == IBV_WC_SUCCESS || r.status == IBV_WC_LOC_PROT_ERR),
		      "SEND round %d: the receive completed with status %d", round, (int)r.status);
		CHECK((r.status == IBV_WC_SUCCESS) == (wc.status == IBV_WC_SUCCESS),
		      "SEND round %d: receive status %d, send status %d", round, (int)r.status, (int)wc.status);
	}
	if (op == SEND_FROM) {
		/* Cut short, the receive holds a part of the message: it must not complete as if it
		 * had all of it (it may be flushed, or stay posted until the QP is destroyed). */
		struct ibv_wc r = wait_wc(b.cq, wc.status == IBV_WC_SUCCESS ? 10000 : 200);
		if (wc.status == IBV_WC_SUCCESS)
			CHECK(r.wr_id == 9 && r.status == IBV_WC_SUCCESS, "SEND from round %d: receive status %d",
			      round, (int)r.status);
		else
			CHECK(r.status != IBV_WC_SUCCESS, "SEND from round %d: a cut-short message was received",
			      round);
	}
	if (source_gone && wc.status == IBV_WC_SUCCESS)
		for (size_t i = 0; i < LEN; i++)
			CHECK(target[i] == 0xa5, "%s round %d: byte %zu wrong", OP[op], round, i);
	if (op != READ && !source_gone) {
		for (size_t i = 0; i < LEN; i++)
			CHECK(gone[i] == 0, "%s round %d (%s): byte %zu landed after ibv_dereg_mr returned",
			      OP[op], round, shared ? "shared" : "private", i);
	}
	if (wc.status == IBV_WC_SUCCESS && op == READ)
		for (size_t i = 0; i < LEN; i++)
			CHECK(local[i] == 0xa5, "READ round %d: byte %zu wrong", round, i);

	CHECK(ibv_destroy_qp(a.qp) == 0 && ibv_destroy_qp(b.qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(a.cq) == 0 && ibv_destroy_cq(b.cq) == 0, "destroy_cq");
	CHECK((!lmr || ibv_dereg_mr(lmr) == 0) && (!tmr || ibv_dereg_mr(tmr) == 0), "dereg_mr");
	CHECK(!mw || ibv_dealloc_mw(mw) == 0, "dealloc_mw");
	if (!source_gone)
		munmap(local, LEN);
	if (op != READ)
		munmap(target, LEN);
	return wc.status != IBV_WC_SUCCESS;
}

int main(void)
{
	alarm(240);
	open_first_device();
	for (enum op op = WRITE; op <= WRITE_FROM; op++)
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
