/* rdma_reject(3): rejects a connection request (the active side gets REJECTED with the
 * transport's reason and our private data), or a datagram lookup (UNREACHABLE). */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_reject", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa };

	if (h_pair_prepare(&p, conf_port(0), &o) != 0 || rdma_connect(p.cli, NULL) != 0) {
		const char *ids[] = { "ERR-LISTENER", "RET-0", "EV-REJECTED", "REJ-REASON", "PRIV-DATA" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err[0] ? p.err : "rdma_connect failed");
	} else {
		struct rdma_cm_event *req = NULL;
		h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err);
		if (req)
			p.srv = req->id;
		/* RETURN VALUE: -1/errno: a listening id has no request to reject. */
		errno = 0;
		int rc = rdma_reject(p.listen, NULL, 0);
		CLAUSE("ERR-LISTENER", rc == -1 && errno == EINVAL, "reject on the listener: %d (%s)", rc,
		       conf_errname(errno));
		/* NOTES: after a request, rdma_reject (with private data) returns 0 ... */
		const char msg[] = "not now, thanks";
		errno = 0;
		rc = req ? rdma_reject(req->id, msg, sizeof msg) : -2;
		CLAUSE("RET-0", rc == 0, "returned %d (%s) %s", rc, conf_errname(errno), req ? "" : err);
		if (req)
			rdma_ack_cm_event(req);
		/* ... the active side is told with REJECTED, carrying the transport's reason ... */
		struct rdma_cm_event *ev = rc == 0 ? h_get(p.cch, H_WAIT_MS) : NULL;
		CLAUSE("EV-REJECTED", ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == p.cli,
		       "client event %s", ev ? rdma_event_str(ev->event) : "(none)");
		int ib = p.cli->verbs && p.cli->verbs->device->transport_type == IBV_TRANSPORT_IB;
		/* rdma_get_cm_event(3): under InfiniBand the status is the REJ reason: consumer
		 * reject (28) */
		CLAUSE("REJ-REASON", ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status != 0 &&
		       (!ib || ev->status == 28), "REJECTED status %d (IB transport %d: expected 28)",
		       ev ? ev->status : 0, ib);
		/* ... and the private data, since the transport carries it in the reject. */
		const struct rdma_conn_param *c = ev ? &ev->param.conn : NULL;
		CLAUSE("PRIV-DATA", c && c->private_data && c->private_data_len >= sizeof msg &&
		       memcmp(c->private_data, msg, sizeof msg) == 0, "REJECTED private data %p, length %u",
		       c ? c->private_data : NULL, c ? c->private_data_len : 0);
		if (ev)
			rdma_ack_cm_event(ev);
		if (p.srv) {
			rdma_destroy_id(p.srv);
			p.srv = NULL;
		}
	}
	h_pair_close(&p);

	/* DESCRIPTION: a datagram service lookup (RDMA_PS_UDP) can be rejected too: the active
	 * side gets UNREACHABLE with a non-zero status. */
	struct ibv_qp_init_attr ua = h_qp_attr(IBV_QPT_UD, 4, 1);
	struct h_pair_opts o2 = { .ps = RDMA_PS_UDP, .cli_qp = &ua };
	if (h_pair_prepare(&p, conf_port(1), &o2) != 0 || rdma_connect(p.cli, NULL) != 0) {
		CLAUSE_BLOCKED("UD-REJECT", p.err[0] ? p.err : "rdma_connect failed");
	} else {
		struct rdma_cm_event *req = NULL, *ev = NULL;
		int rc = -2;
		if (h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
			p.srv = req->id;
			rc = rdma_reject(req->id, NULL, 0);
			rdma_ack_cm_event(req);
			ev = h_get(p.cch, H_WAIT_MS);
		}
		CLAUSE("UD-REJECT", rc == 0 && ev && ev->event == RDMA_CM_EVENT_UNREACHABLE && ev->status != 0,
		       "reject %d; client event %s status %d", rc, ev ? rdma_event_str(ev->event) : "(none)",
		       ev ? ev->status : 0);
		if (ev)
			rdma_ack_cm_event(ev);
		if (p.srv) {
			rdma_destroy_id(p.srv);
			p.srv = NULL;
		}
	}
	h_pair_close(&p);
	return conf_end();
}
