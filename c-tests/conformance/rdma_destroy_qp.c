/* rdma_destroy_qp(3): destroys the id's QP (and the CQs the rdma_cm made for it), before
 * the id is destroyed. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_destroy_qp", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(id, (struct sockaddr *)&lo) == 0;
	struct ibv_pd *pd = ok ? ibv_alloc_pd(id->verbs) : NULL;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	int rc = pd ? rdma_create_qp(id, pd, &qa) : -2;

	/* DESCRIPTION: the QP is destroyed: the id no longer references it, and its PD is free. */
	if (rc == 0)
		rdma_destroy_qp(id);
	int freed = rc == 0 ? ibv_dealloc_pd(pd) : -2;
	CLAUSE("DESC-QP", rc == 0 && id->qp == NULL && freed == 0,
	       "create %d; after destroy id->qp %p, dealloc of its PD %d", rc, id ? (void *)id->qp : NULL, freed);
	if (freed == 0)
		pd = NULL;
	/* The CQs and channels the rdma_cm created for the QP go with it. */
	CLAUSE("DESC-CQS", rc == 0 && !id->send_cq && !id->recv_cq && !id->send_cq_channel && !id->recv_cq_channel,
	       "after destroy: send_cq %p recv_cq %p channels %p %p", id ? (void *)id->send_cq : NULL,
	       id ? (void *)id->recv_cq : NULL, id ? (void *)id->send_cq_channel : NULL,
	       id ? (void *)id->recv_cq_channel : NULL);
	/* The id can take a new QP (one QP per id at a time); another id, default PD (the first
	 * id's PD is now the deallocated one: rdma_create_qp made it the id's PD). */
	struct rdma_cm_id *id2 = NULL;
	struct ibv_qp_init_attr q1 = h_qp_attr(IBV_QPT_RC, 4, 1), q2 = q1;
	h_sin(&lo, "127.0.0.1", 0);
	int r1 = rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(id2, (struct sockaddr *)&lo) == 0 ?
			 rdma_create_qp(id2, NULL, &q1) : -2;
	if (r1 == 0)
		rdma_destroy_qp(id2);
	int rc2 = r1 == 0 ? rdma_create_qp(id2, NULL, &q2) : -2;
	CLAUSE("DESC-NEW-QP", r1 == 0 && rc2 == 0 && id2->qp, "first QP %d, new QP after destroy: %d (%s)", r1,
	       rc2, conf_errname(errno));
	/* NOTES: QP first, then the id. */
	if (rc2 == 0)
		rdma_destroy_qp(id2);
	int d = id2 ? rdma_destroy_id(id2) : -2;
	if (id)
		rdma_destroy_id(id);
	CLAUSE("NOTE-THEN-ID", d == 0, "rdma_destroy_id after rdma_destroy_qp: %d", d);
	if (pd)
		ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
