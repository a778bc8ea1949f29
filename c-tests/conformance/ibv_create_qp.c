/* ibv_create_qp(3) (and ibv_destroy_qp): a QP of the PD with its CQs, SRQ, capabilities (updated
 * to the actual values) and sq_sig_all; SRQs only with RC or UD; destroy fails while attached
 * to a multicast group. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_qp", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-QP", d.err);
		return conf_end();
	}
	struct ibv_cq *scq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
	int tag;
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_context = &tag;
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 5;
	a.cap.max_recv_wr = 7;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = 16;
	/* RETURN VALUE: a pointer to the QP with its number; the QP is of the PD, CQs, type and
	 * context given, in the RESET state. */
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp(d.pd, &a);
	CLAUSE("RET-QP", qp && qp->qp_num != 0 && qp->pd == d.pd && qp->send_cq == scq && qp->recv_cq == rcq &&
				 qp->qp_type == IBV_QPT_RC && qp->qp_context == &tag && ih_qp_state(qp) == IBV_QPS_RESET,
	       "ibv_create_qp: %p (%s), qp_num 0x%x, state %d", (void *)qp, conf_errname(errno), qp ? qp->qp_num : 0,
	       qp ? ih_qp_state(qp) : -1);
	/* DESCRIPTION: cap is updated to the actual values, each at least the value requested. */
	CLAUSE("DESC-CAP-UPDATED", qp && a.cap.max_send_wr >= 5 && a.cap.max_recv_wr >= 7 && a.cap.max_send_sge >= 1 &&
					   a.cap.max_recv_sge >= 1 && a.cap.max_inline_data >= 16,
	       "cap after create: send_wr %u recv_wr %u send_sge %u recv_sge %u inline %u", a.cap.max_send_wr,
	       a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge, a.cap.max_inline_data);
	/* Two QPs have distinct numbers. */
	struct ibv_qp_init_attr a2 = ih_qp_attr(IBV_QPT_RC, scq, 4);
	struct ibv_qp *qp2 = ibv_create_qp(d.pd, &a2);
	CLAUSE("RET-QP-NUM", qp && qp2 && qp2->qp_num != qp->qp_num, "qp_num 0x%x and 0x%x", qp ? qp->qp_num : 0,
	       qp2 ? qp2->qp_num : 0);
	/* A request beyond the device's max_qp_wr fails. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	struct ibv_qp_init_attr big = ih_qp_attr(IBV_QPT_RC, scq, 4);
	big.cap.max_send_wr = (uint32_t)da.max_qp_wr + 1;
	struct ibv_qp *bq = ibv_create_qp(d.pd, &big);
	CLAUSE("ERR-CAP", !bq, "max_send_wr %d + 1: %p", da.max_qp_wr, (void *)bq);
	if (bq)
		ibv_destroy_qp(bq);
	/* sq_sig_all set: every send WR completes, signaled or not; unset: only signaled ones. */
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	int sig_all = -1, sig_none = -1;
	if (ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0) {
		struct ibv_sge sge = { (uintptr_t)b.buf, 8, b.mr->lkey };
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc;
		memset(&wr, 0, sizeof wr);
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = (uintptr_t)b.buf + 64;
		wr.wr.rdma.rkey = b.mr->rkey;
		wr.wr_id = 1; /* unsignaled */
		ibv_post_send(p.qp[0], &wr, &bad);
		wr.wr_id = 2;
		wr.send_flags = IBV_SEND_SIGNALED;
		ibv_post_send(p.qp[0], &wr, &bad);
		sig_none = ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 ? (int)wc.wr_id : 0;
		ih_pair_destroy(&p);
		/* The same on a QP with sq_sig_all. */
		struct ibv_cq *c0 = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
		struct ibv_cq *c1 = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
		struct ibv_qp_init_attr s0 = ih_qp_attr(IBV_QPT_RC, c0, 4), s1 = ih_qp_attr(IBV_QPT_RC, c1, 4);
		s0.sq_sig_all = 1;
		struct ibv_qp *q0 = ibv_create_qp(d.pd, &s0), *q1 = ibv_create_qp(d.pd, &s1);
		if (q0 && q1 && ih_connect(&d, q0, q1->qp_num, IBV_ACCESS_REMOTE_WRITE, d.err, sizeof d.err) == 0 &&
		    ih_connect(&d, q1, q0->qp_num, IBV_ACCESS_REMOTE_WRITE, d.err, sizeof d.err) == 0) {
			wr.wr_id = 3;
			wr.send_flags = 0;
			ibv_post_send(q0, &wr, &bad);
			sig_all = ih_poll(c0, &wc, IH_WAIT_MS) == 1 ? (int)wc.wr_id : 0;
		}
		if (q0)
			ibv_destroy_qp(q0);
		if (q1)
			ibv_destroy_qp(q1);
		ibv_destroy_cq(c0);
		ibv_destroy_cq(c1);
	}
	CLAUSE("ARG-SQ-SIG-ALL", sig_all == 3, "unsignaled WR on a sq_sig_all QP: completion wr_id %d", sig_all);
	CLAUSE("ARG-SQ-SIG-NONE", sig_none == 2, "first completion without sq_sig_all: wr_id %d (want 2: 1 unsignaled)",
	       sig_none);
	/* NOTES: with an SRQ, max_recv_wr and max_recv_sge are ignored (even beyond the device's
	 * limits); receives come from the SRQ. */
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_qp_init_attr wa = ih_qp_attr(IBV_QPT_RC, scq, 4);
	wa.srq = srq;
	wa.cap.max_recv_wr = (uint32_t)da.max_qp_wr + 100;
	wa.cap.max_recv_sge = (uint32_t)da.max_sge + 100;
	struct ibv_qp *sq = srq ? ibv_create_qp(d.pd, &wa) : NULL;
	CLAUSE("NOTE-SRQ-IGNORES-RECV", sq && sq->srq == srq, "QP on an SRQ with huge recv caps: %p (%s)", (void *)sq,
	       conf_errname(errno));
	if (sq)
		ibv_destroy_qp(sq);
	/* NOTES: a QP of a type other than RC or UD cannot use an SRQ: UC with one fails; UD with
	 * one is created. */
	struct ibv_qp_init_attr ua = ih_qp_attr(IBV_QPT_UC, scq, 4);
	ua.srq = srq;
	struct ibv_qp *uq = srq ? ibv_create_qp(d.pd, &ua) : NULL;
	struct ibv_qp_init_attr da2 = ih_qp_attr(IBV_QPT_UD, scq, 4);
	da2.srq = srq;
	struct ibv_qp *dq = srq ? ibv_create_qp(d.pd, &da2) : NULL;
	CLAUSE("NOTE-SRQ-TYPES", srq && !uq && dq, "UC on an SRQ: %p, UD on an SRQ: %p", (void *)uq, (void *)dq);
	if (uq)
		ibv_destroy_qp(uq);
	if (dq)
		ibv_destroy_qp(dq);
	/* NOTES: ibv_destroy_qp fails while the QP is attached to a multicast group. */
	struct ibv_qp_init_attr ma = ih_qp_attr(IBV_QPT_UD, scq, 4);
	struct ibv_qp *mq = ibv_create_qp(d.pd, &ma);
	union ibv_gid mgid;
	memset(&mgid, 0, sizeof mgid);
	mgid.raw[0] = 0xff;
	mgid.raw[1] = 0x0e;
	mgid.raw[15] = 0x31;
	int att = mq ? ibv_attach_mcast(mq, &mgid, 0) : -1;
	int busy = att == 0 ? ibv_destroy_qp(mq) : -1;
	CLAUSE("NOTE-DESTROY-MCAST", att == 0 && busy > 0, "attach %d, destroy while attached %d (%s)", att, busy,
	       conf_errname(busy));
	if (att == 0 && busy != 0)
		ibv_detach_mcast(mq, &mgid, 0);
	/* RETURN VALUE (ibv_destroy_qp): 0 on success. */
	int rc = mq && busy != 0 ? ibv_destroy_qp(mq) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_qp returned %d (%s)", rc, conf_errname(rc));
	if (srq)
		ibv_destroy_srq(srq);
	if (qp2)
		ibv_destroy_qp(qp2);
	if (qp)
		ibv_destroy_qp(qp);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
