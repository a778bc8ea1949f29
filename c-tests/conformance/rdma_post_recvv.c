/* rdma_post_recvv(3): one receive made of a scatter-gather list: the message fills the
 * buffers in order; wr_id = context; the total must be large enough. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_recvv", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-SCATTER", "NOTE-WRID", "NOTE-TOO-SMALL" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char a[8], b[32], c[4], d[4];
	struct ibv_mr *ma = rdma_reg_msgs(p.srv, a, sizeof a), *mb = rdma_reg_msgs(p.srv, b, sizeof b);
	struct ibv_mr *mc = rdma_reg_msgs(p.srv, c, sizeof c), *md = rdma_reg_msgs(p.srv, d, sizeof d);
	struct ibv_sge sgl[2] = { { (uintptr_t)a, 5, ma ? ma->lkey : 0 }, { (uintptr_t)b, 32, mb ? mb->lkey : 0 } };
	int ctx;
	struct ibv_wc wc;
	errno = 0;
	int r = rdma_post_recvv(p.srv, &ctx, sgl, 2);
	CLAUSE("RET-0", r == 0, "returned %d (%s)", r, conf_errname(errno));
	int s = rdma_post_send(p.cli, NULL, "12345scattered", 15, NULL, IBV_SEND_INLINE);
	int n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	/* DESCRIPTION: the buffers receive one message, filled in order. */
	CLAUSE("DESC-SCATTER", n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 15 &&
	       memcmp(a, "12345", 5) == 0 && strcmp(b, "scattered") == 0,
	       "completion %d, %u bytes; first \"%.5s\", second \"%.10s\"", n, n == 1 ? wc.byte_len : 0, a, b);
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx, "wr_id 0x%llx, context %p",
	       n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx);
	rdma_get_send_comp(p.cli, &wc);
	/* NOTES: the total space must hold the message: 8 bytes into 4 + 3 is a length error. */
	struct ibv_sge small[2] = { { (uintptr_t)c, 4, mc ? mc->lkey : 0 }, { (uintptr_t)d, 3, md ? md->lkey : 0 } };
	r = rdma_post_recvv(p.srv, (void *)8, small, 2);
	s = rdma_post_send(p.cli, NULL, "8 bytes", 8, NULL, IBV_SEND_INLINE);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("NOTE-TOO-SMALL", n == 1 && wc.status == IBV_WC_LOC_LEN_ERR && wc.wr_id == 8,
	       "completion %d (%s)", n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
	struct ibv_mr *all[] = { ma, mb, mc, md };
	for (int i = 0; i < 4; i++)
		if (all[i])
			rdma_dereg_mr(all[i]);
	h_pair_close(&p);
	return conf_end();
}
