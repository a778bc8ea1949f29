/* rdma_accept(3): called on the new id of a CONNECT_REQUEST (not on the listener); both
 * sides get ESTABLISHED; the connection properties (private data and its limit, resources,
 * flow control, RNR retry, qp_num/srq ignored with a QP, NULL = the request's values); UD. */
#include "cmhelp.h"

#include <stdlib.h>

#include <sys/wait.h>
#include <unistd.h>

#define UD_ROUNDS 8
#define UD_PROCS 4

/* Client connects to a fresh listener; returns the CONNECT_REQUEST (not acked). */
static struct rdma_cm_event *request(struct h_pair *p, uint16_t port, struct rdma_conn_param *cp,
				     enum rdma_port_space ps)
{
	struct ibv_qp_init_attr qa = h_qp_attr(ps == RDMA_PS_UDP ? IBV_QPT_UD : IBV_QPT_RC, 4, 1);
	struct h_pair_opts o = { .cli_qp = &qa, .ps = ps };
	if (h_pair_prepare(p, port, &o) != 0)
		return NULL;
	if (rdma_connect(p->cli, cp) != 0) {
		snprintf(p->err, sizeof p->err, "rdma_connect: %s", conf_errname(errno));
		return NULL;
	}
	struct rdma_cm_event *ev = NULL;
	if (h_expect(p->sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &ev, p->err, sizeof p->err) != 0)
		return NULL;
	p->srv = ev->id;
	return ev;
}

struct ud_result {
	int rounds, accepted, established, strays, quiet_end, acc_rc, acc_errno;
	char stray[96], err[160];
};

/* UD_ROUNDS datagram lookups against one RDMA_PS_UDP listener on `port`, each client destroyed
 * after its ESTABLISHED; counts stray events on the passive side. */
static void ud_rounds(uint16_t port, struct ud_result *res)
{
	char err[256] = "", serr[256] = "";
	struct ibv_qp_init_attr ua = h_qp_attr(IBV_QPT_UD, 4, 1);
	struct h_pair p;
	struct h_pair_opts o4 = { .ps = RDMA_PS_UDP };
	struct rdma_cm_id *srv_ids[UD_ROUNDS] = { 0 };
	if (h_pair_prepare(&p, port, &o4) != 0) {
		snprintf(res->err, sizeof res->err, "%.150s", p.err);
		h_pair_close(&p);
		return;
	}
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", port);
	for (int i = 0; i < UD_ROUNDS; i++) {
		struct rdma_cm_id *c = p.cli;
		p.cli = NULL;
		struct ibv_qp_init_attr a = ua;
		if (!c && (rdma_create_id(p.cch, &c, NULL, RDMA_PS_UDP) != 0 ||
			   rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) != 0 ||
			   h_expect(p.cch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) != 0 ||
			   rdma_resolve_route(c, 2000) != 0 ||
			   h_expect(p.cch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) != 0)) {
			snprintf(res->err, sizeof res->err, "client %d: %.140s", i, err);
			break;
		}
		struct rdma_cm_event *r = NULL, *cev = NULL;
		int started = rdma_create_qp(c, NULL, &a) == 0 && rdma_connect(c, NULL) == 0;
		/* the request; any other event on the passive side is a stray one */
		long long end = h_now_ms() + H_WAIT_MS;
		while (started && !r && h_now_ms() < end) {
			struct rdma_cm_event *ev = h_get(p.sch, (int)(end - h_now_ms()));
			if (ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
				r = ev;
			} else if (ev) {
				if (!res->strays++)
					snprintf(res->stray, sizeof res->stray, "%s in round %d", rdma_event_str(ev->event), i);
				rdma_ack_cm_event(ev);
			}
		}
		if (r) {
			srv_ids[i] = r->id;
			struct ibv_qp_init_attr b = ua;
			int rc = rdma_create_qp(r->id, NULL, &b) == 0 ? rdma_accept(r->id, NULL) : -2;
			if (rc == 0)
				res->accepted++;
			else if (!res->acc_rc)
				res->acc_rc = rc, res->acc_errno = errno;
			rdma_ack_cm_event(r);
			if (h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &cev, err, sizeof err) == 0 &&
			    srv_ids[i]->qp && cev->param.ud.qp_num == srv_ids[i]->qp->qp_num)
				res->established++;
			if (cev)
				rdma_ack_cm_event(cev);
		}
		if (c->qp)
			rdma_destroy_qp(c);
		rdma_destroy_id(c);
		res->rounds++;
	}
	if (h_quiet(p.sch, H_QUIET_MS, serr, sizeof serr))
		res->quiet_end = 1;
	else if (!res->strays++)
		snprintf(res->stray, sizeof res->stray, "%.90s", serr);
	for (int i = 0; i < UD_ROUNDS; i++) {
		if (!srv_ids[i])
			continue;
		if (srv_ids[i]->qp)
			rdma_destroy_qp(srv_ids[i]);
		rdma_destroy_id(srv_ids[i]);
	}
	h_pair_close(&p);
}

