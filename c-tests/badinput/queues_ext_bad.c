/*
 * c-tests/badinput/queues_ext_bad.c: the static inline functions of <infiniband/verbs.h> that
 * librdmashim exports as real functions (docs/INLINE-API.md), part 2: CQs, SRQs, QPs, XRC and
 * thread domains, parent domains, and the steering, counter and WQ calls. Context, queries and
 * memory are verbs_ext_bad.c's; the posting builders and extended polling wr_poll_bad.c's.
 *
 * The system header defines these static inline, so a call by name would run the inline; every
 * case looks the exported symbol up (SYM, verbs_fixtures.h) and calls it through a pointer of
 * the header's own type. Where the inline would dereference a NULL or unknown handle the export
 * answers EINVAL, and where it would jump through a NULL op EOPNOTSUPP, in the function's
 * convention: NULL with errno for a pointer, the positive errno for an int.
 */
#include "badinput.h"
#include "verbs_fixtures.h"

#include <fcntl.h>

static struct ibv_xrcd foreign_xrcd;
static struct ibv_td foreign_td;

static struct ibv_xrcd *stale_xrcd(struct ibv_context *ctx)
{
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};
	struct ibv_xrcd *x = SYM_OF(ibv_open_xrcd)(ctx, &a);

	if (!x || SYM_OF(ibv_close_xrcd)(x))
		return NULL;
	return x;
}

/* --- CQs, SRQs, QPs, domains ------------------------------------------------------------ */

static void case_ibv_create_cq_ex(void)
{
	SYM(create, ibv_create_cq_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_cq_init_attr_ex a = { .cqe = 4 };
	struct ibv_cq_init_attr_ex zero = { .cqe = 0 };
	struct ibv_cq_init_attr_ex mask = { .cqe = 4, .comp_mask = 1u << 20 };
	struct ibv_cq_init_attr_ex flags = { .cqe = 4, .wc_flags = 1ull << 40 };

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, create(h, &a), EINVAL);
	EXPECT_NULL(create(ctx, NULL), EINVAL);
	EXPECT_NULL(create(ctx, &zero), EINVAL);
	EXPECT_NULL(create(ctx, &mask), EINVAL, EOPNOTSUPP);
	EXPECT_NULL(create(ctx, &flags), EINVAL, EOPNOTSUPP);
	ibv_close_device(ctx);
}

