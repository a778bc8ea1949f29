/* rdma_destroy_srq(3): destroys the id's SRQ (its PD is then free, the id can take a new one)
 * before the id is destroyed. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_destroy_srq", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(id, (struct sockaddr *)&lo) == 0;
	struct ibv_pd *pd = ok ? ibv_alloc_pd(id->verbs) : NULL;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	int rc = pd ? rdma_create_srq(id, pd, &sa) : -2;
	int busy = rc == 0 ? ibv_dealloc_pd(pd) : -2;
	/* DESCRIPTION: the SRQ is destroyed: the id no longer references it; its PD is free. */
	if (rc == 0)
		rdma_destroy_srq(id);
	int freed = rc == 0 && busy != 0 ? ibv_dealloc_pd(pd) : -2;
	CLAUSE("DESC-SRQ", rc == 0 && id->srq == NULL && busy != 0 && freed == 0,
	       "create %d (%s); id->srq after %p; dealloc_pd before %d, after %d", rc, conf_errname(errno),
	       id ? (void *)id->srq : NULL, busy, freed);
	/* A new SRQ can be created on the id (on a new PD: the old one is gone). */
	struct ibv_pd *pd2 = ok ? ibv_alloc_pd(id->verbs) : NULL;
	struct ibv_srq_init_attr s2 = { .attr = { .max_wr = 4, .max_sge = 1 } };
	int rc2 = pd2 && rc == 0 ? rdma_create_srq(id, pd2, &s2) : -2;
	CLAUSE("DESC-NEW-SRQ", rc2 == 0 && id->srq, "new SRQ after destroy: %d (%s)", rc2, conf_errname(errno));
	/* NOTES: SRQ first, then the id. */
	if (rc2 == 0)
		rdma_destroy_srq(id);
	int d = id ? rdma_destroy_id(id) : -2;
	CLAUSE("NOTE-THEN-ID", d == 0, "rdma_destroy_id after rdma_destroy_srq: %d", d);
	if (pd2)
		ibv_dealloc_pd(pd2);
	if (pd && freed != 0)
		ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
