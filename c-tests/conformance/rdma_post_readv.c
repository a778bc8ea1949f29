/* rdma_post_readv(3): an RDMA read scattered into a list of local buffers, in order;
 * wr_id = context; not before the connection. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_readv", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	static char a[8], b[32], remote[64] = "12345scattered read";

	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		struct ibv_mr *m = rdma_reg_msgs(p.cli, a, sizeof a);
		struct ibv_sge sg = { (uintptr_t)a, 8, m ? m->lkey : 0 };
		errno = 0;
		int rc = m ? rdma_post_readv(p.cli, NULL, &sg, 1, IBV_SEND_SIGNALED, (uintptr_t)remote, 1) : -2;
		CLAUSE("NOTE-NOT-CONNECTED", rc == -1 && errno == EINVAL, "post on an unconnected QP: %d (%s)", rc,
		       conf_errname(errno));
		if (m)
			rdma_dereg_mr(m);
	}
	h_pair_close(&p);

	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-SCATTER", "NOTE-WRID" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	struct ibv_mr *ma = rdma_reg_msgs(p.cli, a, sizeof a), *mb = rdma_reg_msgs(p.cli, b, sizeof b);
	struct ibv_mr *rm = rdma_reg_read(p.srv, remote, sizeof remote);
	struct ibv_sge sgl[2] = { { (uintptr_t)a, 5, ma ? ma->lkey : 0 }, { (uintptr_t)b, 15, mb ? mb->lkey : 0 } };
	int ctx;
	struct ibv_wc wc;
	errno = 0;
	int rc = ma && mb && rm ? rdma_post_readv(p.cli, &ctx, sgl, 2, IBV_SEND_SIGNALED, (uintptr_t)remote, rm->rkey) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	int n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("DESC-SCATTER", n == 1 && wc.status == IBV_WC_SUCCESS && memcmp(a, "12345", 5) == 0 &&
	       strcmp(b, "scattered read") == 0, "completion %d (%s); \"%.5s\" + \"%.15s\"", n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-", a, b);
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.opcode == IBV_WC_RDMA_READ,
	       "wr_id 0x%llx (context %p)", n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx);
	struct ibv_mr *all[] = { ma, mb, rm };
	for (int i = 0; i < 3; i++)
		if (all[i])
			rdma_dereg_mr(all[i]);
	h_pair_close(&p);
	return conf_end();
}
