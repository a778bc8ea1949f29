/* ibv_modify_srq(3): sets the SRQ limit (arming the low-watermark event) or resizes the SRQ
 * where the device can; an invalid attribute changes nothing; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_modify_srq", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	for (int i = 0; srq && i < 3; i++) {
		struct ibv_sge sge = { (uintptr_t)b.buf + 512, 64, b.mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		ibv_post_srq_recv(srq, &wr, &bad);
	}
	/* RETURN VALUE: 0 on success (IBV_SRQ_LIMIT), and the limit is set. */
	struct ibv_srq_attr at = { .srq_limit = 3 };
	int rc = srq ? ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT) : -1;
	struct ibv_srq_attr q;
	int qr = srq ? ibv_query_srq(srq, &q) : -1;
	CLAUSE("RET-0", rc == 0 && qr == 0 && q.srq_limit == 3, "modify %d (%s), srq_limit now %u", rc, conf_errname(rc),
	       q.srq_limit);
	/* NOTES: an invalid attribute (a limit above max_wr) changes nothing. */
	struct ibv_srq_attr bad_at = { .srq_limit = 1000 };
	rc = srq ? ibv_modify_srq(srq, &bad_at, IBV_SRQ_LIMIT) : -1;
	qr = srq ? ibv_query_srq(srq, &q) : -1;
	CLAUSE("NOTE-ALL-OR-NOTHING", rc != 0 && qr == 0 && q.srq_limit == 3, "limit 1000: %d, srq_limit now %u", rc,
	       q.srq_limit);
	/* NOTES: the limit arms IBV_EVENT_SRQ_LIMIT_REACHED once the WRs drop below it: one
	 * receive consumed (3 -> 2) raises it. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	qa.srq = srq;
	struct ibv_qp *rq = srq && cq ? ibv_create_qp(d.pd, &qa) : NULL;
	struct ibv_qp_init_attr sqa = ih_qp_attr(IBV_QPT_RC, cq, 4);
	struct ibv_qp *sq = cq ? ibv_create_qp(d.pd, &sqa) : NULL;
	int ev = 0;
	struct ibv_async_event e;
	if (rq && sq && ih_connect(&d, rq, sq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0 &&
	    ih_connect(&d, sq, rq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) == 0) {
		ih_post_send(sq, IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 5);
		if (ih_readable(d.ctx->async_fd, IH_WAIT_MS) && ibv_get_async_event(d.ctx, &e) == 0) {
			ev = e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq;
			ibv_ack_async_event(&e);
		}
	}
	CLAUSE("NOTE-ARM", ev, "no SRQ_LIMIT_REACHED after dropping below the limit");
	struct ibv_wc wc;
	while (cq && ih_poll(cq, &wc, 20) == 1)
		;
	/* NOTES: resizing (IBV_SRQ_MAX_WR) only where IBV_DEVICE_SRQ_RESIZE is set. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	struct ibv_srq_attr rs = { .max_wr = 16 };
	rc = srq ? ibv_modify_srq(srq, &rs, IBV_SRQ_MAX_WR) : -1;
	CLAUSE("NOTE-RESIZE", (da.device_cap_flags & IBV_DEVICE_SRQ_RESIZE) ? rc == 0 : rc != 0,
	       "device_cap_flags 0x%x, IBV_SRQ_MAX_WR: %d", da.device_cap_flags, rc);
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
