/* ibv_query_qp(3): the QP's attributes (those set with ibv_modify_qp) and its init
 * attributes; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_qp", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	memset(&a, 0xa5, sizeof a);
	memset(&ia, 0xa5, sizeof ia);
	int all = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_AV | IBV_QP_PATH_MTU |
		  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
		  IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_CAP;
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_query_qp(p.qp[0], &a, all, &ia);
	CLAUSE("RET-0", rc == 0, "ibv_query_qp returned %d (%s)", rc, conf_errname(rc));
	/* NOTES: attributes set with ibv_modify_qp come back (the helper's INIT/RTR/RTS values). */
	CLAUSE("DESC-STATE", rc == 0 && a.qp_state == IBV_QPS_RTS, "qp_state %d", a.qp_state);
	CLAUSE("DESC-SET-VALUES",
	       rc == 0 && a.port_num == 1 && a.qp_access_flags == (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) &&
		       a.path_mtu == IBV_MTU_1024 && a.dest_qp_num == p.qp[1]->qp_num && a.rq_psn == 0 && a.sq_psn == 0 &&
		       a.max_dest_rd_atomic == 1 && a.min_rnr_timer == 1 && a.timeout == 14 && a.retry_cnt == 7 &&
		       a.rnr_retry == 7 && a.max_rd_atomic == 1 && a.pkey_index == 0,
	       "port %u access 0x%x mtu %d dest 0x%x rq_psn %u sq_psn %u dest_rd %u rnr_timer %u timeout %u retry %u "
	       "rnr_retry %u rd_atomic %u",
	       a.port_num, a.qp_access_flags, a.path_mtu, a.dest_qp_num, a.rq_psn, a.sq_psn, a.max_dest_rd_atomic,
	       a.min_rnr_timer, a.timeout, a.retry_cnt, a.rnr_retry, a.max_rd_atomic);
	/* The address vector set at RTR: the GID and port. */
	CLAUSE("DESC-AV", rc == 0 && a.ah_attr.is_global && memcmp(&a.ah_attr.grh.dgid, &d.gid, 16) == 0 &&
				  a.ah_attr.port_num == 1,
	       "ah_attr: is_global %u port %u", a.ah_attr.is_global, a.ah_attr.port_num);
	/* DESCRIPTION: init_attr gives the creation attributes: CQs, type, caps. */
	CLAUSE("DESC-INIT-ATTR", rc == 0 && ia.send_cq == p.cq[0] && ia.recv_cq == p.cq[0] && ia.qp_type == IBV_QPT_RC &&
					 ia.srq == NULL && ia.cap.max_send_wr >= 16 && ia.cap.max_recv_wr >= 16,
	       "send_cq %p recv_cq %p type %d srq %p send_wr %u recv_wr %u", (void *)ia.send_cq, (void *)ia.recv_cq,
	       ia.qp_type, (void *)ia.srq, ia.cap.max_send_wr, ia.cap.max_recv_wr);
	/* IBV_QP_CAP: the capabilities, as ibv_create_qp reported them. */
	CLAUSE("DESC-CAP", rc == 0 && a.cap.max_send_wr == ia.cap.max_send_wr && a.cap.max_send_sge >= 2,
	       "cap: send_wr %u (init %u) send_sge %u", a.cap.max_send_wr, ia.cap.max_send_wr, a.cap.max_send_sge);
	/* The state follows the QP: after a move to ERR, the query says ERR. */
	struct ibv_qp_attr e = { .qp_state = IBV_QPS_ERR };
	ibv_modify_qp(p.qp[0], &e, IBV_QP_STATE);
	CLAUSE("DESC-STATE-FOLLOWS", ih_qp_state(p.qp[0]) == IBV_QPS_ERR, "state after ERR: %d", ih_qp_state(p.qp[0]));
	ih_pair_destroy(&p);
	ih_dev_close(&d);
	return conf_end();
}
