/* c-tests/badinput/verbs_fixtures.c: see verbs_fixtures.h. */
#include "verbs_fixtures.h"

#include <string.h>

struct ibv_device foreign_dev;
struct ibv_context foreign_ctx;
struct ibv_pd foreign_pd;
struct ibv_mr foreign_mr;
struct ibv_cq foreign_cq;
struct ibv_comp_channel foreign_channel;
struct ibv_qp foreign_qp;
struct ibv_srq foreign_srq;
struct ibv_ah foreign_ah;

char buf[4096];

struct ibv_context *open_ctx(void)
{
	int n = 0;
	struct ibv_device **list = (ibv_get_device_list)(&n);
	struct ibv_context *ctx;

	if (!list || n < 1 || !list[0])
		return NULL;
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	return ctx;
}

struct ibv_context *stale_ctx(void)
{
	struct ibv_context *ctx = open_ctx();

	if (!ctx || ibv_close_device(ctx))
		return NULL;
	return ctx;
}

struct ibv_pd *stale_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd = ibv_alloc_pd(ctx);

	if (!pd || ibv_dealloc_pd(pd))
		return NULL;
	return pd;
}

struct ibv_mr *reg(struct ibv_pd *pd)
{
	return (ibv_reg_mr)(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
}

struct ibv_mr *stale_mr(struct ibv_pd *pd)
{
	struct ibv_mr *mr = reg(pd);

	if (!mr || ibv_dereg_mr(mr))
		return NULL;
	return mr;
}

struct ibv_comp_channel *stale_channel(struct ibv_context *ctx)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);

	if (!ch || ibv_destroy_comp_channel(ch))
		return NULL;
	return ch;
}

struct ibv_cq *stale_cq(struct ibv_context *ctx)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);

	if (!cq || ibv_destroy_cq(cq))
		return NULL;
	return cq;
}

struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.recv_cq = cq;
	a.srq = srq;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = srq ? 0 : 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	return ibv_create_qp(pd, &a);
}

struct ibv_qp *stale_qp(struct ibv_pd *pd, struct ibv_cq *cq)
{
	struct ibv_qp *qp = create_qp(pd, cq, NULL);

	if (!qp || ibv_destroy_qp(qp))
		return NULL;
	return qp;
}

int qp_to_init(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = 0;
	return ibv_modify_qp(qp, &a,
			     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

struct ibv_srq *create_srq(struct ibv_pd *pd, uint32_t max_wr)
{
	struct ibv_srq_init_attr a;

	memset(&a, 0, sizeof(a));
	a.attr.max_wr = max_wr;
	a.attr.max_sge = 1;
	return ibv_create_srq(pd, &a);
}

struct ibv_srq *stale_srq(struct ibv_pd *pd)
{
	struct ibv_srq *srq = create_srq(pd, 4);

	if (!srq || ibv_destroy_srq(srq))
		return NULL;
	return srq;
}

struct ibv_ah *create_ah(struct ibv_pd *pd)
{
	struct ibv_ah_attr a;

	memset(&a, 0, sizeof(a));
	a.is_global = 1;
	a.port_num = 1;
	a.grh.hop_limit = 64;
	return ibv_create_ah(pd, &a);
}

struct ibv_ah *stale_ah(struct ibv_pd *pd)
{
	struct ibv_ah *ah = create_ah(pd);

	if (!ah || ibv_destroy_ah(ah))
		return NULL;
	return ah;
}
