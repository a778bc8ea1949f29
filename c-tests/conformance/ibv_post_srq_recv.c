/* ibv_post_srq_recv(3): posts a list of receive WRs to an SRQ, stopping at the first that
 * fails (bad_wr); UD receives get the 40-byte GRH first; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_post_srq_recv", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 8;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 8);
	qa.srq = srq;
	struct ibv_qp *rq = srq ? ibv_create_qp(d.pd, &qa) : NULL;
	struct ibv_qp_init_attr sqa = ih_qp_attr(IBV_QPT_RC, cq, 8);
	struct ibv_qp *sq = ibv_create_qp(d.pd, &sqa);
	if (!rq || !sq || ih_connect(&d, rq, sq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) ||
	    ih_connect(&d, sq, rq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_sge sg[3];
	struct ibv_recv_wr r[3], *bad = NULL;
	for (int i = 0; i < 3; i++) {
		sg[i] = (struct ibv_sge){ (uintptr_t)b.buf + 1024 * (i + 1), 64, b.mr->lkey };
		memset(&r[i], 0, sizeof r[i]);
		r[i].wr_id = (uint64_t)(40 + i);
		r[i].sg_list = &sg[i];
		r[i].num_sge = 1;
		r[i].next = i < 2 ? &r[i + 1] : NULL;
	}
	/* RETURN VALUE: 0; DESCRIPTION: the list is posted; each message takes the next WR. */
	int rc = ibv_post_srq_recv(srq, &r[0], &bad);
	CLAUSE("RET-0", rc == 0, "ibv_post_srq_recv returned %d (%s)", rc, conf_errname(rc));
	for (int i = 0; i < 3; i++)
		ih_post_send(sq, IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, (uint64_t)i);
	struct ibv_wc wc;
	uint64_t ids[3];
	int n = 0;
	for (int i = 0; i < 6 && n < 3 && ih_poll(cq, &wc, IH_WAIT_MS) == 1; i++)
		if (wc.opcode == IBV_WC_RECV)
			ids[n++] = wc.wr_id;
	CLAUSE("DESC-LIST", n == 3 && ids[0] == 40 && ids[1] == 41 && ids[2] == 42, "%d of 3 receives, in order: %d", n,
	       n == 3 && ids[0] == 40 && ids[2] == 42);
	while (ih_poll(cq, &wc, 10) == 1)
		;
	/* DESCRIPTION: the list stops at the first failing WR (too many SGEs), in bad_wr. */
	struct ibv_sge many[64];
	for (int i = 0; i < 64; i++)
		many[i] = sg[0];
	r[1].sg_list = many;
	r[1].num_sge = 64;
	bad = NULL;
	rc = ibv_post_srq_recv(srq, &r[0], &bad);
	ih_post_send(sq, IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 7);
	ih_post_send(sq, IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 8);
	n = 0;
	for (int i = 0; i < 4 && ih_poll(cq, &wc, IH_QUIET_MS) == 1; i++)
		n += wc.opcode == IBV_WC_RECV && wc.status == IBV_WC_SUCCESS;
	CLAUSE("DESC-BAD-WR", rc != 0 && bad == &r[1] && n == 1, "returned %d (%s), bad_wr %s, %d receive(s)", rc,
	       conf_errname(rc), bad == &r[1] ? "the second" : bad ? "another" : "NULL", n);
	r[1].sg_list = &sg[1];
	r[1].num_sge = 1;
	/* NOTES: a UD QP on the SRQ: the GRH fills the first 40 bytes, the data follows. */
	struct ibv_qp_init_attr ua = ih_qp_attr(IBV_QPT_UD, cq, 4);
	ua.srq = srq;
	struct ibv_qp *urq = ibv_create_qp(d.pd, &ua);
	struct ibv_qp_init_attr usa = ih_qp_attr(IBV_QPT_UD, cq, 4);
	struct ibv_qp *usq = ibv_create_qp(d.pd, &usa);
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.is_global = 1;
	aa.grh.dgid = d.gid;
	aa.grh.hop_limit = 1;
	aa.port_num = 1;
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	int ud = 0;
	/* The RC sender still retries its second message (no receive was left for it): end it. */
	ibv_destroy_qp(sq);
	ibv_destroy_qp(rq);
	sq = rq = NULL;
	while (ih_poll(cq, &wc, 10) == 1)
		;
	if (urq && usq && ah && ih_ud_ready(urq, d.err, sizeof d.err) == 0 && ih_ud_ready(usq, d.err, sizeof d.err) == 0) {
		struct ibv_sge us = { (uintptr_t)b.buf + 7000, 40 + 64, b.mr->lkey };
		struct ibv_recv_wr ur = { .wr_id = 90, .sg_list = &us, .num_sge = 1 };
		memcpy(b.buf + 100, "via srq", 8);
		struct ibv_sge ss = { (uintptr_t)b.buf + 100, 8, b.mr->lkey };
		struct ibv_send_wr sw, *sbad;
		memset(&sw, 0, sizeof sw);
		sw.sg_list = &ss;
		sw.num_sge = 1;
		sw.opcode = IBV_WR_SEND;
		sw.send_flags = IBV_SEND_SIGNALED;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = urq->qp_num;
		sw.wr.ud.remote_qkey = IH_QKEY;
		if (ibv_post_srq_recv(srq, &ur, &bad) == 0 && ibv_post_send(usq, &sw, &sbad) == 0)
			for (int i = 0; i < 2 && ih_poll(cq, &wc, IH_WAIT_MS) == 1; i++)
				if (wc.wr_id == 90)
					ud = wc.status == IBV_WC_SUCCESS && wc.byte_len == 48 &&
					     memcmp(b.buf + 7040, "via srq", 8) == 0;
	}
	CLAUSE("NOTE-UD-GRH", ud, "UD receive through the SRQ: data at offset 40 \"%.7s\" (%s)", b.buf + 7040, d.err);
	/* RETURN VALUE: the errno value: beyond max_wr outstanding, ENOMEM. */
	int full = 0, posted = 0;
	for (int i = 0; i < 40 && !full; i++) {
		struct ibv_recv_wr fw = { .wr_id = (uint64_t)(200 + i), .sg_list = &sg[0], .num_sge = 1 };
		full = ibv_post_srq_recv(srq, &fw, &bad);
		posted += full == 0;
	}
	CLAUSE("ERR-FULL", full == ENOMEM && posted >= 8, "after %d posts: %d (%s)", posted, full, conf_errname(full));
	if (ah)
		ibv_destroy_ah(ah);
	struct ibv_qp *qs[] = { rq, sq, urq, usq };
	for (int i = 0; i < 4; i++)
		if (qs[i])
			ibv_destroy_qp(qs[i]);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
