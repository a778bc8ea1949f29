/* ibv_post_recv(3): posts a list of receive WRs, stopping at the first that fails (bad_wr);
 * not for a QP on an SRQ; UD receives get the 40-byte GRH first; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_post_recv", argc, argv);
	struct ih_dev d;
	struct ih_buf b;
	struct ih_pair p, u;
	memset(&p, 0, sizeof p);
	memset(&u, 0, sizeof u);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE) || ih_pair_make(&d, &u, IBV_QPT_UD, 0)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_wc wc[8];
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
	/* RETURN VALUE: 0; DESCRIPTION: the whole list is posted, consumed in order. */
	int rc = ibv_post_recv(p.qp[1], &r[0], &bad);
	CLAUSE("RET-0", rc == 0, "ibv_post_recv returned %d (%s)", rc, conf_errname(rc));
	memcpy(b.buf, "abc", 4);
	for (int i = 0; i < 3; i++)
		ih_post_send(p.qp[0], IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, (uint64_t)i);
	int n = 0;
	for (int i = 0; i < 3 && ih_poll(p.cq[1], &wc[n], IH_WAIT_MS) == 1; i++)
		n++;
	CLAUSE("DESC-LIST", n == 3 && wc[0].wr_id == 40 && wc[1].wr_id == 41 && wc[2].wr_id == 42 &&
				    memcmp(b.buf + 3072, "abc", 4) == 0,
	       "%d of 3 receives completed, in order: %d", n, n == 3 && wc[0].wr_id == 40 && wc[2].wr_id == 42);
	while (ih_poll(p.cq[0], &wc[0], 10) == 1)
		;
	/* DESCRIPTION: processing stops at the first failing WR (too many SGEs), returned in
	 * bad_wr; the one before it is posted. */
	struct ibv_sge many[64];
	for (int i = 0; i < 64; i++)
		many[i] = sg[0];
	r[1].sg_list = many;
	r[1].num_sge = 64;
	bad = NULL;
	rc = ibv_post_recv(p.qp[1], &r[0], &bad);
	ih_post_send(p.qp[0], IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 7);
	int got = ih_poll(p.cq[1], &wc[0], IH_WAIT_MS);
	ih_post_send(p.qp[0], IBV_WR_SEND, b.buf, 4, b.mr->lkey, 0, 0, 8);
	int more = ih_poll(p.cq[1], &wc[1], IH_QUIET_MS);
	CLAUSE("DESC-BAD-WR", rc != 0 && bad == &r[1] && got == 1 && wc[0].wr_id == 40 && more == 0,
	       "returned %d (%s), bad_wr %s, first received %d, a second %d", rc, conf_errname(rc),
	       bad == &r[1] ? "the second" : bad ? "another" : "NULL", got, more);
	r[1].sg_list = &sg[1];
	r[1].num_sge = 1;
	/* A message scatters over the SGEs of a receive in order. */
	struct ih_pair s;
	memset(&s, 0, sizeof s);
	int sc = 0;
	if (ih_pair_make(&d, &s, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE) == 0) {
		struct ibv_sge two[2] = { { (uintptr_t)b.buf + 5000, 3, b.mr->lkey }, { (uintptr_t)b.buf + 6000, 8, b.mr->lkey } };
		struct ibv_recv_wr sr = { .wr_id = 60, .sg_list = two, .num_sge = 2 };
		memcpy(b.buf + 100, "scattered", 10);
		if (ibv_post_recv(s.qp[1], &sr, &bad) == 0 &&
		    ih_post_send(s.qp[0], IBV_WR_SEND, b.buf + 100, 10, b.mr->lkey, 0, 0, 61) == 0 &&
		    ih_poll(s.cq[1], &wc[0], IH_WAIT_MS) == 1)
			sc = wc[0].byte_len == 10 && memcmp(b.buf + 5000, "sca", 3) == 0 &&
			     memcmp(b.buf + 6000, "ttered", 7) == 0;
		ih_pair_destroy(&s);
	}
	CLAUSE("DESC-SCATTER", sc, "a 10-byte message over SGEs of 3 and 8 bytes: \"%.3s\" + \"%.7s\"", b.buf + 5000,
	       b.buf + 6000);
	/* NOTES: a QP on an SRQ does not use its own receive queue: ibv_post_recv is refused. */
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, p.cq[1], 4);
	qa.srq = srq;
	struct ibv_qp *sq = srq ? ibv_create_qp(d.pd, &qa) : NULL;
	rc = sq ? ibv_post_recv(sq, &r[2], &bad) : -1;
	CLAUSE("NOTE-SRQ", sq && rc != 0, "ibv_post_recv on a QP with an SRQ: %d (%s)", rc, conf_errname(rc));
	if (sq)
		ibv_destroy_qp(sq);
	if (srq)
		ibv_destroy_srq(srq);
	/* NOTES: UD: the GRH fills the first 40 bytes, the data starts at offset 40. */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.is_global = 1;
	aa.grh.dgid = d.gid;
	aa.grh.hop_limit = 1;
	aa.port_num = 1;
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	int ud = 0;
	memset(b.buf + 7000, 0, 200);
	if (ah && ih_post_recv(u.qp[1], b.buf + 7000, 40 + 64, b.mr->lkey, 70) == 0) {
		struct ibv_sge us = { (uintptr_t)b.buf + 100, 10, b.mr->lkey };
		struct ibv_send_wr uw;
		struct ibv_send_wr *ubad;
		memset(&uw, 0, sizeof uw);
		uw.sg_list = &us;
		uw.num_sge = 1;
		uw.opcode = IBV_WR_SEND;
		uw.send_flags = IBV_SEND_SIGNALED;
		uw.wr.ud.ah = ah;
		uw.wr.ud.remote_qpn = u.qp[1]->qp_num;
		uw.wr.ud.remote_qkey = IH_QKEY;
		if (ibv_post_send(u.qp[0], &uw, &ubad) == 0 && ih_poll(u.cq[1], &wc[0], IH_WAIT_MS) == 1)
			ud = wc[0].byte_len == 40 + 10 && memcmp(b.buf + 7040, "scattered", 10) == 0;
		ih_poll(u.cq[0], &wc[1], IH_WAIT_MS);
	}
	CLAUSE("NOTE-UD-GRH", ud, "UD receive: data at offset 40 \"%.9s\"", b.buf + 7040);
	if (ah)
		ibv_destroy_ah(ah);
	/* RETURN VALUE: the errno value: a full receive queue (16) gives ENOMEM. */
	int full = 0, posted = 0;
	for (int i = 0; i < 40 && !full; i++) {
		full = ih_post_recv(p.qp[1], b.buf, 64, b.mr->lkey, (uint64_t)(200 + i));
		posted += full == 0;
	}
	CLAUSE("ERR-RQ-FULL", full == ENOMEM && posted >= 16, "after %d posts: %d (%s)", posted, full, conf_errname(full));
	ih_pair_destroy(&u);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
