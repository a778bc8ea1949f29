/* ibv_poll_cq(3): returns up to num_entries work completions (fewer if fewer are there), each
 * removed from the CQ, with the fields the page describes. */
#include "ibvhelp.h"

#include <arpa/inet.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_poll_cq", argc, argv);
	struct ih_dev d;
	struct ih_pair p, u;
	struct ih_buf b;
	memset(&u, 0, sizeof u);
	int up = ih_dev_open(&d) == 0 &&
		 ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0 &&
		 ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0 &&
		 ih_pair_make(&d, &u, IBV_QPT_UD, 0) == 0;
	if (!up) {
		const char *ids[] = { "RET-EMPTY", "RET-COUNT", "RET-FEWER", "NOTE-REMOVED", "DESC-SEND-FIELDS",
				      "DESC-RECV-FIELDS", "DESC-IMM", "DESC-UD-SRC-QP", "DESC-UD-GRH", "DESC-ERROR-FIELDS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	struct ibv_wc wc[8];
	/* RETURN VALUE: the number of completions found: 0 on an empty CQ. */
	int n = ibv_poll_cq(p.cq[0], 8, wc);
	CLAUSE("RET-EMPTY", n == 0, "empty CQ: %d", n);
	/* Four RDMA writes; poll 3 of them, then the rest: num_entries at most, in order. */
	for (int i = 0; i < 4; i++)
		ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 16, b.mr->lkey, (uintptr_t)b.buf + 4096, b.mr->rkey,
			     (uint64_t)(100 + i));
	int got = 0;
	long long end = ih_now_ms() + IH_WAIT_MS;
	/* Wait for all four without removing any: a resize below the held count fails. */
	while (ih_now_ms() < end && ibv_resize_cq(p.cq[0], 3) == 0) {
		struct timespec t = { 0, 1000000 };
		nanosleep(&t, NULL);
	}
	n = ibv_poll_cq(p.cq[0], 3, wc);
	CLAUSE("RET-COUNT", n == 3 && wc[0].wr_id == 100 && wc[2].wr_id == 102, "poll(3) of 4: %d, first wr_id %llu", n,
	       n > 0 ? (unsigned long long)wc[0].wr_id : 0ull);
	/* DESCRIPTION: fewer available than asked: all of them. */
	got = ibv_poll_cq(p.cq[0], 8, wc + 3);
	CLAUSE("RET-FEWER", got == 1 && wc[3].wr_id == 103, "poll(8) of the 1 left: %d", got);
	/* NOTES: each polled completion is removed: the CQ is empty now. */
	n = ibv_poll_cq(p.cq[0], 8, wc);
	CLAUSE("NOTE-REMOVED", n == 0, "a third poll returned %d", n);
	/* The send completion: wr_id, status, opcode, qp_num. */
	CLAUSE("DESC-SEND-FIELDS", wc[3].status == IBV_WC_SUCCESS && wc[3].opcode == IBV_WC_RDMA_WRITE &&
					  wc[3].qp_num == p.qp[0]->qp_num,
	       "status %s opcode %d qp_num 0x%x (QP 0x%x)", ibv_wc_status_str(wc[3].status), wc[3].opcode, wc[3].qp_num,
	       p.qp[0]->qp_num);
	/* A receive completion: opcode RECV, byte_len, qp_num of the receiving QP. */
	ih_post_recv(p.qp[1], b.buf + 1024, 256, b.mr->lkey, 55);
	ih_post_send(p.qp[0], IBV_WR_SEND, b.buf, 33, b.mr->lkey, 0, 0, 56);
	struct ibv_wc r;
	int rr = ih_poll(p.cq[1], &r, IH_WAIT_MS);
	ih_poll(p.cq[0], wc, IH_WAIT_MS);
	CLAUSE("DESC-RECV-FIELDS", rr == 1 && r.status == IBV_WC_SUCCESS && r.wr_id == 55 && r.opcode == IBV_WC_RECV &&
					  r.byte_len == 33 && r.qp_num == p.qp[1]->qp_num && !(r.wc_flags & IBV_WC_WITH_IMM),
	       "wr_id %llu opcode %d byte_len %u qp_num 0x%x wc_flags 0x%x", (unsigned long long)r.wr_id, r.opcode,
	       r.byte_len, r.qp_num, r.wc_flags);
	/* IBV_WC_WITH_IMM: the immediate data is valid, in network byte order. */
	struct ibv_sge sge = { (uintptr_t)b.buf, 4, b.mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = 57;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(0x12345678);
	ih_post_recv(p.qp[1], b.buf + 1024, 256, b.mr->lkey, 58);
	ibv_post_send(p.qp[0], &wr, &bad);
	rr = ih_poll(p.cq[1], &r, IH_WAIT_MS);
	ih_poll(p.cq[0], wc, IH_WAIT_MS);
	CLAUSE("DESC-IMM", rr == 1 && (r.wc_flags & IBV_WC_WITH_IMM) && ntohl(r.imm_data) == 0x12345678,
	       "wc_flags 0x%x imm_data 0x%08x", r.wc_flags, ntohl(r.imm_data));
	/* UD: src_qp is the sender's QP number; IBV_WC_GRH says a GRH is present (the first 40
	 * bytes of the buffer). */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.is_global = 1;
	aa.grh.dgid = d.gid;
	aa.grh.sgid_index = (uint8_t)d.gid_index;
	aa.grh.hop_limit = 1;
	aa.port_num = 1;
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	int ur = 0;
	if (ah) {
		ih_post_recv(u.qp[1], b.buf + 2048, 40 + 64, b.mr->lkey, 60);
		memset(&wr, 0, sizeof wr);
		sge.length = 16;
		wr.wr_id = 61;
		wr.sg_list = &sge;
		wr.num_sge = 1;
		wr.opcode = IBV_WR_SEND;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.wr.ud.ah = ah;
		wr.wr.ud.remote_qpn = u.qp[1]->qp_num;
		wr.wr.ud.remote_qkey = IH_QKEY;
		if (ibv_post_send(u.qp[0], &wr, &bad) == 0)
			ur = ih_poll(u.cq[1], &r, IH_WAIT_MS);
		ih_poll(u.cq[0], wc, IH_WAIT_MS);
	}
	CLAUSE("DESC-UD-SRC-QP", ur == 1 && r.status == IBV_WC_SUCCESS && r.src_qp == u.qp[0]->qp_num,
	       "UD receive %d: src_qp 0x%x (sender 0x%x)", ur, ur == 1 ? r.src_qp : 0, u.qp[0]->qp_num);
	CLAUSE("DESC-UD-GRH", ur == 1 && (r.wc_flags & IBV_WC_GRH) && r.byte_len == 40 + 16,
	       "UD receive: wc_flags 0x%x byte_len %u", ur == 1 ? r.wc_flags : 0, ur == 1 ? r.byte_len : 0);
	if (ah)
		ibv_destroy_ah(ah);
	/* A completion in error: wr_id, status and qp_num are valid (a receive flushed by ERR). */
	ih_post_recv(p.qp[1], b.buf, 64, b.mr->lkey, 77);
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	ibv_modify_qp(p.qp[1], &qa, IBV_QP_STATE);
	rr = ih_poll(p.cq[1], &r, IH_WAIT_MS);
	CLAUSE("DESC-ERROR-FIELDS", rr == 1 && r.status == IBV_WC_WR_FLUSH_ERR && r.wr_id == 77 &&
					   r.qp_num == p.qp[1]->qp_num,
	       "flushed receive: %d, status %s wr_id %llu qp_num 0x%x", rr, rr == 1 ? ibv_wc_status_str(r.status) : "-",
	       rr == 1 ? (unsigned long long)r.wr_id : 0ull, rr == 1 ? r.qp_num : 0);
	ih_pair_destroy(&u);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
