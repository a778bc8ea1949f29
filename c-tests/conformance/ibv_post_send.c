/* ibv_post_send(3): posts a list of send WRs, stopping at the first that fails (returned in
 * bad_wr); the opcodes each transport takes; send_flags; 0 or an errno value. */
#include "ibvhelp.h"

#include <arpa/inet.h>

static struct ih_dev d;
static struct ih_buf b;

static struct ibv_send_wr wr_of(enum ibv_wr_opcode op, struct ibv_sge *sge, uint64_t id)
{
	struct ibv_send_wr w;
	memset(&w, 0, sizeof w);
	w.wr_id = id;
	w.sg_list = sge;
	w.num_sge = 1;
	w.opcode = op;
	w.send_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		w.wr.atomic.remote_addr = (uintptr_t)b.buf + 2048;
		w.wr.atomic.rkey = b.mr->rkey;
	} else {
		w.wr.rdma.remote_addr = (uintptr_t)b.buf + 1024;
		w.wr.rdma.rkey = b.mr->rkey;
	}
	return w;
}

/* Posts one WR of `op` on a fresh pair of `type` (receives posted for SENDs); returns the
 * post's result, the completion status in *st (-1 if none). */
static int try_op(enum ibv_qp_type type, enum ibv_wr_opcode op, int *st)
{
	struct ih_pair p;
	*st = -1;
	if (ih_pair_make(&d, &p, type, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						IBV_ACCESS_REMOTE_ATOMIC))
		return -1;
	struct ibv_sge sge = { (uintptr_t)b.buf, 8, b.mr->lkey };
	struct ibv_send_wr w = wr_of(op, &sge, 5), *bad;
	struct ibv_ah *ah = NULL;
	if (type == IBV_QPT_UD) {
		struct ibv_ah_attr aa;
		memset(&aa, 0, sizeof aa);
		aa.is_global = 1;
		aa.grh.dgid = d.gid;
		aa.grh.hop_limit = 1;
		aa.port_num = 1;
		ah = ibv_create_ah(d.pd, &aa);
		w.wr.ud.ah = ah;
		w.wr.ud.remote_qpn = p.qp[1]->qp_num;
		w.wr.ud.remote_qkey = IH_QKEY;
	}
	if (op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM)
		ih_post_recv(p.qp[1], b.buf + 3072, 128, b.mr->lkey, 9);
	int rc = ibv_post_send(p.qp[0], &w, &bad);
	struct ibv_wc wc;
	if (rc == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
		*st = wc.status;
	ih_pair_destroy(&p);
	if (ah)
		ibv_destroy_ah(ah);
	return rc;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_post_send", argc, argv);
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) ||
	    ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					      IBV_ACCESS_REMOTE_ATOMIC) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_wc wc[8];
	struct ibv_sge sge = { (uintptr_t)b.buf, 8, b.mr->lkey };
	/* DESCRIPTION: a linked list of WRs, all posted, executed in order; RETURN VALUE: 0. */
	struct ibv_send_wr w[3], *bad = NULL;
	for (int i = 0; i < 3; i++) {
		w[i] = wr_of(IBV_WR_RDMA_WRITE, &sge, (uint64_t)(10 + i));
		w[i].next = i < 2 ? &w[i + 1] : NULL;
	}
	int rc = ibv_post_send(p.qp[0], &w[0], &bad);
	CLAUSE("RET-0", rc == 0, "ibv_post_send returned %d (%s)", rc, conf_errname(rc));
	int n = 0;
	for (int i = 0; i < 3 && ih_poll(p.cq[0], &wc[n], IH_WAIT_MS) == 1; i++)
		n++;
	CLAUSE("DESC-LIST", n == 3 && wc[0].wr_id == 10 && wc[1].wr_id == 11 && wc[2].wr_id == 12,
	       "%d of 3 completions, in order: %d", n, n == 3 && wc[0].wr_id == 10 && wc[2].wr_id == 12);
	/* DESCRIPTION: processing stops at the first failing WR, returned through bad_wr: the
	 * second WR has too many SGEs; the first is posted, the third is not. */
	struct ibv_sge many[64];
	for (int i = 0; i < 64; i++)
		many[i] = sge;
	w[1].sg_list = many;
	w[1].num_sge = 64;
	bad = NULL;
	rc = ibv_post_send(p.qp[0], &w[0], &bad);
	n = 0;
	while (ih_poll(p.cq[0], &wc[n], IH_QUIET_MS) == 1 && n < 7)
		n++;
	CLAUSE("DESC-BAD-WR", rc != 0 && bad == &w[1] && n == 1 && wc[0].wr_id == 10,
	       "returned %d (%s), bad_wr %s, %d completion(s)", rc, conf_errname(rc),
	       bad == &w[1] ? "the second" : bad ? "another" : "NULL", n);
	w[1].sg_list = &sge;
	w[1].num_sge = 1;
	/* The opcode table: RC takes every classic opcode, each completes. */
	enum ibv_wr_opcode rcops[] = { IBV_WR_SEND, IBV_WR_SEND_WITH_IMM, IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM,
				       IBV_WR_RDMA_READ, IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD };
	int st, bad_op = -1, brc = 0, bst = 0;
	for (size_t i = 0; i < sizeof rcops / sizeof rcops[0] && bad_op < 0; i++) {
		rc = try_op(IBV_QPT_RC, rcops[i], &st);
		if (rc != 0 || st != IBV_WC_SUCCESS) {
			bad_op = rcops[i];
			brc = rc;
			bst = st;
		}
	}
	CLAUSE("TABLE-RC", bad_op < 0, "RC opcode %d: post %d, status %d", bad_op, brc, bst);
	/* UC: SEND, SEND_WITH_IMM, RDMA WRITE (+IMM) complete; RDMA READ and atomics are refused. */
	int uc_ok = try_op(IBV_QPT_UC, IBV_WR_SEND, &st) == 0 && st == IBV_WC_SUCCESS &&
		    try_op(IBV_QPT_UC, IBV_WR_RDMA_WRITE_WITH_IMM, &st) == 0 && st == IBV_WC_SUCCESS;
	int uc_read = try_op(IBV_QPT_UC, IBV_WR_RDMA_READ, &st);
	int uc_atom = try_op(IBV_QPT_UC, IBV_WR_ATOMIC_FETCH_AND_ADD, &st);
	CLAUSE("TABLE-UC", uc_ok && uc_read != 0 && uc_atom != 0, "UC send/write_imm %d, read %d, atomic %d", uc_ok,
	       uc_read, uc_atom);
	/* UD: SEND and SEND_WITH_IMM; RDMA WRITE and READ are refused. */
	int ud_ok = try_op(IBV_QPT_UD, IBV_WR_SEND, &st) == 0 && st == IBV_WC_SUCCESS &&
		    try_op(IBV_QPT_UD, IBV_WR_SEND_WITH_IMM, &st) == 0 && st == IBV_WC_SUCCESS;
	int ud_w = try_op(IBV_QPT_UD, IBV_WR_RDMA_WRITE, &st);
	int ud_r = try_op(IBV_QPT_UD, IBV_WR_RDMA_READ, &st);
	CLAUSE("TABLE-UD", ud_ok && ud_w != 0 && ud_r != 0, "UD send/send_imm %d, write %d, read %d", ud_ok, ud_w, ud_r);
	/* RC and UC also take LOCAL_INV, BIND_MW and SEND_WITH_INV (memory windows). */
	int li = try_op(IBV_QPT_RC, IBV_WR_LOCAL_INV, &st);
	CLAUSE("TABLE-MW", li == 0, "RC LOCAL_INV: %d (%s)", li, conf_errname(li));
	/* IBV_WR_TSO needs TSO (tso_caps): without it, refused. */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	int tso = try_op(IBV_QPT_UD, IBV_WR_TSO, &st);
	CLAUSE("TABLE-TSO", dx.tso_caps.max_tso ? tso == 0 : tso != 0, "max_tso %u, UD TSO: %d", dx.tso_caps.max_tso, tso);
	/* IBV_SEND_INLINE: the buffer is reusable at once (the data was taken at the call), and
	 * the lkey is not checked. */
	char msg[32] = "inline payload";
	struct ibv_sge isge = { (uintptr_t)msg, 15, 0xdeadbeef };
	struct ibv_send_wr iw = wr_of(IBV_WR_RDMA_WRITE, &isge, 20);
	iw.send_flags |= IBV_SEND_INLINE;
	iw.wr.rdma.remote_addr = (uintptr_t)b.buf + 4096;
	rc = ibv_post_send(p.qp[0], &iw, &bad);
	memcpy(msg, "overwritten!!!", 15);
	int ir = rc == 0 ? ih_poll(p.cq[0], &wc[0], IH_WAIT_MS) : 0;
	CLAUSE("FLAG-INLINE", rc == 0 && ir == 1 && wc[0].status == IBV_WC_SUCCESS &&
				      memcmp(b.buf + 4096, "inline payload", 15) == 0,
	       "inline post %d, completion %d (%s), target \"%.14s\"", rc, ir, ir == 1 ? ibv_wc_status_str(wc[0].status) : "-",
	       b.buf + 4096);
	/* IBV_SEND_SIGNALED: without it (and without sq_sig_all) no completion. */
	struct ibv_send_wr uw = wr_of(IBV_WR_RDMA_WRITE, &sge, 21);
	uw.send_flags = 0;
	rc = ibv_post_send(p.qp[0], &uw, &bad);
	CLAUSE("FLAG-SIGNALED", rc == 0 && ih_poll(p.cq[0], &wc[0], IH_QUIET_MS) == 0, "an unsignaled WR completed");
	/* RETURN VALUE: the errno value: a full send queue (16 outstanding, the unsignaled WR
	 * above among them until a later completion is polled) gives ENOMEM. */
	int full = 0, posted = 0;
	for (int i = 0; i < 40 && !full; i++) {
		struct ibv_send_wr fw = wr_of(IBV_WR_RDMA_WRITE, &sge, (uint64_t)(100 + i));
		full = ibv_post_send(p.qp[0], &fw, &bad);
		posted += full == 0;
	}
	CLAUSE("ERR-SQ-FULL", full == ENOMEM && posted == 15, "after %d posts: %d (%s)", posted, full, conf_errname(full));
	while (ih_poll(p.cq[0], &wc[0], IH_QUIET_MS) == 1)
		;
	/* A QP that is not ready to send (RESET) refuses the post. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, p.cq[0], 4);
	struct ibv_qp *rq = ibv_create_qp(d.pd, &qa);
	struct ibv_send_wr rw = wr_of(IBV_WR_RDMA_WRITE, &sge, 30);
	rc = rq ? ibv_post_send(rq, &rw, &bad) : -1;
	CLAUSE("ERR-QP-STATE", rc == EINVAL && bad == &rw, "post on a RESET QP: %d (%s)", rc, conf_errname(rc));
	if (rq)
		ibv_destroy_qp(rq);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
