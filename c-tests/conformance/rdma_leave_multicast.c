/* rdma_leave_multicast(3): leaves a joined group (the QP is detached: group messages stop
 * arriving); a group not joined is an error; destroying the id leaves all its groups. Not run
 * on real devices (it would send IGMP). */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

#define GRH 40

int main(int argc, char **argv)
{
	conf_begin("rdma_leave_multicast", argc, argv);
	if (conf_native())
		return conf_skip("multicast on a real device would leave the host (IGMP); loopback only");
	struct sockaddr_in grp, other;
	h_mcast_addr(&grp, 0);
	h_mcast_addr(&other, 1);
	struct h_ud rx, tx;
	int a = h_ud_open(&rx, 1), b = h_ud_open(&tx, 1);
	if (a || b) {
		const char *ids[] = { "ERR-NOT-JOINED", "RET-0", "DESC-DETACH", "NOTE-DESTROY-LEAVES" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], a ? rx.err : tx.err);
		h_ud_close(&rx);
		h_ud_close(&tx);
		return conf_end();
	}
	/* RETURN VALUE -1/errno: a group that was not joined (EADDRNOTAVAIL). */
	errno = 0;
	int rc = rdma_leave_multicast(rx.id, (struct sockaddr *)&other);
	CLAUSE("ERR-NOT-JOINED", rc == -1 && errno == EADDRNOTAVAIL, "leave of a group never joined: %d (%s)", rc,
	       conf_errname(errno));
	/* RETURN VALUE 0; DESCRIPTION: the QP is detached: the group's messages stop arriving. */
	static char rbuf[64 + GRH];
	struct ibv_mr *mr = rdma_reg_msgs(rx.id, rbuf, sizeof rbuf);
	int r = mr ? rdma_post_recv(rx.id, NULL, rbuf, sizeof rbuf, mr) : -2;
	struct rdma_cm_event *e1 = NULL, *e2 = NULL;
	int j = rdma_join_multicast(rx.id, (struct sockaddr *)&grp, NULL) == 0 && (e1 = h_get(rx.ch, H_WAIT_MS)) &&
		rdma_join_multicast(tx.id, (struct sockaddr *)&grp, NULL) == 0 && (e2 = h_get(tx.ch, H_WAIT_MS));
	struct ibv_ah *ah = j ? ibv_create_ah(tx.id->pd, &e2->param.ud.ah_attr) : NULL;
	uint32_t qpn = e2 ? e2->param.ud.qp_num : 0;
	if (e1)
		rdma_ack_cm_event(e1);
	if (e2)
		rdma_ack_cm_event(e2);
	errno = 0;
	rc = j ? rdma_leave_multicast(rx.id, (struct sockaddr *)&grp) : -2;
	CLAUSE("RET-0", rc == 0, "joined %d; leave returned %d (%s)", j, rc, conf_errname(errno));
	int s = ah ? rdma_post_ud_send(tx.id, NULL, "after leaving", 14, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED, ah,
				       qpn) : -2;
	struct ibv_wc wc;
	int n = r == 0 && s == 0 ? h_poll(rx.id->recv_cq, &wc, H_QUIET_MS) : -2;
	CLAUSE("DESC-DETACH", rc == 0 && s == 0 && n == 0, "send to the group %d; the former member received %d (want 0)",
	       s, n);
	h_poll(tx.id->send_cq, &wc, 200);
	if (ah)
		ibv_destroy_ah(ah);
	if (mr)
		rdma_dereg_mr(mr);
	/* NOTES: destroying an id leaves all its groups (no explicit leave needed). */
	long long t0 = h_now_ms();
	if (tx.id->qp)
		rdma_destroy_qp(tx.id);
	int d = rdma_destroy_id(tx.id);
	tx.id = NULL;
	long long took = h_now_ms() - t0;
	struct rdma_cm_id *again = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int rj = rdma_create_id(tx.ch, &again, NULL, RDMA_PS_UDP) == 0 && rdma_bind_addr(again, (struct sockaddr *)&lo) == 0 ?
			 rdma_join_multicast(again, (struct sockaddr *)&grp, NULL) : -2;
	struct rdma_cm_event *e3 = rj == 0 ? h_get(tx.ch, H_WAIT_MS) : NULL;
	CLAUSE("NOTE-DESTROY-LEAVES", j && d == 0 && took < H_NOBLOCK_MS && e3 && e3->event == RDMA_CM_EVENT_MULTICAST_JOIN,
	       "destroy of a joined id %d in %lld ms; a new member joins the group: %s", d, took,
	       e3 ? rdma_event_str(e3->event) : "no event");
	if (e3)
		rdma_ack_cm_event(e3);
	if (again) {
		rdma_leave_multicast(again, (struct sockaddr *)&grp);
		rdma_destroy_id(again);
	}
	h_ud_close(&rx);
	h_ud_close(&tx);
	return conf_end();
}
