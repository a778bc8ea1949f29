/* RC verbs on the soft provider with raw verbs (two QPs of one process connected with
 * ibv_modify_qp, as ibv_rc_pingpong does): one-sided operations, access checks at the target,
 * error completions, RNR retries, transport retries towards a destroyed peer, queue depths.
 * Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct end make_end(int depth)
{
	struct end e;
	e.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(e.cq, "create_cq");
	struct ibv_qp_init_attr a = { .send_cq = e.cq, .recv_cq = e.cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = depth, .max_recv_wr = 16, .max_send_sge = 2,
					       .max_recv_sge = 2 } };
	e.qp = ibv_create_qp(pd, &a);
	CHECK(e.qp, "create_qp");
	return e;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, int access, int rnr_retry, int retry, int timeout,
		   int min_rnr)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = min_rnr;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

static void pair(struct end *a, struct end *b, int access, int rnr_retry)
{
	*a = make_end(4);
	*b = make_end(4);
	to_rts(a->qp, b->qp->qp_num, access, rnr_retry, 7, 14, 1);
	to_rts(b->qp, a->qp->qp_num, access, rnr_retry, 7, 14, 1);
}

static struct ibv_wc wait_wc(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			break;
	}
	wc.status = -1;
	return wc;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? 5 : 10;
		wr.wr.atomic.swap = 7;
	}
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htonl(0xabcd);
	return ibv_post_send(qp, &wr, &bad);
}

static void post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0, "query_qp");
	return a.qp_state;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "device list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	static char local[8192], remote[8192], ro[64];
	static uint64_t counter __attribute__((aligned(8)));
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, sizeof local, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote, sizeof remote, all);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, sizeof ro, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	struct ibv_mr *cmr = ibv_reg_mr(pd, &counter, sizeof counter, all);
	CHECK(lmr && rmr && romr && cmr, "reg_mr");

	struct end a, b;
	pair(&a, &b, all, 7);
	struct ibv_wc wc;

	/* RDMA WRITE lands in the target's memory with nobody polling there. */
	for (int i = 0; i < 6000; i++)
		local[i] = (char)(i * 13);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 6000, lmr->lkey, (uintptr_t)remote + 100, rmr->rkey, 1) == 0,
	      "post write");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 1, "write wc %d", wc.status);
	CHECK(!memcmp(remote + 100, local, 6000), "written bytes");
	puts("ok RDMA WRITE (two ring segments) lands at the target");

	/* RDMA READ. */
	memset(local, 0, sizeof local);
	CHECK(post(a.qp, IBV_WR_RDMA_READ, local, 6000, lmr->lkey, (uintptr_t)remote + 100, rmr->rkey, 2) == 0,
	      "post read");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && wc.byte_len == 6000, "read wc %d",
	      wc.status);
	CHECK(!memcmp(remote + 100, local, 6000), "read bytes");
	puts("ok RDMA READ");

	/* Atomics on an 8-byte aligned word. */
	counter = 5;
	uint64_t *res = (uint64_t *)local;
	CHECK(post(a.qp, IBV_WR_ATOMIC_CMP_AND_SWP, res, 8, lmr->lkey, (uintptr_t)&counter, cmr->rkey, 3) == 0,
	      "cas");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP && *res == 5 && counter == 7, "cas");
	CHECK(post(a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, res, 8, lmr->lkey, (uintptr_t)&counter, cmr->rkey, 4) == 0,
	      "faa");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && *res == 7 && counter == 17, "faa");
	puts("ok compare-and-swap and fetch-and-add");

	/* Zero-byte WRITE with immediate consumes a receive at the target. */
	post_recv(b.qp, remote, 16, rmr->lkey, 50);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, NULL, 0, 0, 0, 0, 5) == 0, "write imm");
	wc = wait_wc(b.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 50 &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xabcd && wc.byte_len == 0,
	      "write-imm recv wc %d op %d", wc.status, wc.opcode);
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 5, "write-imm send wc");
	puts("ok zero-byte RDMA WRITE with immediate");

	/* A write the target's region does not allow: REM_ACCESS_ERR, nothing written, QP to ERR. */
	memset(ro, 0x11, sizeof ro);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 16, lmr->lkey, (uintptr_t)ro, romr->rkey, 6) == 0, "post");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 6, "no REMOTE_WRITE: status %d", wc.status);
	CHECK(ro[0] == 0x11 && ro[15] == 0x11, "target memory must be untouched");
	CHECK(qp_state(a.qp) == IBV_QPS_ERR, "initiator QP in ERR");
	puts("ok write without remote-write access: IBV_WC_REM_ACCESS_ERR, nothing written, QP in ERR");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	/* Out of bounds and a wrong rkey. */
	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 64, lmr->lkey, (uintptr_t)remote + sizeof remote - 32,
		   rmr->rkey, 7) == 0, "post");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "out of bounds: status %d", wc.status);
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_READ, local, 64, lmr->lkey, (uintptr_t)remote, rmr->rkey ^ 0x5a5a, 8) == 0,
	      "post");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_REM_ACCESS_ERR, "bad rkey: status %d", wc.status);
	puts("ok out-of-bounds write and unknown rkey: IBV_WC_REM_ACCESS_ERR");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	/* Unregistered local buffer: LOC_PROT_ERR, not a fault. */
	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_SEND, local, 16, 0x12345678, 0, 0, 9) == 0, "post");
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 9, "bad lkey: status %d", wc.status);
	puts("ok send from an unregistered buffer: IBV_WC_LOC_PROT_ERR");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	/* RNR: rnr_retry 7 waits forever; a receive posted later takes the message. */
	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_SEND, local, 32, lmr->lkey, 0, 0, 10) == 0, "post");
	wc = wait_wc(a.cq, 100);
	CHECK(wc.status == (enum ibv_wc_status)-1, "no completion while the receiver has no receive");
	post_recv(b.qp, remote, 64, rmr->lkey, 51);
	wc = wait_wc(a.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 10, "send after RNR: %d", wc.status);
	wc = wait_wc(b.cq, 2000);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 51 && wc.byte_len == 32, "recv after RNR");
	puts("ok RNR with rnr_retry 7: the send waits for a receive");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	/* RNR with rnr_retry 1 and min_rnr_timer 1 (10 us): IBV_WC_RNR_RETRY_EXC_ERR. */
	pair(&a, &b, all, 1);
	CHECK(post(a.qp, IBV_WR_SEND, local, 32, lmr->lkey, 0, 0, 11) == 0, "post");
	wc = wait_wc(a.cq, 3000);
	CHECK(wc.status == IBV_WC_RNR_RETRY_EXC_ERR && wc.wr_id == 11, "rnr exceeded: status %d", wc.status);
	post_recv(b.qp, remote, 64, rmr->lkey, 52);
	wc = wait_wc(b.cq, 200);
	CHECK(wc.status == (enum ibv_wc_status)-1, "a send the requester gave up on must not be delivered");
	puts("ok RNR with rnr_retry 1: IBV_WC_RNR_RETRY_EXC_ERR, and the message is not delivered later");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	/* A peer that is gone: IBV_WC_RETRY_EXC_ERR after timeout x retry_cnt. */
	a = make_end(4);
	b = make_end(4);
	to_rts(a.qp, b.qp->qp_num, all, 7, 1, 8, 1); /* 4.096 us * 2^8 * 2 = 2 ms */
	to_rts(b.qp, a.qp->qp_num, all, 7, 1, 8, 1);
	ibv_destroy_qp(b.qp);
	CHECK(post(a.qp, IBV_WR_SEND, local, 32, lmr->lkey, 0, 0, 12) == 0, "post");
	wc = wait_wc(a.cq, 3000);
	CHECK(wc.status == IBV_WC_RETRY_EXC_ERR && wc.wr_id == 12, "peer gone: status %d", wc.status);
	puts("ok peer destroyed: IBV_WC_RETRY_EXC_ERR");
	ibv_destroy_qp(a.qp);

	/* Queue depth: max_send_wr outstanding, then ENOMEM. */
	pair(&a, &b, all, 7);
	for (int i = 0; i < 4; i++)
		CHECK(post(a.qp, IBV_WR_SEND, local, 8, lmr->lkey, 0, 0, 20 + i) == 0, "post %d", i);
	CHECK(post(a.qp, IBV_WR_SEND, local, 8, lmr->lkey, 0, 0, 24) == ENOMEM, "send queue full must be ENOMEM");
	puts("ok send queue depth enforced (ENOMEM)");
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);

	puts("ok all");
	return 0;
}
