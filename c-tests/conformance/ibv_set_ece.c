/* ibv_set_ece(3): sets the ECE options a QP uses while it is configured; the accepted options
 * come back in ece; 0 or an errno value (EINVAL for invalid options). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_set_ece", argc, argv);
	struct ih_dev d;
	struct ibv_cq *cq = NULL;
	if (ih_dev_open(&d) || !(cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0))) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *qp = ibv_create_qp(d.pd, &qa);
	struct ibv_ece cur;
	memset(&cur, 0, sizeof cur);
	int q = qp ? ibv_query_ece(qp, &cur) : -1;
	/* RETURN VALUE: 0 for the options the QP reports (the accepted ones come back). */
	struct ibv_ece e = cur;
	int rc = qp && q == 0 ? ibv_set_ece(qp, &e) : -1;
	CLAUSE("RET-0", rc == 0 && e.vendor_id == cur.vendor_id, "query %d, ibv_set_ece %d (%s)", q, rc, conf_errname(rc));
	/* ERRORS: EINVAL for invalid options (another vendor's id). */
	struct ibv_ece bad = cur;
	bad.vendor_id = cur.vendor_id ^ 0x123456;
	int rb = qp ? ibv_set_ece(qp, &bad) : -1;
	CLAUSE("ERR-EINVAL", rb == EINVAL, "another vendor's options: %d (%s)", rb, conf_errname(rb));
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
