/* ibv_create_wq(3) (and ibv_destroy_wq): receive work queues (for RSS). A soft device has no
 * Ethernet receive path: max_wq_type_rq is 0 and the call fails (NULL). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_wq", argc, argv);
	struct ih_dev d;
	struct ibv_cq *cq = NULL;
	if (ih_dev_open(&d) || !(cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0))) {
		CLAUSE_BLOCKED("RET-WQ", d.err);
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
	errno = 0;
	struct ibv_wq *wq = ibv_create_wq(d.ctx, &a);
	int e = errno;
	int rc = wq ? ibv_destroy_wq(wq) : -1;
	/* RETURN VALUE: a WQ where the device has them (then ibv_destroy_wq returns 0), else NULL. */
	CLAUSE("RET-WQ", dx.max_wq_type_rq ? (wq && rc == 0) : (!wq && e != 0),
	       "max_wq_type_rq %u: ibv_create_wq %p (%s), destroy %d", dx.max_wq_type_rq, (void *)wq, conf_errname(e), rc);
	ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
