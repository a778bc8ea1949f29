/* rdma_reg_msgs(3): registers a buffer with the id's PD for sends and receives (and as the
 * local side of RDMA read/write); NULL and errno on failure; released with rdma_dereg_mr. */
#include "cmhelp.h"

#include <sys/mman.h>
#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_reg_msgs", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-MR", "NOTE-PD", "DESC-SEND-RECV", "DESC-RDMA-LOCAL", "ERR-NULL", "NOTE-DEREG" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	static char sbuf[256], rbuf[256], tbuf[64];
	/* RETURN VALUE: the registered region. */
	errno = 0;
	struct ibv_mr *smr = rdma_reg_msgs(p.cli, sbuf, sizeof sbuf);
	struct ibv_mr *rmr = rdma_reg_msgs(p.srv, rbuf, sizeof rbuf);
	CLAUSE("RET-MR", smr && rmr && smr->addr == sbuf && smr->length == sizeof sbuf,
	       "rdma_reg_msgs returned %p (%s), addr %p length %zu", (void *)smr, conf_errname(errno),
	       smr ? smr->addr : NULL, smr ? smr->length : 0);
	/* NOTES: registered with the id's protection domain. */
	CLAUSE("NOTE-PD", smr && smr->pd == p.cli->pd && rmr && rmr->pd == p.srv->pd, "MR's PD %p, id->pd %p",
	       smr ? (void *)smr->pd : NULL, (void *)p.cli->pd);
	/* DESCRIPTION: such buffers are posted with rdma_post_send / rdma_post_recv. */
	strcpy(sbuf, "registered message");
	int r = rmr ? rdma_post_recv(p.srv, rbuf, rbuf, sizeof rbuf, rmr) : -2;
	int s = smr ? rdma_post_send(p.cli, sbuf, sbuf, strlen(sbuf) + 1, smr, 0) : -2;
	struct ibv_wc wc;
	int rn = r == 0 && s == 0 ? rdma_get_recv_comp(p.srv, &wc) : -2;
	int ok = rn == 1 && wc.status == IBV_WC_SUCCESS && strcmp(rbuf, sbuf) == 0;
	int sn = s == 0 ? rdma_get_send_comp(p.cli, &wc) : -2;
	CLAUSE("DESC-SEND-RECV", ok && sn == 1 && wc.status == IBV_WC_SUCCESS,
	       "post_recv %d, post_send %d, recv completion %d, data %s, send completion %d", r, s, rn,
	       ok ? "ok" : "wrong", sn);
	/* DESCRIPTION: ... and as the target of an RDMA read or the source of an RDMA write. */
	struct ibv_mr *tmr = rdma_reg_read(p.srv, tbuf, sizeof tbuf);
	strcpy(tbuf, "remote");
	memset(sbuf, 0, sizeof sbuf);
	int rr = tmr ? rdma_post_read(p.cli, NULL, sbuf, 7, smr, IBV_SEND_SIGNALED, (uintptr_t)tbuf, tmr->rkey) : -2;
	int n1 = rr == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	int read_ok = n1 == 1 && wc.status == IBV_WC_SUCCESS && strcmp(sbuf, "remote") == 0;
	CLAUSE("DESC-RDMA-LOCAL", read_ok, "rdma_post_read into a reg_msgs buffer: post %d (%s), completion %d "
	       "(%s), data %s", rr, conf_errname(errno), n1, n1 == 1 ? ibv_wc_status_str(wc.status) : "-",
	       read_ok ? "ok" : "wrong");
	if (tmr)
		rdma_dereg_mr(tmr);
	/* RETURN VALUE: NULL and errno when registration fails (memory that is not mapped). */
	void *hole = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (hole != MAP_FAILED)
		munmap(hole, 8192);
	errno = 0;
	struct ibv_mr *bad = hole != MAP_FAILED ? rdma_reg_msgs(p.cli, hole, 8192) : NULL;
	int e = errno;
	CLAUSE("ERR-NULL", hole != MAP_FAILED && bad == NULL && e == EFAULT, "unmapped memory: %p (%s)",
	       (void *)bad, conf_errname(e));
	if (bad)
		rdma_dereg_mr(bad);
	/* NOTES: deregistered with rdma_dereg_mr. */
	int d1 = smr ? rdma_dereg_mr(smr) : -2, d2 = rmr ? rdma_dereg_mr(rmr) : -2;
	CLAUSE("NOTE-DEREG", d1 == 0 && d2 == 0, "rdma_dereg_mr returned %d and %d", d1, d2);
	(void)err;
	h_pair_close(&p);
	return conf_end();
}
