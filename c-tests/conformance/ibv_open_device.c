/* ibv_open_device(3) (and ibv_close_device): a context for the device; closing it returns 0. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_open_device", argc, argv);
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		const char *ids[] = { "RET-CTX", "DESC-USABLE", "DESC-TWO", "CLOSE-RET-0", "CLOSE-OTHER" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), "no device");
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the new context, for that device. */
	errno = 0;
	struct ibv_context *c1 = ibv_open_device(list[0]);
	CLAUSE("RET-CTX", c1 && c1->device == list[0], "context %p (%s), its device %p, listed %p", (void *)c1,
	       conf_errname(errno), c1 ? (void *)c1->device : NULL, (void *)list[0]);
	/* DESCRIPTION: the context is for further use: resources can be created on it. */
	struct ibv_pd *pd = c1 ? ibv_alloc_pd(c1) : NULL;
	struct ibv_cq *cq = c1 ? ibv_create_cq(c1, 4, NULL, NULL, 0) : NULL;
	CLAUSE("DESC-USABLE", pd && cq && pd->context == c1 && cq->context == c1, "pd %p, cq %p", (void *)pd,
	       (void *)cq);
	/* Each open creates a context of its own. */
	struct ibv_context *c2 = ibv_open_device(list[0]);
	CLAUSE("DESC-TWO", c2 && c2 != c1 && c2->device == list[0], "second context %p, first %p", (void *)c2,
	       (void *)c1);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	/* RETURN VALUE (ibv_close_device): 0 on success. */
	int rc = c1 ? ibv_close_device(c1) : -2;
	CLAUSE("CLOSE-RET-0", rc == 0, "ibv_close_device returned %d (%s)", rc, conf_errname(errno));
	/* Closing one context leaves the other open. */
	struct ibv_device_attr a;
	int q = c2 ? ibv_query_device(c2, &a) : -2;
	struct ibv_pd *pd2 = c2 ? ibv_alloc_pd(c2) : NULL;
	CLAUSE("CLOSE-OTHER", q == 0 && pd2, "the other context: query_device %d, alloc_pd %p", q, (void *)pd2);
	if (pd2)
		ibv_dealloc_pd(pd2);
	if (c2)
		ibv_close_device(c2);
	ibv_free_device_list(list);
	return conf_end();
}
