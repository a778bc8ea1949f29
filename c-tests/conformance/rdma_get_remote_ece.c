/* rdma_get_remote_ece(3): on the passive side, before replying, the ECE options the peer
 * sent; for ids without a QP; 0 or -1/errno. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_get_remote_ece", argc, argv);
	char err[256] = "";
	struct h_pair p;
	struct h_pair_opts o = { 0 };
	struct ibv_cq *cq = NULL;
	struct ibv_qp *own = NULL;
	int ok = h_pair_prepare(&p, conf_port(0), &o) == 0;
	if (ok) {
		cq = ibv_create_cq(p.cli->verbs, 2, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 2, 1);
		qa.send_cq = qa.recv_cq = cq;
		own = cq ? ibv_create_qp(p.cli->pd, &qa) : NULL;
	}
	struct ibv_ece mine = { .vendor_id = 0x15b3, .options = 0x3 };
	int set = ok ? rdma_set_local_ece(p.cli, &mine) : -2;
	struct rdma_conn_param cp = { .qp_num = own ? own->qp_num : 1, .retry_count = 7, .rnr_retry_count = 7 };
	struct rdma_cm_event *req = NULL;
	if (!ok || !own || rdma_connect(p.cli, &cp) != 0 ||
	    h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) != 0) {
		CLAUSE_BLOCKED("RET-0", p.err[0] ? p.err : err);
		CLAUSE_BLOCKED("DESC-PEER-OPTIONS", p.err[0] ? p.err : err);
		CLAUSE_BLOCKED("ERR-QP", p.err[0] ? p.err : err);
	} else {
		p.srv = req->id;
		/* RETURN VALUE 0, DESCRIPTION: the options the peer sent (its rdma_set_local_ece). */
		struct ibv_ece got = { .comp_mask = 7 };
		errno = 0;
		int rc = rdma_get_remote_ece(req->id, &got);
		CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
		CLAUSE("DESC-PEER-OPTIONS", rc == 0 && set == 0 && got.vendor_id == 0x15b3 && got.options == 0x3 &&
		       got.comp_mask == 0, "peer set %d; got vendor 0x%x options 0x%x comp_mask %u", set, got.vendor_id,
		       got.options, got.comp_mask);
		/* -1/errno on an id with a QP. */
		struct ibv_qp_init_attr sa = h_qp_attr(IBV_QPT_RC, 2, 1);
		int q = rdma_create_qp(req->id, NULL, &sa);
		errno = 0;
		int r2 = q == 0 ? rdma_get_remote_ece(req->id, &got) : -2;
		CLAUSE("ERR-QP", r2 == -1 && errno == EINVAL, "on an id with a QP: %d (%s)", r2, conf_errname(errno));
		rdma_reject(req->id, NULL, 0);
		rdma_ack_cm_event(req);
		h_quiet(p.cch, 100, err, sizeof err);
		if (p.srv->qp)
			rdma_destroy_qp(p.srv);
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
