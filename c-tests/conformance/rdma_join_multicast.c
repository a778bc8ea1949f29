/* rdma_join_multicast(3): joins a group (id bound first), MULTICAST_JOIN carries the join
 * context in private_data and the group's UD data; the id's QP is attached when the event is
 * retrieved (without a QP the user attaches one). Not run on real devices (it would send IGMP). */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

#define GRH 40

int main(int argc, char **argv)
{
	conf_begin("rdma_join_multicast", argc, argv);
	if (conf_native())
		return conf_skip("multicast on a real device would leave the host (IGMP); loopback only");
	char err[256] = "";
	struct sockaddr_in grp;
	h_mcast_addr(&grp, 0);

	/* NOTES: the id must be bound to a device first: -1/errno otherwise. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle = NULL;
	int ok = rdma_create_id(ch, &idle, NULL, RDMA_PS_UDP) == 0;
	errno = 0;
	int rc = ok ? rdma_join_multicast(idle, (struct sockaddr *)&grp, NULL) : -2;
	CLAUSE("ERR-UNBOUND", rc == -1 && errno == EINVAL, "join on an unbound id: %d (%s)", rc, conf_errname(errno));
	if (idle)
		rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);

	struct h_ud rx, tx;
	int a = h_ud_open(&rx, 1), b = h_ud_open(&tx, 1);
	if (a || b) {
		const char *ids[] = { "RET-0", "EV-JOIN", "PARAM-CONTEXT", "PARAM-UD", "NOTE-AUTO-ATTACH",
				      "NOTE-MANUAL-ATTACH" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], a ? rx.err : tx.err);
		h_ud_close(&rx);
		h_ud_close(&tx);
		return conf_end();
	}
	static char rbuf[2][64 + GRH], sbuf[32] = "to the group";
	struct ibv_mr *rmr = rdma_reg_msgs(rx.id, rbuf, sizeof rbuf);
	int r = rmr ? rdma_post_recv(rx.id, NULL, rbuf[0], sizeof rbuf[0], rmr) : -2;
	int token;
	/* RETURN VALUE 0; DESCRIPTION: the group is joined, reported by MULTICAST_JOIN. */
	errno = 0;
	rc = rdma_join_multicast(rx.id, (struct sockaddr *)&grp, &token);
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	struct rdma_cm_event *ev = rc == 0 ? h_get(rx.ch, H_WAIT_MS) : NULL;
	CLAUSE("EV-JOIN", ev && ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && ev->status == 0 && ev->id == rx.id,
	       "event %s status %d", ev ? rdma_event_str(ev->event) : "(none)", ev ? ev->status : 0);
	/* NOTES: the join context comes back in private_data. */
	CLAUSE("PARAM-CONTEXT", ev && ev->param.ud.private_data == &token, "private_data %p, context %p",
	       ev ? ev->param.ud.private_data : NULL, (void *)&token);
	/* UD EVENT DATA: the group's QP number, qkey and an address to send to it. */
	struct ibv_ah *ah = ev ? ibv_create_ah(rx.id->pd, &ev->param.ud.ah_attr) : NULL;
	CLAUSE("PARAM-UD", ev && ev->param.ud.qp_num == 0xffffff && ev->param.ud.qkey == RDMA_UDP_QKEY && ah,
	       "qp_num 0x%x, qkey 0x%x, AH %p", ev ? ev->param.ud.qp_num : 0, ev ? ev->param.ud.qkey : 0, (void *)ah);
	if (ah)
		ibv_destroy_ah(ah);
	if (ev)
		rdma_ack_cm_event(ev);
	/* NOTES: with a QP on the id, it is attached to the group once the event is retrieved:
	 * another member's datagram to the group arrives. */
	int j = rdma_join_multicast(tx.id, (struct sockaddr *)&grp, NULL);
	struct rdma_cm_event *tev = j == 0 ? h_get(tx.ch, H_WAIT_MS) : NULL;
	struct ibv_ah *tah = tev && tev->event == RDMA_CM_EVENT_MULTICAST_JOIN ?
				     ibv_create_ah(tx.id->pd, &tev->param.ud.ah_attr) : NULL;
	uint32_t gqpn = tev ? tev->param.ud.qp_num : 0;
	if (tev)
		rdma_ack_cm_event(tev);
	int s = tah ? rdma_post_ud_send(tx.id, NULL, sbuf, 13, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED, tah, gqpn) : -2;
	struct ibv_wc wc;
	int n = r == 0 && s == 0 ? h_poll(rx.id->recv_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-AUTO-ATTACH", n == 1 && wc.status == IBV_WC_SUCCESS && memcmp(rbuf[0] + GRH, sbuf, 13) == 0,
	       "sender joined %d, AH %p, send %d; member's receive %d", j, (void *)tah, s, n);
	if (s == 0)
		h_poll(tx.id->send_cq, &wc, 200);

	/* NOTES: an id without a QP joins; the user attaches a QP with ibv_attach_mcast. */
	struct h_ud m;
	struct ibv_cq *cq = NULL;
	struct ibv_qp *own = NULL;
	int att = -2, got = -2;
	if (h_ud_open(&m, 0) == 0 && rdma_join_multicast(m.id, (struct sockaddr *)&grp, NULL) == 0 &&
	    (ev = h_get(m.ch, H_WAIT_MS)) != NULL) {
		union ibv_gid mgid = ev->param.ud.ah_attr.grh.dgid;
		uint16_t mlid = ev->param.ud.ah_attr.dlid;
		cq = ibv_create_cq(m.id->verbs, 4, NULL, NULL, 0);
		struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_UD, 4, 1);
		qa.send_cq = qa.recv_cq = cq;
		own = cq ? ibv_create_qp(m.id->pd, &qa) : NULL;
		struct ibv_qp_attr at = { .qp_state = IBV_QPS_INIT, .port_num = m.id->port_num, .qkey = RDMA_UDP_QKEY };
		if (own && ibv_modify_qp(own, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY) == 0) {
			at.qp_state = IBV_QPS_RTR;
			ibv_modify_qp(own, &at, IBV_QP_STATE);
			at.qp_state = IBV_QPS_RTS;
			ibv_modify_qp(own, &at, IBV_QP_STATE | IBV_QP_SQ_PSN);
			att = ibv_attach_mcast(own, &mgid, mlid);
		}
		rdma_ack_cm_event(ev);
		if (att == 0) {
			struct ibv_mr *mm = ibv_reg_mr(m.id->pd, rbuf[1], sizeof rbuf[1], IBV_ACCESS_LOCAL_WRITE);
			struct ibv_sge sg = { (uintptr_t)rbuf[1], sizeof rbuf[1], mm ? mm->lkey : 0 };
			struct ibv_recv_wr rw = { .sg_list = &sg, .num_sge = 1 }, *bad;
			if (mm && ibv_post_recv(own, &rw, &bad) == 0 &&
			    rdma_post_ud_send(tx.id, NULL, sbuf, 13, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED, tah, gqpn) == 0)
				got = h_poll(cq, &wc, H_WAIT_MS);
			h_poll(tx.id->send_cq, &wc, 200);
			ibv_detach_mcast(own, &mgid, mlid);
			if (mm)
				ibv_dereg_mr(mm);
		}
		rdma_leave_multicast(m.id, (struct sockaddr *)&grp);
	}
	CLAUSE("NOTE-MANUAL-ATTACH", att == 0 && got == 1, "ibv_attach_mcast %d; datagram received %d (%s)", att, got,
	       m.err);
	if (own)
		ibv_destroy_qp(own);
	if (cq)
		ibv_destroy_cq(cq);
	h_ud_close(&m);
	if (tah)
		ibv_destroy_ah(tah);
	rdma_leave_multicast(rx.id, (struct sockaddr *)&grp);
	rdma_leave_multicast(tx.id, (struct sockaddr *)&grp);
	if (rmr)
		rdma_dereg_mr(rmr);
	(void)err;
	h_ud_close(&rx);
	h_ud_close(&tx);
	return conf_end();
}
