/* rdma_post_read(3): an RDMA read of remote registered memory into a local registered
 * buffer; wr_id = context in the send completion; the remote region must allow remote reads;
 * not before the connection. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_read", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	static char local[64], remote[64] = "remote memory contents", noread[64] = "no remote read";

	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		struct ibv_mr *lm = rdma_reg_msgs(p.cli, local, sizeof local);
		errno = 0;
		int rc = lm ? rdma_post_read(p.cli, NULL, local, 8, lm, IBV_SEND_SIGNALED, (uintptr_t)remote, 1) : -2;
		CLAUSE("NOTE-NOT-CONNECTED", rc == -1 && errno == EINVAL, "post on an unconnected QP: %d (%s)", rc,
		       conf_errname(errno));
		if (lm)
			rdma_dereg_mr(lm);
	}
	h_pair_close(&p);

	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-READ", "NOTE-WRID", "NOTE-REMOTE-ACCESS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	struct ibv_mr *lm = rdma_reg_msgs(p.cli, local, sizeof local);
	struct ibv_mr *rm = rdma_reg_read(p.srv, remote, sizeof remote);
	struct ibv_mr *nm = rdma_reg_msgs(p.srv, noread, sizeof noread);
	int ctx;
	struct ibv_wc wc;
	/* RETURN VALUE 0; DESCRIPTION: the remote contents are read into the local buffer. */
	errno = 0;
	int rc = lm && rm ? rdma_post_read(p.cli, &ctx, local, sizeof remote, lm, IBV_SEND_SIGNALED,
					   (uintptr_t)remote, rm->rkey) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	int n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("DESC-READ", n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(local, remote) == 0,
	       "completion %d (%s), local \"%.24s\"", n, n == 1 ? ibv_wc_status_str(wc.status) : "-", local);
	/* NOTES: the context comes back as the completion's wr_id (opcode RDMA_READ). */
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.opcode == IBV_WC_RDMA_READ,
	       "wr_id 0x%llx (context %p), opcode %d", n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx,
	       n == 1 ? (int)wc.opcode : -1);
	/* NOTES: the remote buffer must be registered for remote reads: reading a region that
	 * only allows local access completes with a remote access error. */
	memset(local, 0, sizeof local);
	rc = lm && nm ? rdma_post_read(p.cli, (void *)2, local, 8, lm, IBV_SEND_SIGNALED, (uintptr_t)noread,
				      nm->rkey) : -2;
	n = rc == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-REMOTE-ACCESS", (rc == 0 && n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR && local[0] == 0),
	       "post %d (%s), completion %d (%s)", rc, conf_errname(errno), n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	struct ibv_mr *all[] = { lm, rm, nm };
	for (int i = 0; i < 3; i++)
		if (all[i])
			rdma_dereg_mr(all[i]);
	h_pair_close(&p);
	return conf_end();
}
