/* ibv_wr_post(3) (ibv_wr_start, ibv_wr_complete, ibv_wr_abort, the ibv_wr_* builders and
 * setters): posting through the QP's send-ops interface, within a critical region; a QP is only
 * created with send ops it supports; nothing runs before ibv_wr_complete succeeds; an abort
 * discards the batch; a failure aborts the whole posting. */
#include "ibvhelp.h"

#include <arpa/inet.h>
#include <pthread.h>

static struct ih_dev d;
static struct ih_buf b;

#define ALL_OPS                                                                                              \
	(IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE |                    \
	 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
	 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

/* An extended QP on its own CQ. */
static struct ibv_qp *xqp(enum ibv_qp_type t, uint64_t ops, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = cq;
	a.qp_type = t;
	a.cap.max_send_wr = 64;
	a.cap.max_recv_wr = 16;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 2;
	a.cap.max_inline_data = 64;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = d.pd;
	a.send_ops_flags = ops;
	return ibv_create_qp_ex(d.ctx, &a);
}

/* A sender (extended, on cq[0]) and a plain receiver (cq[1]), connected (RC/UC) or ready (UD). */
struct xpair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	struct ibv_qp_ex *x;
};

static int xpair_make(struct xpair *p, enum ibv_qp_type t, uint64_t ops)
{
	memset(p, 0, sizeof *p);
	p->cq[0] = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	p->cq[1] = ibv_create_cq(d.ctx, 256, NULL, NULL, 0);
	if (!p->cq[0] || !p->cq[1])
		return -1;
	p->qp[0] = xqp(t, ops, p->cq[0]);
	struct ibv_qp_init_attr a = ih_qp_attr(t, p->cq[1], 16);
	p->qp[1] = ibv_create_qp(d.pd, &a);
	if (!p->qp[0] || !p->qp[1])
		return -1;
	p->x = ibv_qp_to_qp_ex(p->qp[0]);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (t == IBV_QPT_UD)
		return ih_ud_ready(p->qp[0], d.err, sizeof d.err) || ih_ud_ready(p->qp[1], d.err, sizeof d.err) ? -1 : 0;
	return ih_connect(&d, p->qp[0], p->qp[1]->qp_num, acc, d.err, sizeof d.err) ||
			       ih_connect(&d, p->qp[1], p->qp[0]->qp_num, acc, d.err, sizeof d.err)
		       ? -1
		       : 0;
}

static void xpair_destroy(struct xpair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		if (p->cq[i])
			ibv_destroy_cq(p->cq[i]);
	}
}

struct poster {
	struct xpair *p;
	int base;
	int rc;
};

