/* ibv_alloc_null_mr(3): a null MR of the PD: writes to it are discarded, reads give zeroes;
 * only its lkey is valid. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_null_mr", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-MR", d.err);
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the MR. */
	errno = 0;
	struct ibv_mr *nm = ibv_alloc_null_mr(d.pd);
	CLAUSE("RET-MR", nm && nm->pd == d.pd, "ibv_alloc_null_mr: %p (%s)", (void *)nm, conf_errname(errno));
	struct ibv_wc wc;
	/* DESCRIPTION: data received into it is discarded (the receive completes). */
	int disc = 0;
	if (nm && ih_post_recv(p.qp[1], (void *)0x1000, 64, nm->lkey, 1) == 0 &&
	    ih_post_send(p.qp[0], IBV_WR_SEND, b.buf, 16, b.mr->lkey, 0, 0, 2) == 0)
		disc = ih_poll(p.cq[1], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS;
	ih_poll(p.cq[0], &wc, IH_QUIET_MS);
	CLAUSE("DESC-DISCARD", disc, "a receive into the null MR did not complete");
	/* ... and sending from it sends zeroes. */
	int zero = 0;
	memset(b.buf + 1024, 0x77, 16);
	if (nm && ih_post_recv(p.qp[1], b.buf + 1024, 64, b.mr->lkey, 3) == 0 &&
	    ih_post_send(p.qp[0], IBV_WR_SEND, (void *)0x1000, 16, nm->lkey, 0, 0, 4) == 0 &&
	    ih_poll(p.cq[1], &wc, IH_WAIT_MS) == 1) {
		zero = wc.status == IBV_WC_SUCCESS;
		for (int i = 0; i < 16; i++)
			zero &= b.buf[1024 + i] == 0;
	}
	CLAUSE("DESC-ZEROES", zero, "a send from the null MR did not deliver zeroes");
	if (nm)
		ibv_dereg_mr(nm);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
