/* ibv_create_cq(3) (and ibv_destroy_cq): a CQ of at least cqe entries, its context pointer,
 * an optional completion channel and a completion vector; destroy fails while a QP uses it. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_cq", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		const char *ids[] = { "RET-CQ", "ARG-CQ-CONTEXT", "NOTE-CQE", "ARG-CHANNEL", "ARG-CHANNEL-NULL",
				      "ARG-COMP-VECTOR", "ARG-COMP-VECTOR-RANGE", "NOTE-DESTROY-BUSY", "DESTROY-RET-0" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	int tag;
	/* RETURN VALUE: a pointer to the CQ. */
	errno = 0;
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 10, &tag, NULL, 0);
	CLAUSE("RET-CQ", cq && cq->context == d.ctx, "ibv_create_cq: %p (%s)", (void *)cq, conf_errname(errno));
	/* DESCRIPTION: cq_context is the CQ's user context pointer. */
	CLAUSE("ARG-CQ-CONTEXT", cq && cq->cq_context == &tag, "cq_context %p, passed %p", cq ? cq->cq_context : NULL,
	       (void *)&tag);
	/* NOTES: at least cqe entries: the cqe field gives the actual size. */
	CLAUSE("NOTE-CQE", cq && cq->cqe >= 10, "cqe %d for 10 asked", cq ? cq->cqe : -1);
	/* DESCRIPTION: with a channel, completion events come through it. */
	struct ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
	struct ibv_cq *cq2 = ch ? ibv_create_cq(d.ctx, 16, &tag, ch, 0) : NULL;
	struct ih_pair p;
	int ev = 0;
	void *evctx = NULL;
	struct ibv_cq *evcq = NULL;
	if (cq2 && ibv_req_notify_cq(cq2, 0) == 0 &&
	    ih_pair_make_on(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE, cq2, NULL) == 0) {
		/* QP 0 sends on cq2: its completion raises the channel. */
		char m[16] = "x";
		struct ibv_mr *mr = ibv_reg_mr(d.pd, m, sizeof m, IBV_ACCESS_LOCAL_WRITE);
		if (mr && ih_post_recv(p.qp[1], m, sizeof m, mr->lkey, 2) == 0 &&
		    ih_post_send(p.qp[0], IBV_WR_SEND, m, 4, mr->lkey, 0, 0, 1) == 0 && ih_readable(ch->fd, IH_WAIT_MS))
			ev = ibv_get_cq_event(ch, &evcq, &evctx) == 0;
		if (ev)
			ibv_ack_cq_events(evcq, 1);
		struct ibv_wc wc;
		ih_poll(cq2, &wc, IH_WAIT_MS);
		ih_pair_destroy(&p);
		if (mr)
			ibv_dereg_mr(mr);
	}
	CLAUSE("ARG-CHANNEL", ev && evcq == cq2 && evctx == &tag && cq2->channel == ch,
	       "event %d on the channel, for cq %p (want %p), context %p", ev, (void *)evcq, (void *)cq2, evctx);
	/* The channel is optional: without one, cq->channel is NULL and arming still works. */
	CLAUSE("ARG-CHANNEL-NULL", cq && cq->channel == NULL, "channel %p", cq ? (void *)cq->channel : NULL);
	/* comp_vector: any value from 0 to num_comp_vectors - 1 is accepted ... */
	int nv = d.ctx->num_comp_vectors;
	struct ibv_cq *cqv = nv > 0 ? ibv_create_cq(d.ctx, 4, NULL, NULL, nv - 1) : NULL;
	CLAUSE("ARG-COMP-VECTOR", nv >= 1 && cqv, "num_comp_vectors %d, vector %d: %p", nv, nv - 1, (void *)cqv);
	/* ... and it must be less than num_comp_vectors (and not negative). */
	struct ibv_cq *bad = ibv_create_cq(d.ctx, 4, NULL, NULL, nv);
	struct ibv_cq *neg = ibv_create_cq(d.ctx, 4, NULL, NULL, -1);
	CLAUSE("ARG-COMP-VECTOR-RANGE", !bad && !neg, "vector %d: %p, vector -1: %p", nv, (void *)bad, (void *)neg);
	/* NOTES: ibv_destroy_cq fails while a QP is associated with the CQ. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *qp = cq ? ibv_create_qp(d.pd, &qa) : NULL;
	int busy = qp ? ibv_destroy_cq(cq) : -1;
	CLAUSE("NOTE-DESTROY-BUSY", qp && busy > 0, "ibv_destroy_cq with a QP on it: %d (%s)", busy, conf_errname(busy));
	if (qp)
		ibv_destroy_qp(qp);
	/* RETURN VALUE (ibv_destroy_cq): 0 on success. */
	int rc = cq && busy != 0 ? ibv_destroy_cq(cq) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_cq returned %d (%s)", rc, conf_errname(rc));
	if (bad)
		ibv_destroy_cq(bad);
	if (neg)
		ibv_destroy_cq(neg);
	if (cqv)
		ibv_destroy_cq(cqv);
	if (cq2)
		ibv_destroy_cq(cq2);
	if (ch)
		ibv_destroy_comp_channel(ch);
	ih_dev_close(&d);
	return conf_end();
}
