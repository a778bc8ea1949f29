/* rdma_post_writev(3): an RDMA write gathered from a list of local buffers, in order;
 * wr_id = context; inline lists need no registration; not before the connection. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

static int wait_str(const char *buf, const char *want)
{
	long long end = h_now_ms() + 1000;
	while (strcmp(buf, want) != 0 && h_now_ms() < end)
		h_sleep_ms(1);
	return strcmp(buf, want) == 0;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_post_writev", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	static char a[8] = "gath", b[16] = "ered write", remote[64];

	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		struct ibv_sge sg = { (uintptr_t)a, 4, 0 };
		errno = 0;
		int rc = rdma_post_writev(p.cli, NULL, &sg, 1, IBV_SEND_INLINE, (uintptr_t)remote, 1);
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
	struct ibv_mr *ma = rdma_reg_msgs(p.cli, a, sizeof a), *mb = rdma_reg_msgs(p.cli, b, sizeof b);
	struct ibv_mr *rm = rdma_reg_write(p.srv, remote, sizeof remote);
	struct ibv_sge sgl[2] = { { (uintptr_t)a, 4, ma ? ma->lkey : 0 }, { (uintptr_t)b, 11, mb ? mb->lkey : 0 } };
	int ctx;
	struct ibv_wc wc;
	errno = 0;
	int rc = ma && mb && rm ? rdma_post_writev(p.cli, &ctx, sgl, 2, IBV_SEND_SIGNALED, (uintptr_t)remote, rm->rkey) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	int n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("DESC-GATHER", n == 1 && wc.status == IBV_WC_SUCCESS && wait_str(remote, "gathered write"),
	       "completion %d (%s), remote \"%.16s\"", n, n == 1 ? ibv_wc_status_str(wc.status) : "-", remote);
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.opcode == IBV_WC_RDMA_WRITE,
	       "wr_id 0x%llx (context %p)", n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx);
	char x[4] = "in", y[8] = "line";
	struct ibv_sge il[2] = { { (uintptr_t)x, 2, 0 }, { (uintptr_t)y, 5, 0 } };
	rc = rm ? rdma_post_writev(p.cli, NULL, il, 2, IBV_SEND_INLINE | IBV_SEND_SIGNALED, (uintptr_t)remote + 32,
				   rm->rkey) : -2;
	n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-INLINE", n == 1 && wc.status == IBV_WC_SUCCESS && wait_str(remote + 32, "inline"),
	       "post %d (%s), completion %d, remote \"%.8s\"", rc, conf_errname(errno), n, remote + 32);
	struct ibv_mr *all[] = { ma, mb, rm };
	for (int i = 0; i < 3; i++)
		if (all[i])
			rdma_dereg_mr(all[i]);
	h_pair_close(&p);
	return conf_end();
}
