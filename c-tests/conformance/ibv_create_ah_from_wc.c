/* ibv_create_ah_from_wc(3) (and ibv_init_ah_from_wc): the address of a UD message's sender,
 * from its work completion and GRH, as AH attributes or an AH: a reply reaches the sender. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_ah_from_wc", argc, argv);
	struct ih_dev d;
	struct ih_pair u;
	struct ih_buf b;
	memset(&u, 0, sizeof u);
	struct ibv_ah *ah = NULL;
	struct ibv_wc wc;
	int got = 0;
	if (ih_dev_open(&d) == 0 && ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) == 0 &&
	    ih_pair_make(&d, &u, IBV_QPT_UD, 0) == 0 && (ah = ih_ah(&d, &d.gid)) &&
	    ih_post_recv(u.qp[1], b.buf + 1024, 40 + 64, b.mr->lkey, 1) == 0 &&
	    ih_post_ud(u.qp[0], ah, u.qp[1]->qp_num, b.buf, 8, b.mr->lkey, 2) == 0)
		got = ih_poll(u.cq[1], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS;
	if (!got) {
		CLAUSE_BLOCKED("INIT-RET-0", d.err);
		return conf_end();
	}
	struct ibv_wc sw;
	ih_poll(u.cq[0], &sw, IH_WAIT_MS);
	struct ibv_grh *grh = (struct ibv_grh *)(void *)(b.buf + 1024);
	/* RETURN VALUE (ibv_init_ah_from_wc): 0; the attributes point back at the sender: a GRH
	 * towards its GID, on the port given. */
	struct ibv_ah_attr a;
	memset(&a, 0xa5, sizeof a);
	int rc = ibv_init_ah_from_wc(d.ctx, 1, &wc, grh, &a);
	CLAUSE("INIT-RET-0", rc == 0, "ibv_init_ah_from_wc returned %d (%s)", rc, conf_errname(errno));
	CLAUSE("INIT-ATTR", rc == 0 && a.is_global && memcmp(&a.grh.dgid, &d.gid, 16) == 0 && a.port_num == 1,
	       "is_global %u port %u, dgid %s the sender's GID", a.is_global, a.port_num,
	       memcmp(&a.grh.dgid, &d.gid, 16) ? "is not" : "is");
	/* NOTES: the attributes can be used with ibv_create_ah: a reply through it reaches the
	 * sender (wc.src_qp). */
	struct ibv_ah *r1 = rc == 0 ? ibv_create_ah(d.pd, &a) : NULL;
	int back = 0;
	if (r1 && ih_post_recv(u.qp[0], b.buf + 2048, 40 + 64, b.mr->lkey, 3) == 0 &&
	    ih_post_ud(u.qp[1], r1, wc.src_qp, b.buf, 8, b.mr->lkey, 4) == 0 && ih_poll(u.cq[0], &sw, IH_WAIT_MS) == 1)
		back = sw.status == IBV_WC_SUCCESS && sw.opcode == IBV_WC_RECV;
	ih_poll(u.cq[1], &sw, IH_WAIT_MS);
	CLAUSE("NOTE-CREATE-AH", back, "a reply through ibv_create_ah(attributes) did not reach the sender");
	if (r1)
		ibv_destroy_ah(r1);
	/* RETURN VALUE (ibv_create_ah_from_wc): an AH of the PD; a reply through it arrives. */
	errno = 0;
	struct ibv_ah *r2 = ibv_create_ah_from_wc(d.pd, &wc, grh, 1);
	back = 0;
	if (r2 && ih_post_recv(u.qp[0], b.buf + 2048, 40 + 64, b.mr->lkey, 5) == 0 &&
	    ih_post_ud(u.qp[1], r2, wc.src_qp, b.buf, 8, b.mr->lkey, 6) == 0 && ih_poll(u.cq[0], &sw, IH_WAIT_MS) == 1)
		back = sw.status == IBV_WC_SUCCESS && sw.opcode == IBV_WC_RECV;
	ih_poll(u.cq[1], &sw, IH_WAIT_MS);
	CLAUSE("CREATE-RET-AH", r2 && r2->pd == d.pd && back, "ibv_create_ah_from_wc: %p (%s), reply arrived %d",
	       (void *)r2, conf_errname(errno), back);
	if (r2)
		ibv_destroy_ah(r2);
	/* A completion without a GRH gives attributes without one; on a port that requires a
	 * GRH, ibv_create_ah_from_wc then fails (NULL). */
	struct ibv_port_attr pa;
	ibv_query_port(d.ctx, 1, &pa);
	struct ibv_wc ng = wc;
	ng.wc_flags &= ~(unsigned)IBV_WC_GRH;
	int ri = ibv_init_ah_from_wc(d.ctx, 1, &ng, grh, &a);
	struct ibv_ah *rn = ibv_create_ah_from_wc(d.pd, &ng, grh, 1);
	CLAUSE("ERR-NO-GRH", (ri != 0 || a.is_global == 0) && (!(pa.flags & IBV_QPF_GRH_REQUIRED) || !rn),
	       "port flags 0x%x, completion without GRH: init %d (is_global %u), create %p", pa.flags, ri, a.is_global,
	       (void *)rn);
	if (rn)
		ibv_destroy_ah(rn);
	ibv_destroy_ah(ah);
	ih_pair_destroy(&u);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
