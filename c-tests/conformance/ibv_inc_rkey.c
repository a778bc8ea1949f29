/* ibv_inc_rkey(3): a new rkey, its 8-bit tag increased, its index kept, for binding a window
 * anew. The arithmetic is inline in verbs.h (identical in every library); the clause checks
 * what the library does with such a key: a type 2 bind takes it. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_inc_rkey", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE)) {
		CLAUSE_BLOCKED("NOTE-BIND", d.err);
		return conf_end();
	}
	struct ibv_mw *mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	uint32_t nk = mw ? ibv_inc_rkey(mw->rkey) : 0;
	int ok = 0;
	if (mw) {
		struct ibv_send_wr wr, *bad;
		struct ibv_wc wc;
		memset(&wr, 0, sizeof wr);
		wr.wr_id = 1;
		wr.opcode = IBV_WR_BIND_MW;
		wr.send_flags = IBV_SEND_SIGNALED;
		wr.bind_mw.mw = mw;
		wr.bind_mw.rkey = nk;
		wr.bind_mw.bind_info.mr = b.mr;
		wr.bind_mw.bind_info.addr = (uintptr_t)b.buf;
		wr.bind_mw.bind_info.length = 64;
		wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
		ok = ibv_post_send(p.qp[0], &wr, &bad) == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 &&
		     wc.status == IBV_WC_SUCCESS && mw->rkey == nk;
		ibv_dealloc_mw(mw);
	}
	/* NOTES: the use case: a window bound with ibv_inc_rkey(mw->rkey) takes that new rkey. */
	CLAUSE("NOTE-BIND", ok, "window %p (%s), bound with 0x%x: %d", (void *)mw, conf_errname(errno), nk, ok);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
