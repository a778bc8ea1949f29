/* rdma_create_srq(3): an SRQ on the id (default PD when none is given), ready for receives,
 * actual attributes returned; QPs created on the id afterwards use it. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_create_srq", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a = NULL, *b = NULL, *c = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(a, (struct sockaddr *)&lo) == 0 &&
		 rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(b, (struct sockaddr *)&lo) == 0 &&
		 rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(c, (struct sockaddr *)&lo) == 0;

	/* RETURN VALUE 0; DESCRIPTION: an SRQ associated with the id. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 5, .max_sge = 1 } };
	errno = 0;
	int rc = ok ? rdma_create_srq(a, NULL, &sa) : -2;
	CLAUSE("RET-0", rc == 0 && a->srq != NULL, "returned %d (%s), id->srq %p", rc, conf_errname(errno),
	       a ? (void *)a->srq : NULL);
	/* NOTES: without a PD, the default PD of the device. */
	CLAUSE("NOTE-DEFAULT-PD", rc == 0 && a->srq->pd && a->srq->pd == a->pd, "SRQ's PD %p, id->pd %p",
	       rc == 0 ? (void *)a->srq->pd : NULL, a ? (void *)a->pd : NULL);
	/* NOTES: the actual attributes are returned through attr. */
	CLAUSE("NOTE-ATTR", rc == 0 && sa.attr.max_wr >= 5 && sa.attr.max_sge >= 1,
	       "returned max_wr %u, max_sge %u", sa.attr.max_wr, sa.attr.max_sge);
	/* NOTES: ready to handle posting of receives. */
	static char buf[2][64];
	struct ibv_mr *mr = rc == 0 ? ibv_reg_mr(a->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_sge sg = { (uintptr_t)buf[0], 64, mr ? mr->lkey : 0 };
	struct ibv_recv_wr wr = { .wr_id = 5, .sg_list = &sg, .num_sge = 1 }, *bad;
	int pr = mr ? ibv_post_srq_recv(a->srq, &wr, &bad) : -2;
	CLAUSE("NOTE-RECV-READY", pr == 0, "ibv_post_srq_recv: %d", pr);
	if (mr)
		ibv_dereg_mr(mr);

	/* NOTES: a given PD of the same device is used. */
	struct ibv_pd *pd = ok ? ibv_alloc_pd(b->verbs) : NULL;
	struct ibv_srq_init_attr sb = { .attr = { .max_wr = 2, .max_sge = 1 } };
	rc = pd ? rdma_create_srq(b, pd, &sb) : -2;
	CLAUSE("NOTE-PD", rc == 0 && b->srq && b->srq->pd == pd, "create with a PD: %d, SRQ's PD %p, given %p",
	       rc, rc == 0 ? (void *)b->srq->pd : NULL, (void *)pd);

	/* RETURN VALUE: -1/errno for attributes beyond the device (EINVAL). */
	struct ibv_device_attr da;
	h_query_device(c, &da);
	struct ibv_srq_init_attr sc = { .attr = { .max_wr = (uint32_t)da.max_srq_wr + 1, .max_sge = 1 } };
	errno = 0;
	rc = ok ? rdma_create_srq(c, NULL, &sc) : -2;
	CLAUSE("ERR-ATTR", rc == -1 && errno == EINVAL, "max_wr %u > device max_srq_wr %d: %d (%s)",
	       sc.attr.max_wr, da.max_srq_wr, rc, conf_errname(errno));

	/* A QP created on the id afterwards receives through the SRQ: rdma_post_recv goes to the
	 * SRQ and a message sent to the QP lands in its buffer. */
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa };
	ok = h_pair_prepare(&p, conf_port(0), &o) == 0 && rdma_connect(p.cli, NULL) == 0;
	struct rdma_cm_event *req = NULL;
	if (ok && h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, p.err, sizeof p.err) == 0) {
		p.srv = req->id;
		struct ibv_srq_init_attr s2 = { .attr = { .max_wr = 4, .max_sge = 1 } };
		struct ibv_qp_init_attr q2 = h_qp_attr(IBV_QPT_RC, 4, 1);
		ok = rdma_create_srq(p.srv, NULL, &s2) == 0 && rdma_create_qp(p.srv, NULL, &q2) == 0 &&
		     rdma_accept(p.srv, NULL) == 0;
		rdma_ack_cm_event(req);
		ok = ok && h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, p.err, sizeof p.err) == 0 &&
		     h_expect(p.sch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, p.err, sizeof p.err) == 0;
	} else {
		ok = 0;
	}
	if (!ok) {
		CLAUSE_BLOCKED("SRQ-RECEIVES", p.err);
	} else {
		static char rbuf[32], sbuf[32] = "through the srq";
		struct ibv_mr *rmr = ibv_reg_mr(p.srv->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
		int r = rmr ? rdma_post_recv(p.srv, (void *)0x55, rbuf, sizeof rbuf, rmr) : -2;
		int s = rdma_post_send(p.cli, NULL, sbuf, sizeof sbuf, NULL, IBV_SEND_INLINE);
		struct ibv_wc wc;
		int n = r == 0 && s == 0 ? h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) : -2;
		CLAUSE("SRQ-RECEIVES", p.srv->qp->srq == p.srv->srq && n == 1 && wc.status == IBV_WC_SUCCESS &&
		       wc.wr_id == 0x55 && strcmp(rbuf, sbuf) == 0,
		       "QP's SRQ is the id's: %d; post_recv %d, send %d, completion %d (%s)",
		       p.srv->qp->srq == p.srv->srq, r, s, n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
		h_poll(p.cli->send_cq, &wc, 100);
		if (rmr)
			ibv_dereg_mr(rmr);
	}
	if (p.srv && p.srv->qp) {
		rdma_destroy_qp(p.srv);
	}
	if (p.srv && p.srv->srq)
		rdma_destroy_srq(p.srv);
	h_pair_close(&p);

	struct rdma_cm_id *all[] = { a, b, c };
	for (size_t i = 0; i < 3; i++) {
		if (!all[i])
			continue;
		if (all[i]->srq)
			rdma_destroy_srq(all[i]);
		rdma_destroy_id(all[i]);
	}
	if (pd)
		ibv_dealloc_pd(pd);
	(void)err;
	rdma_destroy_event_channel(ch);
	return conf_end();
}
