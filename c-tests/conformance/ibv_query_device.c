/* ibv_query_device(3): the device's attributes; 0 on success, an errno value on failure; the
 * maxima are upper limits. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_device", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_device_attr a;
	memset(&a, 0xa5, sizeof a);
	/* RETURN VALUE: 0 on success. */
	int rc = ctx ? ibv_query_device(ctx, &a) : -1;
	CLAUSE("RET-0", rc == 0, "ibv_query_device returned %d (%s)", rc, ctx ? conf_errname(rc) : err);
	if (rc != 0) {
		const char *ids[] = { "DESC-FW-VER", "DESC-NODE-GUID", "DESC-PORT-CNT", "DESC-LIMITS", "DESC-ATOMIC-CAP",
				      "NOTE-UPPER-LIMIT" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), "no device attributes");
		return conf_end();
	}
	/* fw_ver: a NUL-terminated string in its 64 bytes. */
	CLAUSE("DESC-FW-VER", memchr(a.fw_ver, 0, sizeof a.fw_ver) != NULL, "fw_ver not terminated");
	/* node_guid: network byte order, the device's GUID (ibv_get_device_guid). */
	uint64_t g = ibv_get_device_guid(ctx->device);
	CLAUSE("DESC-NODE-GUID", a.node_guid == g && g != 0, "node_guid 0x%016llx, device guid 0x%016llx",
	       (unsigned long long)a.node_guid, (unsigned long long)g);
	/* phys_port_cnt: the ports 1..phys_port_cnt exist (ibv_query_port succeeds), the next does not. */
	struct ibv_port_attr pa;
	int last = a.phys_port_cnt ? ibv_query_port(ctx, a.phys_port_cnt, &pa) : -1;
	int beyond = ibv_query_port(ctx, (uint8_t)(a.phys_port_cnt + 1), &pa);
	CLAUSE("DESC-PORT-CNT", a.phys_port_cnt >= 1 && last == 0 && beyond != 0,
	       "phys_port_cnt %u: query_port(last) %d, query_port(last+1) %d", a.phys_port_cnt, last, beyond);
	/* The limits describe a usable device: every resource and work-queue maximum is positive. */
	CLAUSE("DESC-LIMITS",
	       a.max_mr_size > 0 && a.max_qp > 0 && a.max_qp_wr > 0 && a.max_sge > 0 && a.max_cq > 0 && a.max_cqe > 0 &&
		       a.max_mr > 0 && a.max_pd > 0 && a.max_srq >= 0 && a.max_pkeys > 0 && a.page_size_cap != 0,
	       "max_mr_size %llu max_qp %d max_qp_wr %d max_sge %d max_cq %d max_cqe %d max_mr %d max_pd %d max_pkeys %u",
	       (unsigned long long)a.max_mr_size, a.max_qp, a.max_qp_wr, a.max_sge, a.max_cq, a.max_cqe, a.max_mr,
	       a.max_pd, a.max_pkeys);
	/* atomic_cap is one of enum ibv_atomic_cap. */
	CLAUSE("DESC-ATOMIC-CAP", a.atomic_cap == IBV_ATOMIC_NONE || a.atomic_cap == IBV_ATOMIC_HCA ||
					  a.atomic_cap == IBV_ATOMIC_GLOB,
	       "atomic_cap %d", (int)a.atomic_cap);
	/* NOTES: the maxima are upper limits: a CQ or a QP beyond them cannot be created. */
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *big = ibv_create_cq(ctx, a.max_cqe + 1, NULL, NULL, 0);
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	struct ibv_qp *qp = NULL;
	if (pd && cq) {
		struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, cq, 4);
		qa.cap.max_send_wr = (uint32_t)a.max_qp_wr + 1;
		qp = ibv_create_qp(pd, &qa);
	}
	CLAUSE("NOTE-UPPER-LIMIT", pd && cq && !big && !qp, "CQ of max_cqe+1: %p, QP of max_qp_wr+1: %p", (void *)big,
	       (void *)qp);
	if (big)
		ibv_destroy_cq(big);
	if (qp)
		ibv_destroy_qp(qp);
	if (cq)
		ibv_destroy_cq(cq);
	if (pd)
		ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return conf_end();
}
