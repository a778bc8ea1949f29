/* ibv_attach_mcast(3) (and ibv_detach_mcast): a UD QP joins (leaves) the delivery of a
 * multicast group; attaching twice still gives one copy; 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_attach_mcast", argc, argv);
	if (conf_native())
		return conf_skip("a multicast group on a real fabric needs an SA join (and sends IGMP on RoCE)");
	struct ih_dev d;
	struct ih_pair u;
	struct ih_buf b;
	memset(&u, 0, sizeof u);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE) || ih_pair_make(&d, &u, IBV_QPT_UD, 0)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	union ibv_gid mgid;
	memset(&mgid, 0, sizeof mgid);
	/* An IPv4-mapped multicast GID (239.1.2.<page id>), as RoCE uses. */
	mgid.raw[10] = 0xff;
	mgid.raw[11] = 0xff;
	mgid.raw[12] = 239;
	mgid.raw[13] = 1;
	mgid.raw[14] = 2;
	mgid.raw[15] = (uint8_t)(conf_port(0) & 0xff);
	struct ibv_ah *ah = ih_ah(&d, &mgid);
	struct ibv_wc wc;
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_attach_mcast(u.qp[1], &mgid, 0);
	CLAUSE("RET-0", rc == 0, "ibv_attach_mcast returned %d (%s)", rc, conf_errname(rc));
	/* DESCRIPTION: an attached QP receives the datagrams sent to the group. */
	for (int i = 0; i < 4; i++)
		ih_post_recv(u.qp[1], b.buf + 1024 * (i + 1), 40 + 64, b.mr->lkey, (uint64_t)(10 + i));
	int got = 0;
	memcpy(b.buf, "to group", 9);
	if (ah && ih_post_ud(u.qp[0], ah, 0xffffff, b.buf, 9, b.mr->lkey, 1) == 0 && ih_poll(u.cq[1], &wc, IH_WAIT_MS) == 1)
		got = wc.status == IBV_WC_SUCCESS && memcmp(b.buf + 1024 + 40, "to group", 9) == 0;
	ih_poll(u.cq[0], &wc, IH_WAIT_MS);
	CLAUSE("DESC-RECEIVES", got, "no datagram through the group (AH %p)", (void *)ah);
	/* NOTES: attached twice, the QP still gets a single copy of each message. */
	int twice = ibv_attach_mcast(u.qp[1], &mgid, 0);
	int copies = 0;
	if (ah && ih_post_ud(u.qp[0], ah, 0xffffff, b.buf, 9, b.mr->lkey, 2) == 0)
		while (ih_poll(u.cq[1], &wc, IH_QUIET_MS) == 1)
			copies++;
	ih_poll(u.cq[0], &wc, IH_WAIT_MS);
	CLAUSE("NOTE-ONE-COPY", twice == 0 && copies == 1, "second attach %d, copies received %d", twice, copies);
	/* RETURN VALUE (detach): 0; then no more datagrams from the group. */
	rc = ibv_detach_mcast(u.qp[1], &mgid, 0);
	int after = 0;
	if (ah && ih_post_ud(u.qp[0], ah, 0xffffff, b.buf, 9, b.mr->lkey, 3) == 0)
		after = ih_poll(u.cq[1], &wc, IH_QUIET_MS);
	ih_poll(u.cq[0], &wc, IH_WAIT_MS);
	CLAUSE("DETACH-RET-0", rc == 0, "ibv_detach_mcast returned %d (%s)", rc, conf_errname(rc));
	CLAUSE("DETACH-STOPS", rc == 0 && after == 0, "a datagram arrived after the detach");
	/* NOTES: only UD QPs may be attached: an RC QP is refused. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, u.cq[0], 4);
	struct ibv_qp *rq = ibv_create_qp(d.pd, &qa);
	int rrc = rq ? ibv_attach_mcast(rq, &mgid, 0) : -1;
	CLAUSE("NOTE-UD-ONLY", rq && rrc > 0, "RC attach: %d (%s)", rrc, conf_errname(rrc));
	if (rq && rrc == 0)
		ibv_detach_mcast(rq, &mgid, 0);
	if (rq)
		ibv_destroy_qp(rq);
	/* Failure returns the errno value: detaching a group the QP is not attached to. */
	int nd = ibv_detach_mcast(u.qp[1], &mgid, 0);
	CLAUSE("ERR-NOT-ATTACHED", nd > 0, "detach when not attached: %d", nd);
	if (ah)
		ibv_destroy_ah(ah);
	ih_pair_destroy(&u);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
