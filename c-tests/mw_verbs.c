/* Memory windows end to end on the soft provider: a type 2 window bound through ibv_wr_bind_mw
 * (ZERO_BASED), remote writes inside and past its range, SEND with invalidate (the receive
 * carries IBV_WC_WITH_INV and the rkey; the window then refuses access), a rebind through
 * ibv_post_send, ibv_dereg_mr refused while bound, LOCAL_INV, and ibv_dealloc_mw. */
#include "conformance/ibvhelp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c, ...)                                                                                                  \
	do {                                                                                                           \
		if (!(c)) {                                                                                            \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                          \
			fprintf(stderr, __VA_ARGS__);                                                                  \
			fprintf(stderr, "\n");                                                                         \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

static struct ih_dev d;
static struct ih_buf b;

static int write_status(struct ih_pair *p, uint64_t raddr, uint32_t rkey)
{
	struct ibv_wc wc;
	if (ih_post_send(p->qp[1], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, raddr, rkey, 3) != 0 ||
	    ih_poll(p->cq[1], &wc, IH_WAIT_MS) != 1)
		return -1;
	return wc.status;
}

static void pair(struct ih_pair *p)
{
	CHECK(ih_pair_make(&d, p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0, "pair: %s",
	      d.err);
}

int main(void)
{
	struct ih_pair p;
	struct ibv_wc wc;
	CHECK(ih_dev_open(&d) == 0, "device: %s", d.err);
	CHECK(ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) == 0, "buffer");
	struct ibv_device_attr da;
	CHECK(ibv_query_device(d.ctx, &da) == 0 && da.max_mw > 0 && (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW) &&
		      (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
	      "device caps 0x%x, max_mw %d", da.device_cap_flags, da.max_mw);
	struct ibv_mw *mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	CHECK(mw, "ibv_alloc_mw");
	pair(&p);

	/* Type 2 bind through the posting API, zero-based. */
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(p.qp[0]);
	uint32_t nk = ibv_inc_rkey(mw->rkey);
	struct ibv_mw_bind_info bi = { b.mr, (uintptr_t)b.buf + 4096, 64, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED };
	ibv_wr_start(x);
	x->wr_id = 11;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_bind_mw(x, mw, nk, &bi);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete");
	CHECK(ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW &&
		      wc.wr_id == 11,
	      "bind completion %d op %d", wc.status, wc.opcode);
	CHECK(mw->rkey == nk, "rkey 0x%x, asked 0x%x", mw->rkey, nk);

	strcpy(b.buf, "window!");
	CHECK(write_status(&p, 8, mw->rkey) == IBV_WC_SUCCESS, "write at offset 8");
	CHECK(strcmp(b.buf + 4096 + 8, "window!") == 0, "written bytes");
	CHECK(write_status(&p, 60, mw->rkey) == IBV_WC_REM_ACCESS_ERR, "write past the window");
	ih_pair_destroy(&p);

	/* SEND with invalidate from the peer. */
	pair(&p);
	CHECK(ih_post_recv(p.qp[0], b.buf + 1024, 64, b.mr->lkey, 21) == 0, "post_recv");
	struct ibv_sge sge = { (uintptr_t)b.buf, 8, b.mr->lkey };
	struct ibv_send_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.wr_id = 22;
	w.sg_list = &sge;
	w.num_sge = 1;
	w.opcode = IBV_WR_SEND_WITH_INV;
	w.send_flags = IBV_SEND_SIGNALED;
	w.invalidate_rkey = mw->rkey;
	CHECK(ibv_post_send(p.qp[1], &w, &bad) == 0, "post SEND_WITH_INV");
	CHECK(ih_poll(p.cq[1], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "send completion %d", wc.status);
	CHECK(ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_INV) &&
		      wc.invalidated_rkey == mw->rkey,
	      "receive %d flags 0x%x rkey 0x%x", wc.status, wc.wc_flags, wc.invalidated_rkey);
	CHECK(write_status(&p, 8, mw->rkey) == IBV_WC_REM_ACCESS_ERR, "write after invalidation");
	ih_pair_destroy(&p);

	/* Rebind through ibv_post_send, dereg refused while bound, LOCAL_INV. */
	pair(&p);
	memset(&w, 0, sizeof w);
	w.wr_id = 31;
	w.opcode = IBV_WR_BIND_MW;
	w.send_flags = IBV_SEND_SIGNALED;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	w.bind_mw.bind_info = bi;
	CHECK(ibv_post_send(p.qp[0], &w, &bad) == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 &&
		      wc.status == IBV_WC_SUCCESS,
	      "rebind %d", wc.status);
	CHECK(ibv_dereg_mr(b.mr) == EBUSY, "ibv_dereg_mr while a window is bound");
	memset(&w, 0, sizeof w);
	w.wr_id = 32;
	w.opcode = IBV_WR_LOCAL_INV;
	w.send_flags = IBV_SEND_SIGNALED;
	w.invalidate_rkey = mw->rkey;
	CHECK(ibv_post_send(p.qp[0], &w, &bad) == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 &&
		      wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_LOCAL_INV,
	      "local invalidate %d op %d", wc.status, wc.opcode);
	CHECK(write_status(&p, 8, mw->rkey) == IBV_WC_REM_ACCESS_ERR, "write after LOCAL_INV");
	/* A type 2 bind with a key of another index is refused. */
	w.opcode = IBV_WR_BIND_MW;
	w.bind_mw.mw = mw;
	w.bind_mw.rkey = mw->rkey ^ 0x100;
	w.bind_mw.bind_info = bi;
	CHECK(ibv_post_send(p.qp[0], &w, &bad) == EINVAL, "bind with another index");
	CHECK(ibv_dealloc_mw(mw) == 0, "ibv_dealloc_mw");
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	printf("mw_verbs: ok\n");
	return 0;
}
