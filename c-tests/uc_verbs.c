/*
 * UC QPs (issue 13): connected like RC, without acknowledgements. Two UC QPs of one process:
 *
 * 1. the UC state table: RTR refuses RC-only attributes (max_dest_rd_atomic, min_rnr_timer)
 *    and RTS refuses timeout/retry (EINVAL); the UC masks pass;
 * 2. READ and atomics cannot be posted on UC (EINVAL);
 * 3. a SEND with no receive posted completes at the sender and is dropped at the receiver (no
 *    RNR); the next one, with a receive, arrives: the receiver sees only it;
 * 4. a SEND longer than the posted receive is dropped and the receive stays posted for the next
 *    message that fits;
 * 5. RDMA WRITE with immediate: the data at the target and a RECV_RDMA_WITH_IMM completion
 *    with the immediate;
 * 6. an RDMA WRITE with a wrong rkey completes at the sender, writes nothing, and leaves the
 *    responder in RTS: a later SEND still arrives.
 */
#include <errno.h>

#include "rc_pair.h"

#define BUF 4096
#define WAIT_MS 5000

static const int ACCESS = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;

static void uc_to_rts(struct ibv_qp *qp, uint32_t dest)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = ACCESS };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.port_num = 1;
	int base = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	errno = 0;
	CHECK(ibv_modify_qp(qp, &a, base | IBV_QP_MAX_DEST_RD_ATOMIC) == EINVAL, "UC RTR took max_dest_rd_atomic");
	CHECK(ibv_modify_qp(qp, &a, base | IBV_QP_MIN_RNR_TIMER) == EINVAL, "UC RTR took min_rnr_timer");
	CHECK(ibv_modify_qp(qp, &a, base) == 0, "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT) == EINVAL, "UC RTS took timeout");
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_RETRY_CNT) == EINVAL,
	      "UC RTS took retry_cnt");
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "RTS");
}

/* The next completion on cq, which must have `status` (and, for receives, `opcode`). */
static struct ibv_wc expect(struct ibv_cq *cq, enum ibv_wc_status status, const char *what)
{
	struct ibv_wc wc = wait_wc(cq, WAIT_MS);
	CHECK((int)wc.status != -1, "%s: no completion", what);
	CHECK(wc.status == status, "%s: %s", what, ibv_wc_status_str(wc.status));
	return wc;
}

