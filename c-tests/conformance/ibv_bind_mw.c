/* ibv_bind_mw(3): posts a type 1 window bind on a UC/RC QP; the window's new rkey is returned in
 * mw->rkey; remote access through it within the bound range and rights; a zero-length bind
 * invalidates it. */
#include "ibvhelp.h"

static struct ih_dev d;
static struct ih_buf b;

/* An RDMA WRITE through rkey at addr on a fresh pair: the completion status (-1: none). */
static int write_through(uint32_t rkey, uint64_t addr)
{
	struct ih_pair p;
	int st = -1;
	if (ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		return -1;
	struct ibv_wc wc;
	if (ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, addr, rkey, 1) == 0 &&
	    ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
		st = wc.status;
	ih_pair_destroy(&p);
	return st;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_bind_mw", argc, argv);
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) ||
	    ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_mw *mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_1);
	uint32_t old = mw ? mw->rkey : 0;
	struct ibv_mw_bind bind;
	memset(&bind, 0, sizeof bind);
	bind.wr_id = 7;
	bind.send_flags = IBV_SEND_SIGNALED;
	bind.bind_info.mr = b.mr;
	bind.bind_info.addr = (uintptr_t)b.buf + 4096;
	bind.bind_info.length = 1024;
	bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	/* RETURN VALUE: 0; the bind completes on the QP; the new rkey is in mw->rkey. */
	int rc = mw ? ibv_bind_mw(p.qp[0], mw, &bind) : -1;
	struct ibv_wc wc;
	int done = rc == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7;
	CLAUSE("RET-0", done && mw->rkey != old, "mw %p (%s), ibv_bind_mw %d, completion %d, rkey 0x%x -> 0x%x", (void *)mw,
	       conf_errname(errno), rc, done, old, mw ? mw->rkey : 0);
	/* The window gives remote write within its range ... */
	int in = done ? write_through(mw->rkey, (uintptr_t)b.buf + 4096 + 16) : -1;
	CLAUSE("DESC-ACCESS", in == IBV_WC_SUCCESS, "RDMA WRITE inside the window: status %d", in);
	/* ... and nothing outside it. */
	int outside = done ? write_through(mw->rkey, (uintptr_t)b.buf + 16) : -1;
	CLAUSE("DESC-RANGE", outside == IBV_WC_REM_ACCESS_ERR, "RDMA WRITE outside the window: status %d", outside);
	/* A zero-length bind invalidates a type 1 window. */
	bind.bind_info.length = 0;
	bind.wr_id = 8;
	uint32_t bound = mw ? mw->rkey : 0;
	rc = done ? ibv_bind_mw(p.qp[0], mw, &bind) : -1;
	int inv = rc == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS;
	int after = inv ? write_through(bound, (uintptr_t)b.buf + 4096 + 16) : -1;
	CLAUSE("DESC-UNBIND", inv && after == IBV_WC_REM_ACCESS_ERR, "zero-length bind %d, then RDMA WRITE: status %d", rc,
	       after);
	/* The QP must be UC, RC or XRC_SEND: a bind on a UD QP is refused. */
	struct ih_pair u;
	memset(&u, 0, sizeof u);
	int ud = -1;
	if (mw && ih_pair_make(&d, &u, IBV_QPT_UD, 0) == 0) {
		bind.bind_info.length = 64;
		ud = ibv_bind_mw(u.qp[0], mw, &bind);
	}
	CLAUSE("DESC-QP-TYPE", mw && ud != 0, "bind on a UD QP: %d", ud);
	ih_pair_destroy(&u);
	if (mw)
		ibv_dealloc_mw(mw);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
