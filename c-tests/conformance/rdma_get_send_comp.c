/* rdma_get_send_comp(3): returns one completed send (or RDMA read/write) of the id, with
 * wr_id = the request's context; blocks until one completes. */
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
	w->rc = rdma_get_send_comp(w->id, &w->wc);
	__atomic_store_n(&w->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_send_comp", argc, argv);
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-1", "DESC-WRID", "NOTE-BLOCKS", "DESC-RDMA" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char rbuf[4][64], target[64];
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	int ctx;
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	/* RETURN VALUE: the number of completions returned (1) ... */
	int r = rdma_post_recv(p.srv, NULL, rbuf[0], 64, rmr);
	int s = rdma_post_send(p.cli, &ctx, "send", 5, NULL, IBV_SEND_INLINE);
	errno = 0;
	int n = r == 0 && s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("RET-1", n == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
	       "returned %d (%s), status %s, opcode %d", n, conf_errname(errno),
	       n == 1 ? ibv_wc_status_str(wc.status) : "-", n == 1 ? (int)wc.opcode : -1);
	/* DESCRIPTION: ... with wr_id set to the request's context. */
	CLAUSE("DESC-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx, "wr_id 0x%llx, context %p",
	       (unsigned long long)wc.wr_id, (void *)&ctx);
	rdma_get_recv_comp(p.srv, &wc);

	/* NOTES: if no completion is there, the call blocks until a request completes (a send
	 * waits for the peer's receive, posted later). */
	s = rdma_post_send(p.cli, (void *)0x77, "late", 5, NULL, IBV_SEND_INLINE);
	struct waiter w = { .id = p.cli };
	pthread_t th;
	pthread_create(&th, NULL, wait_thread, &w);
	h_sleep_ms(H_QUIET_MS);
	int early = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
	r = rdma_post_recv(p.srv, NULL, rbuf[1], 64, rmr);
	long long end = h_now_ms() + H_WAIT_MS;
	while (!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
		h_sleep_ms(2);
	int late = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
	int recv_done = h_poll(p.srv->recv_cq, &wc, late ? H_WAIT_MS : 10) == 1;
	CLAUSE("NOTE-BLOCKS", s == 0 && r == 0 && !early && late && w.rc == 1 && w.wc.wr_id == 0x77,
	       "post_send %d, post_recv %d; returned before the peer's receive: %d; after: %d (rc %d, "
	       "wr_id 0x%llx); a poll of the receiver's CQ afterwards %s", s, r, early, late, w.rc, (unsigned long long)w.wc.wr_id,
	       recv_done ? "returned the receive" : "found no receive");
	if (!late) { /* polling the receiver above moved the message; give the waiter its chance */
		if (!recv_done)
			h_poll(p.srv->recv_cq, &wc, H_WAIT_MS);
		end = h_now_ms() + H_WAIT_MS;
		while (!__atomic_load_n(&w.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
			h_sleep_ms(2);
	}
	int joined = __atomic_load_n(&w.done, __ATOMIC_SEQ_CST);
	if (joined)
		pthread_join(th, NULL);
	else
		pthread_detach(th);

	/* DESCRIPTION: RDMA writes (and reads) complete through it as well. */
	struct ibv_mr *tmr = joined ? rdma_reg_write(p.srv, target, sizeof target) : NULL;
	int wr = tmr ? rdma_post_write(p.cli, (void *)0x88, "written", 8, NULL, IBV_SEND_INLINE, (uintptr_t)target,
				      tmr->rkey) : -2;
	n = wr == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("DESC-RDMA", n == 1 && wc.wr_id == 0x88 && wc.opcode == IBV_WC_RDMA_WRITE &&
	       wc.status == IBV_WC_SUCCESS, "rdma_post_write %d (%s), completion %d, opcode %d", wr,
	       conf_errname(errno), n, n == 1 ? (int)wc.opcode : -1);
	if (tmr)
		rdma_dereg_mr(tmr);
	if (rmr)
		rdma_dereg_mr(rmr);
	h_pair_close(&p);
	return conf_end();
}
