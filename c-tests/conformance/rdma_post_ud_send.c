/* rdma_post_ud_send(3), in depth: a datagram to a UD QP (found through the rdma_cm's UD
 * lookup) arrives after the 40-byte GRH with exactly the bytes sent; wr_id = context; inline
 * sends need no MR; signaled vs unsignaled; the hard-coded RDMA_UDP_QKEY (a QP with another
 * qkey drops it); no receive posted = dropped; errors: unregistered buffer (error completion),
 * larger than the path MTU, past the send queue depth, QP not ready (-1 and errno). */
#include "cmhelp.h"

#include <stdlib.h>
#include <rdma/rdma_verbs.h>

#define GRH 40

static int recv_one(struct rdma_cm_id *id, struct ibv_mr *mr, char *buf, size_t len, void *ctx)
{
	return rdma_post_recv(id, ctx, buf, len, mr);
}

int main(int argc, char **argv)
{
	conf_begin("rdma_post_ud_send", argc, argv);
	char err[256] = "";
	static const char *all_ids[] = { "RET-0", "DESC-DELIVERED", "NOTE-WRID", "NOTE-INLINE", "FLAG-SIGNALED",
					 "FLAG-UNSIGNALED", "NOTE-RECV-FIRST", "QKEY-FIXED", "QKEY-MISMATCH",
					 "ERR-MTU", "ERR-SQ-DEPTH", "NOTE-UNREGISTERED", "ERR-NOT-READY" };
	struct ibv_qp_init_attr ca = h_qp_attr(IBV_QPT_UD, 4, 0); /* sq_sig_all = 0 */
	struct h_pair p;
	struct h_pair_opts o = { .ps = RDMA_PS_UDP, .cli_qp = &ca };
	struct rdma_cm_event *est = NULL;
	struct ibv_ah *ah = NULL;
	int ok = h_pair_prepare(&p, conf_port(0), &o) == 0;
	if (ok && rdma_connect(p.cli, NULL) != 0) {
		snprintf(p.err, sizeof p.err, "rdma_connect: %s", conf_errname(errno));
		ok = 0;
	}
	struct rdma_cm_event *req = NULL;
	if (ok && h_expect(p.sch, RDMA_CM_EVENT_CONNECT_REQUEST, H_WAIT_MS, &req, p.err, sizeof p.err) == 0) {
		p.srv = req->id;
		struct ibv_qp_init_attr sa = h_qp_attr(IBV_QPT_UD, 8, 0);
		ok = rdma_create_qp(p.srv, NULL, &sa) == 0 && rdma_accept(p.srv, NULL) == 0;
		if (!ok)
			snprintf(p.err, sizeof p.err, "server UD QP/accept: %s", conf_errname(errno));
		rdma_ack_cm_event(req);
	} else {
		ok = 0;
	}
	if (ok && h_expect(p.cch, RDMA_CM_EVENT_ESTABLISHED, H_WAIT_MS, &est, p.err, sizeof p.err) != 0)
		ok = 0;
	if (ok && !(ah = ibv_create_ah(p.cli->pd, &est->param.ud.ah_attr))) {
		snprintf(p.err, sizeof p.err, "ibv_create_ah: %s", conf_errname(errno));
		ok = 0;
	}
	if (!ok) {
		for (size_t i = 0; i < sizeof all_ids / sizeof all_ids[0]; i++)
			CLAUSE_BLOCKED(all_ids[i], p.err);
		if (est)
			rdma_ack_cm_event(est);
		if (p.srv && p.srv->qp)
			rdma_destroy_qp(p.srv);
		h_pair_close(&p);
		return conf_end();
	}
	uint32_t qpn = est->param.ud.qp_num;
	rdma_ack_cm_event(est);

	static char sbuf[256], rbuf[8][256 + GRH];
	struct ibv_mr *smr = rdma_reg_msgs(p.cli, sbuf, sizeof sbuf);
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	struct ibv_wc wc;
	int ctx;

	/* RETURN VALUE 0; DESCRIPTION: the buffer goes to the destination QP, which sees it after
	 * the 40-byte GRH, exactly. */
	strcpy(sbuf, "a datagram");
	int r = recv_one(p.srv, rmr, rbuf[0], sizeof rbuf[0], (void *)0x10);
	errno = 0;
	int s = rdma_post_ud_send(p.cli, &ctx, sbuf, 11, smr, IBV_SEND_SIGNALED, ah, qpn);
	CLAUSE("RET-0", s == 0, "returned %d (%s)", s, conf_errname(errno));
	int n = r == 0 && s == 0 ? h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("DESC-DELIVERED", n == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 11 + GRH &&
	       (wc.wc_flags & IBV_WC_GRH) && memcmp(rbuf[0] + GRH, "a datagram", 11) == 0 &&
	       wc.src_qp == p.cli->qp->qp_num, "receive %d (%s), byte_len %u (want %d), GRH flag %d, "
	       "payload \"%.11s\", src_qp 0x%x", n, n == 1 ? ibv_wc_status_str(wc.status) : "-",
	       n == 1 ? wc.byte_len : 0, 11 + GRH, n == 1 && (wc.wc_flags & IBV_WC_GRH), rbuf[0] + GRH,
	       n == 1 ? wc.src_qp : 0);
	/* NOTES: the context comes back as the send completion's wr_id; FLAGS: a signaled send
	 * completes on a QP without sq_sig_all. */
	n = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-WRID", n == 1 && wc.wr_id == (uintptr_t)&ctx && wc.status == IBV_WC_SUCCESS,
	       "send completion %d, wr_id 0x%llx (context %p)", n, n == 1 ? (unsigned long long)wc.wr_id : 0ULL,
	       (void *)&ctx);
	CLAUSE("FLAG-SIGNALED", n == 1 && wc.opcode == IBV_WC_SEND, "signaled send: completion %d", n);

	/* NOTES: inline data needs no registration (mr NULL). */
	char inl[16] = "inline dgram";
	r = recv_one(p.srv, rmr, rbuf[1], sizeof rbuf[1], NULL);
	s = rdma_post_ud_send(p.cli, (void *)2, inl, 13, NULL, IBV_SEND_INLINE | IBV_SEND_SIGNALED, ah, qpn);
	memset(inl, 'X', 12);
	n = r == 0 && s == 0 ? h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) : -2;
	int n2 = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-INLINE", s == 0 && n == 1 && n2 == 1 && memcmp(rbuf[1] + GRH, "inline dgram", 13) == 0,
	       "post %d (%s), receive %d, send completion %d", s, conf_errname(errno), n, n2);

	/* FLAGS: without IBV_SEND_SIGNALED no send completion (the datagram still goes). */
	r = recv_one(p.srv, rmr, rbuf[2], sizeof rbuf[2], NULL);
	s = rdma_post_ud_send(p.cli, (void *)3, sbuf, 11, smr, 0, ah, qpn);
	n = r == 0 && s == 0 ? h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) : -2;
	n2 = h_poll(p.cli->send_cq, &wc, H_QUIET_MS);
	CLAUSE("FLAG-UNSIGNALED", s == 0 && n == 1 && n2 == 0, "unsignaled send %d, delivered %d, send "
	       "completions %d", s, n, n2);

	/* NOTES: the destination must have queued a receive: a datagram that finds none is
	 * dropped (a receive posted later gets the next datagram, not that one). */
	strcpy(sbuf, "dropped");
	s = rdma_post_ud_send(p.cli, NULL, sbuf, 8, smr, IBV_SEND_SIGNALED, ah, qpn);
	h_poll(p.cli->send_cq, &wc, H_WAIT_MS);
	h_sleep_ms(50);
	r = recv_one(p.srv, rmr, rbuf[3], sizeof rbuf[3], NULL);
	n = h_poll(p.srv->recv_cq, &wc, H_QUIET_MS);
	strcpy(sbuf, "second");
	int s2 = rdma_post_ud_send(p.cli, NULL, sbuf, 7, smr, IBV_SEND_SIGNALED, ah, qpn);
	n2 = n == 0 && s2 == 0 ? h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) : -2;
	h_poll(p.cli->send_cq, &wc, H_WAIT_MS);
	CLAUSE("NOTE-RECV-FIRST", s == 0 && r == 0 && n == 0 && n2 == 1 && strcmp(rbuf[3] + GRH, "second") == 0,
	       "no receive posted: the receive posted afterwards got %s (first poll %d, second %d, "
	       "payload \"%.8s\")", n ? "the dropped datagram" : "nothing", n, n2, rbuf[3] + GRH);

	/* The qkey is RDMA_UDP_QKEY: rdma_create_qp gave the UD QP that qkey ... */
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	int q = ibv_query_qp(p.srv->qp, &at, IBV_QP_QKEY, &ia);
	CLAUSE("QKEY-FIXED", q == 0 && at.qkey == RDMA_UDP_QKEY, "server QP qkey 0x%x (query %d)", at.qkey, q);
	/* ... and a QP with another qkey drops rdma_post_ud_send's datagrams (while a send with
	 * its own qkey reaches it). */
	struct ibv_cq *ocq = ibv_create_cq(p.srv->verbs, 4, NULL, NULL, 0);
	struct ibv_qp_init_attr oa = h_qp_attr(IBV_QPT_UD, 4, 1);
	oa.send_cq = oa.recv_cq = ocq;
	struct ibv_qp *oqp = ocq ? ibv_create_qp(p.srv->pd, &oa) : NULL;
	int mod = -1;
	if (oqp) {
		struct ibv_qp_attr m = { .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = p.srv->port_num,
					 .qkey = 0x11111111 };
		mod = ibv_modify_qp(oqp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
		m.qp_state = IBV_QPS_RTR;
		mod = mod ? mod : ibv_modify_qp(oqp, &m, IBV_QP_STATE);
		m.qp_state = IBV_QPS_RTS;
		m.sq_psn = 0;
		mod = mod ? mod : ibv_modify_qp(oqp, &m, IBV_QP_STATE | IBV_QP_SQ_PSN);
	}
	int got_wrong = -2, got_right = -2;
	if (mod == 0) {
		struct ibv_sge sg = { (uintptr_t)rbuf[4], sizeof rbuf[4], rmr->lkey };
		struct ibv_recv_wr rw = { .sg_list = &sg, .num_sge = 1 }, *rb;
		ibv_post_recv(oqp, &rw, &rb);
		s = rdma_post_ud_send(p.cli, NULL, sbuf, 7, smr, IBV_SEND_SIGNALED, ah, oqp->qp_num);
		h_poll(p.cli->send_cq, &wc, H_WAIT_MS);
		got_wrong = h_poll(ocq, &wc, H_QUIET_MS);
		struct ibv_sge ss = { (uintptr_t)sbuf, 7, smr->lkey };
		struct ibv_send_wr sw = { .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED }, *sb;
		sw.wr.ud.ah = ah;
		sw.wr.ud.remote_qpn = oqp->qp_num;
		sw.wr.ud.remote_qkey = 0x11111111;
		if (ibv_post_send(p.cli->qp, &sw, &sb) == 0) {
			h_poll(p.cli->send_cq, &wc, H_WAIT_MS);
			got_right = h_poll(ocq, &wc, H_WAIT_MS);
		}
	}
	CLAUSE("QKEY-MISMATCH", mod == 0 && got_wrong == 0 && got_right == 1,
	       "QP with qkey 0x11111111 (setup %d): rdma_post_ud_send delivered %d (want 0); a send with "
	       "that qkey delivered %d (want 1)", mod, got_wrong, got_right);
	if (oqp)
		ibv_destroy_qp(oqp);
	if (ocq)
		ibv_destroy_cq(ocq);

	/* Larger than the path MTU: -1/EINVAL. */
	struct ibv_port_attr pa;
	int mtu = ibv_query_port(p.cli->verbs, p.cli->port_num, &pa) == 0 ? 128 << pa.active_mtu : 0;
	char *big = mtu ? calloc(1, (size_t)mtu + 1) : NULL;
	struct ibv_mr *bmr = big ? rdma_reg_msgs(p.cli, big, (size_t)mtu + 1) : NULL;
	errno = 0;
	s = bmr ? rdma_post_ud_send(p.cli, NULL, big, (size_t)mtu + 1, bmr, IBV_SEND_SIGNALED, ah, qpn) : -2;
	int e = errno;
	if (s == 0)
		h_poll(p.cli->send_cq, &wc, H_WAIT_MS);
	CLAUSE("ERR-MTU", s == -1 && e == EINVAL, "%d bytes (active MTU %d): %d (%s)", mtu + 1, mtu, s,
	       conf_errname(e));
	if (bmr)
		rdma_dereg_mr(bmr);
	free(big);

	/* Past the send queue depth (no completions polled): -1/ENOMEM. */
	struct ibv_qp_attr ca2;
	struct ibv_qp_init_attr ci;
	int depth = ibv_query_qp(p.cli->qp, &ca2, IBV_QP_CAP, &ci) == 0 ? (int)ci.cap.max_send_wr : 0;
	int posted = 0;
	for (int i = 0; i < depth; i++)
		posted += rdma_post_ud_send(p.cli, NULL, sbuf, 4, smr, IBV_SEND_SIGNALED, ah, qpn) == 0;
	errno = 0;
	s = rdma_post_ud_send(p.cli, NULL, sbuf, 4, smr, IBV_SEND_SIGNALED, ah, qpn);
	e = errno;
	CLAUSE("ERR-SQ-DEPTH", depth > 0 && posted == depth && s == -1 && e == ENOMEM,
	       "send queue of %d: %d posted, the next one %d (%s)", depth, posted, s, conf_errname(e));
	for (int i = 0; i < depth + 1 && h_poll(p.cli->send_cq, &wc, 200) == 1; i++)
		;
	while (h_poll(p.srv->recv_cq, &wc, 20) == 1)
		;

	/* NOTES: without inline data the buffer must be registered: mr NULL ends in an error
	 * completion (local protection), not a crash and not a success. */
	static char plain[16] = "unregistered";
	r = recv_one(p.srv, rmr, rbuf[5], sizeof rbuf[5], NULL);
	s = rdma_post_ud_send(p.cli, (void *)6, plain, 13, NULL, IBV_SEND_SIGNALED, ah, qpn);
	n = s == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("NOTE-UNREGISTERED", (s == -1) || (n == 1 && wc.status == IBV_WC_LOC_PROT_ERR && wc.wr_id == 6),
	       "post %d, completion %d (%s)", s, n, n == 1 ? ibv_wc_status_str(wc.status) : "-");

	/* A QP that is not ready to send (back in RESET): -1/EINVAL. */
	struct ibv_qp_attr rs = { .qp_state = IBV_QPS_RESET };
	int m = ibv_modify_qp(p.cli->qp, &rs, IBV_QP_STATE);
	errno = 0;
	s = m == 0 ? rdma_post_ud_send(p.cli, NULL, sbuf, 4, smr, IBV_SEND_SIGNALED, ah, qpn) : -2;
	e = errno;
	CLAUSE("ERR-NOT-READY", m == 0 && s == -1 && e == EINVAL, "QP to RESET %d; post %d (%s)", m, s,
	       conf_errname(e));

	(void)err;
	if (ah)
		ibv_destroy_ah(ah);
	if (smr)
		rdma_dereg_mr(smr);
	if (rmr)
		rdma_dereg_mr(rmr);
	if (p.srv && p.srv->qp)
		rdma_destroy_qp(p.srv);
	h_pair_close(&p);
	return conf_end();
}
