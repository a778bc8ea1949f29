/* rdma_resolve_route(3): after rdma_resolve_addr, resolves the route (ROUTE_RESOLVED; on
 * InfiniBand-style transports a path record). */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_resolve_route", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL, *early = NULL;
	struct sockaddr_in dst, own;
	h_sin(&dst, "127.0.0.1", conf_port(0));
	h_sin(&own, "127.0.0.1", conf_port(1));

	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		 h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	errno = 0;
	int rc = ok ? rdma_resolve_route(id, 2000) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s) %s", rc, conf_errname(errno), ok ? "" : err);
	struct rdma_cm_event *ev = rc == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("EV-RESOLVED", ev && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && ev->status == 0 && ev->id == id,
	       "event %s status %d", ev ? rdma_event_str(ev->event) : "(none)", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	/* INFINIBAND SPECIFIC: a path record is obtained. */
	int ib = id && id->verbs && id->verbs->device->transport_type == IBV_TRANSPORT_IB;
	CLAUSE("IB-PATH", ev && (!ib || (id->route.num_paths >= 1 && id->route.path_rec != NULL)),
	       "transport IB %d: num_paths %d, path_rec %p", ib, id ? id->route.num_paths : -1,
	       id ? (void *)id->route.path_rec : NULL);

	/* DESCRIPTION: the destination must have been resolved first: -1/EINVAL otherwise (an id
	 * that is only bound to a local address). */
	ok = rdma_create_id(ch, &early, NULL, RDMA_PS_TCP) == 0 &&
	     rdma_bind_addr(early, (struct sockaddr *)&own) == 0;
	errno = 0;
	rc = ok ? rdma_resolve_route(early, 2000) : -2;
	CLAUSE("ERR-NO-ADDR", rc == -1 && errno == EINVAL, "route before address resolution: %d (%s)", rc,
	       conf_errname(errno));
	h_quiet(ch, 50, err, sizeof err);

	if (id)
		rdma_destroy_id(id);
	if (early)
		rdma_destroy_id(early);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
