/* rdma_get_recv_comp(3): returns one completed receive of the id (wr_id = context, the
 * ibv_wc fields), blocking until a receive completes. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

struct waiter {
	struct rdma_cm_id *id;
	struct ibv_wc wc;
	int rc;
	volatile int done;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	w->rc = rdma_get_recv_comp(w->id, &w->wc);
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_recv_comp", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-1", "DESC-WRID", "DESC-WC", "NOTE-BLOCKS", "WC-IMM" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char rbuf[4][64];
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	int ctx;
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	int r = rdma_post_recv(p.srv, &ctx, rbuf[0], 64, rmr);
	int s = rdma_post_send(p.cli, NULL, "twelve bytes", 12, NULL, IBV_SEND_INLINE);
	errno = 0;
	int n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	/* RETURN VALUE: the number of completions (1); DESCRIPTION: wr_id = context, and the
	 * work completion as ibv_poll_cq fills it. */
	CLAUSE("RET-1", n == 1, "returned %d (%s)", n, conf_errname(errno));
	CLAUSE("DESC-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx, "wr_id 0x%llx, context %p",
	       (unsigned long long)wc.wr_id, (void *)&ctx);
	CLAUSE("DESC-WC", n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 12 &&
	       wc.qp_num == p.srv->qp->qp_num, "status %s, opcode %d, byte_len %u, qp_num 0x%x (QP 0x%x)",
	       ibv_wc_status_str(wc.status), (int)wc.opcode, wc.byte_len, wc.qp_num, p.srv->qp->qp_num);
	rdma_get_send_comp(p.cli, &wc);

	/* NOTES: with no completion, the call blocks until a receive completes. */
	r = rdma_post_recv(p.srv, (void *)0x99, rbuf[1], 64, rmr);
	struct waiter w = { .id = p.srv };
	pthread_t th;
	pthread_create(&th, NULL, wait_thread, &w);
	h_sleep_ms(H_QUIET_MS);
	int early = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
	s = rdma_post_send(p.cli, NULL, "late", 5, NULL, IBV_SEND_INLINE);
	long long end = h_now_ms() + H_WAIT_MS;
	while (!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
		h_sleep_ms(2);
	int late = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
	if (late)
		pthread_join(th, NULL);
	else
		pthread_detach(th);
	CLAUSE("NOTE-BLOCKS", r == 0 && s == 0 && !early && late && w.rc == 1 && w.wc.wr_id == 0x99,
	       "returned before the send: %d; after: %d (rc %d)", early, late, w.rc);
	rdma_get_send_comp(p.cli, &wc);

	/* The ibv_wc of a SEND_WITH_IMM reports the immediate data. */
	r = rdma_post_recv(p.srv, NULL, rbuf[2], 64, rmr);
	struct ibv_sge sg = { (uintptr_t)"imm", 4, 0 };
	struct ibv_send_wr swr = { .wr_id = 1, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				   .send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED, .imm_data = htonl(0x1234) }, *bad;
	s = ibv_post_send(p.cli->qp, &swr, &bad);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("WC-IMM", n == 1 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0x1234) &&
	       wc.opcode == IBV_WC_RECV, "completion %d, flags 0x%x, imm 0x%x", n, n == 1 ? wc.wc_flags : 0,
	       n == 1 ? ntohl(wc.imm_data) : 0);
	rdma_get_send_comp(p.cli, &wc);
	if (rmr)
		rdma_dereg_mr(rmr);
	h_pair_close(&p);
	return conf_end();
}
