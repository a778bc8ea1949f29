/* rdma_establish(3): an active id without a QP gets CONNECT_RESPONSE and completes the
 * connection with rdma_establish, which makes the passive side's ESTABLISHED; not for ids
 * with a QP. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_establish", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { 0 };

	/* The application's own QP (not on the id), announced through conn_param.qp_num. */
	struct ibv_qp *own = NULL;
	struct ibv_cq *cq = NULL;
	int ok = h_pair_prepare(&p, conf_port(0), &o) == 0;
	if (ok) {
		cq = ibv_create_cq(p.cli->verbs, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr a = qa;
		a.send_cq = a.recv_cq = cq;
		own = cq ? ibv_create_qp(p.cli->pd, &a) : NULL;
		ok = own != NULL;
		if (!ok)
			snprintf(p.err, sizeof p.err, "ibv_create_qp: %s", conf_errname(errno));
	}
	struct rdma_conn_param cp = { .qp_num = own ? own->qp_num : 0, .retry_count = 7, .rnr_retry_count = 7 };
	if (!ok || rdma_connect(p.cli, &cp) != 0) {
		const char *ids[] = { "DESC-RESPONSE", "NOTE-PASSIVE-WAITS", "RET-0", "NOTE-PASSIVE-EST", "ERR-QP" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err[0] ? p.err : "rdma_connect failed");
	} else {
		struct rdma_cm_event *req = NULL;
		struct ibv_qp_init_attr sa = qa;
		if (h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
			p.srv = req->id;
			if (rdma_create_qp(p.srv, NULL, &sa) != 0 || rdma_accept(p.srv, NULL) != 0)
				snprintf(err, sizeof err, "server accept: %s", conf_errname(errno));
			rdma_ack_cm_event(req);
		}
		/* DESCRIPTION: the active side (no QP on the id) gets a connect response event. */
		struct rdma_cm_event *ev = h_get(p.cch, H_WAIT_MS);
		CLAUSE("DESC-RESPONSE", ev && ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE && ev->status == 0,
		       "client event %s (%s)", ev ? rdma_event_str(ev->event) : "(none)", err);
		if (ev)
			rdma_ack_cm_event(ev);
		/* Until rdma_establish, the passive side is not established. */
		int quiet = h_quiet(p.sch, H_QUIET_MS, err, sizeof err);
		CLAUSE("NOTE-PASSIVE-WAITS", quiet, "passive side before rdma_establish: %s", err);
		errno = 0;
		int rc = rdma_establish(p.cli);
		CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
		/* DESCRIPTION: this triggers ESTABLISHED on the passive side. */
		ev = h_get(p.sch, H_WAIT_MS);
		CLAUSE("NOTE-PASSIVE-EST", ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == p.srv,
		       "server event %s", ev ? rdma_event_str(ev->event) : "(none)");
		if (ev)
			rdma_ack_cm_event(ev);
		/* NOTES: not to be used on an id with a QP (the passive id has one): -1/EINVAL. */
		errno = 0;
		rc = rdma_establish(p.srv);
		CLAUSE("ERR-QP", rc == -1 && errno == EINVAL, "on an id with a QP: %d (%s)", rc, conf_errname(errno));
	}
	h_pair_close(&p);
	if (own)
		ibv_destroy_qp(own);
	if (cq)
		ibv_destroy_cq(cq);
	return conf_end();
}
