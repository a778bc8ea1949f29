/* ibv_create_qp_ex(3): a QP from extended attributes (PD, create flags, send ops, RSS, source
 * QPN), its caps updated; ibv_qp_to_qp_ex gives the send-ops interface; the refusals of what
 * the device lacks; destroy fails while attached to a multicast group. */
#include "ibvhelp.h"

static struct ih_dev d;
static struct ibv_cq *cq;

static struct ibv_qp_init_attr_ex ex_attr(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = t;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = d.pd;
	return a;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_create_qp_ex", argc, argv);
	struct ih_buf b;
	if (ih_dev_open(&d) || !(cq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0)) ||
	    ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("RET-QP", d.err);
		return conf_end();
	}
	int tag;
	struct ibv_qp_init_attr_ex a = ex_attr(IBV_QPT_RC);
	a.qp_context = &tag;
	a.cap.max_send_wr = 5;
	a.cap.max_inline_data = 8;
	/* RETURN VALUE: a pointer to the QP, with its number, of the PD and CQs given. */
	errno = 0;
	struct ibv_qp *qp = ibv_create_qp_ex(d.ctx, &a);
	CLAUSE("RET-QP", qp && qp->qp_num && qp->pd == d.pd && qp->send_cq == cq && qp->qp_context == &tag &&
				 ih_qp_state(qp) == IBV_QPS_RESET,
	       "ibv_create_qp_ex: %p (%s)", (void *)qp, conf_errname(errno));
	/* DESCRIPTION: cap is updated to the actual values, at least those requested. */
	CLAUSE("DESC-CAP-UPDATED", qp && a.cap.max_send_wr >= 5 && a.cap.max_inline_data >= 8,
	       "max_send_wr %u, max_inline_data %u", a.cap.max_send_wr, a.cap.max_inline_data);
	/* NOTES: with an SRQ, max_recv_wr and max_recv_sge are ignored. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	struct ibv_qp_init_attr_ex s = ex_attr(IBV_QPT_RC);
	s.srq = srq;
	s.cap.max_recv_wr = (uint32_t)da.max_qp_wr + 10;
	s.cap.max_recv_sge = (uint32_t)da.max_sge + 10;
	struct ibv_qp *sq = srq ? ibv_create_qp_ex(d.ctx, &s) : NULL;
	CLAUSE("NOTE-SRQ-IGNORES-RECV", sq != NULL, "QP on an SRQ with huge recv caps: %s", conf_errname(errno));
	/* NOTES: with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS, ibv_qp_to_qp_ex gives the send-ops
	 * interface: the builders asked for are there. */
	struct ibv_qp_init_attr_ex o = ex_attr(IBV_QPT_RC);
	o.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	o.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
	struct ibv_qp *oq = ibv_create_qp_ex(d.ctx, &o);
	struct ibv_qp_ex *qx = oq ? ibv_qp_to_qp_ex(oq) : NULL;
	CLAUSE("NOTE-QP-EX", qx && qx->wr_start && qx->wr_complete && qx->wr_abort && qx->wr_send && qx->wr_rdma_write &&
				     qx->wr_set_sge && &qx->qp_base == oq,
	       "qp %p, qp_ex %p", (void *)oq, (void *)qx);
	/* create_flags: IBV_QP_CREATE_BLOCK_SELF_MCAST_LB: the QP does not receive its own
	 * multicast datagrams, another attached QP does. */
	struct ibv_qp_init_attr_ex m = ex_attr(IBV_QPT_UD);
	m.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	m.create_flags = IBV_QP_CREATE_BLOCK_SELF_MCAST_LB;
	struct ibv_cq *mcq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0), *ocq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	m.send_cq = m.recv_cq = mcq;
	struct ibv_qp *mq = ibv_create_qp_ex(d.ctx, &m);
	struct ibv_qp_init_attr_ex m2 = ex_attr(IBV_QPT_UD);
	m2.send_cq = m2.recv_cq = ocq;
	struct ibv_qp *oq2 = ibv_create_qp_ex(d.ctx, &m2);
	union ibv_gid mgid;
	memset(&mgid, 0, sizeof mgid);
	mgid.raw[10] = mgid.raw[11] = 0xff;
	mgid.raw[12] = 239;
	mgid.raw[13] = 1;
	mgid.raw[14] = 3;
	mgid.raw[15] = (uint8_t)(conf_port(0) & 0xff);
	int self = -1, other = -1, attached = 0;
	struct ibv_ah *ah = ih_ah(&d, &mgid);
	struct ibv_wc wc;
	if (!conf_native() && mq && oq2 && ah && ih_ud_ready(mq, d.err, sizeof d.err) == 0 &&
	    ih_ud_ready(oq2, d.err, sizeof d.err) == 0 && ibv_attach_mcast(mq, &mgid, 0) == 0) {
		attached = 1;
		ibv_attach_mcast(oq2, &mgid, 0);
		ih_post_recv(mq, b.buf + 1024, 40 + 64, b.mr->lkey, 1);
		ih_post_recv(oq2, b.buf + 2048, 40 + 64, b.mr->lkey, 2);
		ih_post_ud(mq, ah, 0xffffff, b.buf, 8, b.mr->lkey, 3);
		other = ih_poll(ocq, &wc, IH_WAIT_MS);
		self = 0;
		while (ih_poll(mcq, &wc, IH_QUIET_MS) == 1)
			self += wc.opcode == IBV_WC_RECV;
		ibv_detach_mcast(oq2, &mgid, 0);
	}
	CLAUSE("FLAG-BLOCK-SELF-MCAST", conf_native() || (mq && other == 1 && self == 0),
	       "QP %p: own datagram received %d time(s), the other QP %d (%s)", (void *)mq, self, other, d.err);
	/* NOTES: ibv_destroy_qp fails while the QP is attached to a multicast group. */
	int busy = attached ? ibv_destroy_qp(mq) : -1;
	CLAUSE("NOTE-DESTROY-MCAST", conf_native() || busy > 0, "destroy while attached: %d", busy);
	if (attached && busy != 0)
		ibv_detach_mcast(mq, &mgid, 0);
	/* RETURN VALUE (ibv_destroy_qp): 0 on success. */
	int rc = mq && busy != 0 ? ibv_destroy_qp(mq) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_qp returned %d (%s)", rc, conf_errname(rc));
	/* Flags for raw Ethernet QPs (SCATTER_FCS, CVLAN_STRIPPING) and SOURCE_QPN on an RC QP
	 * (UD only) are refused; so is the raw packet type, which a soft device cannot offer. */
	struct ibv_qp_init_attr_ex f = ex_attr(IBV_QPT_UD);
	f.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	f.create_flags = IBV_QP_CREATE_SCATTER_FCS | IBV_QP_CREATE_CVLAN_STRIPPING;
	struct ibv_qp *fq = ibv_create_qp_ex(d.ctx, &f);
	struct ibv_qp_init_attr_ex sq2 = ex_attr(IBV_QPT_RC);
	sq2.comp_mask |= IBV_QP_INIT_ATTR_CREATE_FLAGS;
	sq2.create_flags = IBV_QP_CREATE_SOURCE_QPN;
	sq2.source_qpn = 0x123;
	struct ibv_qp *srcq = ibv_create_qp_ex(d.ctx, &sq2);
	struct ibv_qp_init_attr_ex raw = ex_attr(IBV_QPT_RAW_PACKET);
	struct ibv_qp *rq = ibv_create_qp_ex(d.ctx, &raw);
	CLAUSE("FLAG-UNSUPPORTED", !fq && !srcq && !rq, "FCS/CVLAN flags %p, RC SOURCE_QPN %p, RAW_PACKET %p", (void *)fq,
	       (void *)srcq, (void *)rq);
	/* An RSS QP (rwq_ind_tbl, rx_hash_conf) needs receive WQs, which the device lacks. */
	struct ibv_qp_init_attr_ex r = ex_attr(IBV_QPT_RAW_PACKET);
	uint8_t key[40] = { 0 };
	r.comp_mask |= IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH;
	r.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
	r.rx_hash_conf.rx_hash_key_len = sizeof key;
	r.rx_hash_conf.rx_hash_key = key;
	r.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
	struct ibv_qp *rss = ibv_create_qp_ex(d.ctx, &r);
	CLAUSE("DESC-RSS", !rss, "an RSS QP without indirection tables: %p", (void *)rss);
	struct ibv_qp *all[] = { qp, sq, oq, oq2, fq, srcq, rq, rss };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i])
			ibv_destroy_qp(all[i]);
	if (ah)
		ibv_destroy_ah(ah);
	if (srq)
		ibv_destroy_srq(srq);
	ibv_destroy_cq(mcq);
	ibv_destroy_cq(ocq);
	ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
