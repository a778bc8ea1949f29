/* rdma_post_recv(3): posts a registered buffer to the receive queue (possible as soon as the
 * id has a QP): it receives the peer's next message, wr_id = context; it must be large enough. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_recv", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair p;
	static char rbuf[3][64], early[64], sbuf[64] = "message";

	/* NOTES: receives may be posted once the id has a QP, before the connection exists. */
	struct ibv_qp_init_attr a1 = qa, a2 = qa;
	struct h_pair_opts o = { .cli_qp = &a1, .srv_qp = &a2 };
	struct ibv_mr *emr = NULL;
	int pre = -2;
	int ok = h_pair_prepare(&p, conf_port(0), &o) == 0;
	if (ok) {
		emr = rdma_reg_msgs(p.cli, early, sizeof early);
		pre = emr ? rdma_post_recv(p.cli, (void *)0xe, early, sizeof early, emr) : -2;
		ok = rdma_connect(p.cli, NULL) == 0;
	}
	struct rdma_cm_event *req = NULL;
	if (ok && h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, p.err, sizeof p.err) == 0) {
		p.srv = req->id;
		ok = rdma_create_qp(p.srv, NULL, &a2) == 0 && rdma_accept(p.srv, NULL) == 0;
		rdma_ack_cm_event(req);
		ok = ok && h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, p.err, sizeof p.err) == 0 &&
		     h_expect(p.sch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, NULL, p.err, sizeof p.err) == 0;
	} else {
		ok = 0;
	}
	if (!ok) {
		const char *ids[] = { "NOTE-AFTER-QP", "RET-0", "DESC-RECEIVE", "NOTE-WRID", "NOTE-TOO-SMALL" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	struct ibv_wc wc;
	int s = rdma_post_send(p.srv, NULL, "to the early receive", 21, NULL, IBV_SEND_INLINE);
	int n = rdma_get_recv_comp(p.cli, &wc);
	CLAUSE("NOTE-AFTER-QP", pre == 0 && s == 0 && n == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 0xe &&
	       strcmp(early, "to the early receive") == 0, "posted before connecting %d; completion %d (%s)", pre,
	       n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
	rdma_get_send_comp(p.srv, &wc);

	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	int ctx;
	/* RETURN VALUE 0; DESCRIPTION: the buffer receives the peer's message. */
	errno = 0;
	int r = rmr ? rdma_post_recv(p.srv, &ctx, rbuf[0], 64, rmr) : -2;
	CLAUSE("RET-0", r == 0, "returned %d (%s)", r, conf_errname(errno));
	s = rdma_post_send(p.cli, NULL, sbuf, 8, NULL, IBV_SEND_INLINE);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("DESC-RECEIVE", n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 8 &&
	       strcmp(rbuf[0], "message") == 0 && wc.opcode == IBV_WC_RECV,
	       "completion %d (%s), %u bytes, \"%.10s\"", n, n == 1 ? ibv_wc_status_str(wc.status) : "-",
	       n == 1 ? wc.byte_len : 0, rbuf[0]);
	/* NOTES: the context comes back as wr_id. */
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx, "wr_id 0x%llx, context %p",
	       n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx);
	rdma_get_send_comp(p.cli, &wc);
	/* NOTES: the buffer must be large enough for the message: a smaller one completes with a
	 * length error. */
	r = rmr ? rdma_post_recv(p.srv, (void *)7, rbuf[1], 4, rmr) : -2;
	s = rdma_post_send(p.cli, NULL, sbuf, 16, NULL, IBV_SEND_INLINE);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("NOTE-TOO-SMALL", n == 1 && wc.status == IBV_WC_LOC_LEN_ERR && wc.wr_id == 7,
	       "16 bytes into 4: completion %d (%s)", n, n == 1 ? ibv_wc_status_str(wc.status) : "-");
	(void)err;
	if (rmr)
		rdma_dereg_mr(rmr);
	if (emr)
		rdma_dereg_mr(emr);
	h_pair_close(&p);
	return conf_end();
}
