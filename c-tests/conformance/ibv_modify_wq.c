/* ibv_modify_wq(3): changes a WQ's state. A soft device creates no WQs (max_wq_type_rq 0), so
 * there is nothing to modify: the clause checks that prerequisite's refusal. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_modify_wq", argc, argv);
	struct ih_dev d;
	struct ibv_cq *cq = NULL;
	if (ih_dev_open(&d) || !(cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0))) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_wq_init_attr a;
	memset(&a, 0, sizeof a);
	a.wq_type = IBV_WQT_RQ;
	a.max_wr = 4;
	a.max_sge = 1;
	a.pd = d.pd;
	a.cq = cq;
	struct ibv_wq *wq = ibv_create_wq(d.ctx, &a);
	int ok;
	if (wq) {
		/* RETURN VALUE: 0 on success: the WQ goes to RDY. */
		struct ibv_wq_attr m = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };
		ok = ibv_modify_wq(wq, &m) == 0;
		ibv_destroy_wq(wq);
	} else {
		ok = dx.max_wq_type_rq == 0;
	}
	CLAUSE("RET-0", ok, "max_wq_type_rq %u, WQ %p", dx.max_wq_type_rq, (void *)wq);
	ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
