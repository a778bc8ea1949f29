/* rdma_disconnect(3): moves the QP to the error state (posted work requests flush), both sides
 * get exactly one DISCONNECTED, both sides may call it; synchronous ids block for it. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_disconnect", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };

	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-QP-ERROR", "DESC-FLUSH", "DESC-EV-BOTH", "DESC-BOTH-CALL",
				      "DESC-EV-ONCE" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
	} else {
		/* a receive posted on the client, to be flushed */
		static char buf[64];
		struct ibv_mr *mr = ibv_reg_mr(p.cli->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_sge sg = { (uintptr_t)buf, sizeof buf, mr ? mr->lkey : 0 };
		struct ibv_recv_wr wr = { .wr_id = 77, .sg_list = &sg, .num_sge = 1 }, *bad;
		int posted = mr && ibv_post_recv(p.cli->qp, &wr, &bad) == 0;

		errno = 0;
		int rc = rdma_disconnect(p.cli);
		CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
		/* DESCRIPTION: the associated QP goes to the error state ... */
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;
		int q = ibv_query_qp(p.cli->qp, &at, IBV_QP_STATE, &ia);
		CLAUSE("DESC-QP-ERROR", q == 0 && at.qp_state == IBV_QPS_ERR, "ibv_query_qp %d, state %d", q,
		       at.qp_state);
		/* ... which flushes posted work requests to the completion queue. */
		struct ibv_wc wc;
		int n = posted ? h_poll(p.cli->recv_cq, &wc, H_WAIT_MS) : -2;
		CLAUSE("DESC-FLUSH", n == 1 && wc.wr_id == 77 && wc.status == IBV_WC_WR_FLUSH_ERR,
		       "posted %d; poll %d, wr_id %llu, status %s", posted, n,
		       n == 1 ? (unsigned long long)wc.wr_id : 0ULL, n == 1 ? ibv_wc_status_str(wc.status) : "-");
		/* DESCRIPTION: DISCONNECTED is generated on both sides. */
		struct rdma_cm_event *ce = h_get(p.cch, H_WAIT_MS), *se = h_get(p.sch, H_WAIT_MS);
		CLAUSE("DESC-EV-BOTH", ce && ce->event == RDMA_CM_EVENT_DISCONNECTED && ce->id == p.cli && se &&
		       se->event == RDMA_CM_EVENT_DISCONNECTED && se->id == p.srv,
		       "client event %s, server event %s", ce ? rdma_event_str(ce->event) : "(none)",
		       se ? rdma_event_str(se->event) : "(none)");
		if (ce)
			rdma_ack_cm_event(ce);
		if (se)
			rdma_ack_cm_event(se);
		/* DESCRIPTION: both sides should call it: the passive side's call succeeds too ... */
		errno = 0;
		rc = rdma_disconnect(p.srv);
		CLAUSE("DESC-BOTH-CALL", rc == 0, "the other side's rdma_disconnect returned %d (%s)", rc,
		       conf_errname(errno));
		/* ... and no side gets a second DISCONNECTED. */
		int q1 = h_quiet(p.cch, H_QUIET_MS, err, sizeof err);
		int q2 = h_quiet(p.sch, 50, err, sizeof err);
		CLAUSE("DESC-EV-ONCE", q1 && q2, "after both disconnects: %s", err);
		if (mr)
			ibv_dereg_mr(mr);
		rdma_destroy_qp(p.cli);
		rdma_destroy_qp(p.srv);
		rdma_destroy_id(p.cli);
		rdma_destroy_id(p.srv);
		p.cli = p.srv = NULL;
	}
	h_pair_close(&p);

	/* RETURN VALUE: -1/errno on an id that is not connected (bound to a device only). */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *b = NULL;
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(1));
	int ok = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(b, (struct sockaddr *)&a) == 0;
	errno = 0;
	int rc = ok ? rdma_disconnect(b) : -2;
	CLAUSE("ERR-NOT-CONNECTED", rc == -1 && errno == EINVAL, "disconnect of a bound id: %d (%s)", rc,
	       conf_errname(errno));
	if (b)
		rdma_destroy_id(b);
	rdma_destroy_event_channel(ch);

	/* A synchronous id blocks in rdma_disconnect until its DISCONNECTED (kept in id->event). */
	struct h_server s = { .disconnect_back = 1 };
	if (h_server_start(&s, conf_port(2)) != 0) {
		CLAUSE_BLOCKED("SYNC-BLOCKS", s.err);
	} else {
		struct rdma_cm_id *sid = NULL;
		struct sockaddr_in dst;
		h_sin(&dst, "127.0.0.1", conf_port(2));
		struct ibv_qp_init_attr a2 = qa;
		ok = rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0 &&
		     rdma_resolve_addr(sid, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		     rdma_resolve_route(sid, 2000) == 0 && rdma_create_qp(sid, NULL, &a2) == 0 &&
		     rdma_connect(sid, NULL) == 0;
		errno = 0;
		rc = ok ? rdma_disconnect(sid) : -2;
		struct rdma_cm_event *held = sid ? sid->event : NULL;
		CLAUSE("SYNC-BLOCKS", rc == 0 && held && held->event == RDMA_CM_EVENT_DISCONNECTED,
		       "connected %d; sync disconnect %d (%s), id->event %s", ok, rc, conf_errname(errno),
		       held ? rdma_event_str(held->event) : "(none)");
		if (sid) {
			if (sid->qp)
				rdma_destroy_qp(sid);
			rdma_destroy_id(sid);
		}
	}
	h_server_stop(&s);
	return conf_end();
}