int main(int argc, char **argv)
{
	conf_begin("rdma_accept", argc, argv);
	/* The UD rounds (section 4) run in child processes started before this process uses
	 * the library (each child is a fresh process with its own library state). */
	int ud_pipe[UD_PROCS];
	pid_t ud_pid[UD_PROCS];
	for (int k = 0; k < UD_PROCS; k++) {
		int fds[2];
		ud_pipe[k] = -1;
		ud_pid[k] = -1;
		if (pipe(fds) != 0)
			continue;
		fflush(stdout);
		ud_pid[k] = fork();
		if (ud_pid[k] == 0) {
			alarm(15);
			struct ud_result r;
			memset(&r, 0, sizeof r);
			ud_rounds(conf_port(3 + k), &r);
			ssize_t w = write(fds[1], &r, sizeof r);
			_exit(w == (ssize_t)sizeof r ? 0 : 1);
		}
		close(fds[1]);
		ud_pipe[k] = fds[0];
	}
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;

	/* --- 1: private data limit, properties, ESTABLISHED on both sides ------------------- */
	struct rdma_cm_event *req = request(&p, conf_port(0), NULL, RDMA_PS_TCP);
	if (!req) {
		const char *ids[] = { "NOTE-NEW-ID", "ERR-LISTENER", "PRIV-LIMIT", "RESP-RES-MAX", "RET-0",
				      "EV-ESTABLISHED", "PRIV-DATA", "FLOW-CONTROL", "RNR-RETRY",
				      "QPNUM-IGNORED", "SRQ-IGNORED" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
	} else {
		/* NOTES: the request brings a new id, bound to a device; not the listener. */
		CLAUSE("NOTE-NEW-ID", req->id && req->id != p.listen && req->listen_id == p.listen &&
		       req->id->verbs != NULL, "request id %p (listener %p), verbs %p", (void *)req->id,
		       (void *)p.listen, req->id ? (void *)req->id->verbs : NULL);
		/* NOTES: rdma_accept is not called on the listening id. */
		struct rdma_conn_param cp = { .qp_num = 1 };
		errno = 0;
		int rc = rdma_accept(p.listen, &cp);
		CLAUSE("ERR-LISTENER", rc == -1 && errno == EINVAL, "accept on the listener: %d (%s)", rc,
		       conf_errname(errno));
		/* INFINIBAND SPECIFIC: private data is limited to 196 bytes (RDMA_PS_TCP). */
		unsigned char big[197];
		for (size_t i = 0; i < sizeof big; i++)
			big[i] = (unsigned char)(i + 1);
		struct rdma_conn_param over = { .private_data = big, .private_data_len = 197, .qp_num = 1 };
		errno = 0;
		rc = rdma_accept(p.srv, &over);
		CLAUSE("PRIV-LIMIT", rc == -1 && errno == EINVAL, "197 bytes of private data: %d (%s)", rc,
		       conf_errname(errno));
		/* CONNECTION PROPERTIES: responder_resources at most the device's max_qp_rd_atom. */
		struct ibv_device_attr da;
		int q = h_query_device(p.srv, &da);
		if (q == 0 && da.max_qp_rd_atom < 254) {
			struct rdma_conn_param rr = { .responder_resources = (uint8_t)(da.max_qp_rd_atom + 1),
						      .qp_num = 1 };
			errno = 0;
			rc = rdma_accept(p.srv, &rr);
			CLAUSE("RESP-RES-MAX", rc == -1 && errno == EINVAL,
			       "responder_resources %d > max_qp_rd_atom %d: %d (%s)", da.max_qp_rd_atom + 1,
			       da.max_qp_rd_atom, rc, conf_errname(errno));
		} else {
			CLAUSE("RESP-RES-MAX", q == 0, "ibv_query_device failed (max_qp_rd_atom %d)",
			       da.max_qp_rd_atom);
		}
		/* A valid accept: QP, 196 bytes, flow control, RNR retry, a bogus qp_num and srq. */
		struct ibv_qp_init_attr a1 = qa;
		int qrc = rdma_create_qp(p.srv, NULL, &a1);
		struct rdma_conn_param ok = { .private_data = big, .private_data_len = 196, .flow_control = 1,
					      .rnr_retry_count = 5, .qp_num = 0xabcde, .srq = 1,
					      .responder_resources = 1, .initiator_depth = 1 };
		errno = 0;
		rc = qrc == 0 ? rdma_accept(p.srv, &ok) : -2;
		CLAUSE("RET-0", rc == 0, "accept returned %d (%s)", rc, conf_errname(errno));
		rdma_ack_cm_event(req);
		struct rdma_cm_event *cev = NULL, *sev = NULL;
		h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &cev, err, sizeof err);
		h_expect(p.sch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &sev, err, sizeof err);
		CLAUSE("EV-ESTABLISHED", cev && sev, "client ESTABLISHED %s, server ESTABLISHED %s (%s)",
		       cev ? "yes" : "no", sev ? "yes" : "no", err);
		const struct rdma_conn_param *c = cev ? &cev->param.conn : NULL;
		CLAUSE("PRIV-DATA", c && c->private_data && c->private_data_len >= 196 &&
		       memcmp(c->private_data, big, 196) == 0,
		       "client's ESTABLISHED private data %p, length %u", c ? c->private_data : NULL,
		       c ? c->private_data_len : 0);
		CLAUSE("FLOW-CONTROL", c && c->flow_control == 1, "flow_control %u reported to the client, "
		       "accepted with 1", c ? c->flow_control : 0);
		CLAUSE("RNR-RETRY", c && c->rnr_retry_count == 5, "rnr_retry_count %u reported, accepted "
		       "with 5", c ? c->rnr_retry_count : 0);
		CLAUSE("QPNUM-IGNORED", c && p.srv->qp && c->qp_num == p.srv->qp->qp_num,
		       "client sees qp_num 0x%x, the server QP is 0x%x (conn_param said 0xabcde)",
		       c ? c->qp_num : 0, p.srv->qp ? p.srv->qp->qp_num : 0);
		CLAUSE("SRQ-IGNORED", c && c->srq == 0, "client sees srq %u for a QP without SRQ (conn_param "
		       "said 1)", c ? c->srq : 0);
		if (cev)
			rdma_ack_cm_event(cev);
		if (sev)
			rdma_ack_cm_event(sev);
	}
	h_pair_close(&p);

	/* --- 2: NULL conn_param takes the request's values ------------------------------------ */
	struct rdma_conn_param creq = { .responder_resources = 3, .initiator_depth = 2, .retry_count = 7,
					.rnr_retry_count = 7 };
	req = request(&p, conf_port(1), &creq, RDMA_PS_TCP);
	if (!req) {
		CLAUSE_BLOCKED("NULL-PARAM", p.err);
	} else {
		struct ibv_qp_init_attr a2 = qa;
		int rc = rdma_create_qp(p.srv, NULL, &a2) == 0 ? rdma_accept(p.srv, NULL) : -2;
		rdma_ack_cm_event(req);
		struct rdma_cm_event *cev = NULL;
		h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &cev, err, sizeof err);
		const struct rdma_conn_param *c = cev ? &cev->param.conn : NULL;
		/* the server mirrors the request: its initiator depth is the client's responder
		 * resources (3) and vice versa (2), reported back to the client swapped again */
		CLAUSE("NULL-PARAM", rc == 0 && c && c->responder_resources == 3 && c->initiator_depth == 2,
		       "accept(NULL) %d; client ESTABLISHED responder_resources %d (want 3), "
		       "initiator_depth %d (want 2) %s", rc, c ? c->responder_resources : -1,
		       c ? c->initiator_depth : -1, err);
		if (cev)
			rdma_ack_cm_event(cev);
	}
	h_pair_close(&p);

	/* --- 3: the request event's own rdma_conn_param may be passed (event acked after) ------- */
	req = request(&p, conf_port(2), &creq, RDMA_PS_TCP);
	if (!req) {
		CLAUSE_BLOCKED("PARAM-FROM-EVENT", p.err);
	} else {
		struct ibv_qp_init_attr a3 = qa;
		int rc = rdma_create_qp(p.srv, NULL, &a3) == 0 ? rdma_accept(p.srv, &req->param.conn) : -2;
		int e = errno;
		rdma_ack_cm_event(req);
		int est = rc == 0 && h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, err, sizeof err) == 0;
		CLAUSE("PARAM-FROM-EVENT", rc == 0 && est, "accept(&event->param.conn) %d (%s), client: %s", rc,
		       conf_errname(e), est ? "ESTABLISHED" : err);
	}
	h_pair_close(&p);

	/* --- 4: UD (datagram service lookup): accept returns at once and nothing happens on the
	 * passive side (no connection exists), even when the active side goes away. Run in
	 * UD_PROCS child processes started at the beginning, UD_ROUNDS times each, so that an event
	 * that only shows up in some runs is still caught. ----------------------------------- */
	struct ud_result all = { 0 };
	int got = 0;
	for (int k = 0; k < UD_PROCS; k++) {
		struct ud_result r;
		memset(&r, 0, sizeof r);
		ssize_t n = ud_pipe[k] >= 0 ? read(ud_pipe[k], &r, sizeof r) : -1;
		if (ud_pid[k] > 0)
			waitpid(ud_pid[k], NULL, 0);
		if (n != (ssize_t)sizeof r)
			continue;
		got++;
		all.rounds += r.rounds;
		all.accepted += r.accepted;
		all.established += r.established;
		all.quiet_end += r.quiet_end;
		if (!all.acc_rc && r.acc_rc)
			all.acc_rc = r.acc_rc, all.acc_errno = r.acc_errno;
		if (!all.strays && r.strays)
			memcpy(all.stray, r.stray, sizeof all.stray);
		all.strays += r.strays;
		if (!all.err[0] && r.err[0])
			memcpy(all.err, r.err, sizeof all.err);
	}
	int want = UD_PROCS * UD_ROUNDS;
	CLAUSE("UD-ACCEPT", got == UD_PROCS && all.rounds == want && all.accepted == want && all.established == want &&
	       all.quiet_end == UD_PROCS && !all.strays,
	       "%d processes x %d rounds: %d rounds, %d accepts returned 0 (first failure %d, %s), %d clients got "
	       "ESTABLISHED with the QPN; passive side: %d stray event(s) (first: %s); %s", got, UD_ROUNDS,
	       all.rounds, all.accepted, all.acc_rc, conf_errname(all.acc_errno), all.established, all.strays,
	       all.strays ? all.stray : "-", all.err[0] ? all.err : "");
	return conf_end();
}
