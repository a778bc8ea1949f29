/* A UD QP taken to RTS with one qkey, as the C tests that receive datagrams need it
 * (icrc_target.c, ud_foreign_uid.c). Returns NULL (errno set by the failing verb) on failure. */
#ifndef UD_QP_H
#define UD_QP_H

#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

static inline struct ibv_qp *ud_qp_rts(struct ibv_pd *pd, struct ibv_cq *cq, uint32_t max_send,
				       uint32_t max_recv, uint32_t qkey)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;
	struct ibv_qp *qp;

	memset(&ia, 0, sizeof ia);
	ia.send_cq = ia.recv_cq = cq;
	ia.qp_type = IBV_QPT_UD;
	ia.cap.max_send_wr = max_send;
	ia.cap.max_recv_wr = max_recv;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	qp = ibv_create_qp(pd, &ia);
	if (!qp)
		return NULL;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = qkey;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
		goto fail;
	a.qp_state = IBV_QPS_RTR;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE))
		goto fail;
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN))
		goto fail;
	return qp;
fail:
	ibv_destroy_qp(qp);
	return NULL;
}

#endif
