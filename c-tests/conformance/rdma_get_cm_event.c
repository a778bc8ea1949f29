/* rdma_get_cm_event(3): blocking by default (O_NONBLOCK: EAGAIN), events must be acked
 * (destroy waits for it), and the EVENT DATA: id/listen_id, status, the CONN and UD
 * parameters, private data (NULL when none; longer than sent and zero-filled), event types. */
#include "cmhelp.h"

#include <fcntl.h>

struct getter {
	struct rdma_event_channel *ch;
	struct rdma_cm_event *ev;
	volatile int done;
	int rc;
};

static void *get_thread(void *arg)
{
	struct getter *g = arg;
	g->rc = rdma_get_cm_event(g->ch, &g->ev);
	__atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static void *destroy_thread(void *arg)
{
	struct getter *g = arg; /* reuses the struct: ev->id is destroyed */
	g->rc = rdma_destroy_id((struct rdma_cm_id *)g->ch);
	__atomic_store_n(&g->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

static int wait_done(volatile int *done, int ms)
{
	long long end = h_now_ms() + ms;
	while (!__atomic_load_n(done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
		h_sleep_ms(2);
	return __atomic_load_n(done, __ATOMIC_SEQ_CST);
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_cm_event", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(0));

	/* DESCRIPTION: with nothing pending the call blocks until an event is received. */
	struct rdma_cm_id *id = NULL;
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	struct getter g = { .ch = ch };
	pthread_t th;
	pthread_create(&th, NULL, get_thread, &g);
	h_sleep_ms(H_QUIET_MS);
	int early = __atomic_load_n(&g.done, __ATOMIC_SEQ_CST);
	int r = id ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -1;
	int late = wait_done(&g.done, H_WAIT_MS);
	if (late)
		pthread_join(th, NULL);
	else
		pthread_detach(th);
	CLAUSE("DESC-BLOCKS", !early && r == 0 && late && g.rc == 0 && g.ev &&
	       g.ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "returned before any event: %d; after the event: %d (rc %d, %s)", early, late, g.rc,
	       g.ev ? rdma_event_str(g.ev->event) : "(none)");
	/* RETURN VALUE 0; EVENT DATA: id, event, status 0 on success, no private data. */
	CLAUSE("RET-0", late && g.rc == 0, "returned %d", g.rc);
	struct rdma_cm_event *ev = late ? g.ev : NULL;
	CLAUSE("EV-ID", ev && ev->id == id, "event id %p, expected %p", ev ? (void *)ev->id : NULL, (void *)id);
	CLAUSE("EV-STATUS-OK", ev && ev->status == 0, "status %d for a successful resolution", ev ? ev->status : -1);
	CLAUSE("PRIV-NULL", ev && ev->param.conn.private_data == NULL && ev->param.conn.private_data_len == 0,
	       "ADDR_RESOLVED private data %p, length %u", ev ? ev->param.conn.private_data : NULL,
	       ev ? ev->param.conn.private_data_len : 0);

	/* NOTES: destroying the id blocks until its reported events are acknowledged. */
	if (ev) {
		struct getter d = { .ch = (struct rdma_event_channel *)id };
		pthread_create(&th, NULL, destroy_thread, &d);
		h_sleep_ms(H_QUIET_MS);
		int d_early = __atomic_load_n(&d.done, __ATOMIC_SEQ_CST);
		rdma_ack_cm_event(ev);
		int d_late = wait_done(&d.done, H_WAIT_MS);
		if (d_late)
			pthread_join(th, NULL);
		else
			pthread_detach(th);
		CLAUSE("NOTE-ACK-DESTROY", !d_early && d_late && d.rc == 0,
		       "destroy returned before the ack: %d, after: %d (rc %d)", d_early, d_late, d.rc);
		id = NULL;
	} else {
		CLAUSE_BLOCKED("NOTE-ACK-DESTROY", "no event");
	}

	/* NOTES: the default behaviour changes with the fd: O_NONBLOCK gives -1/EAGAIN. */
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	struct rdma_cm_event *none = NULL;
	errno = 0;
	int rc = rdma_get_cm_event(ch, &none);
	int e = errno;
	fcntl(ch->fd, F_SETFL, fl);
	CLAUSE("NOTE-NONBLOCK", rc == -1 && e == EAGAIN, "non-blocking channel, nothing pending: %d (%s)", rc,
	       conf_errname(e));
	if (rc == 0 && none)
		rdma_ack_cm_event(none);

	/* EVENT DATA of a connection: CONNECT_REQUEST's new id and listen_id, the CONN
	 * parameters as the peer gave them (depth and resources swapped), private data. */
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	const char cmsg[] = "request data", amsg[] = "accept data";
	struct rdma_conn_param cp = { .private_data = cmsg, .private_data_len = sizeof cmsg,
				      .responder_resources = 1, .initiator_depth = 2, .retry_count = 5,
				      .rnr_retry_count = 6, .flow_control = 1 };
	struct rdma_conn_param ap = { .private_data = amsg, .private_data_len = sizeof amsg,
				      .responder_resources = 2, .initiator_depth = 1, .rnr_retry_count = 4 };
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa, .conn = &cp, .acc = &ap, .keep_events = 1 };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "EV-CONNREQ-IDS", "CONN-PRIV", "CONN-PRIV-LEN", "CONN-RESP-RES",
				      "CONN-INIT-DEPTH", "CONN-RETRY", "CONN-RNR", "CONN-FLOW", "CONN-QPNUM",
				      "CONN-EST-DATA", "EV-QP-ESTABLISHED" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
	} else {
		struct rdma_cm_event *q = p.req_ev, *ce = p.cli_est;
		const struct rdma_conn_param *c = &q->param.conn;
		CLAUSE("EV-CONNREQ-IDS", q->event == RDMA_CM_EVENT_CONNECT_REQUEST && q->listen_id == p.listen &&
		       q->id != p.listen && q->id == p.srv && q->status == 0,
		       "CONNECT_REQUEST id %p, listen_id %p (listener %p), status %d", (void *)q->id,
		       (void *)q->listen_id, (void *)p.listen, q->status);
		CLAUSE("CONN-PRIV", c->private_data && memcmp(c->private_data, cmsg, sizeof cmsg) == 0,
		       "CONNECT_REQUEST private data %p", c->private_data);
		int zero = 1;
		for (unsigned i = sizeof cmsg; c->private_data && i < c->private_data_len; i++)
			zero &= ((const unsigned char *)c->private_data)[i] == 0;
		CLAUSE("CONN-PRIV-LEN", c->private_data_len >= sizeof cmsg && zero,
		       "private_data_len %u for %zu bytes sent, rest zeroed %d", c->private_data_len,
		       sizeof cmsg, zero);
		CLAUSE("CONN-RESP-RES", c->responder_resources == 2,
		       "responder_resources %u; the peer's initiator_depth was 2", c->responder_resources);
		CLAUSE("CONN-INIT-DEPTH", c->initiator_depth == 1,
		       "initiator_depth %u; the peer's responder_resources was 1", c->initiator_depth);
		CLAUSE("CONN-RETRY", c->retry_count == 5, "retry_count %u, peer gave 5", c->retry_count);
		CLAUSE("CONN-RNR", c->rnr_retry_count == 6, "rnr_retry_count %u, peer gave 6", c->rnr_retry_count);
		CLAUSE("CONN-FLOW", c->flow_control == 1, "flow_control %u, peer gave 1", c->flow_control);
		CLAUSE("CONN-QPNUM", c->qp_num == p.cli->qp->qp_num && ce->param.conn.qp_num == p.srv->qp->qp_num,
		       "request qp_num 0x%x (client QP 0x%x); ESTABLISHED qp_num 0x%x (server QP 0x%x)",
		       c->qp_num, p.cli->qp->qp_num, ce->param.conn.qp_num, p.srv->qp->qp_num);
		const struct rdma_conn_param *e2 = &ce->param.conn;
		CLAUSE("CONN-EST-DATA", e2->private_data && memcmp(e2->private_data, amsg, sizeof amsg) == 0 &&
		       e2->private_data_len >= sizeof amsg && e2->responder_resources == 1 &&
		       e2->initiator_depth == 2 && e2->rnr_retry_count == 4,
		       "client ESTABLISHED: data %s, len %u, responder_resources %u (want 1), "
		       "initiator_depth %u (want 2), rnr_retry_count %u (want 4)",
		       e2->private_data && memcmp(e2->private_data, amsg, sizeof amsg) == 0 ? "ok" : "wrong",
		       e2->private_data_len, e2->responder_resources, e2->initiator_depth, e2->rnr_retry_count);
		/* EVENT TYPES: an id with a QP gets ESTABLISHED (CONNECT_RESPONSE is only for ids
		 * without one; see rdma_establish(3)). */
		CLAUSE("EV-QP-ESTABLISHED", ce->event == RDMA_CM_EVENT_ESTABLISHED && p.srv_est &&
		       p.srv_est->event == RDMA_CM_EVENT_ESTABLISHED, "client got %s", rdma_event_str(ce->event));
	}
	h_pair_close(&p);

	/* EVENT TYPES: a failed operation is reported with a non-zero status (no listener). */
	struct rdma_cm_id *lone = NULL;
	h_sin(&dst, "127.0.0.1", conf_port(2));
	struct ibv_qp_init_attr a2 = qa;
	int ok = rdma_create_id(ch, &lone, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(lone, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		 rdma_resolve_route(lone, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		 rdma_create_qp(lone, NULL, &a2) == 0 && rdma_connect(lone, NULL) == 0;
	ev = ok ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("EV-STATUS-ERR", ev && ev->status != 0 && ev->event == RDMA_CM_EVENT_REJECTED,
	       "connect to nobody: %s status %d (%s)", ev ? rdma_event_str(ev->event) : "(none)",
	       ev ? ev->status : 0, err);
	if (ev)
		rdma_ack_cm_event(ev);
	if (lone) {
		if (lone->qp)
			rdma_destroy_qp(lone);
		rdma_destroy_id(lone);
	}

	/* UD EVENT DATA: ESTABLISHED of a datagram lookup carries ah_attr, qp_num and qkey. */
	struct ibv_qp_init_attr ua = h_qp_attr(IBV_QPT_UD, 4, 1);
	struct h_pair_opts o2 = { .ps = RDMA_PS_UDP, .cli_qp = &ua };
	if (h_pair_prepare(&p, conf_port(3), &o2) != 0 || rdma_connect(p.cli, NULL) != 0) {
		CLAUSE_BLOCKED("UD-EST-DATA", p.err[0] ? p.err : "rdma_connect failed");
	} else {
		struct rdma_cm_event *req = NULL, *est = NULL;
		struct ibv_ah *ah = NULL;
		if (h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
			p.srv = req->id;
			struct ibv_qp_init_attr ub = h_qp_attr(IBV_QPT_UD, 4, 1);
			if (rdma_create_qp(p.srv, NULL, &ub) == 0)
				rdma_accept(p.srv, NULL);
			rdma_ack_cm_event(req);
			h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &est, err, sizeof err);
		}
		if (est)
			ah = ibv_create_ah(p.cli->pd, &est->param.ud.ah_attr);
		CLAUSE("UD-EST-DATA", est && p.srv && p.srv->qp && est->param.ud.qp_num == p.srv->qp->qp_num &&
		       est->param.ud.qkey == RDMA_UDP_QKEY && ah, "%s", est ? "ESTABLISHED param.ud: qp_num, qkey "
		       "or an unusable ah_attr" : err);
		if (ah)
			ibv_destroy_ah(ah);
		if (est)
			rdma_ack_cm_event(est);
	}
	if (p.srv && p.srv->qp)
		rdma_destroy_qp(p.srv);
	h_pair_close(&p);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
