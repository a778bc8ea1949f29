/* rdma_connect(3): starts a connection request (needs a resolved route); the connection
 * properties reach the passive side (private data and its 56-byte limit, retry counts, flow
 * control, qp_num/srq taken from the QP); synchronous ids block; UD lookups. */
#include "cmhelp.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_connect", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;

	/* --- 1: errors before the route, limits, then a full request ------------------------- */
	struct ibv_qp_init_attr a1 = qa;
	struct h_pair_opts o = { .cli_qp = &a1 };
	if (h_pair_prepare(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "PRIV-LIMIT", "RESP-RES-MAX", "INIT-DEPTH-MAX", "RET-0", "DESC-REQUEST",
				      "PRIV-DATA", "RETRY-COUNT", "RNR-RETRY", "FLOW-CONTROL",
				      "QPNUM-IGNORED", "SRQ-IGNORED" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
	} else {
		/* INFINIBAND SPECIFIC: private data is limited to 56 bytes (RDMA_PS_TCP). */
		unsigned char pd[57];
		for (size_t i = 0; i < sizeof pd; i++)
			pd[i] = (unsigned char)(0xa0 + i);
		struct rdma_conn_param over = { .private_data = pd, .private_data_len = 57 };
		errno = 0;
		int rc = rdma_connect(p.cli, &over);
		CLAUSE("PRIV-LIMIT", rc == -1 && errno == EINVAL, "57 bytes of private data: %d (%s)", rc,
		       conf_errname(errno));
		/* CONNECTION PROPERTIES: resources at most the device's limits. */
		struct ibv_device_attr da;
		int q = h_query_device(p.cli, &da);
		if (q == 0 && da.max_qp_rd_atom < 254) {
			struct rdma_conn_param rr = { .responder_resources = (uint8_t)(da.max_qp_rd_atom + 1) };
			errno = 0;
			rc = rdma_connect(p.cli, &rr);
			CLAUSE("RESP-RES-MAX", rc == -1 && errno == EINVAL, "responder_resources %d > %d: %d (%s)",
			       da.max_qp_rd_atom + 1, da.max_qp_rd_atom, rc, conf_errname(errno));
		} else {
			CLAUSE("RESP-RES-MAX", q == 0, "ibv_query_device failed");
		}
		if (q == 0 && da.max_qp_init_rd_atom < 254) {
			struct rdma_conn_param id = { .initiator_depth = (uint8_t)(da.max_qp_init_rd_atom + 1) };
			errno = 0;
			rc = rdma_connect(p.cli, &id);
			CLAUSE("INIT-DEPTH-MAX", rc == -1 && errno == EINVAL, "initiator_depth %d > %d: %d (%s)",
			       da.max_qp_init_rd_atom + 1, da.max_qp_init_rd_atom, rc, conf_errname(errno));
		} else {
			CLAUSE("INIT-DEPTH-MAX", q == 0, "ibv_query_device failed");
		}
		struct rdma_conn_param cp = { .private_data = pd, .private_data_len = 56, .retry_count = 5,
					      .rnr_retry_count = 6, .flow_control = 1, .qp_num = 0xabcde,
					      .srq = 1, .responder_resources = 1, .initiator_depth = 1 };
		errno = 0;
		rc = rdma_connect(p.cli, &cp);
		CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
		struct rdma_cm_event *req = NULL;
		h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err);
		/* DESCRIPTION: a connection request reaches the remote destination. */
		CLAUSE("DESC-REQUEST", req != NULL, "listener: %s", err);
		const struct rdma_conn_param *c = req ? &req->param.conn : NULL;
		CLAUSE("PRIV-DATA", c && c->private_data && c->private_data_len >= 56 &&
		       memcmp(c->private_data, pd, 56) == 0, "request private data %p, length %u",
		       c ? c->private_data : NULL, c ? c->private_data_len : 0);
		CLAUSE("RETRY-COUNT", c && c->retry_count == 5, "request retry_count %u, connected with 5",
		       c ? c->retry_count : 0);
		CLAUSE("RNR-RETRY", c && c->rnr_retry_count == 6, "request rnr_retry_count %u, connected with 6",
		       c ? c->rnr_retry_count : 0);
		CLAUSE("FLOW-CONTROL", c && c->flow_control == 1, "request flow_control %u, connected with 1",
		       c ? c->flow_control : 0);
		CLAUSE("QPNUM-IGNORED", c && c->qp_num == p.cli->qp->qp_num,
		       "request qp_num 0x%x, client QP 0x%x (conn_param said 0xabcde)", c ? c->qp_num : 0,
		       p.cli->qp->qp_num);
		CLAUSE("SRQ-IGNORED", c && c->srq == 0, "request srq %u for a QP without SRQ (conn_param said 1)",
		       c ? c->srq : 0);
		if (req) {
			p.srv = req->id;
			rdma_reject(req->id, NULL, 0);
			rdma_ack_cm_event(req);
		}
		h_quiet(p.cch, 100, err, sizeof err);
	}
	h_pair_close(&p);

	/* --- 2: the route must be resolved first (EINVAL after rdma_resolve_addr only) -------- */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *early = NULL;
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(1));
	int ok = rdma_create_id(ch, &early, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(early, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	struct rdma_conn_param cq = { .qp_num = 1 };
	errno = 0;
	int rc = ok ? rdma_connect(early, &cq) : -2;
	CLAUSE("NOTE-ROUTE-FIRST", rc == -1 && errno == EINVAL, "connect before resolve_route: %d (%s)", rc,
	       conf_errname(errno));
	if (early)
		rdma_destroy_id(early);

	/* --- 3: without a QP, conn_param is required (qp_num); NULL with a QP is fine ---------- */
	struct h_pair_opts o3 = { 0 };
	if (h_pair_prepare(&p, conf_port(2), &o3) != 0) {
		CLAUSE_BLOCKED("NOQP-NEEDS-PARAM", p.err);
		CLAUSE_BLOCKED("NULL-PARAM", p.err);
	} else {
		errno = 0;
		rc = rdma_connect(p.cli, NULL);
		CLAUSE("NOQP-NEEDS-PARAM", rc == -1 && errno == EINVAL, "no QP, NULL conn_param: %d (%s)", rc,
		       conf_errname(errno));
		struct ibv_qp_init_attr a3 = qa;
		rc = rdma_create_qp(p.cli, NULL, &a3) == 0 ? rdma_connect(p.cli, NULL) : -2;
		struct rdma_cm_event *req = NULL;
		int got = rc == 0 && h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0;
		CLAUSE("NULL-PARAM", rc == 0 && got, "with a QP, connect(NULL) %d (%s), listener: %s", rc,
		       conf_errname(errno), got ? "CONNECT_REQUEST" : err);
		if (req) {
			p.srv = req->id;
			rdma_reject(req->id, NULL, 0);
			rdma_ack_cm_event(req);
		}
		h_quiet(p.cch, 100, err, sizeof err);
	}
	h_pair_close(&p);

	/* --- 4: no listener: the request is rejected (event status non-zero) ----------------- */
	struct rdma_cm_id *lone = NULL;
	h_sin(&dst, "127.0.0.1", conf_port(3));
	struct ibv_qp_init_attr a4 = qa;
	ok = rdma_create_id(ch, &lone, NULL, RDMA_PS_TCP) == 0 &&
	     rdma_resolve_addr(lone, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
	     h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
	     rdma_resolve_route(lone, 2000) == 0 &&
	     h_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
	     rdma_create_qp(lone, NULL, &a4) == 0;
	rc = ok ? rdma_connect(lone, NULL) : -2;
	struct rdma_cm_event *ev = rc == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("NO-LISTENER", rc == 0 && ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status != 0,
	       "connect %d; event %s status %d", rc, ev ? rdma_event_str(ev->event) : "(none)",
	       ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	if (lone) {
		if (lone->qp)
			rdma_destroy_qp(lone);
		rdma_destroy_id(lone);
	}

	/* --- 5: synchronous ids block until ESTABLISHED, or fail with ECONNREFUSED ------------- */
	for (int rej = 0; rej <= 1; rej++) {
		const char *id = rej ? CLAUSE_ID("SYNC-REJECTED") : CLAUSE_ID("SYNC-BLOCKS");
		struct h_server s = { .reject = rej };
		if (h_server_start(&s, conf_port(4 + rej)) != 0) {
			CLAUSE_BLOCKED(id, s.err);
			h_server_stop(&s);
			continue;
		}
		struct rdma_cm_id *sid = NULL;
		struct ibv_qp_init_attr a5 = qa;
		h_sin(&dst, "127.0.0.1", conf_port(4 + rej));
		ok = rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP) == 0 &&
		     rdma_resolve_addr(sid, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		     rdma_resolve_route(sid, 2000) == 0 && rdma_create_qp(sid, NULL, &a5) == 0;
		errno = 0;
		rc = ok ? rdma_connect(sid, NULL) : -2;
		int e = errno;
		if (rej) {
			CLAUSE(id, rc == -1 && e == ECONNREFUSED, "sync connect to a rejecting server: %d (%s)", rc,
			       conf_errname(e));
		} else {
			struct rdma_cm_event *held = sid ? sid->event : NULL;
			CLAUSE(id, rc == 0 && held && held->event == RDMA_CM_EVENT_ESTABLISHED,
			       "sync connect %d (%s), id->event %s", rc, conf_errname(e),
			       held ? rdma_event_str(held->event) : "(none)");
			if (rc == 0)
				rdma_disconnect(sid);
		}
		if (sid) {
			if (sid->qp)
				rdma_destroy_qp(sid);
			rdma_destroy_id(sid);
		}
		h_server_stop(&s);
	}

	/* --- 6: PS_UDP: a lookup of the remote QP, answered by ESTABLISHED with param.ud ------ */
	struct ibv_qp_init_attr ua = h_qp_attr(IBV_QPT_UD, 4, 1);
	struct h_pair_opts o6 = { .ps = RDMA_PS_UDP, .cli_qp = &ua };
	if (h_pair_prepare(&p, conf_port(6), &o6) != 0) {
		CLAUSE_BLOCKED("UD-LOOKUP", p.err);
	} else {
		rc = rdma_connect(p.cli, NULL);
		struct rdma_cm_event *req = NULL, *est = NULL;
		if (rc == 0 && h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
			p.srv = req->id;
			struct ibv_qp_init_attr ub = h_qp_attr(IBV_QPT_UD, 4, 1);
			if (rdma_create_qp(p.srv, NULL, &ub) == 0)
				rdma_accept(p.srv, NULL);
			rdma_ack_cm_event(req);
			h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &est, err, sizeof err);
		}
		CLAUSE("UD-LOOKUP", est && p.srv && p.srv->qp && est->param.ud.qp_num == p.srv->qp->qp_num &&
		       est->param.ud.qkey == RDMA_UDP_QKEY, "connect %d; %s", rc, est ? "ESTABLISHED with other "
		       "param.ud" : err);
		if (est)
			rdma_ack_cm_event(est);
	}
	if (p.srv && p.srv->qp)
		rdma_destroy_qp(p.srv);
	h_pair_close(&p);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
