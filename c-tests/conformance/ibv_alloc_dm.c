/* ibv_alloc_dm(3) (ibv_free_dm, ibv_memcpy_to_dm, ibv_memcpy_from_dm, ibv_reg_dm_mr): device
 * memory: allocated, copied to and from, registered as a zero-based MR, freed (not while an MR
 * uses it). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_alloc_dm", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) ||
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-DM", d.err);
		return conf_end();
	}
	struct ibv_alloc_dm_attr a = { .length = 256, .log_align_req = 3 };
	/* RETURN VALUE: a pointer to the DM (with a handle for importing). */
	errno = 0;
	struct ibv_dm *dm = ibv_alloc_dm(d.ctx, &a);
	CLAUSE("RET-DM", dm != NULL, "ibv_alloc_dm(256): %p (%s)", (void *)dm, conf_errname(errno));
	/* ibv_memcpy_to_dm / ibv_memcpy_from_dm: 0, and the bytes round-trip at an offset. */
	char out[16] = "device memory!", in[16] = "";
	int w = dm ? ibv_memcpy_to_dm(dm, 32, out, sizeof out) : -1;
	int r = dm ? ibv_memcpy_from_dm(in, dm, 32, sizeof in) : -1;
	CLAUSE("DESC-MEMCPY", w == 0 && r == 0 && memcmp(in, out, sizeof out) == 0, "to_dm %d, from_dm %d, \"%.14s\"", w, r,
	       in);
	/* ibv_reg_dm_mr: a zero-based MR over the DM: an RDMA WRITE at offset 64 lands there. */
	struct ibv_mr *mr = dm ? ibv_reg_dm_mr(d.pd, dm, 0, 256,
					       IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
			       : NULL;
	int wr = 0;
	struct ibv_wc wc;
	memcpy(b.buf, "via rdma", 9);
	if (mr && ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 9, b.mr->lkey, 64, mr->rkey, 1) == 0 &&
	    ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS &&
	    ibv_memcpy_from_dm(in, dm, 64, 9) == 0)
		wr = memcmp(in, "via rdma", 9) == 0;
	CLAUSE("DESC-REG-DM-MR", mr && wr, "reg_dm_mr %p, RDMA WRITE at offset 64 landed %d", (void *)mr, wr);
	/* NOTES: ibv_free_dm may fail while an MR uses the DM; RETURN VALUE: 0 once free. */
	int busy = mr ? ibv_free_dm(dm) : -1;
	if (mr)
		ibv_dereg_mr(mr);
	int rc = dm && busy != 0 ? ibv_free_dm(dm) : -1;
	CLAUSE("FREE-RET-0", rc == 0 && busy != 0, "free with an MR on it %d, then %d", busy, rc);
	/* NOTES: allocation beyond max_dm_size fails. */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_alloc_dm_attr big = { .length = dx.max_dm_size + 1 };
	struct ibv_dm *bd = ibv_alloc_dm(d.ctx, &big);
	CLAUSE("NOTE-MAX-DM-SIZE", !bd, "max_dm_size %llu + 1: %p", (unsigned long long)dx.max_dm_size, (void *)bd);
	if (bd)
		ibv_free_dm(bd);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
