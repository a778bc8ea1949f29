/* rdma_notify(3): tells the rdma_cm of a QP's communication-established event; it makes sure
 * ESTABLISHED is delivered (once); EISCONN just means "already connected". */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_notify", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa };

	/* NOTES: on the passive side after rdma_accept, the notification forces the connection
	 * established: exactly one ESTABLISHED is delivered. */
	if (h_pair_prepare(&p, conf_port(0), &o) != 0 || rdma_connect(p.cli, NULL) != 0) {
		CLAUSE_BLOCKED("NOTE-ESTABLISHED", p.err[0] ? p.err : "rdma_connect failed");
		CLAUSE_BLOCKED("RET-0", p.err[0] ? p.err : "rdma_connect failed");
		CLAUSE_BLOCKED("RET-EISCONN", p.err[0] ? p.err : "rdma_connect failed");
	} else {
		struct rdma_cm_event *req = NULL;
		int rc = -2, e = 0;
		struct ibv_qp_init_attr sa = qa;
		if (h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
			p.srv = req->id;
			if (rdma_create_qp(p.srv, NULL, &sa) == 0 && rdma_accept(p.srv, NULL) == 0) {
				errno = 0;
				rc = rdma_notify(p.srv, IBV_EVENT_COMM_EST);
				e = errno;
			}
			rdma_ack_cm_event(req);
		}
		/* RETURN VALUE: 0, or -1 with EISCONN when the connection was already made. */
		CLAUSE("RET-0", rc == 0 || (rc == -1 && e == EISCONN), "returned %d (%s)", rc, conf_errname(e));
		int est = 0;
		struct rdma_cm_event *ev;
		while ((ev = h_get(p.sch, est ? H_QUIET_MS : H_WAIT_MS)) != NULL) {
			est += ev->event == RDMA_CM_EVENT_ESTABLISHED;
			rdma_ack_cm_event(ev);
		}
		CLAUSE("NOTE-ESTABLISHED", est == 1, "passive side got %d ESTABLISHED event(s)", est);
		h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, err, sizeof err);
		/* Once connected, a late notification is 0 or the ignorable EISCONN. */
		errno = 0;
		rc = rdma_notify(p.cli, IBV_EVENT_COMM_EST);
		e = errno;
		int quiet = h_quiet(p.cch, H_QUIET_MS, err, sizeof err);
		CLAUSE("RET-EISCONN", (rc == 0 || (rc == -1 && e == EISCONN)) && quiet,
		       "on an established id: %d (%s); events afterwards: %s", rc, conf_errname(e),
		       quiet ? "none" : err);
	}
	h_pair_close(&p);

	/* RETURN VALUE: -1/errno for an id that has no device (and no connection) yet. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle = NULL;
	int ok = ch && rdma_create_id(ch, &idle, NULL, RDMA_PS_TCP) == 0;
	errno = 0;
	int rc = ok ? rdma_notify(idle, IBV_EVENT_COMM_EST) : -2;
	CLAUSE("ERR-UNBOUND", rc == -1 && errno == EINVAL, "on an id without a device: %d (%s)", rc,
	       conf_errname(errno));
	if (idle)
		rdma_destroy_id(idle);
	if (ch)
		rdma_destroy_event_channel(ch);
	return conf_end();
}
