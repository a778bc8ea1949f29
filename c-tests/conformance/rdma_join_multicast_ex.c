/* rdma_join_multicast_ex(3): a join with a comp_mask (address, join flags): full member (sends
 * and receives) or send-only full member (its QP is not attached); invalid masks and flags are
 * refused. Not run on real devices (it would send IGMP). */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

#define GRH 40

int main(int argc, char **argv)
{
	conf_begin("rdma_join_multicast_ex", argc, argv);
	if (conf_native())
		return conf_skip("multicast on a real device would leave the host (IGMP); loopback only");
	struct sockaddr_in grp;
	h_mcast_addr(&grp, 0);
	struct h_ud full, so;
	int a = h_ud_open(&full, 1), b = h_ud_open(&so, 1);
	if (a || b) {
		const char *ids[] = { "ERR-COMP-MASK", "ERR-NO-ADDRESS", "ERR-FLAGS", "RET-0", "FULLMEMBER",
				      "SENDONLY" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], a ? full.err : so.err);
		h_ud_close(&full);
		h_ud_close(&so);
		return conf_end();
	}
	/* RETURN VALUE -1/errno: a comp_mask with unknown bits (ENOTSUP), no address (EINVAL), a
	 * join flag that does not exist (EINVAL). */
	struct rdma_cm_join_mc_attr_ex x = { .comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS |
							 RDMA_CM_JOIN_MC_ATTR_RESERVED,
					     .join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER, .addr = (struct sockaddr *)&grp };
	errno = 0;
	int rc = rdma_join_multicast_ex(full.id, &x, NULL);
	CLAUSE("ERR-COMP-MASK", rc == -1 && errno == ENOTSUP, "reserved comp_mask bit: %d (%s)", rc, conf_errname(errno));
	x.comp_mask = RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	errno = 0;
	rc = rdma_join_multicast_ex(full.id, &x, NULL);
	CLAUSE("ERR-NO-ADDRESS", rc == -1 && errno == EINVAL, "no address bit: %d (%s)", rc, conf_errname(errno));
	x.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	x.join_flags = RDMA_MC_JOIN_FLAG_RESERVED;
	errno = 0;
	rc = rdma_join_multicast_ex(full.id, &x, NULL);
	CLAUSE("ERR-FLAGS", rc == -1 && errno == EINVAL, "join flag %d: %d (%s)", RDMA_MC_JOIN_FLAG_RESERVED, rc,
	       conf_errname(errno));

	/* RETURN VALUE 0; FULLMEMBER: receives the group's messages. */
	static char rbuf[2][64 + GRH];
	struct ibv_mr *fm = rdma_reg_msgs(full.id, rbuf[0], sizeof rbuf[0]);
	struct ibv_mr *sm = rdma_reg_msgs(so.id, rbuf[1], sizeof rbuf[1]);
	int r1 = fm ? rdma_post_recv(full.id, NULL, rbuf[0], sizeof rbuf[0], fm) : -2;
	int r2 = sm ? rdma_post_recv(so.id, NULL, rbuf[1], sizeof rbuf[1], sm) : -2;
	x.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	int ctx;
	errno = 0;
	rc = rdma_join_multicast_ex(full.id, &x, &ctx);
	struct rdma_cm_event *ev = rc == 0 ? h_get(full.ch, H_WAIT_MS) : NULL;
	CLAUSE("RET-0", rc == 0 && ev && ev->event == RDMA_CM_EVENT_MULTICAST_JOIN && ev->param.ud.private_data == &ctx,
	       "full member join %d (%s), event %s", rc, conf_errname(errno), ev ? rdma_event_str(ev->event) : "(none)");
	if (ev)
		rdma_ack_cm_event(ev);
	/* SENDONLY_FULLMEMBER: can send to the group, but its QP is not attached. */
	struct rdma_cm_join_mc_attr_ex y = x;
	y.join_flags = RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER;
	int rs = rdma_join_multicast_ex(so.id, &y, NULL);
	struct rdma_cm_event *sev = rs == 0 ? h_get(so.ch, H_WAIT_MS) : NULL;
	struct ibv_ah *ah = sev && sev->event == RDMA_CM_EVENT_MULTICAST_JOIN ?
				    ibv_create_ah(so.id->pd, &sev->param.ud.ah_attr) : NULL;
	uint32_t qpn = sev ? sev->param.ud.qp_num : 0;
	if (sev)
		rdma_ack_cm_event(sev);
	int s = ah ? rdma_post_ud_send(so.id, NULL, "from a send-only member", 24, NULL,
				       IBV_SEND_INLINE | IBV_SEND_SIGNALED, ah, qpn) : -2;
	struct ibv_wc wc;
	int nf = r1 == 0 && s == 0 ? h_poll(full.id->recv_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("FULLMEMBER", nf == 1 && wc.status == IBV_WC_SUCCESS && strcmp(rbuf[0] + GRH, "from a send-only member") == 0,
	       "send-only join %d, send %d; full member received %d", rs, s, nf);
	h_poll(so.id->send_cq, &wc, 200);
	/* the full member sends: the send-only member's QP gets nothing */
	struct rdma_cm_event *fev = NULL;
	struct ibv_ah *fah = NULL;
	int f2 = rdma_leave_multicast(full.id, (struct sockaddr *)&grp) == 0 &&
		 rdma_join_multicast(full.id, (struct sockaddr *)&grp, NULL) == 0 && (fev = h_get(full.ch, H_WAIT_MS)) &&
		 (fah = ibv_create_ah(full.id->pd, &fev->param.ud.ah_attr));
	if (fev)
		rdma_ack_cm_event(fev);
	int s2 = f2 ? rdma_post_ud_send(full.id, NULL, "to everyone", 12, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED, fah,
					qpn) : -2;
	int ns = r2 == 0 && s2 == 0 ? h_poll(so.id->recv_cq, &wc, H_QUIET_MS) : -2;
	CLAUSE("SENDONLY", rs == 0 && s == 0 && s2 == 0 && ns == 0, "send-only member: join %d, its send %d; a group "
	       "message reached its QP: %d (want 0)", rs, s, ns);
	if (ah)
		ibv_destroy_ah(ah);
	if (fah)
		ibv_destroy_ah(fah);
	rdma_leave_multicast(full.id, (struct sockaddr *)&grp);
	rdma_leave_multicast(so.id, (struct sockaddr *)&grp);
	if (fm)
		rdma_dereg_mr(fm);
	if (sm)
		rdma_dereg_mr(sm);
	h_ud_close(&full);
	h_ud_close(&so);
	return conf_end();
}
