/* rdma_reg_write(3): registers a buffer that a remote RDMA write may access (its rkey is given
 * to the peer's rdma_post_write); remote reads are not allowed from it. */
#include "cmhelp.h"

#include <sys/mman.h>
#include <rdma/rdma_verbs.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_reg_write", argc, argv);
	static char target[64], local[64];
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair p;
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(0), &o) != 0) {
		const char *ids[] = { "RET-MR", "DESC-REMOTE-WRITE", "ACCESS-NO-READ", "ERR-NULL" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], p.err);
		h_pair_close(&p);
		return conf_end();
	}
	errno = 0;
	struct ibv_mr *mr = rdma_reg_write(p.srv, target, sizeof target);
	CLAUSE("RET-MR", mr && mr->addr == target && mr->length == sizeof target && mr->pd == p.srv->pd,
	       "returned %p (%s)", (void *)mr, conf_errname(errno));
	struct ibv_mr *lmr = rdma_reg_msgs(p.cli, local, sizeof local);
	/* DESCRIPTION: a remote RDMA write (remote_addr + rkey) lands in it. */
	strcpy(local, "written by the peer");
	struct ibv_wc wc;
	int w = mr && lmr ? rdma_post_write(p.cli, (void *)1, local, strlen(local) + 1, lmr, IBV_SEND_SIGNALED,
					   (uintptr_t)target, mr->rkey) : -2;
	int n = w == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	long long end = h_now_ms() + 1000;
	while (n == 1 && strcmp(target, local) != 0 && h_now_ms() < end)
		h_sleep_ms(1);
	CLAUSE("DESC-REMOTE-WRITE", n == 1 && wc.status == IBV_WC_SUCCESS && strcmp(target, local) == 0,
	       "post_write %d (%s), completion %d (%s), target \"%.20s\"", w, conf_errname(errno), n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-", target);
	/* Registered for remote write only: a remote read is refused (remote access error). */
	memset(local, 0, sizeof local);
	int r = mr && lmr ? rdma_post_read(p.cli, (void *)2, local, 8, lmr, IBV_SEND_SIGNALED, (uintptr_t)target,
					  mr->rkey) : -2;
	n = r == 0 ? h_poll(p.cli->send_cq, &wc, H_WAIT_MS) : -2;
	CLAUSE("ACCESS-NO-READ", n == 1 && wc.status == IBV_WC_REM_ACCESS_ERR && local[0] == 0,
	       "post_read %d (%s), completion %d (%s)", r, conf_errname(errno), n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "-");
	void *hole = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (hole != MAP_FAILED)
		munmap(hole, 8192);
	errno = 0;
	struct ibv_mr *bad = hole != MAP_FAILED ? rdma_reg_write(p.srv, hole, 8192) : NULL;
	int e = errno;
	CLAUSE("ERR-NULL", hole != MAP_FAILED && !bad && e == EFAULT, "unmapped memory: %p (%s)", (void *)bad,
	       conf_errname(e));
	if (bad)
		rdma_dereg_mr(bad);
	if (mr)
		rdma_dereg_mr(mr);
	if (lmr)
		rdma_dereg_mr(lmr);
	h_pair_close(&p);
	return conf_end();
}
