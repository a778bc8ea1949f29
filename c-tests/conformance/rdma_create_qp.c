/* rdma_create_qp(3): a QP on the id, moved by the rdma_cm (receives can be posted at once;
 * an unconnected QP can send); default PD per device; CQs and completion channels created
 * when not given; the actual capabilities returned; one QP per id. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_create_qp", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a = NULL, *b = NULL, *c = NULL, *u = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(a, (struct sockaddr *)&lo) == 0 &&
		 rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(b, (struct sockaddr *)&lo) == 0 &&
		 rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(c, (struct sockaddr *)&lo) == 0;

	/* RETURN VALUE 0; DESCRIPTION: a QP is allocated and associated with the id. */
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 5, 1);
	qa.cap.max_inline_data = 16;
	errno = 0;
	int rc = ok ? rdma_create_qp(a, NULL, &qa) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	CLAUSE("DESC-QP", rc == 0 && a->qp && a->qp->qp_type == IBV_QPT_RC, "id->qp %p", a ? (void *)a->qp : NULL);
	/* NOTES: transitioned by the librdmacm: ready for receives (INIT) right after creation. */
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	int q = rc == 0 ? ibv_query_qp(a->qp, &at, IBV_QP_STATE | IBV_QP_CAP, &ia) : -2;
	CLAUSE("NOTE-STATE-INIT", q == 0 && at.qp_state == IBV_QPS_INIT, "query %d, state %d", q, at.qp_state);
	static char buf[64];
	struct ibv_mr *mr = rc == 0 ? ibv_reg_mr(a->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_sge sg = { (uintptr_t)buf, sizeof buf, mr ? mr->lkey : 0 };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1 }, *bad;
	int pr = mr ? ibv_post_recv(a->qp, &wr, &bad) : -2;
	CLAUSE("NOTE-RECV-READY", pr == 0, "ibv_post_recv right after creation: %d", pr);
	/* NOTES: no PD given: the id's default PD. */
	CLAUSE("NOTE-DEFAULT-PD", rc == 0 && a->qp->pd && a->qp->pd == a->pd, "QP's PD %p, id->pd %p",
	       rc == 0 ? (void *)a->qp->pd : NULL, a ? (void *)a->pd : NULL);
	/* NOTES: no CQs given: CQs and completion channels are created, exposed in the id. */
	CLAUSE("NOTE-CQS", rc == 0 && a->send_cq && a->recv_cq && a->send_cq_channel && a->recv_cq_channel &&
	       a->qp->send_cq == a->send_cq && a->qp->recv_cq == a->recv_cq &&
	       a->send_cq->channel == a->send_cq_channel && a->recv_cq->channel == a->recv_cq_channel,
	       "id send_cq %p recv_cq %p, channels %p %p", a ? (void *)a->send_cq : NULL,
	       a ? (void *)a->recv_cq : NULL, a ? (void *)a->send_cq_channel : NULL,
	       a ? (void *)a->recv_cq_channel : NULL);
	/* NOTES: the actual capabilities come back through qp_init_attr. */
	CLAUSE("NOTE-CAPS", rc == 0 && q == 0 && qa.cap.max_send_wr >= 5 && qa.cap.max_recv_wr >= 5 &&
	       qa.cap.max_inline_data >= 16 && ia.cap.max_send_wr == qa.cap.max_send_wr &&
	       ia.cap.max_recv_wr == qa.cap.max_recv_wr && qa.send_cq == a->send_cq,
	       "returned caps send %u recv %u inline %u; ibv_query_qp says send %u recv %u",
	       qa.cap.max_send_wr, qa.cap.max_recv_wr, qa.cap.max_inline_data, ia.cap.max_send_wr,
	       ia.cap.max_recv_wr);
	/* NOTES: one QP per id. */
	struct ibv_qp_init_attr q2 = h_qp_attr(IBV_QPT_RC, 2, 1);
	errno = 0;
	int rc2 = rc == 0 ? rdma_create_qp(a, NULL, &q2) : -2;
	CLAUSE("NOTE-ONE-QP", rc2 == -1 && errno == EINVAL, "second QP on the id: %d (%s)", rc2,
	       conf_errname(errno));

	/* NOTES: one default PD per device: another id on it gets the same PD. */
	struct ibv_qp_init_attr qb = h_qp_attr(IBV_QPT_RC, 2, 1);
	rc2 = ok ? rdma_create_qp(b, NULL, &qb) : -2;
	CLAUSE("NOTE-ONE-PD", rc == 0 && rc2 == 0 && b->qp->pd == a->qp->pd, "two default PDs: %p and %p",
	       rc == 0 ? (void *)a->qp->pd : NULL, rc2 == 0 ? (void *)b->qp->pd : NULL);

	/* NOTES: a PD (of the same device) and CQs given by the user are used. */
	struct ibv_pd *pd = ok ? ibv_alloc_pd(c->verbs) : NULL;
	struct ibv_cq *scq = ok ? ibv_create_cq(c->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_cq *rcq = ok ? ibv_create_cq(c->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qc = h_qp_attr(IBV_QPT_RC, 2, 1);
	qc.send_cq = scq;
	qc.recv_cq = rcq;
	rc2 = pd && scq && rcq ? rdma_create_qp(c, pd, &qc) : -2;
	CLAUSE("NOTE-USER-RESOURCES", rc2 == 0 && c->qp->pd == pd && c->qp->send_cq == scq && c->qp->recv_cq == rcq,
	       "create with own PD/CQs: %d (%s)", rc2, conf_errname(errno));

	/* NOTES: an unconnected (UD) QP is ready to post sends (RTS) after creation. */
	h_sin(&lo, "127.0.0.1", 0);
	struct ibv_qp_init_attr qu = h_qp_attr(IBV_QPT_UD, 2, 1);
	int ru = rdma_create_id(ch, &u, NULL, RDMA_PS_UDP) == 0 && rdma_bind_addr(u, (struct sockaddr *)&lo) == 0 ?
			 rdma_create_qp(u, NULL, &qu) : -2;
	q = ru == 0 ? ibv_query_qp(u->qp, &at, IBV_QP_STATE, &ia) : -2;
	CLAUSE("NOTE-UD-RTS", ru == 0 && q == 0 && at.qp_state == IBV_QPS_RTS, "UD QP: create %d (%s), state %d",
	       ru, conf_errname(errno), q == 0 ? (int)at.qp_state : -1);

	if (mr)
		ibv_dereg_mr(mr);
	struct rdma_cm_id *all[] = { a, b, c, u };
	for (size_t i = 0; i < 4; i++) {
		if (!all[i])
			continue;
		if (all[i]->qp)
			rdma_destroy_qp(all[i]);
		rdma_destroy_id(all[i]);
	}
	if (scq)
		ibv_destroy_cq(scq);
	if (rcq)
		ibv_destroy_cq(rcq);
	if (pd)
		ibv_dealloc_pd(pd);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
