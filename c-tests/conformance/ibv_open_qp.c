/* ibv_open_qp(3): opens an existing XRC target QP of an XRC domain by number and type (a
 * second reference; ibv_destroy_qp closes it); fails for a QP that does not exist there. */
#include "ibvhelp.h"

#include <fcntl.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_open_qp", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-QP", d.err);
		return conf_end();
	}
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					 .oflags = O_CREAT };
	struct ibv_xrcd *x = ibv_open_xrcd(d.ctx, &xa);
	struct ibv_qp *tgt = NULL;
	if (x) {
		struct ibv_qp_init_attr_ex a;
		memset(&a, 0, sizeof a);
		a.qp_type = IBV_QPT_XRC_RECV;
		a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
		a.xrcd = x;
		tgt = ibv_create_qp_ex(d.ctx, &a);
	}
	/* RETURN VALUE: a pointer to the opened QP, with the same number. */
	struct ibv_qp *op = NULL;
	if (tgt) {
		struct ibv_qp_open_attr o = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
							   IBV_QP_OPEN_ATTR_TYPE,
					      .qp_num = tgt->qp_num,
					      .xrcd = x,
					      .qp_type = IBV_QPT_XRC_RECV };
		op = ibv_open_qp(d.ctx, &o);
	}
	CLAUSE("RET-QP", op && op->qp_num == tgt->qp_num, "xrcd %p (%s), target QP %p, opened %p", (void *)x,
	       conf_errname(errno), (void *)tgt, (void *)op);
	/* NOTES: a number that does not exist in the domain is refused. */
	struct ibv_qp *none = NULL;
	if (x) {
		struct ibv_qp_open_attr o = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD |
							   IBV_QP_OPEN_ATTR_TYPE,
					      .qp_num = 0xfffffe,
					      .xrcd = x,
					      .qp_type = IBV_QPT_XRC_RECV };
		none = ibv_open_qp(d.ctx, &o);
	}
	CLAUSE("NOTE-NO-SUCH-QP", x && !none, "opening QP 0xfffffe: %p", (void *)none);
	/* ibv_destroy_qp closes the opened QP; the underlying one stays until its last reference. */
	int c1 = op ? ibv_destroy_qp(op) : -1;
	int c2 = tgt ? ibv_destroy_qp(tgt) : -1;
	CLAUSE("DESC-DESTROY", c1 == 0 && c2 == 0, "close the opened QP %d, destroy the target %d", c1, c2);
	if (none)
		ibv_destroy_qp(none);
	if (x)
		ibv_close_xrcd(x);
	ih_dev_close(&d);
	return conf_end();
}
