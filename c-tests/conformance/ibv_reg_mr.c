/* ibv_reg_mr(3) (and ibv_reg_mr_iova, ibv_dereg_mr): a memory region of the PD with an lkey
 * for local SGEs and an rkey for remote RDMA and atomics, within its access rights. */
#include "ibvhelp.h"

#include <stdint.h>

static struct ih_dev d;

/* One operation on a fresh RC pair (QP 0 initiates, QP 1 is the responder; an error breaks the
 * pair): the initiator's completion status, or -1 when it could not be run. A SEND posts a
 * receive of rlen bytes into rbuf/rkey on QP 1 first (rkey is then the receive's lkey). */
static int one_op(enum ibv_wr_opcode op, void *lbuf, uint32_t len, uint32_t lkey, uint64_t raddr, uint32_t rkey,
		  int *recv_status)
{
	struct ih_pair p;
	struct ibv_wc wc;
	int st = -1;
	if (ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC))
		return -1;
	if (op == IBV_WR_SEND && ih_post_recv(p.qp[1], (void *)(uintptr_t)raddr, len, rkey, 9))
		goto out;
	if (ih_post_send(p.qp[0], op, lbuf, len, lkey, raddr, rkey, 1) == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1)
		st = wc.status;
	if (recv_status)
		*recv_status = ih_poll(p.cq[1], &wc, IH_QUIET_MS) == 1 ? (int)wc.status : -1;
out:
	ih_pair_destroy(&p);
	return st;
}

static const char *st(int s)
{
	return s < 0 ? "(none)" : ibv_wc_status_str((enum ibv_wc_status)s);
}

