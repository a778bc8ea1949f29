/* ibv_alloc_td(3) (and ibv_dealloc_td): a thread domain of the context, usable in a parent
 * domain; deallocation returns 0. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_td", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-TD", d.err);
		return conf_end();
	}
	struct ibv_td_init_attr a = { .comp_mask = 0 };
	/* RETURN VALUE: a pointer to the thread domain. */
	errno = 0;
	struct ibv_td *td = ibv_alloc_td(d.ctx, &a);
	CLAUSE("RET-TD", td && td->context == d.ctx, "ibv_alloc_td: %p (%s)", (void *)td, conf_errname(errno));
	/* DESCRIPTION: a thread domain can be added to a parent domain, which creates objects. */
	struct ibv_parent_domain_init_attr pa;
	memset(&pa, 0, sizeof pa);
	pa.pd = d.pd;
	pa.td = td;
	struct ibv_pd *par = td ? ibv_alloc_parent_domain(d.ctx, &pa) : NULL;
	struct ibv_cq *cq = par ? ibv_create_cq(d.ctx, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *qp = cq ? ibv_create_qp(par, &qa) : NULL;
	CLAUSE("DESC-PARENT-DOMAIN", par && qp, "parent domain with the TD %p, QP on it %p", (void *)par, (void *)qp);
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
	if (par)
		ibv_dealloc_pd(par);
	/* RETURN VALUE (ibv_dealloc_td): 0 on success. */
	int rc = td ? ibv_dealloc_td(td) : -1;
	CLAUSE("DEALLOC-RET-0", rc == 0, "ibv_dealloc_td: %d", rc);
	ih_dev_close(&d);
	return conf_end();
}
