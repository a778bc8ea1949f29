/* rdma_destroy_srq(3): destroys the id's SRQ (its PD is then free, the id can take a new one)
 * before the id is destroyed. */
#include "cmhelp.h"

#include <fcntl.h>
#include <rdma/rdma_verbs.h>

/* Ours beyond librdmacm: an XRC SRQ made on an RC id completes on the id's receive CQ. That
 * CQ outlives rdma_destroy_qp (librdmacm loses it, with its channel, to EBUSY) and goes with
 * rdma_destroy_srq. */
static void xrc_srq_keeps_cq(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(id, (struct sockaddr *)&lo) == 0;
	struct ibv_qp_init_attr qa = { .cap = { .max_send_wr = 2, .max_recv_wr = 2, .max_send_sge = 1,
						.max_recv_sge = 1 },
				       .qp_type = IBV_QPT_RC };
	int qp = ok ? rdma_create_qp(id, NULL, &qa) : -2;
	struct ibv_srq_init_attr_ex sa = { .attr = { .max_wr = 4, .max_sge = 1 },
					   .comp_mask = IBV_SRQ_INIT_ATTR_TYPE,
					   .srq_type = IBV_SRQT_XRC };
	int srq = qp == 0 ? rdma_create_srq_ex(id, &sa) : -2;
	struct ibv_cq *rcq = id ? id->recv_cq : NULL;
	int fd = id && id->recv_cq_channel ? id->recv_cq_channel->fd : -1;
	if (qp == 0)
		rdma_destroy_qp(id);
	int kept = srq == 0 && id->recv_cq == rcq && rcq == sa.cq && fcntl(fd, F_GETFD) >= 0;
	if (srq == 0)
		rdma_destroy_srq(id);
	int closed = srq == 0 && fd >= 0 && fcntl(fd, F_GETFD) < 0 && errno == EBADF;
	CLAUSE("OURS-XRC-CQ", srq == 0 && kept && closed && id->recv_cq == NULL,
	       "create_qp %d, srq_ex %d (%s); CQ kept past rdma_destroy_qp %d; channel closed with the SRQ %d", qp,
	       srq, conf_errname(errno), kept, closed);
	if (id)
		rdma_destroy_id(id);
}

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
	if (!conf_native())
		xrc_srq_keeps_cq(ch);
	if (pd && freed != 0)
		ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
