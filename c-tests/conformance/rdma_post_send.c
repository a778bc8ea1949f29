/* rdma_post_send(3): posts a send on the id's QP: the peer's posted receive gets the bytes,
 * the context comes back as wr_id, inline data needs no registration (otherwise the buffer
 * must be registered), not before the connection, flags as for ibv_post_send. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_post_send", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 0); /* sq_sig_all = 0 */
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };

	/* NOTES: not before the connection: on a QP that is only created, the post fails. */
	struct ibv_qp_init_attr a0 = qa;
	struct h_pair_opts o0 = { .cli_qp = &a0 };
	if (h_pair_prepare(&p, conf_port(0), &o0) != 0) {
		CLAUSE_BLOCKED("NOTE-NOT-CONNECTED", p.err);
	} else {
		static char b[16] = "too early";
		errno = 0;
		int rc = rdma_post_send(p.cli, NULL, b, sizeof b, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
		CLAUSE("NOTE-NOT-CONNECTED", rc == -1 && errno == EINVAL, "post on an unconnected QP: %d (%s)", rc,
		       conf_errname(errno));
	}
	h_pair_close(&p);

	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		const char *ids[] = { "RET-0", "DESC-DELIVERED", "NOTE-WRID", "NOTE-INLINE", "NOTE-UNREGISTERED",
				      "FLAG-UNSIGNALED", "NOTE-PEER-RECV" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char sbuf[128], rbuf[4][128];
	struct ibv_mr *smr = rdma_reg_msgs(p.cli, sbuf, sizeof sbuf);
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	struct ibv_wc wc;
	int ctx;

	/* RETURN VALUE 0; DESCRIPTION: the buffer's contents reach the peer's receive. */
	strcpy(sbuf, "a message for the peer");
	int r = rdma_post_recv(p.srv, NULL, rbuf[0], 128, rmr);
	errno = 0;
	int s = rdma_post_send(p.cli, &ctx, sbuf, strlen(sbuf) + 1, smr, IBV_SEND_SIGNALED);
	CLAUSE("RET-0", s == 0, "returned %d (%s)", s, conf_errname(errno));
	int n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	CLAUSE("DESC-DELIVERED", n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == strlen(sbuf) + 1 &&
	       strcmp(rbuf[0], sbuf) == 0, "receive completion %d (%s), %u bytes, data %s", n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-", n == 1 ? wc.byte_len : 0,
	       strcmp(rbuf[0], sbuf) == 0 ? "ok" : "wrong");
	/* NOTES: the context comes back in the completion's wr_id. */
	n = s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.status == IBV_WC_SUCCESS &&
	       wc.opcode == IBV_WC_SEND, "send completion %d, wr_id 0x%llx (context %p), opcode %d", n,
	       n == 1 ? (unsigned long long)wc.wr_id : 0ULL, (void *)&ctx, n == 1 ? (int)wc.opcode : -1);

	/* NOTES: inline data needs no registration (mr NULL, buffer on the stack). */
	char inl[32] = "inline, unregistered";
	r = rdma_post_recv(p.srv, NULL, rbuf[1], 128, rmr);
	s = rdma_post_send(p.cli, (void *)2, inl, strlen(inl) + 1, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
	memset(inl, 'X', sizeof inl - 1); /* inline: the data was taken at post time */
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	int n2 = s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("NOTE-INLINE", s == 0 && n == 1 && n2 == 1 && strcmp(rbuf[1], "inline, unregistered") == 0,
	       "post %d (%s), receive %d, send completion %d, data \"%.24s\"", s, conf_errname(errno), n, n2,
	       rbuf[1]);

	/* flags: without IBV_SEND_SIGNALED (QP made with sq_sig_all = 0) no send completion. */
	r = rdma_post_recv(p.srv, NULL, rbuf[2], 128, rmr);
	s = rdma_post_send(p.cli, (void *)3, sbuf, 8, smr, 0);
	n = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	int quiet = h_poll(p.cli->send_cq, &wc, H_QUIET_MS);
	CLAUSE("FLAG-UNSIGNALED", s == 0 && n == 1 && quiet == 0, "unsignaled send %d delivered %d; send "
	       "completions seen: %d (wr_id %llu)", s, n, quiet, quiet == 1 ? (unsigned long long)wc.wr_id : 0ULL);

	/* NOTES: the peer must have a receive queued: a send posted first waits for it. */
	s = rdma_post_send(p.cli, (void *)4, sbuf, 16, smr, IBV_SEND_SIGNALED);
	h_sleep_ms(100);
	r = rdma_post_recv(p.srv, NULL, rbuf[3], 128, rmr);
	n = s == 0 && r == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	n2 = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-PEER-RECV", n == 1 && n2 == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 4,
	       "send before the receive: receive %d, send completion %d (%s)", n, n2,
	       n2 == 1 ? ibv_wc_status_str(wc.status) : "-");

	/* NOTES: without inline data the buffer must be registered: mr NULL (lkey 0) ends in an
	 * error completion, never in a successful transfer. */
	static char plain[32] = "not registered";
	r = rdma_post_recv(p.srv, NULL, rbuf[0], 128, rmr);
	s = rdma_post_send(p.cli, (void *)5, plain, sizeof plain, NULL, IBV_SEND_SIGNALED);
	n = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-UNREGISTERED", (s == -1) || (n == 1 && wc.status == IBV_WC_LOC_PROT_ERR),
	       "post %d, completion %d (%s)", s, n, n == 1 ? ibv_wc_status_str(wc.status) : "-");

	(void)err;
	if (smr)
		rdma_dereg_mr(smr);
	if (rmr)
		rdma_dereg_mr(rmr);
	h_pair_close(&p);
	return conf_end();
}
