/* rdma_listen(3): listens for connection requests on the bound address: a specific address
 * restricts the listen to it, a port-only (wildcard) bind listens everywhere. */
#include "cmhelp.h"

/* A client id on its own channel, resolved to (family, port) and connecting. */
static int dial(struct rdma_event_channel *ch, struct rdma_cm_id **id, int v6, uint16_t port,
		char *err, size_t len)
{
	struct sockaddr_storage ss;
	if (v6)
		h_sin6((struct sockaddr_in6 *)&ss, "::1", port);
	else
		h_sin((struct sockaddr_in *)&ss, "127.0.0.1", port);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 2, 1);
	if (rdma_create_id(ch, id, NULL, RDMA_PS_TCP) != 0 ||
	    rdma_resolve_addr(*id, NULL, (struct sockaddr *)&ss, 2000) != 0 ||
	    h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, len) != 0 ||
	    rdma_resolve_route(*id, 2000) != 0 ||
	    h_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, len) != 0 ||
	    rdma_create_qp(*id, NULL, &qa) != 0)
		return -1;
	return rdma_connect(*id, NULL);
}

static void drop(struct rdma_cm_id **id)
{
	if (*id) {
		if ((*id)->qp)
			rdma_destroy_qp(*id);
		rdma_destroy_id(*id);
		*id = NULL;
	}
}

int main(int argc, char **argv)
{
	conf_begin("rdma_listen", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *lch = rdma_create_event_channel(), *cch = rdma_create_event_channel();
	struct rdma_cm_id *l = NULL, *c = NULL, *w = NULL, *bad = NULL;
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));

	/* RETURN VALUE 0; DESCRIPTION: requests to the address arrive as CONNECT_REQUEST. */
	int ok = rdma_create_id(lch, &l, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(l, (struct sockaddr *)&a) == 0;
	errno = 0;
	int rc = ok ? rdma_listen(l, 4) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	int d = rc == 0 ? dial(cch, &c, 0, conf_port(0), err, sizeof err) : -2;
	struct rdma_cm_event *ev = d == 0 ? h_get(lch, H_WAIT_MS) : NULL;
	CLAUSE("DESC-REQUEST", ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l &&
	       ev->id != l, "connect %d (%s); listener event %s, listen_id %s", d, err,
	       ev ? rdma_event_str(ev->event) : "(none)", ev && ev->listen_id == l ? "ok" : "wrong");
	if (ev) {
		rdma_reject(ev->id, NULL, 0);
		struct rdma_cm_id *nid = ev->id;
		rdma_ack_cm_event(ev);
		rdma_destroy_id(nid);
	}
	h_quiet(cch, 100, err, sizeof err);
	drop(&c);

	/* NOTES: a listen on a specific address is restricted to it: a request for [::1] on the
	 * same port does not reach a 127.0.0.1 listener (the connecting side is turned away). */
	d = rc == 0 ? dial(cch, &c, 1, conf_port(0), err, sizeof err) : -2;
	struct rdma_cm_event *cev = d == 0 ? h_get(cch, H_WAIT_MS) : NULL;
	int quiet = h_quiet(lch, H_QUIET_MS, err, sizeof err);
	CLAUSE("NOTE-RESTRICTED", d == 0 && quiet && cev &&
	       (cev->event == RDMA_CM_EVENT_REJECTED || cev->event == RDMA_CM_EVENT_UNREACHABLE),
	       "listener %s; the [::1] client got %s", quiet ? "quiet" : err,
	       cev ? rdma_event_str(cev->event) : "no event");
	if (cev)
		rdma_ack_cm_event(cev);
	drop(&c);
	drop(&l);

	/* NOTES: bound to a port only (wildcard address), the listen covers every device and
	 * address: requests to 127.0.0.1 and to [::1] both arrive. */
	struct sockaddr_in6 any6;
	h_sin6(&any6, "::", conf_port(1));
	ok = rdma_create_id(lch, &w, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(w, (struct sockaddr *)&any6) == 0 &&
	     rdma_listen(w, 4) == 0;
	int got = 0;
	for (int v6 = 0; ok && v6 <= 1; v6++) {
		if (dial(cch, &c, v6, conf_port(1), err, sizeof err) != 0)
			break;
		ev = h_get(lch, H_WAIT_MS);
		if (ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == w)
			got++;
		if (ev) {
			struct rdma_cm_id *nid = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->id : NULL;
			if (nid)
				rdma_reject(nid, NULL, 0);
			rdma_ack_cm_event(ev);
			if (nid)
				rdma_destroy_id(nid);
		}
		h_quiet(cch, 100, err, sizeof err);
		drop(&c);
	}
	CLAUSE("NOTE-WILDCARD", ok && got == 2, "wildcard listener set up %d, requests received %d of 2", ok,
	       got);
	drop(&w);

	/* RETURN VALUE: -1 and errno for an id that cannot listen (address already resolved). */
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(2));
	ok = rdma_create_id(cch, &bad, NULL, RDMA_PS_TCP) == 0 &&
	     rdma_resolve_addr(bad, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
	     h_expect(cch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	errno = 0;
	rc = ok ? rdma_listen(bad, 4) : -2;
	CLAUSE("ERR-STATE", rc == -1 && errno == EINVAL, "listen after resolve_addr: %d (%s)", rc,
	       conf_errname(errno));
	drop(&bad);

	rdma_destroy_event_channel(lch);
	rdma_destroy_event_channel(cch);
	return conf_end();
}
