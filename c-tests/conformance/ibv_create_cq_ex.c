/* ibv_create_cq_ex(3): an extended CQ (at least cqe entries, context, channel, vector,
 * wc_flags, flags, parent domain), polled with ibv_start_poll/ibv_next_poll/ibv_end_poll and
 * the ibv_wc_read_* functions; destroyed with ibv_destroy_cq. */
#include "ibvhelp.h"

#include <arpa/inet.h>
#include <time.h>

static struct ibv_cq_init_attr_ex cq_attr(int cqe, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.cqe = (uint32_t)cqe;
	a.wc_flags = wc_flags;
	return a;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_create_cq_ex", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-CQ", d.err);
		return conf_end();
	}
	const uint64_t F = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
			   IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
			   IBV_WC_EX_WITH_DLID_PATH_BITS;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(d.ctx);
	int tag;
	struct ibv_cq_init_attr_ex a = cq_attr(20, F | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
							   IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK);
	a.cq_context = &tag;
	a.channel = ch;
	/* RETURN VALUE: a pointer to the CQ. NOTES: at least cqe entries (cqe field). */
	errno = 0;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(d.ctx, &a);
	struct ibv_cq *c = cq ? ibv_cq_ex_to_cq(cq) : NULL;
	CLAUSE("RET-CQ", cq && c->cqe >= 20, "ibv_create_cq_ex: %p (%s), cqe %d", (void *)cq, conf_errname(errno),
	       c ? c->cqe : -1);
	if (!cq) {
		ih_dev_close(&d);
		return conf_end();
	}
	/* cq_context and channel: returned with the CQ's completion events. */
	CLAUSE("ARG-CONTEXT-CHANNEL", c->cq_context == &tag && c->channel == ch, "cq_context %p, channel %p",
	       c->cq_context, (void *)c->channel);
	/* comp_vector: must be below num_comp_vectors. */
	struct ibv_cq_init_attr_ex bv = cq_attr(4, 0);
	bv.comp_vector = (uint32_t)d.ctx->num_comp_vectors;
	struct ibv_cq_ex *bad = ibv_create_cq_ex(d.ctx, &bv);
	CLAUSE("ARG-COMP-VECTOR", !bad, "comp_vector %d (num_comp_vectors): %p", d.ctx->num_comp_vectors, (void *)bad);
	if (bad)
		ibv_destroy_cq(ibv_cq_ex_to_cq(bad));
	/* flags (comp_mask FLAGS): a single-threaded CQ is accepted. */
	struct ibv_cq_init_attr_ex st = cq_attr(4, IBV_WC_EX_WITH_BYTE_LEN);
	st.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS;
	st.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
	struct ibv_cq_ex *sq = ibv_create_cq_ex(d.ctx, &st);
	CLAUSE("ARG-FLAGS", sq != NULL, "SINGLE_THREADED CQ: %s", conf_errname(errno));
	if (sq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(sq));
	/* parent_domain (comp_mask PD): a CQ created on a parent domain. */
	struct ibv_parent_domain_init_attr pa;
	memset(&pa, 0, sizeof pa);
	pa.pd = d.pd;
	struct ibv_pd *par = ibv_alloc_parent_domain(d.ctx, &pa);
	struct ibv_cq_ex *pq = NULL;
	if (par) {
		struct ibv_cq_init_attr_ex pp = cq_attr(4, 0);
		pp.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
		pp.parent_domain = par;
		pq = ibv_create_cq_ex(d.ctx, &pp);
	}
	CLAUSE("ARG-PARENT-DOMAIN", par && pq, "parent domain %p (%s), CQ on it %p", (void *)par, conf_errname(errno),
	       (void *)pq);
	if (pq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(pq));
	if (par)
		ibv_dealloc_pd(par);
	/* ibv_start_poll on an empty CQ: ENOENT (and no ibv_end_poll). */
	struct ibv_poll_cq_attr pattr = { 0 };
	int rc = ibv_start_poll(cq, &pattr);
	CLAUSE("START-POLL-ENOENT", rc == ENOENT, "empty CQ: ibv_start_poll returned %d", rc);
	/* Two completions on QP 1's receive side: a SEND with immediate, then a plain SEND. */
	struct ih_pair p;
	struct ih_buf b;
	int up = ih_pair_make_on(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE, NULL, c) == 0 &&
		 ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) == 0;
	struct timespec t0;
	clock_gettime(CLOCK_REALTIME, &t0);
	if (up) {
		ih_post_recv(p.qp[1], b.buf + 1024, 256, b.mr->lkey, 11);
		ih_post_recv(p.qp[1], b.buf + 2048, 256, b.mr->lkey, 12);
		struct ibv_sge sge = { (uintptr_t)b.buf, 24, b.mr->lkey };
		struct ibv_send_wr wr, *bw;
		memset(&wr, 0, sizeof wr);
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND_WITH_IMM;
		wr.imm_data = htonl(0xfeed);
		wr.send_flags = IBV_SEND_SIGNALED;
		ibv_post_send(p.qp[0], &wr, &bw);
		wr.opcode = IBV_WR_SEND;
		sge.length = 5;
		ibv_post_send(p.qp[0], &wr, &bw);
		struct ibv_wc wc;
		ih_poll(p.cq[0], &wc, IH_WAIT_MS);
		ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	}
	/* ibv_start_poll: 0 once a completion is there; wr_id and status in the struct. */
	long long end = ih_now_ms() + IH_WAIT_MS;
	do
		rc = ibv_start_poll(cq, &pattr);
	while (rc == ENOENT && ih_now_ms() < end);
	CLAUSE("START-POLL", up && rc == 0 && cq->wr_id == 11 && cq->status == IBV_WC_SUCCESS,
	       "ibv_start_poll %d, wr_id %llu, status %d", rc, (unsigned long long)cq->wr_id, cq->status);
	/* The readers: opcode, byte_len, immediate (network order) and its flag, qp_num, src_qp. */
	int first = rc == 0 && ibv_wc_read_opcode(cq) == IBV_WC_RECV && ibv_wc_read_byte_len(cq) == 24 &&
		    ntohl(ibv_wc_read_imm_data(cq)) == 0xfeed && (ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM) &&
		    ibv_wc_read_qp_num(cq) == p.qp[1]->qp_num;
	CLAUSE("READ-FIELDS", first, "opcode %d byte_len %u imm 0x%x wc_flags 0x%x qp_num 0x%x",
	       rc == 0 ? (int)ibv_wc_read_opcode(cq) : -1, rc == 0 ? ibv_wc_read_byte_len(cq) : 0,
	       rc == 0 ? ntohl(ibv_wc_read_imm_data(cq)) : 0, rc == 0 ? ibv_wc_read_wc_flags(cq) : 0,
	       rc == 0 ? ibv_wc_read_qp_num(cq) : 0);
	/* Completion timestamps: HCA clock units, and wall-clock nanoseconds near now. */
	uint64_t ts1 = rc == 0 ? ibv_wc_read_completion_ts(cq) : 0;
	uint64_t wall = rc == 0 ? ibv_wc_read_completion_wallclock_ns(cq) : 0;
	long long now_ns = (long long)t0.tv_sec * 1000000000LL + t0.tv_nsec;
	CLAUSE("READ-TIMESTAMPS", ts1 != 0 && wall != 0 && llabs((long long)wall - now_ns) < 10000000000LL,
	       "completion_ts %llu, wallclock_ns %llu (now %lld)", (unsigned long long)ts1, (unsigned long long)wall, now_ns);
	/* ibv_next_poll: the next completion, then ENOENT; ibv_end_poll ends the batch. */
	int n1 = rc == 0 ? ibv_next_poll(cq) : -1;
	if (n1 == ENOENT) {
		end = ih_now_ms() + IH_WAIT_MS;
		ibv_end_poll(cq);
		do
			n1 = ibv_start_poll(cq, &pattr);
		while (n1 == ENOENT && ih_now_ms() < end);
	}
	uint64_t ts2 = n1 == 0 ? ibv_wc_read_completion_ts(cq) : 0;
	int second = n1 == 0 && cq->wr_id == 12 && ibv_wc_read_byte_len(cq) == 5 &&
		     !(ibv_wc_read_wc_flags(cq) & IBV_WC_WITH_IMM);
	int n2 = n1 == 0 ? ibv_next_poll(cq) : -1;
	CLAUSE("NEXT-POLL", second && n2 == ENOENT, "next: %d (wr_id %llu), then %d", n1, (unsigned long long)cq->wr_id,
	       n2);
	CLAUSE("READ-TIMESTAMP-ORDER", ts2 >= ts1 && ts2 != 0, "timestamps %llu then %llu", (unsigned long long)ts1,
	       (unsigned long long)ts2);
	if (rc == 0 || n1 == 0)
		ibv_end_poll(cq);
	/* After ibv_end_poll the batch is consumed: a new batch finds nothing. */
	rc = ibv_start_poll(cq, &pattr);
	CLAUSE("END-POLL", rc == ENOENT, "a new batch after end_poll: %d", rc);
	if (rc == 0)
		ibv_end_poll(cq);
	if (up) {
		ih_pair_destroy(&p);
		ih_buf_free(&b);
	}
	/* NOTES: destroyed with ibv_destroy_cq. */
	rc = ibv_destroy_cq(c);
	CLAUSE("NOTE-DESTROY", rc == 0, "ibv_destroy_cq returned %d", rc);
	if (ch)
		ibv_destroy_comp_channel(ch);
	ih_dev_close(&d);
	return conf_end();
}
