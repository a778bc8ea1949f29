/* rdma_init_qp_attr(3): the attributes and mask to move a QP the rdma_cm does not manage to
 * INIT, RTR and RTS for the id's connection (as ibv_modify_qp takes them); 0 or -1/errno. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_init_qp_attr", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr sqa = h_qp_attr(IBV_QPT_RC, 4, 1);

	/* RETURN VALUE -1/errno for an id that is not bound to a device yet (EINVAL). */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle = NULL;
	struct ibv_qp_attr at;
	int mask = 0;
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_INIT;
	int ok = rdma_create_id(ch, &idle, NULL, RDMA_PS_TCP) == 0;
	errno = 0;
	int rc = ok ? rdma_init_qp_attr(idle, &at, &mask) : -2;
	CLAUSE("ERR-UNBOUND", rc == -1 && errno == EINVAL, "idle id: %d (%s)", rc, conf_errname(errno));
	if (idle)
		rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);

	/* The rping -q flow: own QP, INIT before connecting, RTR and RTS after CONNECT_RESPONSE. */
	struct h_pair p;
	struct h_pair_opts o = { .srv_qp = &sqa };
	struct ibv_cq *cq = NULL;
	struct ibv_qp *own = NULL;
	ok = h_pair_prepare(&p, conf_port(0), &o) == 0;
	if (ok) {
		cq = ibv_create_cq(p.cli->verbs, 8, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
		qa.send_cq = qa.recv_cq = cq;
		own = cq ? ibv_create_qp(p.cli->pd, &qa) : NULL;
		ok = own != NULL;
	}
	if (!ok) {
		const char *ids[] = { "RET-0", "INIT-MASK", "RTR-MASK", "RTS-MASK", "DESC-USABLE" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err[0] ? p.err : "own QP");
		h_pair_close(&p);
		return conf_end();
	}
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_INIT;
	errno = 0;
	rc = rdma_init_qp_attr(p.cli, &at, &mask);
	CLAUSE("RET-0", rc == 0, "INIT attributes: %d (%s)", rc, conf_errname(errno));
	int need = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	int m1 = rc == 0 ? ibv_modify_qp(own, &at, mask) : -2;
	CLAUSE("INIT-MASK", rc == 0 && (mask & need) == need && at.port_num == p.cli->port_num && m1 == 0,
	       "mask 0x%x (needs 0x%x), port %u, ibv_modify_qp %d", mask, need, at.port_num, m1);

	struct rdma_conn_param cp = { .qp_num = own->qp_num, .retry_count = 7, .rnr_retry_count = 7,
				      .responder_resources = 1, .initiator_depth = 1 };
	struct rdma_cm_event *req = NULL;
	int connected = rdma_connect(p.cli, &cp) == 0 &&
			h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, err, sizeof err) == 0;
	if (connected) {
		p.srv = req->id;
		struct ibv_qp_init_attr a = sqa;
		connected = rdma_create_qp(p.srv, NULL, &a) == 0 && rdma_accept(p.srv, NULL) == 0;
		rdma_ack_cm_event(req);
		connected = connected &&
			    h_expect(p.cch, RDMA_CM_EVENT_CONNECT_RESPONSE, H_WAIT_MS, NULL, err, sizeof err) == 0;
	}
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_RTR;
	mask = 0;
	rc = connected ? rdma_init_qp_attr(p.cli, &at, &mask) : -2;
	need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	int m2 = rc == 0 ? ibv_modify_qp(own, &at, mask) : -2;
	CLAUSE("RTR-MASK", rc == 0 && (mask & need) == need && p.srv && at.dest_qp_num == p.srv->qp->qp_num && m2 == 0,
	       "connected %d (%s); RTR %d: mask 0x%x (needs 0x%x), dest_qp_num 0x%x, ibv_modify_qp %d", connected,
	       err, rc, mask, need, at.dest_qp_num, m2);
	memset(&at, 0, sizeof at);
	at.qp_state = IBV_QPS_RTS;
	mask = 0;
	rc = m2 == 0 ? rdma_init_qp_attr(p.cli, &at, &mask) : -2;
	need = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	       IBV_QP_MAX_QP_RD_ATOMIC;
	int m3 = rc == 0 ? ibv_modify_qp(own, &at, mask) : -2;
	CLAUSE("RTS-MASK", rc == 0 && (mask & need) == need && m3 == 0, "RTS %d: mask 0x%x (needs 0x%x), "
	       "ibv_modify_qp %d", rc, mask, need, m3);
	/* With those attributes the QP carries the connection's traffic. */
	int est = m3 == 0 && rdma_establish(p.cli) == 0 &&
		  h_expect(p.sch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	static char rbuf[32];
	struct ibv_mr *rmr = est ? rdma_reg_msgs(p.srv, rbuf, sizeof rbuf) : NULL;
	int r = rmr ? rdma_post_recv(p.srv, NULL, rbuf, sizeof rbuf, rmr) : -2;
	struct ibv_sge sg = { (uintptr_t)"own QP", 7, 0 };
	struct ibv_send_wr wr = { .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED }, *bad;
	int s = r == 0 ? ibv_post_send(own, &wr, &bad) : -2;
	struct ibv_wc wc;
	int n = s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("DESC-USABLE", n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(rbuf, "own QP") == 0,
	       "established %d; send %d; receive %d", est, s, n);
	if (s == 0)
		h_poll(cq, &wc, 200);
	if (rmr)
		rdma_dereg_mr(rmr);
	h_pair_close(&p);
	ibv_destroy_qp(own);
	ibv_destroy_cq(cq);
	return conf_end();
}
