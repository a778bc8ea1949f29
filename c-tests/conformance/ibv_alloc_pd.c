/* ibv_alloc_pd(3) (and ibv_dealloc_pd): a PD of the context; deallocation returns 0, or an
 * errno value while resources still use the PD. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_pd", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	/* RETURN VALUE: a pointer to the new PD, of this context. */
	errno = 0;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	CLAUSE("RET-PD", pd && pd->context == ctx, "ibv_alloc_pd: %p (%s)", (void *)pd, ctx ? conf_errname(errno) : err);
	/* DESCRIPTION: each call allocates a PD of its own. */
	struct ibv_pd *pd2 = ctx ? ibv_alloc_pd(ctx) : NULL;
	CLAUSE("DESC-DISTINCT", pd2 && pd2 != pd && pd2->handle != (pd ? pd->handle : 0), "second PD %p (handle %u), first %p",
	       (void *)pd2, pd2 ? pd2->handle : 0, (void *)pd);
	/* NOTES: deallocation fails while another resource (an MR) is still on the PD ... */
	char *buf = calloc(1, 4096);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	int busy = mr ? ibv_dealloc_pd(pd) : -1;
	CLAUSE("NOTE-BUSY", mr && busy > 0, "ibv_dealloc_pd with an MR on it returned %d (%s)", busy, conf_errname(busy));
	/* ... and the PD is still usable then. */
	struct ibv_mr *mr2 = busy > 0 ? ibv_reg_mr(pd, buf, 64, 0) : NULL;
	CLAUSE("NOTE-BUSY-KEPT", mr2 != NULL, "reg_mr on the PD after the refused dealloc: %p (%s)", (void *)mr2,
	       conf_errname(errno));
	if (mr2)
		ibv_dereg_mr(mr2);
	if (mr)
		ibv_dereg_mr(mr);
	/* RETURN VALUE (ibv_dealloc_pd): 0 on success. */
	int rc = pd && busy != 0 ? ibv_dealloc_pd(pd) : -1;
	CLAUSE("DEALLOC-RET-0", rc == 0, "ibv_dealloc_pd returned %d (%s)", rc, conf_errname(rc));
	/* Resources of one PD cannot be used with another: a QP of pd2 cannot use an MR of pd3. */
	struct ih_dev d;
	int ok = ih_dev_open(&d) == 0;
	struct ih_pair p;
	struct ibv_pd *other = ok ? ibv_alloc_pd(d.ctx) : NULL;
	struct ibv_mr *omr = other ? ibv_reg_mr(other, buf, 4096, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_wc wc = { .status = IBV_WC_SUCCESS };
	int got = 0;
	if (omr && ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE) == 0) {
		/* A SEND from a buffer of the other PD: a local protection error. */
		if (ih_post_send(p.qp[0], IBV_WR_SEND, buf, 16, omr->lkey, 0, 0, 1) == 0)
			got = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
		ih_pair_destroy(&p);
	}
	CLAUSE("DESC-PROTECTION", got == 1 && wc.status == IBV_WC_LOC_PROT_ERR,
	       "SEND with an lkey of another PD: %d completion(s), status %s", got, ibv_wc_status_str(wc.status));
	if (omr)
		ibv_dereg_mr(omr);
	if (other)
		ibv_dealloc_pd(other);
	ih_dev_close(&d);
	free(buf);
	if (pd2)
		ibv_dealloc_pd(pd2);
	if (ctx)
		ibv_close_device(ctx);
	return conf_end();
}
