/* ibv_query_qp_data_in_order(3): 1 if the data of one WQE is written in order at the
 * receiving side (a reader may poll the data), 0 otherwise; flags must be 0. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_qp_data_in_order", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 1 << 20, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-VALUE", d.err);
		return conf_end();
	}
	/* RETURN VALUE: 1 or 0, for each operation type it describes. */
	int w = ibv_query_qp_data_in_order(p.qp[1], IBV_WR_RDMA_WRITE, 0);
	int s = ibv_query_qp_data_in_order(p.qp[1], IBV_WR_SEND, 0);
	int r = ibv_query_qp_data_in_order(p.qp[0], IBV_WR_RDMA_READ, 0);
	CLAUSE("RET-VALUE", (w == 0 || w == 1) && (s == 0 || s == 1) && (r == 0 || r == 1), "write %d, send %d, read %d",
	       w, s, r);
	/* DESCRIPTION: where it says 1 for RDMA WRITE, a reader that sees the last byte of a
	 * write sees all the bytes before it (half a megabyte, polled on its last byte). */
	size_t len = 512 * 1024;
	char *src = b.buf, *dst = b.buf + len;
	memset(src, 0x5a, len);
	memset(dst, 0, len);
	int ok = 1;
	if (w == 1) {
		ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, src, (uint32_t)len, b.mr->lkey, (uintptr_t)dst, b.mr->rkey, 1);
		long long end = ih_now_ms() + IH_WAIT_MS;
		while (*(volatile char *)(dst + len - 1) != 0x5a && ih_now_ms() < end)
			;
		for (size_t i = 0; i < len && ok; i++)
			ok = dst[i] == 0x5a;
		struct ibv_wc wc;
		ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	}
	CLAUSE("DESC-IN-ORDER", ok, "in-order %d, but a byte before the last was not written yet", w);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
