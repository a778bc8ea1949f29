/* ibv_alloc_parent_domain(3): a parent domain over a PD (optionally a thread domain, custom
 * allocators, a pd_context), usable wherever a PD is; deallocated with ibv_dealloc_pd. */
#include "ibvhelp.h"

static int allocs;

static void *my_alloc(struct ibv_pd *pd, void *ctx, size_t size, size_t align, uint64_t type)
{
	(void)pd;
	(void)type;
	if (ctx != &allocs)
		return NULL;
	allocs++;
	void *p = NULL;
	if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size))
		return NULL;
	memset(p, 0, size);
	return p;
}

static void my_free(struct ibv_pd *pd, void *ctx, void *ptr, uint64_t type)
{
	(void)pd;
	(void)ctx;
	(void)type;
	free(ptr);
}

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_parent_domain", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-PD", d.err);
		return conf_end();
	}
	struct ibv_parent_domain_init_attr a;
	memset(&a, 0, sizeof a);
	a.pd = d.pd;
	/* RETURN VALUE: a pointer to the parent domain, an ibv_pd of the context. */
	errno = 0;
	struct ibv_pd *par = ibv_alloc_parent_domain(d.ctx, &a);
	CLAUSE("RET-PD", par && par->context == d.ctx, "ibv_alloc_parent_domain: %p (%s)", (void *)par, conf_errname(errno));
	/* DESCRIPTION: interchangeable with its PD: an MR of the PD serves a QP of the parent
	 * domain (a message is sent from it). */
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *q0 = par ? ibv_create_qp(par, &qa) : NULL;
	struct ibv_qp *q1 = par ? ibv_create_qp(d.pd, &qa) : NULL;
	int sent = 0;
	struct ibv_wc wc;
	if (q0 && q1 && ih_connect(&d, q0, q1->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
	    ih_connect(&d, q1, q0->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
	    ih_post_recv(q1, b.buf + 1024, 64, b.mr->lkey, 1) == 0 &&
	    ih_post_send(q0, IBV_WR_SEND, b.buf, 8, b.mr->lkey, 0, 0, 2) == 0) {
		for (int i = 0; i < 2 && ih_poll(cq, &wc, IH_WAIT_MS) == 1; i++)
			sent += wc.status == IBV_WC_SUCCESS;
	}
	CLAUSE("DESC-INTERCHANGEABLE", q0 && sent == 2, "QP on the parent domain %p, completions %d", (void *)q0, sent);
	if (q0)
		ibv_destroy_qp(q0);
	if (q1)
		ibv_destroy_qp(q1);
	/* ARGUMENTS: custom allocators are called with pd_context for provider memory. */
	struct ibv_parent_domain_init_attr ca = a;
	ca.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
	ca.alloc = my_alloc;
	ca.free = my_free;
	ca.pd_context = &allocs;
	struct ibv_pd *cpar = ibv_alloc_parent_domain(d.ctx, &ca);
	struct ibv_qp *cq0 = cpar ? ibv_create_qp(cpar, &qa) : NULL;
	CLAUSE("ARG-ALLOCATORS", cpar && cq0, "parent domain with allocators %p, QP %p, allocator calls %d", (void *)cpar,
	       (void *)cq0, allocs);
	if (cq0)
		ibv_destroy_qp(cq0);
	/* ibv_dealloc_pd deallocates the parent domain (0). */
	int r1 = par ? ibv_dealloc_pd(par) : -1;
	int r2 = cpar ? ibv_dealloc_pd(cpar) : -1;
	CLAUSE("DEALLOC-RET-0", r1 == 0 && r2 == 0, "ibv_dealloc_pd: %d, %d", r1, r2);
	ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
