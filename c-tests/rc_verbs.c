/* RC verbs on the soft provider with raw verbs (two QPs of one process connected with
 * ibv_modify_qp, as ibv_rc_pingpong does): one-sided operations, access checks at the target,
 * error completions, RNR retries, transport retries towards a destroyed peer, queue depths.
 * Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <errno.h>

#include "rc_pair.h"

int main(void)
{
	open_first_device();
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
