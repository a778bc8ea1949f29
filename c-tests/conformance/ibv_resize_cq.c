/* ibv_resize_cq(3): the CQ gets at least cqe entries (cq->cqe updated); cqe below the unpolled
 * entries fails; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_resize_cq", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) ||
	    ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		const char *ids[] = { "RET-0", "NOTE-CQE-UPDATED", "DESC-KEEPS", "DESC-UNPOLLED", "DESC-SHRINK" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	struct ibv_cq *cq = p.cq[0];
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_resize_cq(cq, 200);
	CLAUSE("RET-0", rc == 0, "ibv_resize_cq(200) returned %d (%s)", rc, conf_errname(rc));
	/* NOTES: the size may be larger than asked; cq->cqe is updated to it. */
	CLAUSE("NOTE-CQE-UPDATED", rc == 0 && cq->cqe >= 200, "cqe %d after resizing to 200", cq->cqe);
	/* Completions held are kept across a resize: 8 RDMA writes, resize, 8 completions. */
	int posted = 0;
	for (int i = 0; i < 8; i++)
		posted += ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, (uintptr_t)b.buf + 64,
				       b.mr->rkey, (uint64_t)i) == 0;
	/* Wait until all 8 are in the CQ (peek with a resize that is always big enough). */
	long long end = ih_now_ms() + IH_WAIT_MS;
	struct ibv_wc wc[16];
	int n = 0;
	/* Let them complete without polling: the progress engine completes RDMA writes. */
	while (ih_now_ms() < end) {
		struct timespec t = { 0, 2000000 };
		nanosleep(&t, NULL);
		/* A resize to 7 must fail once 8 are held: that tells us they arrived. */
		if (ibv_resize_cq(cq, 7) != 0)
			break;
	}
	/* cqe must be at least the unpolled entries: 7 for 8 held fails. */
	int small = ibv_resize_cq(cq, 7);
	CLAUSE("DESC-UNPOLLED", posted == 8 && small != 0, "8 completions held, resize to 7: %d (%s)", small,
	       conf_errname(small));
	int grow = ibv_resize_cq(cq, 400);
	for (int i = 0; i < 10 && n < 8; i++) {
		int k = ibv_poll_cq(cq, 16 - n, wc + n);
		if (k > 0)
			n += k;
		else if (k < 0)
			break;
		else {
			struct timespec t = { 0, 1000000 };
			nanosleep(&t, NULL);
		}
	}
	int inorder = n == 8;
	for (int i = 0; i < n && inorder; i++)
		inorder &= wc[i].wr_id == (uint64_t)i && wc[i].status == IBV_WC_SUCCESS;
	CLAUSE("DESC-KEEPS", grow == 0 && inorder, "resize to 400: %d; then %d of 8 completions polled in order: %d",
	       grow, n, inorder);
	/* A valid size below the current one may be ignored, but keeps at least what was asked. */
	int shrink = ibv_resize_cq(cq, 16);
	CLAUSE("DESC-SHRINK", shrink == 0 && cq->cqe >= 16, "resize to 16: %d, cqe %d", shrink, cq->cqe);
	ih_buf_free(&b);
	ih_pair_destroy(&p);
	ih_dev_close(&d);
	return conf_end();
}