static void expect_none(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc = wait_wc(cq, 200);
	CHECK((int)wc.status == -1, "%s: an unexpected completion (wr_id %llu, %s)", what,
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

int main(void)
{
	open_first_device();
	char *abuf = calloc(1, BUF), *bbuf = calloc(1, BUF);
	struct ibv_mr *amr = ibv_reg_mr(pd, abuf, BUF, ACCESS), *bmr = ibv_reg_mr(pd, bbuf, BUF, ACCESS);
	CHECK(amr && bmr, "reg_mr");

	struct end a = make_end_of(IBV_QPT_UC, 8), b = make_end_of(IBV_QPT_UC, 8);
	CHECK(a.qp->qp_type == IBV_QPT_UC, "qp_type");
	uc_to_rts(a.qp, b.qp->qp_num);
	uc_to_rts(b.qp, a.qp->qp_num);
	printf("ok UC state table: RC-only attributes refused, UC masks accepted\n");

	CHECK(post(a.qp, IBV_WR_RDMA_READ, abuf, 8, amr->lkey, (uintptr_t)bbuf, bmr->rkey, 1) == EINVAL,
	      "READ posted on UC");
	CHECK(post(a.qp, IBV_WR_ATOMIC_FETCH_AND_ADD, abuf, 8, amr->lkey, (uintptr_t)bbuf, bmr->rkey, 1) == EINVAL,
	      "atomic posted on UC");
	printf("ok READ and atomics refused on UC (EINVAL)\n");

	/* 3. No receive: dropped. */
	strcpy(abuf, "first");
	CHECK(post(a.qp, IBV_WR_SEND, abuf, 6, amr->lkey, 0, 0, 10) == 0, "post");
	expect(a.cq, IBV_WC_SUCCESS, "SEND without a receive, at the sender");
	expect_none(b.cq, "SEND without a receive, at the receiver");
	post_recv(b.qp, bbuf, 64, bmr->lkey, 20);
	strcpy(abuf, "second");
	CHECK(post(a.qp, IBV_WR_SEND, abuf, 7, amr->lkey, 0, 0, 11) == 0, "post");
	expect(a.cq, IBV_WC_SUCCESS, "second SEND, at the sender");
	struct ibv_wc wc = expect(b.cq, IBV_WC_SUCCESS, "second SEND, at the receiver");
	CHECK(wc.wr_id == 20 && wc.opcode == IBV_WC_RECV && wc.byte_len == 7 && !strcmp(bbuf, "second"),
	      "the receiver got '%s' (%u bytes)", bbuf, wc.byte_len);
	printf("ok a SEND with no receive posted is dropped, without RNR; the next one arrives\n");

	/* 4. Too long for the receive: dropped, the receive stays. */
	post_recv(b.qp, bbuf, 16, bmr->lkey, 21);
	memset(abuf, 'L', 100);
	CHECK(post(a.qp, IBV_WR_SEND, abuf, 100, amr->lkey, 0, 0, 12) == 0, "post");
	expect(a.cq, IBV_WC_SUCCESS, "long SEND, at the sender");
	expect_none(b.cq, "long SEND, at the receiver");
	strcpy(abuf, "fits");
	CHECK(post(a.qp, IBV_WR_SEND, abuf, 5, amr->lkey, 0, 0, 13) == 0, "post");
	expect(a.cq, IBV_WC_SUCCESS, "short SEND, at the sender");
	wc = expect(b.cq, IBV_WC_SUCCESS, "short SEND, at the receiver");
	CHECK(wc.wr_id == 21 && wc.byte_len == 5 && !strcmp(bbuf, "fits"), "the receive kept for the next message");
	printf("ok a SEND longer than the receive is dropped; the receive takes the next one\n");

	/* 5. WRITE with immediate. */
	post_recv(b.qp, bbuf, 16, bmr->lkey, 22);
	memset(abuf, 'W', 256);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE_WITH_IMM, abuf, 256, amr->lkey, (uintptr_t)bbuf + 1024, bmr->rkey, 14) == 0,
	      "post");
	expect(a.cq, IBV_WC_SUCCESS, "WRITE with immediate, at the sender");
	wc = expect(b.cq, IBV_WC_SUCCESS, "WRITE with immediate, at the target");
	CHECK(wc.wr_id == 22 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM) &&
		      ntohl(wc.imm_data) == 0xabcd,
	      "RECV_RDMA_WITH_IMM with the immediate (opcode %d, imm %#x)", wc.opcode, ntohl(wc.imm_data));
	for (int i = 0; i < 256; i++)
		CHECK(bbuf[1024 + i] == 'W', "WRITE data at the target, byte %d", i);
	printf("ok RDMA WRITE with immediate: data and immediate at the target\n");

	/* 6. A wrong rkey: dropped silently, the responder stays in RTS. */
	memset(bbuf + 2048, 0, 64);
	memset(abuf, 'X', 64);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, abuf, 64, amr->lkey, (uintptr_t)bbuf + 2048, bmr->rkey ^ 1, 15) == 0,
	      "post");
	expect(a.cq, IBV_WC_SUCCESS, "WRITE with a wrong rkey, at the sender (UC has no NAK)");
	post_recv(b.qp, bbuf, 16, bmr->lkey, 23);
	strcpy(abuf, "after");
	CHECK(post(a.qp, IBV_WR_SEND, abuf, 6, amr->lkey, 0, 0, 16) == 0, "post");
	expect(a.cq, IBV_WC_SUCCESS, "SEND after the bad WRITE, at the sender");
	wc = expect(b.cq, IBV_WC_SUCCESS, "SEND after the bad WRITE, at the receiver");
	CHECK(wc.wr_id == 23 && !strcmp(bbuf, "after"), "SEND after the bad WRITE");
	for (int i = 0; i < 64; i++)
		CHECK(bbuf[2048 + i] == 0, "the bad WRITE wrote byte %d", i);
	CHECK(qp_state(b.qp) == IBV_QPS_RTS && qp_state(a.qp) == IBV_QPS_RTS, "a QP left RTS");
	printf("ok a WRITE with a wrong rkey is dropped: nothing written, both QPs in RTS\n");

	printf("PASS\n");
	return 0;
}
