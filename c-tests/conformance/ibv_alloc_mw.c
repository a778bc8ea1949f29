/* ibv_alloc_mw(3) (and ibv_dealloc_mw): a memory window (type 1 or 2) of the PD, created
 * unbound (no remote access until bound), with an rkey; deallocation returns 0. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_mw", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-MW", d.err);
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the MW, of the PD and type asked, with an rkey. */
	errno = 0;
	struct ibv_mw *m1 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
	int e1 = errno;
	struct ibv_mw *m2 = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	CLAUSE("RET-MW", m1 && m2 && m1->pd == d.pd && m1->type == IBV_MW_TYPE_1 && m2->type == IBV_MW_TYPE_2,
	       "type 1: %p (%s), type 2: %p", (void *)m1, conf_errname(e1), (void *)m2);
	/* DESCRIPTION: created unbound: its rkey gives no remote access. */
	int st = -1;
	if (m2) {
		struct ibv_wc wc;
		if (ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, (uintptr_t)b.buf + 64, m2->rkey, 1) == 0 &&
		    ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
			st = wc.status;
	}
	CLAUSE("DESC-UNBOUND", st == IBV_WC_REM_ACCESS_ERR, "RDMA WRITE through an unbound window: status %d", st);
	/* RETURN VALUE (ibv_dealloc_mw): 0 on success. */
	int r1 = m1 ? ibv_dealloc_mw(m1) : -1, r2 = m2 ? ibv_dealloc_mw(m2) : -1;
	CLAUSE("DEALLOC-RET-0", r1 == 0 && r2 == 0, "ibv_dealloc_mw: %d, %d", r1, r2);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
