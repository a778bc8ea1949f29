/* rdma_cm(7): the RETURN CODES rule (0 = success, or "started" for asynchronous calls whose
 * result comes as an event; -1 with errno, never -errno), and the documented client and
 * server flows: asynchronous, synchronous, disconnect from either side, UD. */
#include "cmhelp.h"

#include <semaphore.h>
#include <rdma/rdma_verbs.h>

#define STEP(cond, ...) do { if (!(cond)) { snprintf(f->fail, sizeof f->fail, __VA_ARGS__); goto out; } } while (0)

struct flow {
	uint16_t port;
	int server_disconnects;   /* server initiates the disconnect */
	sem_t ready;
	int done;                 /* all steps succeeded */
	char fail[300];
};

/* SERVER OPERATION, step by step. */
static void *server_flow(void *arg)
{
	struct flow *f = arg;
	struct rdma_event_channel *ch = NULL;
	struct rdma_cm_id *l = NULL, *id = NULL;
	struct rdma_cm_event *ev = NULL;
	struct ibv_mr *mr = NULL;
	static __thread char buf[64];
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", f->port);
	int posted = 0;
	STEP((ch = rdma_create_event_channel()) != NULL, "rdma_create_event_channel: %s", conf_errname(errno));
	STEP(rdma_create_id(ch, &l, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", conf_errname(errno));
	STEP(rdma_bind_addr(l, (struct sockaddr *)&a) == 0, "rdma_bind_addr: %s", conf_errname(errno));
	STEP(rdma_listen(l, 4) == 0, "rdma_listen: %s", conf_errname(errno));
	sem_post(&f->ready);
	posted = 1;
	STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->id != l,
	     "wait for CONNECT_REQUEST with a new id: %s", ev ? rdma_event_str(ev->event) : "none");
	id = ev->id;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	STEP(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp on the new id: %s", conf_errname(errno));
	STEP((mr = rdma_reg_msgs(id, buf, sizeof buf)) && rdma_post_recv(id, NULL, buf, sizeof buf, mr) == 0,
	     "receive for the data transfer: %s", conf_errname(errno));
	STEP(rdma_accept(id, NULL) == 0, "rdma_accept: %s", conf_errname(errno));
	STEP(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event: %s", conf_errname(errno));
	ev = NULL;
	STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_ESTABLISHED,
	     "wait for ESTABLISHED: %s", ev ? rdma_event_str(ev->event) : "none");
	STEP(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event: %s", conf_errname(errno));
	ev = NULL;
	struct ibv_wc wc;
	STEP(rdma_get_recv_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS && strcmp(buf, "flow data") == 0,
	     "data transfer: receive");
	if (f->server_disconnects)
		STEP(rdma_disconnect(id) == 0, "rdma_disconnect (server first): %s", conf_errname(errno));
	STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_DISCONNECTED,
	     "wait for DISCONNECTED: %s", ev ? rdma_event_str(ev->event) : "none");
	STEP(rdma_ack_cm_event(ev) == 0, "rdma_ack_cm_event: %s", conf_errname(errno));
	ev = NULL;
	if (!f->server_disconnects)
		STEP(rdma_disconnect(id) == 0, "rdma_disconnect: %s", conf_errname(errno));
	rdma_dereg_mr(mr);
	mr = NULL;
	rdma_destroy_qp(id);
	STEP(rdma_destroy_id(id) == 0, "rdma_destroy_id (connection): %s", conf_errname(errno));
	id = NULL;
	STEP(rdma_destroy_id(l) == 0, "rdma_destroy_id (listener): %s", conf_errname(errno));
	l = NULL;
	rdma_destroy_event_channel(ch);
	ch = NULL;
	f->done = 1;
out:
	if (!posted)
		sem_post(&f->ready);
	if (ev)
		rdma_ack_cm_event(ev);
	if (mr)
		rdma_dereg_mr(mr);
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	if (l)
		rdma_destroy_id(l);
	if (ch)
		rdma_destroy_event_channel(ch);
	return NULL;
}

/* CLIENT OPERATION (asynchronous, or synchronous without the channel calls). */
static void client_flow(struct flow *f, int sync, int server_disconnects)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res = NULL;
	struct rdma_event_channel *ch = NULL;
	struct rdma_cm_id *id = NULL;
	struct rdma_cm_event *ev = NULL;
	char port[16];
	snprintf(port, sizeof port, "%u", f->port);
	STEP(rdma_getaddrinfo("127.0.0.1", port, &hints, &res) == 0, "rdma_getaddrinfo: %s", conf_errname(errno));
	if (!sync)
		STEP((ch = rdma_create_event_channel()) != NULL, "rdma_create_event_channel: %s", conf_errname(errno));
	STEP(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "rdma_create_id: %s", conf_errname(errno));
	STEP(rdma_resolve_addr(id, NULL, res->ai_dst_addr, 2000) == 0, "rdma_resolve_addr: %s", conf_errname(errno));
	if (!sync) {
		STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
		     "wait for ADDR_RESOLVED: %s", ev ? rdma_event_str(ev->event) : "none");
		STEP(rdma_ack_cm_event(ev) == 0, "ack");
		ev = NULL;
	}
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	STEP(rdma_create_qp(id, NULL, &qa) == 0, "rdma_create_qp: %s", conf_errname(errno));
	STEP(rdma_resolve_route(id, 2000) == 0, "rdma_resolve_route: %s", conf_errname(errno));
	if (!sync) {
		STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
		     "wait for ROUTE_RESOLVED: %s", ev ? rdma_event_str(ev->event) : "none");
		STEP(rdma_ack_cm_event(ev) == 0, "ack");
		ev = NULL;
	}
	STEP(rdma_connect(id, NULL) == 0, "rdma_connect: %s", conf_errname(errno));
	if (!sync) {
		STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_ESTABLISHED,
		     "wait for ESTABLISHED: %s", ev ? rdma_event_str(ev->event) : "none");
		STEP(rdma_ack_cm_event(ev) == 0, "ack");
		ev = NULL;
	}
	struct ibv_wc wc;
	STEP(rdma_post_send(id, NULL, "flow data", 10, NULL, IBV_SEND_INLINE) == 0 &&
	     rdma_get_send_comp(id, &wc) == 1 && wc.status == IBV_WC_SUCCESS, "data transfer: send");
	if (server_disconnects && !sync) {
		STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_DISCONNECTED,
		     "wait for the server's DISCONNECTED: %s", ev ? rdma_event_str(ev->event) : "none");
		STEP(rdma_ack_cm_event(ev) == 0, "ack");
		ev = NULL;
		STEP(rdma_disconnect(id) == 0, "rdma_disconnect (answer): %s", conf_errname(errno));
	} else {
		STEP(rdma_disconnect(id) == 0, "rdma_disconnect: %s", conf_errname(errno));
		if (!sync) {
			STEP((ev = h_get(ch, H_WAIT_MS)) && ev->event == RDMA_CM_EVENT_DISCONNECTED,
			     "wait for DISCONNECTED: %s", ev ? rdma_event_str(ev->event) : "none");
			STEP(rdma_ack_cm_event(ev) == 0, "ack");
			ev = NULL;
		}
	}
	rdma_destroy_qp(id);
	STEP(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s", conf_errname(errno));
	id = NULL;
	if (ch)
		rdma_destroy_event_channel(ch);
	ch = NULL;
	f->done = 1;
out:
	if (ev)
		rdma_ack_cm_event(ev);
	if (id) {
		if (id->qp)
			rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	if (ch)
		rdma_destroy_event_channel(ch);
	if (res)
		rdma_freeaddrinfo(res);
}

static void run_flows(const char *cid, const char *sid, uint16_t port, int sync, int server_disconnects)
{
	struct flow s = { .port = port, .server_disconnects = server_disconnects }, c = { .port = port };
	sem_init(&s.ready, 0, 0);
	pthread_t th;
	pthread_create(&th, NULL, server_flow, &s);
	sem_wait(&s.ready);
	client_flow(&c, sync, server_disconnects);
	pthread_join(th, NULL);
	if (cid)
		CLAUSE(cid, c.done, "client step failed: %s", c.fail);
	if (sid)
		CLAUSE(sid, s.done, "server step failed: %s", s.fail);
	sem_destroy(&s.ready);
}

int main(int argc, char **argv)
{
	conf_begin("rdma_cm.7", argc, argv);
	char err[256] = "";

	/* CLIENT OPERATION and SERVER OPERATION, asynchronous, the client disconnecting. */
	run_flows(CLAUSE_ID("CLIENT-FLOW"), CLAUSE_ID("SERVER-FLOW"), conf_port(0), 0, 0);
	/* CLIENT OPERATION: synchronous ids skip the channel and event calls. */
	run_flows(CLAUSE_ID("SYNC-FLOW"), NULL, conf_port(1), 1, 0);
	/* Either side may initiate the disconnect. */
	run_flows(CLAUSE_ID("EITHER-DISCONNECTS"), NULL, conf_port(2), 0, 1);

	/* RETURN CODES: success is 0; a failure is -1 with errno set (a positive errno, never a
	 * negative return), across calls. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *a = NULL, *b = NULL, *bad = NULL;
	struct sockaddr_in addr;
	h_sin(&addr, "127.0.0.1", conf_port(3));
	int z1 = rdma_create_id(ch, &a, NULL, RDMA_PS_TCP), z2 = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP);
	int z3 = a ? rdma_bind_addr(a, (struct sockaddr *)&addr) : -2;
	int z4 = a ? rdma_listen(a, 1) : -2;
	CLAUSE("RC-ZERO", z1 == 0 && z2 == 0 && z3 == 0 && z4 == 0, "create %d %d, bind %d, listen %d", z1, z2, z3, z4);
	struct { const char *what; int rc, e; } errs[4];
	errno = 0;
	errs[0].rc = b ? rdma_bind_addr(b, (struct sockaddr *)&addr) : -2;
	errs[0].e = errno, errs[0].what = "bind of a used address";
	errno = 0;
	errs[1].rc = b ? rdma_resolve_route(b, 100) : -2;
	errs[1].e = errno, errs[1].what = "route before address";
	errno = 0;
	errs[2].rc = rdma_create_id(ch, &bad, NULL, (enum rdma_port_space)0x7777);
	errs[2].e = errno, errs[2].what = "unknown port space";
	errno = 0;
	errs[3].rc = rdma_ack_cm_event(NULL);
	errs[3].e = errno, errs[3].what = "ack of no event";
	int all = 1;
	char msg[256] = "";
	for (int i = 0; i < 4; i++) {
		if (!(errs[i].rc == -1 && errs[i].e > 0)) {
			all = 0;
			snprintf(msg, sizeof msg, "%s: returned %d, errno %d", errs[i].what, errs[i].rc, errs[i].e);
		}
	}
	CLAUSE("RC-MINUS1-ERRNO", all, "%s", msg);
	/* RETURN CODES: for an asynchronous call 0 means "started"; the operation can still fail,
	 * as the event's status says (a connection to a port nobody listens on). */
	struct rdma_cm_id *c = NULL;
	struct sockaddr_in none;
	h_sin(&none, "127.0.0.1", conf_port(4));
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 2, 1);
	int ok = rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(c, NULL, (struct sockaddr *)&none, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		 rdma_resolve_route(c, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		 rdma_create_qp(c, NULL, &qa) == 0;
	int rc = ok ? rdma_connect(c, NULL) : -2;
	struct rdma_cm_event *ev = rc == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("RC-ASYNC-STARTED", rc == 0 && ev && ev->status != 0, "rdma_connect returned %d; its event %s, status %d",
	       rc, ev ? rdma_event_str(ev->event) : "(none)", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	struct rdma_cm_id *ids[] = { a, b, c };
	for (int i = 0; i < 3; i++) {
		if (!ids[i])
			continue;
		if (ids[i]->qp)
			rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	if (bad)
		rdma_destroy_id(bad);
	rdma_destroy_event_channel(ch);

	/* CLIENT OPERATION: "an almost identical process" sets up UD communication (no
	 * connection, so no disconnect): lookup, ESTABLISHED with the peer's UD data, a datagram. */
	struct ibv_qp_init_attr ua = h_qp_attr(IBV_QPT_UD, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .ps = RDMA_PS_UDP, .cli_qp = &ua };
	int ud = 0;
	if (h_pair_prepare(&p, conf_port(5), &o) == 0 && rdma_connect(p.cli, NULL) == 0) {
		struct rdma_cm_event *req = NULL, *est = NULL;
		if (h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, p.err, sizeof p.err) == 0) {
			p.srv = req->id;
			struct ibv_qp_init_attr ub = h_qp_attr(IBV_QPT_UD, 4, 1);
			static char rbuf[64 + 40];
			struct ibv_mr *mr = NULL;
			if (rdma_create_qp(p.srv, NULL, &ub) == 0 && (mr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf)) &&
			    rdma_post_recv(p.srv, NULL, rbuf, sizeof rbuf, mr) == 0 && rdma_accept(p.srv, NULL) == 0) {
				rdma_ack_cm_event(req);
				req = NULL;
				if (h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &est, p.err, sizeof p.err) == 0) {
					struct ibv_ah *ah = ibv_create_ah(p.cli->pd, &est->param.ud.ah_attr);
					struct ibv_wc wc;
					ud = ah && rdma_post_ud_send(p.cli, NULL, "ud", 3, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED,
								     ah, est->param.ud.qp_num) == 0 &&
					     rdma_get_recv_comp(p.srv, &wc) == 1 && wc.status == IBV_WC_SUCCESS &&
					     strcmp(rbuf + 40, "ud") == 0;
					h_poll(p.cli->send_cq, &wc, 200);
					if (ah)
						ibv_destroy_ah(ah);
					rdma_ack_cm_event(est);
				}
			}
			if (req)
				rdma_ack_cm_event(req);
			if (mr)
				rdma_dereg_mr(mr);
		}
	}
	CLAUSE("UD-FLOW", ud, "UD flow: %s", p.err[0] ? p.err : "no datagram");
	if (p.srv && p.srv->qp)
		rdma_destroy_qp(p.srv);
	if (p.srv) {
		rdma_destroy_id(p.srv);
		p.srv = NULL;
	}
	h_pair_close(&p);
	return conf_end();
}
