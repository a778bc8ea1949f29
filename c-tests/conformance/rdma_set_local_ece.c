/* rdma_set_local_ece(3): for ids without a QP (external QPs): stores the ECE options sent in
 * the REQ/REP; 0 on success, -1/errno for an id with a QP or invalid options. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_set_local_ece", argc, argv);
	char err[256] = "";
	struct h_pair p;
	struct h_pair_opts o = { 0 };
	if (h_pair_prepare(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-0", "ERR-INVALID", "DESC-SENT", "ERR-QP" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	/* RETURN VALUE 0: valid options on an id without a QP (the documented flow: before
	 * rdma_connect). */
	struct ibv_ece ece = { .vendor_id = 0x2c9, .options = 0x5, .comp_mask = 0 };
	errno = 0;
	int rc = rdma_set_local_ece(p.cli, &ece);
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	/* RETURN VALUE -1/errno: options that cannot be valid (no vendor, unknown comp_mask). */
	struct ibv_ece nov = { .vendor_id = 0, .options = 1 }, mask = { .vendor_id = 0x2c9, .comp_mask = 1 };
	errno = 0;
	int r1 = rdma_set_local_ece(p.cli, &nov);
	int e1 = errno;
	errno = 0;
	int r2 = rdma_set_local_ece(p.cli, &mask);
	int e2 = errno;
	CLAUSE("ERR-INVALID", r1 == -1 && e1 == EINVAL && r2 == -1 && e2 == EINVAL,
	       "vendor_id 0: %d (%s); comp_mask 1: %d (%s)", r1, conf_errname(e1), r2, conf_errname(e2));
	/* DESCRIPTION: the options go to the peer with the connection request. */
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 2, 1);
	struct ibv_cq *cq = ibv_create_cq(p.cli->verbs, 2, NULL, NULL, 0);
	qa.send_cq = qa.recv_cq = cq;
	struct ibv_qp *own = cq ? ibv_create_qp(p.cli->pd, &qa) : NULL;
	struct rdma_conn_param cp = { .qp_num = own ? own->qp_num : 1, .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *req = NULL;
	struct ibv_ece got = { 0 };
	int g = -2;
	if (rdma_connect(p.cli, &cp) == 0 &&
	    h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0) {
		p.srv = req->id;
		g = rdma_get_remote_ece(req->id, &got);
		rdma_reject(req->id, NULL, 0);
		rdma_ack_cm_event(req);
		char e2[256];
		h_quiet(p.cch, 100, e2, sizeof e2);
	}
	CLAUSE("DESC-SENT", rc == 0 && g == 0 && got.vendor_id == 0x2c9 && got.options == 0x5,
	       "peer's rdma_get_remote_ece %d: vendor 0x%x options 0x%x (sent 0x2c9/0x5) %s", g, got.vendor_id,
	       got.options, err);
	/* RETURN VALUE -1/errno: not for ids with a QP (rdma_cm manages those). */
	struct rdma_cm_id *q = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	struct ibv_qp_init_attr qb = h_qp_attr(IBV_QPT_RC, 2, 1);
	int ok = rdma_create_id(p.cch, &q, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(q, (struct sockaddr *)&lo) == 0 &&
		 rdma_create_qp(q, NULL, &qb) == 0;
	errno = 0;
	int r3 = ok ? rdma_set_local_ece(q, &ece) : -2;
	CLAUSE("ERR-QP", r3 == -1 && errno == EINVAL, "on an id with a QP: %d (%s)", r3, conf_errname(errno));
	if (q) {
		if (q->qp)
			rdma_destroy_qp(q);
		rdma_destroy_id(q);
	}
	if (p.srv) {
		rdma_destroy_id(p.srv);
		p.srv = NULL;
	}
	h_pair_close(&p);
	if (own)
		ibv_destroy_qp(own);
	if (cq)
		ibv_destroy_cq(cq);
	return conf_end();
}
