/* rdma_post_write(3): an RDMA write of a local buffer (registered, or inline without
 * registration) into remote registered memory; wr_id = context; the remote region must allow
 * remote writes; not before the connection. */
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
	conf_begin("rdma_post_write", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	static char local[64] = "written remotely", remote[64], nowrite[64] = "unchanged";

	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		errno = 0;
		int rc = rdma_post_write(p.cli, NULL, local, 8, NULL, IBV_SEND_INLINE, (uintptr_t)remote, 1);
		CLAUSE("NOTE-NOT-CONNECTED", rc == -1 && errno == EINVAL, "post on an unconnected QP: %d (%s)", rc,
		       conf_errname(errno));
	}
	h_pair_close(&p);

	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-WRITE", "NOTE-WRID", "NOTE-INLINE", "NOTE-REMOTE-ACCESS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	struct ibv_mr *lm = rdma_reg_msgs(p.cli, local, sizeof local);
	struct ibv_mr *rm = rdma_reg_write(p.srv, remote, sizeof remote);
	struct ibv_mr *nm = rdma_reg_msgs(p.srv, nowrite, sizeof nowrite);
	int ctx;
	struct ibv_wc wc;
	errno = 0;
	int rc = lm && rm ? rdma_post_write(p.cli, &ctx, local, strlen(local) + 1, lm, IBV_SEND_SIGNALED,
					    (uintptr_t)remote, rm->rkey) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	int n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	/* DESCRIPTION: the local contents are written into the remote region. */
	CLAUSE("DESC-WRITE", n == 1 && wc.status == IBV_WC_SUCCESS && wait_str(remote, local),
	       "completion %d (%s), remote \"%.20s\"", n, n == 1 ? ibv_wc_status_str(wc.status) : "-", remote);
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.opcode == IBV_WC_RDMA_WRITE,
	       "wr_id 0x%llx (context %p), opcode %d", n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx,
	       n == 1 ? (int)wc.opcode : -1);
	/* NOTES: inline data needs no local registration. */
	char inl[16] = "inline write";
	rc = rm ? rdma_post_write(p.cli, (void *)2, inl, 13, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED,
				  (uintptr_t)remote + 32, rm->rkey) : -2;
	n = rc == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-INLINE", n == 1 && wc.status == IBV_WC_SUCCESS && wait_str(remote + 32, "inline write"),
	       "post %d (%s), completion %d, remote \"%.13s\"", rc, conf_errname(errno), n, remote + 32);
	/* NOTES: the remote buffer must be registered for remote writes. */
	rc = lm && nm ? rdma_post_write(p.cli, (void *)3, local, 8, lm, IBV_SEND_SIGNALED, (uintptr_t)nowrite,
				       nm->rkey) : -2;
	n = rc == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-REMOTE-ACCESS", rc == 0 && n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR &&
	       strcmp(nowrite, "unchanged") == 0, "post %d (%s), completion %d (%s)", rc, conf_errname(errno), n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	struct ibv_mr *all[] = { lm, rm, nm };
	for (int i = 0; i < 3; i++)
		if (all[i])
			rdma_dereg_mr(all[i]);
	h_pair_close(&p);
	return conf_end();
}
