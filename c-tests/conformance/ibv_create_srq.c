/* ibv_create_srq(3) (and ibv_destroy_srq): an SRQ of the PD, its attributes updated to the
 * actual values, shared by the QPs that use it; destroy fails while a QP uses it. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_srq", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-SRQ", d.err);
		return conf_end();
	}
	int tag;
	struct ibv_srq_init_attr a;
	memset(&a, 0, sizeof a);
	a.srq_context = &tag;
	a.attr.max_wr = 10;
	a.attr.max_sge = 1;
	/* RETURN VALUE: a pointer to the SRQ, of the PD, with its context. */
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &a);
	CLAUSE("RET-SRQ", srq && srq->pd == d.pd && srq->context == d.ctx && srq->srq_context == &tag,
	       "ibv_create_srq: %p (%s)", (void *)srq, conf_errname(errno));
	/* DESCRIPTION: max_wr and max_sge are updated, at least the values requested. */
	CLAUSE("DESC-ATTR-UPDATED", srq && a.attr.max_wr >= 10 && a.attr.max_sge >= 1, "max_wr %u, max_sge %u",
	       a.attr.max_wr, a.attr.max_sge);
	/* Beyond the device's max_srq_wr: refused. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	struct ibv_srq_init_attr big = a;
	big.attr.max_wr = (uint32_t)da.max_srq_wr + 1;
	struct ibv_srq *bs = ibv_create_srq(d.pd, &big);
	CLAUSE("ERR-LIMITS", !bs, "max_wr %d + 1: %p", da.max_srq_wr, (void *)bs);
	if (bs)
		ibv_destroy_srq(bs);
	/* The queue is shared: two QPs that use it both take their receives from it. */
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
	struct ibv_qp *rq[2] = { 0 }, *sq[2] = { 0 };
	int shared = srq && cq;
	for (int i = 0; i < 2 && shared; i++) {
		struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
		qa.srq = srq;
		rq[i] = ibv_create_qp(d.pd, &qa);
		struct ibv_qp_init_attr sa = ih_qp_attr(IBV_QPT_RC, cq, 4);
		sq[i] = ibv_create_qp(d.pd, &sa);
		shared = rq[i] && sq[i] && ih_connect(&d, rq[i], sq[i]->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
			 ih_connect(&d, sq[i], rq[i]->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0;
	}
	int recvs = 0;
	if (shared) {
		for (int i = 0; i < 2; i++) {
			struct ibv_sge sge = { (uintptr_t)b.buf + 512 * (i + 1), 64, b.mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)(80 + i), .sg_list = &sge, .num_sge = 1 }, *bad;
			ibv_post_srq_recv(srq, &wr, &bad);
		}
		ih_post_send(sq[0], IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 1);
		ih_post_send(sq[1], IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 2);
		struct ibv_wc wc;
		uint32_t qpns[2] = { 0, 0 };
		for (int i = 0; i < 4 && ih_poll(cq, &wc, IH_WAIT_MS) == 1; i++)
			if (wc.opcode == IBV_WC_RECV && wc.status == IBV_WC_SUCCESS && recvs < 2)
				qpns[recvs++] = wc.qp_num;
		recvs = recvs == 2 && qpns[0] != qpns[1] ? 2 : 0;
	}
	CLAUSE("DESC-SHARED", recvs == 2, "receives through the SRQ on two QPs: %d (%s)", recvs, d.err);
	/* NOTES: ibv_destroy_srq fails while a QP is associated with it. */
	int busy = rq[0] ? ibv_destroy_srq(srq) : -1;
	CLAUSE("NOTE-DESTROY-BUSY", busy > 0, "ibv_destroy_srq with QPs on it: %d (%s)", busy, conf_errname(busy));
	for (int i = 0; i < 2; i++) {
		if (rq[i])
			ibv_destroy_qp(rq[i]);
		if (sq[i])
			ibv_destroy_qp(sq[i]);
	}
	/* RETURN VALUE (ibv_destroy_srq): 0 on success. */
	int rc = srq && busy != 0 ? ibv_destroy_srq(srq) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_srq returned %d (%s)", rc, conf_errname(rc));
	if (cq)
		ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
