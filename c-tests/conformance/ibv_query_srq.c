/* ibv_query_srq(3): the SRQ's attributes; srq_limit 0 means the limit event is not (or no
 * longer) armed; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_srq", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 2;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_srq_attr q;
	memset(&q, 0xa5, sizeof q);
	/* RETURN VALUE: 0 on success; the attributes are the SRQ's (as created). */
	int rc = srq ? ibv_query_srq(srq, &q) : -1;
	CLAUSE("RET-0", rc == 0, "ibv_query_srq returned %d (%s)", rc, conf_errname(rc));
	CLAUSE("DESC-ATTR", rc == 0 && q.max_wr == sa.attr.max_wr && q.max_sge == sa.attr.max_sge,
	       "max_wr %u (created %u), max_sge %u (created %u)", q.max_wr, sa.attr.max_wr, q.max_sge, sa.attr.max_sge);
	/* NOTES: never armed: srq_limit 0. */
	CLAUSE("NOTE-LIMIT-UNARMED", rc == 0 && q.srq_limit == 0, "srq_limit %u before any arming", q.srq_limit);
	/* Armed: the limit set. Fired: 0 again (no longer armed). */
	for (int i = 0; srq && i < 2; i++) {
		struct ibv_sge sge = { (uintptr_t)b.buf + 512, 64, b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		ibv_post_srq_recv(srq, &wr, &bad);
	}
	struct ibv_srq_attr at = { .srq_limit = 2 };
	int m = srq ? ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT) : -1;
	int armed = m == 0 && ibv_query_srq(srq, &q) == 0 ? (int)q.srq_limit : -1;
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	qa.srq = srq;
	struct ibv_qp *rq = srq ? ibv_create_qp(d.pd, &qa) : NULL;
	struct ibv_qp_init_attr sqa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *sq = ibv_create_qp(d.pd, &sqa);
	int fired = -1;
	struct ibv_async_event e;
	if (rq && sq && ih_connect(&d, rq, sq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
	    ih_connect(&d, sq, rq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
	    ih_post_send(sq, IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 5) == 0 && ih_readable(d.ctx->async_fd, IH_WAIT_MS) &&
	    ibv_get_async_event(d.ctx, &e) == 0) {
		ibv_ack_async_event(&e);
		fired = ibv_query_srq(srq, &q) == 0 ? (int)q.srq_limit : -1;
	}
	CLAUSE("NOTE-LIMIT-FIRED", armed == 2 && fired == 0, "srq_limit armed %d, after the event %d", armed, fired);
	struct ibv_wc wc;
	while (cq && ih_poll(cq, &wc, 20) == 1)
		;
	if (rq)
		ibv_destroy_qp(rq);
	if (sq)
		ibv_destroy_qp(sq);
	if (srq)
		ibv_destroy_srq(srq);
	if (cq)
		ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
