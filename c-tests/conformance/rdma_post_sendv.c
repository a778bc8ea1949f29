/* rdma_post_sendv(3): one send made of a scatter-gather list (gathered in order into one
 * message), wr_id = context, inline lists need no registration, not before the connection. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_sendv", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;

	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		char b[8] = "early";
		struct ibv_sge sg = { (uintptr_t)b, sizeof b, 0 };
		errno = 0;
		int rc = rdma_post_sendv(p.cli, NULL, &sg, 1, IBV_SEND_INLINE);
		CLAUSE("NOTE-NOT-CONNECTED", rc == -1 && errno == EINVAL, "post on an unconnected QP: %d (%s)", rc,
		       conf_errname(errno));
	}
	h_pair_close(&p);

	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-GATHER", "NOTE-WRID", "NOTE-INLINE" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char part1[16] = "first+", part2[16] = "second", rbuf[2][64];
	struct ibv_mr *m1 = rdma_reg_msgs(p.cli, part1, sizeof part1);
	struct ibv_mr *m2 = rdma_reg_msgs(p.cli, part2, sizeof part2);
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	struct ibv_wc wc;
	int ctx;
	/* RETURN VALUE 0; DESCRIPTION: the buffers' contents, in order, as one message. */
	struct ibv_sge sgl[2] = { { (uintptr_t)part1, 6, m1 ? m1->lkey : 0 },
				  { (uintptr_t)part2, 7, m2 ? m2->lkey : 0 } };
	int r = rdma_post_recv(p.srv, NULL, rbuf[0], 64, rmr);
	errno = 0;
	int s = rdma_post_sendv(p.cli, &ctx, sgl, 2, 0);
	CLAUSE("RET-0", s == 0, "returned %d (%s)", s, conf_errname(errno));
	int n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("DESC-GATHER", n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 13 &&
	       strcmp(rbuf[0], "first+second") == 0, "receive %d, %u bytes, \"%.20s\"", n,
	       n == 1 ? wc.byte_len : 0, rbuf[0]);
	/* NOTES: the context comes back as wr_id. */
	n = s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.status == IBV_WC_SUCCESS,
	       "send completion %d, wr_id 0x%llx, context %p", n, n == 1 ? (unsigned long long)wc.wr_id : 0ULL,
	       (void *)&ctx);
	/* NOTES: inline data needs no registration. */
	char a[8] = "abc", b[8] = "def";
	struct ibv_sge il[2] = { { (uintptr_t)a, 3, 0 }, { (uintptr_t)b, 4, 0 } };
	r = rdma_post_recv(p.srv, NULL, rbuf[1], 64, rmr);
	s = rdma_post_sendv(p.cli, NULL, il, 2, IBV_SEND_INLINE);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	int n2 = s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-INLINE", s == 0 && n == 1 && n2 == 1 && strcmp(rbuf[1], "abcdef") == 0,
	       "inline sendv %d (%s), receive %d, send completion %d, \"%.8s\"", s, conf_errname(errno), n, n2,
	       rbuf[1]);
	if (m1)
		rdma_dereg_mr(m1);
	if (m2)
		rdma_dereg_mr(m2);
	if (rmr)
		rdma_dereg_mr(rmr);
	h_pair_close(&p);
	return conf_end();
}