static void *post_thread(void *arg)
{
	struct poster *t = arg;
	for (int i = 0; i < 30 && t->rc == 0; i++) {
		ibv_wr_start(t->p->x);
		t->p->x->wr_id = (uint64_t)(t->base + i);
		t->p->x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(t->p->x, b.mr->rkey, (uintptr_t)b.buf + 6000);
		ibv_wr_set_sge(t->p->x, b.mr->lkey, (uintptr_t)b.buf, 8);
		t->rc = ibv_wr_complete(t->p->x);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_wr_post", argc, argv);
	struct xpair p;
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 16384, acc) || xpair_make(&p, IBV_QPT_RC, ALL_OPS)) {
		CLAUSE_BLOCKED("DESC-SEND", d.err);
		return conf_end();
	}
	struct ibv_wc wc;
	struct ibv_qp_ex *x = p.x;
	/* USAGE: a QP is created only with send ops it supports: RDMA WRITE on UD, TSO on RC
	 * (and TSO at all on a device without it) are refused. */
	struct ibv_cq *tcq = ibv_create_cq(d.ctx, 4, NULL, NULL, 0);
	struct ibv_qp *u1 = xqp(IBV_QPT_UD, IBV_QP_EX_WITH_RDMA_WRITE, tcq);
	struct ibv_qp *u2 = xqp(IBV_QPT_RC, IBV_QP_EX_WITH_TSO, tcq);
	struct ibv_qp *u3 = xqp(IBV_QPT_UC, IBV_QP_EX_WITH_RDMA_READ, tcq);
	CLAUSE("USAGE-UNSUPPORTED", !u1 && !u2 && !u3, "UD+RDMA_WRITE %p, RC+TSO %p, UC+RDMA_READ %p", (void *)u1,
	       (void *)u2, (void *)u3);
	/* The simple send of USAGE: wr_id set first, builder, DATA setter, complete. */
	memcpy(b.buf, "wr api send", 12);
	ih_post_recv(p.qp[1], b.buf + 1024, 64, b.mr->lkey, 90);
	ibv_wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 12);
	int rc = ibv_wr_complete(x);
	int s = rc == 0 ? ih_poll(p.cq[0], &wc, IH_WAIT_MS) : 0;
	int r = ih_poll(p.cq[1], &wc, s ? IH_WAIT_MS : 0);
	CLAUSE("DESC-SEND", rc == 0 && s == 1 && r == 1 && memcmp(b.buf + 1024, "wr api send", 12) == 0,
	       "complete %d, send completion %d, received %d \"%.11s\"", rc, s, r, b.buf + 1024);
	/* Several WRs in one region, executed in order, each with its wr_id. */
	ibv_wr_start(x);
	for (int i = 0; i < 3; i++) {
		x->wr_id = (uint64_t)(10 + i);
		x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 2048 + 8 * i);
		ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	}
	rc = ibv_wr_complete(x);
	uint64_t ids[3] = { 0, 0, 0 };
	int n = 0;
	while (n < 3 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
		ids[n++] = wc.wr_id;
	CLAUSE("DESC-BATCH", rc == 0 && n == 3 && ids[0] == 10 && ids[1] == 11 && ids[2] == 12,
	       "complete %d, %d completions, wr_ids %llu %llu %llu", rc, n, (unsigned long long)ids[0],
	       (unsigned long long)ids[1], (unsigned long long)ids[2]);
	/* ibv_wr_abort discards everything prepared since ibv_wr_start. */
	memset(b.buf + 3000, 0, 16);
	ibv_wr_start(x);
	x->wr_id = 20;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 3000);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	ibv_wr_abort(x);
	int ab = ih_poll(p.cq[0], &wc, IH_QUIET_MS);
	CLAUSE("DESC-ABORT", ab == 0 && b.buf[3000] == 0, "after abort: %d completion(s), target byte 0x%02x", ab,
	       (unsigned char)b.buf[3000]);
	/* No work runs until ibv_wr_complete: a built WR waits for it. */
	ibv_wr_start(x);
	x->wr_id = 21;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 3000);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	int early = ih_poll(p.cq[0], &wc, IH_QUIET_MS) || b.buf[3000] != 0;
	rc = ibv_wr_complete(x);
	int late = ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.wr_id == 21 && memcmp(b.buf + 3000, b.buf, 8) == 0;
	CLAUSE("DESC-NOT-BEFORE-COMPLETE", !early && rc == 0 && late, "ran before complete %d, after %d", early, late);
	/* RDMA WRITE with immediate: the remote gets IBV_WC_RECV_RDMA_WITH_IMM and the data. */
	ih_post_recv(p.qp[1], b.buf + 1024, 64, b.mr->lkey, 91);
	ibv_wr_start(x);
	x->wr_id = 30;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(x, b.mr->rkey, (uintptr_t)b.buf + 4000, htonl(0xabcd));
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	rc = ibv_wr_complete(x);
	ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	r = ih_poll(p.cq[1], &wc, IH_WAIT_MS);
	CLAUSE("OP-WRITE-IMM", rc == 0 && r == 1 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && ntohl(wc.imm_data) == 0xabcd &&
				       memcmp(b.buf + 4000, b.buf, 8) == 0,
	       "complete %d, remote opcode %d imm 0x%x", rc, r == 1 ? (int)wc.opcode : -1, r == 1 ? ntohl(wc.imm_data) : 0);
	/* SEND with immediate: the remote gets the 32 bits of immediate data. */
	ih_post_recv(p.qp[1], b.buf + 1024, 64, b.mr->lkey, 92);
	ibv_wr_start(x);
	x->wr_id = 31;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htonl(0x1234));
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 4);
	rc = ibv_wr_complete(x);
	ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	r = ih_poll(p.cq[1], &wc, IH_WAIT_MS);
	CLAUSE("OP-SEND-IMM", rc == 0 && r == 1 && (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0x1234,
	       "complete %d, remote wc_flags 0x%x imm 0x%x", rc, r == 1 ? wc.wc_flags : 0, r == 1 ? ntohl(wc.imm_data) : 0);
	/* RDMA READ: the DATA buffers receive the remote bytes. */
	memcpy(b.buf + 5000, "remote!", 8);
	memset(b.buf + 5100, 0, 8);
	ibv_wr_start(x);
	x->wr_id = 32;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_read(x, b.mr->rkey, (uintptr_t)b.buf + 5000);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf + 5100, 8);
	rc = ibv_wr_complete(x);
	s = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	CLAUSE("OP-RDMA-READ", rc == 0 && s == 1 && wc.status == IBV_WC_SUCCESS && memcmp(b.buf + 5100, "remote!", 8) == 0,
	       "complete %d, status %d, read \"%.7s\"", rc, s == 1 ? (int)wc.status : -1, b.buf + 5100);
	/* Atomics: compare-and-swap sets swap where the word equals compare; fetch-and-add adds;
	 * both return the old value. */
	uint64_t *word = (uint64_t *)(void *)(b.buf + 5200);
	uint64_t *old = (uint64_t *)(void *)(b.buf + 5304);
	*word = 5;
	ibv_wr_start(x);
	x->wr_id = 33;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_cmp_swp(x, b.mr->rkey, (uintptr_t)word, 5, 9);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)old, 8);
	rc = ibv_wr_complete(x);
	s = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	int cas = rc == 0 && s == 1 && *word == 9 && *old == 5;
	ibv_wr_start(x);
	x->wr_id = 34;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(x, b.mr->rkey, (uintptr_t)word, 3);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)old, 8);
	rc = ibv_wr_complete(x);
	s = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	int fad = rc == 0 && s == 1 && *word == 12 && *old == 9;
	CLAUSE("OP-ATOMIC", cas && fad, "cmp_swp %d, fetch_add %d (word %llu)", cas, fad, (unsigned long long)*word);
	/* ibv_wr_set_sge_list: the buffers are concatenated. */
	memcpy(b.buf + 100, "first-", 6);
	memcpy(b.buf + 200, "second", 7);
	struct ibv_sge two[2] = { { (uintptr_t)b.buf + 100, 6, b.mr->lkey }, { (uintptr_t)b.buf + 200, 7, b.mr->lkey } };
	ibv_wr_start(x);
	x->wr_id = 35;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 7000);
	ibv_wr_set_sge_list(x, 2, two);
	rc = ibv_wr_complete(x);
	s = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
	CLAUSE("SETTER-SGE-LIST", rc == 0 && s == 1 && memcmp(b.buf + 7000, "first-second", 13) == 0,
	       "complete %d, target \"%.12s\"", rc, b.buf + 7000);
	/* Inline setters copy the data at the call: the buffers are reusable at once (single
	 * buffer, and a list concatenated). */
	char in1[8] = "inl-one", in2[8] = "-two", in3[8] = "-three";
	ibv_wr_start(x);
	x->wr_id = 36;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 7100);
	ibv_wr_set_inline_data(x, in1, 7);
	x->wr_id = 37;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 7200);
	struct ibv_data_buf lst[2] = { { in2, 4 }, { in3, 6 } };
	ibv_wr_set_inline_data_list(x, 2, lst);
	memset(in1, 'X', 7);
	memset(in2, 'X', 4);
	memset(in3, 'X', 6);
	rc = ibv_wr_complete(x);
	n = 0;
	while (n < 2 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
		n++;
	CLAUSE("SETTER-INLINE", rc == 0 && n == 2 && memcmp(b.buf + 7100, "inl-one", 7) == 0 &&
					memcmp(b.buf + 7200, "-two-three", 10) == 0,
	       "complete %d, %d completions, targets \"%.7s\" \"%.10s\"", rc, n, b.buf + 7100, b.buf + 7200);
	/* wr_flags: without IBV_SEND_SIGNALED no completion. */
	ibv_wr_start(x);
	x->wr_id = 38;
	x->wr_flags = 0;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 7300);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	rc = ibv_wr_complete(x);
	CLAUSE("FLAG-SIGNALED", rc == 0 && ih_poll(p.cq[0], &wc, IH_QUIET_MS) == 0, "an unsignaled WR completed");
	/* RETURN VALUE: a failure found at posting (an SGE list longer than max_send_sge) makes
	 * ibv_wr_complete fail and aborts the whole posting, the valid WR before it too. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	ibv_query_qp(p.qp[0], &qa, IBV_QP_CAP, &qia);
	uint32_t too = qia.cap.max_send_sge + 1;
	struct ibv_sge *many = calloc(too, sizeof *many);
	for (uint32_t i = 0; i < too; i++)
		many[i] = (struct ibv_sge){ (uintptr_t)b.buf, 1, b.mr->lkey };
	memset(b.buf + 7400, 0, 8);
	ibv_wr_start(x);
	x->wr_id = 39;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 7400);
	ibv_wr_set_sge(x, b.mr->lkey, (uintptr_t)b.buf, 8);
	x->wr_id = 40;
	ibv_wr_rdma_write(x, b.mr->rkey, (uintptr_t)b.buf + 8192);
	ibv_wr_set_sge_list(x, too, many);
	rc = ibv_wr_complete(x);
	int any = ih_poll(p.cq[0], &wc, IH_QUIET_MS);
	CLAUSE("RET-FAILURE", rc != 0 && any == 0 && b.buf[7400] == 0,
	       "%u SGEs (max %u): complete %d, completions %d", too, qia.cap.max_send_sge, rc, any);
	free(many);
	/* CONCURRENCY: the provider locks the region: two threads posting at once (30 WRs each,
	 * within the send queue's 64) lose nothing. */
	struct poster t1 = { &p, 1000, 0 }, t2 = { &p, 2000, 0 };
	pthread_t th1, th2;
	pthread_create(&th1, NULL, post_thread, &t1);
	pthread_create(&th2, NULL, post_thread, &t2);
	pthread_join(th1, NULL);
	pthread_join(th2, NULL);
	n = 0;
	while (ih_poll(p.cq[0], &wc, IH_QUIET_MS) == 1)
		n += wc.status == IBV_WC_SUCCESS;
	CLAUSE("CONCURRENCY", t1.rc == 0 && t2.rc == 0 && n == 60, "threads: complete %d / %d, %d of 60 completions",
	       t1.rc, t2.rc, n);
	xpair_destroy(&p);
	/* UD: ibv_wr_set_ud_addr gives the destination. */
	struct xpair u;
	int ud = 0;
	struct ibv_ah *ah = NULL;
	if (xpair_make(&u, IBV_QPT_UD, IBV_QP_EX_WITH_SEND) == 0 && (ah = ih_ah(&d, &d.gid))) {
		ih_post_recv(u.qp[1], b.buf + 9000, 40 + 64, b.mr->lkey, 93);
		ibv_wr_start(u.x);
		u.x->wr_id = 50;
		u.x->wr_flags = IBV_SEND_SIGNALED;
		ibv_wr_send(u.x);
		ibv_wr_set_ud_addr(u.x, ah, u.qp[1]->qp_num, IH_QKEY);
		ibv_wr_set_sge(u.x, b.mr->lkey, (uintptr_t)b.buf, 12);
		if (ibv_wr_complete(u.x) == 0 && ih_poll(u.cq[1], &wc, IH_WAIT_MS) == 1)
			ud = memcmp(b.buf + 9040, "wr api send", 12) == 0;
		ih_poll(u.cq[0], &wc, IH_WAIT_MS);
	}
	CLAUSE("SETTER-UD-ADDR", ud, "a UD send through ibv_wr_set_ud_addr did not arrive (%s)", d.err);
	if (ah)
		ibv_destroy_ah(ah);
	xpair_destroy(&u);
	/* Memory windows: BIND_MW, LOCAL_INV and SEND_WITH_INV on RC. */
	struct ibv_qp *mq = xqp(IBV_QPT_RC, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_SEND_WITH_INV,
				tcq);
	CLAUSE("OP-MW", mq != NULL, "RC QP with the memory-window send ops: %s", conf_errname(errno));
	if (mq)
		ibv_destroy_qp(mq);
	/* XRC_SEND QPs take ibv_wr_set_xrc_srqn. */
	struct ibv_qp_init_attr_ex xa;
	memset(&xa, 0, sizeof xa);
	xa.send_cq = xa.recv_cq = tcq;
	xa.qp_type = IBV_QPT_XRC_SEND;
	xa.cap.max_send_wr = 4;
	xa.cap.max_send_sge = 1;
	xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	xa.pd = d.pd;
	xa.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *xq = ibv_create_qp_ex(d.ctx, &xa);
	struct ibv_qp_ex *xx = xq ? ibv_qp_to_qp_ex(xq) : NULL;
	CLAUSE("SETTER-XRC-SRQN", xx && xx->wr_set_xrc_srqn, "XRC_SEND QP with the send ops: %p (%s)", (void *)xq,
	       conf_errname(errno));
	if (xq)
		ibv_destroy_qp(xq);
	struct ibv_qp *left[] = { u1, u2, u3 };
	for (int i = 0; i < 3; i++)
		if (left[i])
			ibv_destroy_qp(left[i]);
	ibv_destroy_cq(tcq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
