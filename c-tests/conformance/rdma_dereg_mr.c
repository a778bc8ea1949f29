/* rdma_dereg_mr(3): deregisters a memory region (its key stops working); all memory must be
 * deregistered before its protection domain can be destroyed. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_dereg_mr", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		CLAUSE_BLOCKED("RET-0", p.err);
		CLAUSE_BLOCKED("DESC-KEY-INVALID", p.err);
		CLAUSE_BLOCKED("NOTE-PD", p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char sbuf[64] = "after deregistration", rbuf[64];
	struct ibv_mr *smr = rdma_reg_msgs(p.cli, sbuf, sizeof sbuf);
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	uint32_t lkey = smr ? smr->lkey : 0;
	/* RETURN VALUE: 0. */
	errno = 0;
	int rc = smr ? rdma_dereg_mr(smr) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	/* DESCRIPTION: deregistered: a send that still uses its lkey completes in error. */
	int r = rmr ? rdma_post_recv(p.srv, NULL, rbuf, sizeof rbuf, rmr) : -2;
	struct ibv_sge sg = { (uintptr_t)sbuf, sizeof sbuf, lkey };
	struct ibv_send_wr wr = { .wr_id = 9, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	int s = rc == 0 && r == 0 ? ibv_post_send(p.cli->qp, &wr, &bad) : -2;
	struct ibv_wc wc;
	int n = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("DESC-KEY-INVALID", (s != 0 && s != -2) || (n == 1 && wc.status == IBV_WC_LOC_PROT_ERR),
	       "send with the old lkey: post %d, completion %d (%s)", s, n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	if (rmr)
		rdma_dereg_mr(rmr);
	/* NOTES: memory must be deregistered before the protection domain can be destroyed. */
	struct ibv_pd *pd = ibv_alloc_pd(p.cli->verbs);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	int busy = mr ? ibv_dealloc_pd(pd) : -2;
	int d = mr ? rdma_dereg_mr(mr) : -2;
	int freed = d == 0 && busy != 0 ? ibv_dealloc_pd(pd) : -2;
	CLAUSE("NOTE-PD", busy != 0 && busy != -2 && d == 0 && freed == 0,
	       "dealloc_pd with a registered MR %d, rdma_dereg_mr %d, dealloc_pd after %d", busy, d, freed);
	h_pair_close(&p);
	return conf_end();
}
