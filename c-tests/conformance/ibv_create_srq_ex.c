/* ibv_create_srq_ex(3): an SRQ of a type (basic, XRC, tag matching) with its attributes
 * updated to the actual values; destroy fails while a QP uses it. */
#include "ibvhelp.h"

#include <fcntl.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_create_srq_ex", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-SRQ", d.err);
		return conf_end();
	}
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.attr.max_wr = 6;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD;
	a.srq_type = IBV_SRQT_BASIC;
	a.pd = d.pd;
	/* RETURN VALUE: a pointer to the SRQ (a basic one here), of the PD. */
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq_ex(d.ctx, &a);
	CLAUSE("RET-SRQ", srq && srq->pd == d.pd, "basic SRQ: %p (%s)", (void *)srq, conf_errname(errno));
	/* DESCRIPTION: the attributes are updated, max_wr and max_sge at least as requested. */
	CLAUSE("DESC-ATTR-UPDATED", srq && a.attr.max_wr >= 6 && a.attr.max_sge >= 1, "max_wr %u max_sge %u", a.attr.max_wr,
	       a.attr.max_sge);
	/* DESCRIPTION: XRC mode: an XRC SRQ on an XRC domain and a CQ. */
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					 .oflags = O_CREAT };
	struct ibv_xrcd *xrcd = ibv_open_xrcd(d.ctx, &xa);
	struct ibv_srq *xs = NULL;
	if (xrcd) {
		struct ibv_srq_init_attr_ex x = a;
		x.srq_type = IBV_SRQT_XRC;
		x.comp_mask |= IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
		x.xrcd = xrcd;
		x.cq = cq;
		xs = ibv_create_srq_ex(d.ctx, &x);
	}
	CLAUSE("DESC-XRC", xrcd && xs, "XRC domain %p (%s), XRC SRQ %p", (void *)xrcd, conf_errname(errno), (void *)xs);
	if (xs)
		ibv_destroy_srq(xs);
	if (xrcd)
		ibv_close_xrcd(xrcd);
	/* A tag-matching SRQ needs tag matching (tm_caps): refused without it. */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_srq_init_attr_ex t = a;
	t.srq_type = IBV_SRQT_TM;
	t.comp_mask |= IBV_SRQ_INIT_ATTR_TM | IBV_SRQ_INIT_ATTR_CQ;
	t.cq = cq;
	t.tm_cap.max_num_tags = 4;
	t.tm_cap.max_ops = 4;
	struct ibv_srq *ts = ibv_create_srq_ex(d.ctx, &t);
	CLAUSE("DESC-TM", dx.tm_caps.max_num_tags ? ts != NULL : ts == NULL, "tm_caps.max_num_tags %u, TM SRQ %p",
	       dx.tm_caps.max_num_tags, (void *)ts);
	if (ts)
		ibv_destroy_srq(ts);
	/* NOTES: ibv_destroy_srq fails while a QP uses the SRQ; then returns 0. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	qa.srq = srq;
	struct ibv_qp *qp = srq && cq ? ibv_create_qp(d.pd, &qa) : NULL;
	int busy = qp ? ibv_destroy_srq(srq) : -1;
	CLAUSE("NOTE-DESTROY-BUSY", busy > 0, "destroy with a QP on it: %d (%s)", busy, conf_errname(busy));
	if (qp)
		ibv_destroy_qp(qp);
	int rc = srq && busy != 0 ? ibv_destroy_srq(srq) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_srq returned %d (%s)", rc, conf_errname(rc));
	if (cq)
		ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