int main(int argc, char **argv)
{
	conf_begin("ibv_reg_mr", argc, argv);
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-MR", d.err);
		return conf_end();
	}
	const int RW = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	char *src = aligned_alloc(4096, 8192), *dst = aligned_alloc(4096, 8192);
	memset(src, 0, 8192);
	memset(dst, 0, 8192);
	/* RETURN VALUE: a pointer to the MR, describing the region and its PD. */
	errno = 0;
	struct ibv_mr *ms = ibv_reg_mr(d.pd, src, 8192, RW);
	struct ibv_mr *md = ibv_reg_mr(d.pd, dst, 8192, RW | IBV_ACCESS_REMOTE_ATOMIC);
	CLAUSE("RET-MR", ms && md && ms->addr == src && ms->length == 8192 && ms->pd == d.pd && ms->context == d.ctx,
	       "ibv_reg_mr: %p (%s), addr %p length %zu", (void *)ms, conf_errname(errno), ms ? ms->addr : NULL,
	       ms ? ms->length : 0);
	if (!ms || !md) {
		ih_dev_close(&d);
		return conf_end();
	}
	/* RETURN VALUE: lkey goes in an SGE, rkey lets the peer RDMA-write: the data lands. */
	memcpy(src, "registered", 11);
	int s1 = one_op(IBV_WR_RDMA_WRITE, src, 11, ms->lkey, (uintptr_t)dst + 100, md->rkey, NULL);
	CLAUSE("RET-KEYS", s1 == IBV_WC_SUCCESS && memcmp(dst + 100, "registered", 11) == 0,
	       "RDMA WRITE with lkey/rkey: %s, target \"%.10s\"", st(s1), dst + 100);
	/* The rkey also serves RDMA READ and atomics when granted. */
	uint64_t *word = (uint64_t *)(dst + 256);
	*word = 40;
	int s2 = one_op(IBV_WR_ATOMIC_FETCH_AND_ADD, src + 512, 8, ms->lkey, (uintptr_t)word, md->rkey, NULL);
	uint64_t old = 0;
	memcpy(&old, src + 512, 8);
	CLAUSE("ACCESS-REMOTE-ATOMIC", s2 == IBV_WC_SUCCESS && *word == 41 && old == 40,
	       "fetch-and-add 1: %s, word %llu, old value %llu", st(s2), (unsigned long long)*word,
	       (unsigned long long)old);
	/* Local read access is always enabled: an MR registered with access 0 can be sent from. */
	char *ro = calloc(1, 64);
	memcpy(ro, "readonly", 9);
	struct ibv_mr *m0 = ibv_reg_mr(d.pd, ro, 64, 0);
	int rs = -1;
	int s3 = m0 ? one_op(IBV_WR_SEND, ro, 9, m0->lkey, (uintptr_t)dst + 1024, md->lkey, &rs) : -1;
	CLAUSE("ACCESS-LOCAL-READ", m0 && s3 == IBV_WC_SUCCESS && memcmp(dst + 1024, "readonly", 9) == 0,
	       "MR with access 0: %p, SEND from it: %s", (void *)m0, st(s3));
	/* Without LOCAL_WRITE the region cannot receive: a receive into it fails. */
	rs = -1;
	int s4 = m0 ? one_op(IBV_WR_SEND, src, 9, ms->lkey, (uintptr_t)ro, m0->lkey, &rs) : -1;
	CLAUSE("ACCESS-LOCAL-WRITE", m0 && rs == IBV_WC_LOC_PROT_ERR && s4 != IBV_WC_SUCCESS,
	       "receive into a read-only MR: %s (sender %s)", st(rs), st(s4));
	/* REMOTE_WRITE or REMOTE_ATOMIC need LOCAL_WRITE too: refused without it. */
	errno = 0;
	struct ibv_mr *bw = ibv_reg_mr(d.pd, ro, 64, IBV_ACCESS_REMOTE_WRITE);
	int ew = errno;
	struct ibv_mr *ba = ibv_reg_mr(d.pd, ro, 64, IBV_ACCESS_REMOTE_ATOMIC);
	int ea = errno;
	CLAUSE("ACCESS-NEEDS-LOCAL-WRITE", !bw && !ba && ew == EINVAL && ea == EINVAL,
	       "REMOTE_WRITE alone: %p (%s), REMOTE_ATOMIC alone: %p (%s)", (void *)bw, conf_errname(ew), (void *)ba,
	       conf_errname(ea));
	/* Without REMOTE_WRITE, an RDMA WRITE through the rkey is refused. */
	char *nw = calloc(1, 64);
	struct ibv_mr *mnw = ibv_reg_mr(d.pd, nw, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	int s5 = mnw ? one_op(IBV_WR_RDMA_WRITE, src, 8, ms->lkey, (uintptr_t)nw, mnw->rkey, NULL) : -1;
	CLAUSE("ACCESS-REMOTE-WRITE", s5 == IBV_WC_REM_ACCESS_ERR && nw[0] == 0,
	       "RDMA WRITE to an MR without REMOTE_WRITE: %s", st(s5));
	/* Without REMOTE_READ, an RDMA READ through the rkey is refused. */
	struct ibv_mr *mnr = ibv_reg_mr(d.pd, nw, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	int s6 = mnr ? one_op(IBV_WR_RDMA_READ, src, 8, ms->lkey, (uintptr_t)nw, mnr->rkey, NULL) : -1;
	CLAUSE("ACCESS-REMOTE-READ", s6 == IBV_WC_REM_ACCESS_ERR, "RDMA READ of an MR without REMOTE_READ: %s", st(s6));
	/* Without REMOTE_ATOMIC, an atomic through the rkey is refused. */
	int s7 = mnr ? one_op(IBV_WR_ATOMIC_CMP_AND_SWP, src, 8, ms->lkey, (uintptr_t)nw, mnr->rkey, NULL) : -1;
	CLAUSE("ACCESS-REMOTE-ATOMIC-DENIED", s7 == IBV_WC_REM_ACCESS_ERR, "atomic on an MR without REMOTE_ATOMIC: %s",
	       st(s7));
	/* ZERO_BASED: remote addresses are offsets from the start of the MR. */
	struct ibv_mr *mz = ibv_reg_mr(d.pd, nw, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							     IBV_ACCESS_ZERO_BASED);
	memset(nw, 0, 64);
	int s8 = mz ? one_op(IBV_WR_RDMA_WRITE, src, 4, ms->lkey, 8, mz->rkey, NULL) : -1;
	CLAUSE("ACCESS-ZERO-BASED", mz && s8 == IBV_WC_SUCCESS && memcmp(nw + 8, src, 4) == 0,
	       "ZERO_BASED MR: %p (%s), RDMA WRITE at offset 8: %s", (void *)mz, conf_errname(errno), st(s8));
	/* ibv_reg_mr_iova: the region is addressed from iova through its keys. */
	uint64_t iova = 0x100000000ull;
	struct ibv_mr *mi = ibv_reg_mr_iova(d.pd, nw, 64, iova, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	memset(nw, 0, 64);
	int s9 = mi ? one_op(IBV_WR_RDMA_WRITE, src, 4, ms->lkey, iova + 16, mi->rkey, NULL) : -1;
	CLAUSE("IOVA", mi && s9 == IBV_WC_SUCCESS && memcmp(nw + 16, src, 4) == 0,
	       "reg_mr_iova: %p (%s), RDMA WRITE at iova+16: %s", (void *)mi, conf_errname(errno), st(s9));
	/* Implicit ODP: ON_DEMAND with addr 0 and length SIZE_MAX covers the address space. */
	struct ibv_mr *mo = ibv_reg_mr(d.pd, NULL, SIZE_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	CLAUSE("ODP-IMPLICIT", mo != NULL, "implicit ODP MR: %s", conf_errname(errno));
	/* MW_BIND: a memory window can be bound to an MR registered with it, and while one is
	 * bound, ibv_dereg_mr fails. */
	struct ibv_mr *mb = ibv_reg_mr(d.pd, nw, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = ibv_alloc_mw(d.pd, IBV_MW_TYPE_2);
	int busy = -1;
	if (mb && mw) {
		struct ih_pair p;
		if (ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0) {
			struct ibv_send_wr wr, *bad;
			struct ibv_wc wc;
			memset(&wr, 0, sizeof wr);
			wr.opcode = IBV_WR_BIND_MW;
			wr.send_flags = IBV_SEND_SIGNALED;
			wr.bind_mw.mw = mw;
			wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
			wr.bind_mw.bind_info.mr = mb;
			wr.bind_mw.bind_info.addr = (uintptr_t)nw;
			wr.bind_mw.bind_info.length = 64;
			wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
			if (ibv_post_send(p.qp[0], &wr, &bad) == 0 && ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 &&
			    wc.status == IBV_WC_SUCCESS)
				busy = ibv_dereg_mr(mb);
			ih_pair_destroy(&p);
		}
	}
	CLAUSE("NOTE-MW-BOUND", busy > 0, "MW_BIND MR %p, window %p (%s), dereg while bound: %d", (void *)mb, (void *)mw,
	       conf_errname(errno), busy);
	if (mw)
		ibv_dealloc_mw(mw);
	/* RETURN VALUE (ibv_dereg_mr): 0 on success ... */
	int rc = ibv_dereg_mr(mnw);
	CLAUSE("DEREG-RET-0", rc == 0, "ibv_dereg_mr returned %d (%s)", rc, conf_errname(rc));
	/* ... and the rkey no longer gives access. */
	int s10 = one_op(IBV_WR_RDMA_WRITE, src, 8, ms->lkey, (uintptr_t)dst + 2048, md->rkey, NULL);
	uint32_t rkey = md->rkey;
	int keep = ibv_dereg_mr(md);
	int s11 = one_op(IBV_WR_RDMA_WRITE, src, 8, ms->lkey, (uintptr_t)dst + 2048, rkey, NULL);
	CLAUSE("DEREG-REVOKES", s10 == IBV_WC_SUCCESS && keep == 0 && s11 == IBV_WC_REM_ACCESS_ERR,
	       "RDMA WRITE before the dereg: %s, after: %s", st(s10), st(s11));
	if (mb && busy != 0)
		ibv_dereg_mr(mb);
	if (mo)
		ibv_dereg_mr(mo);
	if (mi)
		ibv_dereg_mr(mi);
	if (mz)
		ibv_dereg_mr(mz);
	if (mnr)
		ibv_dereg_mr(mnr);
	if (m0)
		ibv_dereg_mr(m0);
	ibv_dereg_mr(ms);
	free(nw);
	free(ro);
	free(src);
	free(dst);
	ih_dev_close(&d);
	return conf_end();
}