static void case_ibv_modify_cq(void)
{
	SYM(modify, ibv_modify_cq);
	struct ibv_context *ctx = open_ctx();
	struct ibv_cq *cq, *stale;
	struct ibv_modify_cq_attr a = {
		.attr_mask = IBV_CQ_ATTR_MODERATE,
		.moderate = { .cq_count = 1, .cq_period = 1 },
	};
	struct ibv_modify_cq_attr mask = { .attr_mask = 1u << 20 };

	REQUIRE(ctx != NULL && (cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_cq, modify(h, &a), EINVAL);
	EXPECT_RET(modify(cq, NULL), EINVAL);
	EXPECT_RET(modify(cq, &mask), EINVAL, EOPNOTSUPP);
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
}

static void case_ibv_create_srq_ex(void)
{
	SYM(create, ibv_create_srq_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale_c = stale_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_srq_init_attr_ex a;

	REQUIRE(ctx != NULL && stale_c != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 4;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_PD;
	EXPECT_NULL(create(ctx, NULL), EINVAL);
	/* A basic SRQ goes through ibv_create_srq: the PD is checked. */
	a.pd = NULL;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	a.pd = stale;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	a.pd = &foreign_pd;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	/* Anything else through the context's op: the context is checked. */
	a.pd = pd;
	a.comp_mask = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_XRCD |
		      IBV_SRQ_INIT_ATTR_CQ;
	a.srq_type = IBV_SRQT_XRC;
	EXPECT_BAD_HANDLES(NULL, stale_c, &foreign_ctx, create(h, &a), EINVAL);
	/* XRC without a domain and a CQ. */
	EXPECT_NULL(create(ctx, &a), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_get_srq_num(void)
{
	SYM(get_num, ibv_get_srq_num);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_srq *srq, *stale;
	uint32_t num;

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL && (stale = stale_srq(pd)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_srq, get_num(h, &num), EINVAL);
	/* A basic SRQ has no number (only XRC SRQs do). */
	EXPECT_RET(get_num(srq, &num), EINVAL, EOPNOTSUPP);
	ibv_destroy_srq(srq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_post_srq_ops(void)
{
	SYM(post_ops, ibv_post_srq_ops);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_srq *srq, *stale;
	struct ibv_ops_wr op, *bad;

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL && (stale = stale_srq(pd)) != NULL);
	memset(&op, 0, sizeof(op));
	op.opcode = IBV_WR_TAG_ADD;
	EXPECT_BAD_HANDLES(RET, stale, &foreign_srq, post_ops(h, &op, &bad), EINVAL);
	/* No tag matching on the soft device: the inline's EOPNOTSUPP, *bad_op = op. */
	bad = NULL;
	EXPECT_RET(post_ops(srq, &op, &bad), EOPNOTSUPP);
	CHECK(bad == &op);
	EXPECT_RET(post_ops(srq, &op, NULL), EOPNOTSUPP);
	ibv_destroy_srq(srq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_create_qp_ex(void)
{
	SYM(create, ibv_create_qp_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale_c = stale_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_cq *cq;
	struct ibv_qp_init_attr_ex a;

	REQUIRE(ctx != NULL && stale_c != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	memset(&a, 0, sizeof(a));
	a.send_cq = a.recv_cq = cq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	EXPECT_NULL(create(ctx, NULL), EINVAL);
	/* comp_mask PD alone goes through ibv_create_qp: the PD is checked. */
	a.pd = NULL;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	a.pd = stale;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	a.pd = &foreign_pd;
	EXPECT_NULL(create(ctx, &a), EINVAL);
	/* With the posting API, through the context's op. */
	a.pd = pd;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	EXPECT_BAD_HANDLES(NULL, stale_c, &foreign_ctx, create(h, &a), EINVAL);
	/* An unknown comp_mask bit, and an unknown send op. */
	a.comp_mask = IBV_QP_INIT_ATTR_PD | (1u << 30);
	EXPECT_NULL(create(ctx, &a), EINVAL, EOPNOTSUPP);
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = 1ull << 60;
	EXPECT_NULL(create(ctx, &a), EINVAL, EOPNOTSUPP);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_open_qp(void)
{
	SYM(open_qp, ibv_open_qp);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale_c = stale_ctx();
	struct ibv_xrcd *stale;
	struct ibv_qp_open_attr a;

	REQUIRE(ctx != NULL && stale_c != NULL && (stale = stale_xrcd(ctx)) != NULL);
	memset(&a, 0, sizeof(a));
	a.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
	a.qp_num = 0xabcdef;
	a.qp_type = IBV_QPT_XRC_RECV;
	a.xrcd = stale;
	EXPECT_BAD_HANDLES(NULL, stale_c, &foreign_ctx, open_qp(h, &a), EINVAL);
	EXPECT_NULL(open_qp(ctx, NULL), EINVAL);
	EXPECT_NULL(open_qp(ctx, &a), EINVAL);
	a.xrcd = &foreign_xrcd;
	EXPECT_NULL(open_qp(ctx, &a), EINVAL);
	a.xrcd = NULL;
	EXPECT_NULL(open_qp(ctx, &a), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_modify_qp_rate_limit(void)
{
	SYM(rate_limit, ibv_modify_qp_rate_limit);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *stale;
	struct ibv_qp_rate_limit_attr a = { .rate_limit = 1000 };

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL && (stale = stale_qp(pd, cq)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_qp, rate_limit(h, &a), EINVAL);
	/* No packet pacing on the soft device. */
	EXPECT_RET(rate_limit(qp, &a), EOPNOTSUPP);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_open_xrcd(void)
{
	SYM(open_xrcd, ibv_open_xrcd);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_xrcd_init_attr a = {
		.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS,
		.fd = -1,
		.oflags = O_CREAT,
	};
	struct ibv_xrcd_init_attr bad = a;

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, open_xrcd(h, &a), EINVAL);
	EXPECT_NULL(open_xrcd(ctx, NULL), EINVAL);
	/* ibv_open_xrcd(3): fd -1 needs O_CREAT; a bad descriptor; an unknown comp_mask bit. */
	bad.oflags = 0;
	EXPECT_NULL(open_xrcd(ctx, &bad), EINVAL);
	bad = a;
	bad.fd = 1 << 20;
	EXPECT_NULL(open_xrcd(ctx, &bad), EBADF, EINVAL);
	bad = a;
	bad.comp_mask |= 1u << 20;
	EXPECT_NULL(open_xrcd(ctx, &bad), EINVAL, EOPNOTSUPP);
	ibv_close_device(ctx);
}

static void case_ibv_close_xrcd(void)
{
	SYM(close_xrcd, ibv_close_xrcd);
	struct ibv_context *ctx = open_ctx();
	struct ibv_xrcd *stale;

	REQUIRE(ctx != NULL && (stale = stale_xrcd(ctx)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_xrcd, close_xrcd(h), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_alloc_td(void)
{
	SYM(alloc, ibv_alloc_td);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_td_init_attr a = { .comp_mask = 0 };
	struct ibv_td_init_attr mask = { .comp_mask = 1 };

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, alloc(h, &a), EINVAL);
	EXPECT_NULL(alloc(ctx, NULL), EINVAL);
	EXPECT_NULL(alloc(ctx, &mask), EINVAL, EOPNOTSUPP);
	ibv_close_device(ctx);
}

static void case_ibv_dealloc_td(void)
{
	SYM(alloc, ibv_alloc_td);
	SYM(dealloc, ibv_dealloc_td);
	struct ibv_context *ctx = open_ctx();
	struct ibv_td_init_attr a = { .comp_mask = 0 };
	struct ibv_td *stale;

	REQUIRE(ctx != NULL && (stale = alloc(ctx, &a)) != NULL);
	REQUIRE(dealloc(stale) == 0);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_td, dealloc(h), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_alloc_parent_domain(void)
{
	SYM(alloc, ibv_alloc_parent_domain);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_pd *pd, *stale_p;
	struct ibv_parent_domain_init_attr a;

	REQUIRE(ctx != NULL && stale != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale_p = stale_pd(ctx)) != NULL);
	memset(&a, 0, sizeof(a));
	a.pd = pd;
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, alloc(h, &a), EINVAL);
	EXPECT_NULL(alloc(ctx, NULL), EINVAL);
	a.pd = NULL;
	EXPECT_NULL(alloc(ctx, &a), EINVAL);
	a.pd = stale_p;
	EXPECT_NULL(alloc(ctx, &a), EINVAL);
	a.pd = &foreign_pd;
	EXPECT_NULL(alloc(ctx, &a), EINVAL);
	a.pd = pd;
	a.comp_mask = 1u << 20;
	EXPECT_NULL(alloc(ctx, &a), EINVAL, EOPNOTSUPP);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_query_rt_values_ex(void)
{
	SYM(query, ibv_query_rt_values_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_values_ex v = { .comp_mask = IBV_VALUES_MASK_RAW_CLOCK };
	struct ibv_values_ex mask = { .comp_mask = 1u << 20 };

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_ctx, query(h, &v), EINVAL);
	EXPECT_RET(query(ctx, NULL), EINVAL);
	EXPECT_RET(query(ctx, &mask), EINVAL, EOPNOTSUPP);
	ibv_close_device(ctx);
}

static void case_ibv_query_device_ex(void)
{
	SYM(query, ibv_query_device_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_device_attr_ex attr;
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_ctx, query(h, NULL, &attr), EINVAL);
	EXPECT_RET(query(ctx, NULL, NULL), EINVAL);
	/* The inline's own check: input->comp_mask must be 0. */
	EXPECT_RET(query(ctx, &in, &attr), EINVAL);
	EXPECT_EQ(query(ctx, NULL, &attr), 0);
	ibv_close_device(ctx);
}

/* --- steering, counters, WQs: objects the soft device never makes ----------------------- */

/*
 * The destroy/modify calls read the object's context as the inline does: NULL is EINVAL, an
 * object whose context is not ours EINVAL, and one on our context EOPNOTSUPP (no such op).
 */
#define EXPECT_ON_OBJECTS(type, call_with_x)                                                   \
	do {                                                                                   \
		struct ibv_context *ctx_ = open_ctx();                                         \
		type obj_;                                                                     \
		type *x;                                                                       \
		REQUIRE(ctx_ != NULL);                                                         \
		memset(&obj_, 0, sizeof(obj_));                                                \
		x = NULL;                                                                      \
		EXPECT_RET(call_with_x, EINVAL);                                               \
		x = &obj_;                                                                     \
		obj_.context = &foreign_ctx;                                                   \
		EXPECT_RET(call_with_x, EINVAL);                                               \
		obj_.context = ctx_;                                                           \
		EXPECT_RET(call_with_x, EOPNOTSUPP);                                           \
		ibv_close_device(ctx_);                                                        \
	} while (0)

/* The create calls: the context is checked, then the op is missing. */
#define EXPECT_CREATE(fn, attr)                                                                \
	do {                                                                                   \
		struct ibv_context *ctx_ = open_ctx();                                         \
		struct ibv_context *stale_ = stale_ctx();                                      \
		REQUIRE(ctx_ != NULL && stale_ != NULL);                                       \
		EXPECT_BAD_HANDLES(NULL, stale_, &foreign_ctx, fn(h, attr), EINVAL);          \
		EXPECT_NULL(fn(ctx_, attr), EOPNOTSUPP);                                       \
		EXPECT_NULL(fn(ctx_, NULL), EOPNOTSUPP);                                       \
		ibv_close_device(ctx_);                                                        \
	} while (0)

static void case_ibv_create_flow(void)
{
	SYM(create, ibv_create_flow);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *stale;
	struct ibv_flow_attr fa = { .type = IBV_FLOW_ATTR_NORMAL, .port = 1 };

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL && (stale = stale_qp(pd, cq)) != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_qp, create(h, &fa), EINVAL);
	EXPECT_NULL(create(qp, &fa), EOPNOTSUPP);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_destroy_flow(void)
{
	SYM(destroy, ibv_destroy_flow);
	EXPECT_ON_OBJECTS(struct ibv_flow, destroy(x));
}

static void case_ibv_create_flow_action_esp(void)
{
	SYM(create, ibv_create_flow_action_esp);
	struct ibv_flow_action_esp_attr esp;

	memset(&esp, 0, sizeof(esp));
	EXPECT_CREATE(create, &esp);
}

static void case_ibv_modify_flow_action_esp(void)
{
	SYM(modify, ibv_modify_flow_action_esp);
	struct ibv_flow_action_esp_attr esp;

	memset(&esp, 0, sizeof(esp));
	EXPECT_ON_OBJECTS(struct ibv_flow_action, modify(x, &esp));
}

static void case_ibv_destroy_flow_action(void)
{
	SYM(destroy, ibv_destroy_flow_action);
	EXPECT_ON_OBJECTS(struct ibv_flow_action, destroy(x));
}

static void case_ibv_create_counters(void)
{
	SYM(create, ibv_create_counters);
	struct ibv_counters_init_attr a = { .comp_mask = 0 };

	EXPECT_CREATE(create, &a);
}

static void case_ibv_destroy_counters(void)
{
	SYM(destroy, ibv_destroy_counters);
	EXPECT_ON_OBJECTS(struct ibv_counters, destroy(x));
}

static void case_ibv_attach_counters_point_flow(void)
{
	SYM(attach, ibv_attach_counters_point_flow);
	struct ibv_counter_attach_attr a;
	struct ibv_flow flow;

	memset(&a, 0, sizeof(a));
	memset(&flow, 0, sizeof(flow));
	EXPECT_ON_OBJECTS(struct ibv_counters, attach(x, &a, &flow));
}

static void case_ibv_read_counters(void)
{
	SYM(read_counters, ibv_read_counters);
	uint64_t v[4];

	EXPECT_ON_OBJECTS(struct ibv_counters, read_counters(x, v, 4, 0));
}

static void case_ibv_create_wq(void)
{
	SYM(create, ibv_create_wq);
	struct ibv_wq_init_attr a;

	memset(&a, 0, sizeof(a));
	a.wq_type = IBV_WQT_RQ;
	a.max_wr = 4;
	a.max_sge = 1;
	EXPECT_CREATE(create, &a);
}

static void case_ibv_modify_wq(void)
{
	SYM(modify, ibv_modify_wq);
	struct ibv_wq_attr a = { .attr_mask = IBV_WQ_ATTR_STATE, .wq_state = IBV_WQS_RDY };

	EXPECT_ON_OBJECTS(struct ibv_wq, modify(x, &a));
}

static void case_ibv_destroy_wq(void)
{
	SYM(destroy, ibv_destroy_wq);
	EXPECT_ON_OBJECTS(struct ibv_wq, destroy(x));
}

static void case_ibv_post_wq_recv(void)
{
	SYM(post, ibv_post_wq_recv);
	struct ibv_wq wq;
	struct ibv_recv_wr wr, *bad = NULL;

	memset(&wq, 0, sizeof(wq));
	memset(&wr, 0, sizeof(wr));
	EXPECT_RET(post(NULL, &wr, &bad), EINVAL);
	/* A WQ without its post_recv function: EOPNOTSUPP rather than a jump through NULL. */
	EXPECT_RET(post(&wq, &wr, &bad), EOPNOTSUPP);
}

static void case_ibv_create_rwq_ind_table(void)
{
	SYM(create, ibv_create_rwq_ind_table);
	struct ibv_rwq_ind_table_init_attr a;

	memset(&a, 0, sizeof(a));
	EXPECT_CREATE(create, &a);
}

static void case_ibv_destroy_rwq_ind_table(void)
{
	SYM(destroy, ibv_destroy_rwq_ind_table);
	EXPECT_ON_OBJECTS(struct ibv_rwq_ind_table, destroy(x));
}

static const struct bi_case cases[] = {
	BI_CASE(ibv_create_cq_ex),
	BI_CASE(ibv_modify_cq),
	BI_CASE(ibv_create_srq_ex),
	BI_CASE(ibv_get_srq_num),
	BI_CASE(ibv_post_srq_ops),
	BI_CASE(ibv_create_qp_ex),
	BI_CASE(ibv_open_qp),
	BI_CASE(ibv_modify_qp_rate_limit),
	BI_CASE(ibv_open_xrcd),
	BI_CASE(ibv_close_xrcd),
	BI_CASE(ibv_alloc_td),
	BI_CASE(ibv_dealloc_td),
	BI_CASE(ibv_alloc_parent_domain),
	BI_CASE(ibv_query_rt_values_ex),
	BI_CASE(ibv_query_device_ex),
	BI_CASE(ibv_create_flow),
	BI_CASE(ibv_destroy_flow),
	BI_CASE(ibv_create_flow_action_esp),
	BI_CASE(ibv_modify_flow_action_esp),
	BI_CASE(ibv_destroy_flow_action),
	BI_CASE(ibv_create_counters),
	BI_CASE(ibv_destroy_counters),
	BI_CASE(ibv_attach_counters_point_flow),
	BI_CASE(ibv_read_counters),
	BI_CASE(ibv_create_wq),
	BI_CASE(ibv_modify_wq),
	BI_CASE(ibv_destroy_wq),
	BI_CASE(ibv_post_wq_recv),
	BI_CASE(ibv_create_rwq_ind_table),
	BI_CASE(ibv_destroy_rwq_ind_table),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
