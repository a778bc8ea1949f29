/*
 * c-tests/badinput/verbs_ext_bad.c: the static inline functions of <infiniband/verbs.h> that
 * librdmashim exports as real functions (docs/INLINE-API.md), part 1: context and queries,
 * memory regions and windows, device memory and the pure helpers. Queues, domains and
 * steering are queues_ext_bad.c's; the posting builders and extended polling wr_poll_bad.c's.
 *
 * The system header defines these static inline, so a call by name would run the inline; every
 * case looks the exported symbol up (SYM, verbs_fixtures.h) and calls it through a pointer of
 * the header's own type. Where the inline would dereference a NULL or unknown handle the export
 * answers EINVAL, and where it would jump through a NULL op EOPNOTSUPP, in the function's
 * convention: NULL with errno for a pointer, the positive errno for an int, the negative errno
 * for ibv_query_gid_table.
 */
#include "badinput.h"
#include "verbs_fixtures.h"

/* Declared by the header only under RDMA_STATIC_PROVIDERS. */
typedef struct ibv_device **(*get_device_list_fn)(int *);

static struct ibv_mw foreign_mw;
static struct ibv_dm foreign_dm;

static struct ibv_mw *stale_mw(struct ibv_pd *pd)
{
	struct ibv_mw *mw = SYM_OF(ibv_alloc_mw)(pd, IBV_MW_TYPE_2);

	if (!mw || SYM_OF(ibv_dealloc_mw)(mw))
		return NULL;
	return mw;
}

static struct ibv_dm *alloc_dm(struct ibv_context *ctx)
{
	struct ibv_alloc_dm_attr a = { .length = 64 };

	return SYM_OF(ibv_alloc_dm)(ctx, &a);
}

static struct ibv_dm *stale_dm(struct ibv_context *ctx)
{
	struct ibv_dm *dm = alloc_dm(ctx);

	if (!dm || SYM_OF(ibv_free_dm)(dm))
		return NULL;
	return dm;
}

/* --- context and queries ---------------------------------------------------------------- */

static void case_verbs_get_ctx(void)
{
	SYM(get_ctx, verbs_get_ctx);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, get_ctx(h), EINVAL);
	/* Ours are extended: the verbs_context in front of the context. */
	CHECK(get_ctx(ctx) != NULL && &get_ctx(ctx)->context == ctx);
	ibv_close_device(ctx);
}

static void case___ibv_get_device_list(void)
{
	get_device_list_fn get = (get_device_list_fn)bi_sym("__ibv_get_device_list");
	struct ibv_device **list;
	int n = -1;

	REQUIRE(get != NULL);
	/* num_devices is optional. */
	EXPECT_NONNULL(list = get(NULL));
	if (list)
		ibv_free_device_list(list);
	EXPECT_NONNULL(list = get(&n));
	CHECK(n >= 1);
	if (list)
		ibv_free_device_list(list);
}

static void case____ibv_query_port(void)
{
	typedef int (*query_port_fn)(struct ibv_context *, uint8_t, struct ibv_port_attr *);
	query_port_fn query = (query_port_fn)bi_sym("___ibv_query_port");
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_port_attr pa;

	REQUIRE(query != NULL && ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_ctx, query(h, 1, &pa), EINVAL);
	EXPECT_RET(query(ctx, 1, NULL), EINVAL);
	EXPECT_RET(query(ctx, 0, &pa), EINVAL);
	EXPECT_RET(query(ctx, 2, &pa), EINVAL);
	EXPECT_EQ(query(ctx, 1, &pa), 0);
	ibv_close_device(ctx);
}

static void case_ibv_query_gid_ex(void)
{
	SYM(query, ibv_query_gid_ex);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_gid_entry e;

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_ctx, query(h, 1, 0, &e, 0), EINVAL);
	EXPECT_RET(query(ctx, 1, 0, NULL, 0), EINVAL);
	EXPECT_RET(query(ctx, 2, 0, &e, 0), EINVAL);
	EXPECT_RET(query(ctx, 1, 0, &e, 1), EINVAL);
	EXPECT_RET(query(ctx, 1, 1u << 20, &e, 0), EINVAL, ENODATA);
	ibv_close_device(ctx);
}

static void case_ibv_query_gid_table(void)
{
	SYM(query, ibv_query_gid_table);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_gid_entry e[64];

	REQUIRE(ctx != NULL && stale != NULL);
	/* ibv_query_gid_table(3): a negative errno on error. */
	EXPECT_EQ(query(NULL, e, 64, 0), -EINVAL);
	EXPECT_EQ(query(stale, e, 64, 0), -EINVAL);
	EXPECT_EQ(query(&foreign_ctx, e, 64, 0), -EINVAL);
	EXPECT_EQ(query(ctx, NULL, 64, 0), -EINVAL);
	EXPECT_EQ(query(ctx, e, 64, 1), -EINVAL);
	CHECK(query(ctx, e, 64, 0) >= 1);
	ibv_close_device(ctx);
}

/* --- memory regions and windows --------------------------------------------------------- */

static void case___ibv_reg_mr(void)
{
	typedef struct ibv_mr *(*reg_mr_fn)(struct ibv_pd *, void *, size_t, unsigned int, int);
	reg_mr_fn reg_mr = (reg_mr_fn)bi_sym("__ibv_reg_mr");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;

	REQUIRE(reg_mr != NULL && ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	/* Both paths: a constant access (ibv_reg_mr) and a variable one (ibv_reg_mr_iova2). */
	for (int is_const = 0; is_const < 2; is_const++) {
		bi_set_context("is_access_const %d", is_const);
		EXPECT_NULL(reg_mr(NULL, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, is_const),
			    EINVAL);
		EXPECT_NULL(reg_mr(stale, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, is_const),
			    EINVAL);
		EXPECT_NULL(reg_mr(&foreign_pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE, is_const),
			    EINVAL);
		/* Remote write without local write: ibv_reg_mr(3)'s EINVAL. */
		EXPECT_NULL(reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE, is_const), EINVAL);
	}
	bi_clear_context();
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case___ibv_reg_mr_iova(void)
{
	typedef struct ibv_mr *(*reg_mr_iova_fn)(struct ibv_pd *, void *, size_t, uint64_t,
						 unsigned int, int);
	reg_mr_iova_fn reg_mr = (reg_mr_iova_fn)bi_sym("__ibv_reg_mr_iova");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;

	REQUIRE(reg_mr != NULL && ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	for (int is_const = 0; is_const < 2; is_const++) {
		bi_set_context("is_access_const %d", is_const);
		EXPECT_NULL(reg_mr(NULL, buf, sizeof(buf), 0x1000, IBV_ACCESS_LOCAL_WRITE, is_const),
			    EINVAL);
		EXPECT_NULL(reg_mr(stale, buf, sizeof(buf), 0x1000, IBV_ACCESS_LOCAL_WRITE,
				   is_const),
			    EINVAL);
		EXPECT_NULL(reg_mr(&foreign_pd, buf, sizeof(buf), 0x1000, IBV_ACCESS_LOCAL_WRITE,
				   is_const),
			    EINVAL);
		EXPECT_NULL(reg_mr(pd, buf, sizeof(buf), 0x1000, IBV_ACCESS_REMOTE_WRITE, is_const),
			    EINVAL);
	}
	bi_clear_context();
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_inc_rkey(void)
{
	SYM(inc, ibv_inc_rkey);

	/* No error value: the key's low 8 bits (its tag) step by one and wrap; the rest stays. */
	EXPECT_EQ(inc(0x12345678u), 0x12345679u);
	EXPECT_EQ(inc(0x123456ffu), 0x12345600u);
	EXPECT_EQ(inc(0xffffffffu), 0xffffff00u);
}

static void case_ibv_is_qpt_supported(void)
{
	SYM(supported, ibv_is_qpt_supported);

	EXPECT_EQ(supported(1u << IBV_QPT_RC, IBV_QPT_RC), 1);
	EXPECT_EQ(supported(1u << IBV_QPT_RC, IBV_QPT_UD), 0);
	/* A type past the 32 bits of caps is not supported (the inline's shift would be UB). */
	EXPECT_EQ(supported(0xffffffffu, (enum ibv_qp_type)32), 0);
	EXPECT_EQ(supported(0xffffffffu, (enum ibv_qp_type)0xffffffffu), 0);
}

static void case_ibv_flow_label_to_udp_sport(void)
{
	SYM(sport, ibv_flow_label_to_udp_sport);

	/* Always in the RoCEv2 range 0xc000..0xffff; only the 20 label bits count. */
	EXPECT_EQ(sport(0), 0xc000);
	EXPECT_EQ(sport(0xfffff), 0xffc0);
	EXPECT_EQ(sport(0xffffffffu), sport(0xfffff));
}

static void case_ibv_alloc_mw(void)
{
	SYM(alloc, ibv_alloc_mw);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_pd, alloc(h, IBV_MW_TYPE_2), EINVAL);
	EXPECT_NULL(alloc(pd, (enum ibv_mw_type)7), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_dealloc_mw(void)
{
	SYM(dealloc, ibv_dealloc_mw);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_mw *stale;

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_mw(pd)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_mw, dealloc(h), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_bind_mw(void)
{
	SYM(alloc, ibv_alloc_mw);
	SYM(dealloc, ibv_dealloc_mw);
	SYM(bind, ibv_bind_mw);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *pd2;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr, *mr2;
	struct ibv_mw *mw1, *mw2, *stale;
	struct ibv_mw_bind b;

	REQUIRE(ctx != NULL && (pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((pd2 = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((mr = (ibv_reg_mr)(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_MW_BIND)) != NULL);
	REQUIRE((mr2 = (ibv_reg_mr)(pd2, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_MW_BIND)) != NULL);
	REQUIRE((mw1 = alloc(pd, IBV_MW_TYPE_1)) != NULL);
	REQUIRE((mw2 = alloc(pd, IBV_MW_TYPE_2)) != NULL);
	REQUIRE((stale = stale_mw(pd)) != NULL);
	memset(&b, 0, sizeof(b));
	b.wr_id = 1;
	b.bind_info.mr = mr;
	b.bind_info.addr = (uintptr_t)buf;
	b.bind_info.length = 64;
	b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
	EXPECT_BAD_HANDLES(RET, stale, &foreign_mw, bind(qp, h, &b), EINVAL);
	EXPECT_RET(bind(qp, mw1, NULL), EINVAL);
	/* ibv_bind_mw(3) binds type 1 windows; a type 2 one is bound by a work request. */
	EXPECT_RET(bind(qp, mw2, &b), EINVAL);
	/* An MR of another PD than the window's. */
	b.bind_info.mr = mr2;
	EXPECT_RET(bind(qp, mw1, &b), EPERM);
	/* A range without an MR. */
	b.bind_info.mr = NULL;
	EXPECT_RET(bind(qp, mw1, &b), EINVAL);
	/* A QP that is not ours, and one in RESET (not ready to send). */
	b.bind_info.mr = mr;
	EXPECT_RET(bind(NULL, mw1, &b), EINVAL);
	EXPECT_RET(bind(&foreign_qp, mw1, &b), EINVAL);
	EXPECT_RET(bind(qp, mw1, &b), EINVAL);
	dealloc(mw1);
	dealloc(mw2);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(mr2);
	ibv_dealloc_pd(pd2);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_advise_mr(void)
{
	SYM(advise, ibv_advise_mr);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_mr *mr;
	struct ibv_sge sge;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	sge.addr = (uintptr_t)buf;
	sge.length = sizeof(buf);
	sge.lkey = mr->lkey;
	EXPECT_BAD_HANDLES(RET, stale, &foreign_pd, advise(h, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL);
	EXPECT_RET(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, NULL, 1), EINVAL);
	EXPECT_RET(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
	EXPECT_RET(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 20, &sge, 1), EINVAL);
	/* An advice the device does not know, as mlx5 answers it. */
	EXPECT_RET(advise(pd, (enum ibv_advise_mr_advice)99, 0, &sge, 1), EOPNOTSUPP);
	/* ibv_advise_mr(3): EFAULT for a range that is not in an ODP region of the PD. */
	EXPECT_RET(advise(pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EFAULT);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_alloc_null_mr(void)
{
	SYM(alloc, ibv_alloc_null_mr);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *stale;

	REQUIRE(ctx != NULL && (stale = stale_pd(ctx)) != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_pd, alloc(h), EINVAL);
	ibv_close_device(ctx);
}

/* --- device memory ---------------------------------------------------------------------- */

static void case_ibv_alloc_dm(void)
{
	SYM(alloc, ibv_alloc_dm);
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_alloc_dm_attr a = { .length = 64 };
	struct ibv_alloc_dm_attr huge = { .length = (size_t)1 << 40 };
	struct ibv_alloc_dm_attr mask = { .length = 64, .comp_mask = 1 };

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_ctx, alloc(h, &a), EINVAL);
	EXPECT_NULL(alloc(ctx, NULL), EINVAL);
	/* More than the device's max_dm_size, and an unknown comp_mask bit. */
	EXPECT_NULL(alloc(ctx, &huge), EINVAL, ENOMEM);
	EXPECT_NULL(alloc(ctx, &mask), EINVAL, EOPNOTSUPP);
	ibv_close_device(ctx);
}

static void case_ibv_free_dm(void)
{
	SYM(free_dm, ibv_free_dm);
	struct ibv_context *ctx = open_ctx();
	struct ibv_dm *stale;

	REQUIRE(ctx != NULL && (stale = stale_dm(ctx)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_dm, free_dm(h), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_memcpy_to_dm(void)
{
	SYM(to_dm, ibv_memcpy_to_dm);
	SYM(free_dm, ibv_free_dm);
	struct ibv_context *ctx = open_ctx();
	struct ibv_dm *dm, *stale;

	REQUIRE(ctx != NULL && (dm = alloc_dm(ctx)) != NULL && (stale = stale_dm(ctx)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_dm, to_dm(h, 0, buf, 8), EINVAL);
	/* Past the 64 bytes allocated, and an offset that wraps: EFAULT, as mlx5 answers. */
	EXPECT_RET(to_dm(dm, 60, buf, 8), EFAULT);
	EXPECT_RET(to_dm(dm, UINT64_MAX, buf, 8), EFAULT);
	EXPECT_RET(to_dm(dm, 0, NULL, 8), EINVAL);
	EXPECT_EQ(to_dm(dm, 0, buf, 64), 0);
	free_dm(dm);
	ibv_close_device(ctx);
}

static void case_ibv_memcpy_from_dm(void)
{
	SYM(from_dm, ibv_memcpy_from_dm);
	SYM(free_dm, ibv_free_dm);
	struct ibv_context *ctx = open_ctx();
	struct ibv_dm *dm, *stale;

	REQUIRE(ctx != NULL && (dm = alloc_dm(ctx)) != NULL && (stale = stale_dm(ctx)) != NULL);
	EXPECT_BAD_HANDLES(RET, stale, &foreign_dm, from_dm(buf, h, 0, 8), EINVAL);
	EXPECT_RET(from_dm(buf, dm, 60, 8), EFAULT);
	EXPECT_RET(from_dm(buf, dm, UINT64_MAX, 8), EFAULT);
	EXPECT_RET(from_dm(NULL, dm, 0, 8), EINVAL);
	EXPECT_EQ(from_dm(buf, dm, 0, 64), 0);
	free_dm(dm);
	ibv_close_device(ctx);
}

static void case_ibv_reg_dm_mr(void)
{
	SYM(reg_dm_mr, ibv_reg_dm_mr);
	SYM(free_dm, ibv_free_dm);
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_dm *dm, *stale_d;
	const unsigned int acc = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL && (stale = stale_pd(ctx)) != NULL);
	REQUIRE((dm = alloc_dm(ctx)) != NULL && (stale_d = stale_dm(ctx)) != NULL);
	EXPECT_BAD_HANDLES(NULL, stale, &foreign_pd, reg_dm_mr(h, dm, 0, 64, acc), EINVAL);
	EXPECT_BAD_HANDLES(NULL, stale_d, &foreign_dm, reg_dm_mr(pd, h, 0, 64, acc), EINVAL);
	/* ibv_reg_dm_mr(3): device memory is registered zero-based; past its end. */
	EXPECT_NULL(reg_dm_mr(pd, dm, 0, 64, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL(reg_dm_mr(pd, dm, 32, 64, acc), EINVAL);
	free_dm(dm);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static const struct bi_case cases[] = {
	BI_CASE(verbs_get_ctx),
	BI_CASE(__ibv_get_device_list),
	BI_CASE(___ibv_query_port),
	BI_CASE(ibv_query_gid_ex),
	BI_CASE(ibv_query_gid_table),
	BI_CASE(__ibv_reg_mr),
	BI_CASE(__ibv_reg_mr_iova),
	BI_CASE(ibv_inc_rkey),
	BI_CASE(ibv_is_qpt_supported),
	BI_CASE(ibv_flow_label_to_udp_sport),
	BI_CASE(ibv_alloc_mw),
	BI_CASE(ibv_dealloc_mw),
	BI_CASE(ibv_bind_mw),
	BI_CASE(ibv_advise_mr),
	BI_CASE(ibv_alloc_null_mr),
	BI_CASE(ibv_alloc_dm),
	BI_CASE(ibv_free_dm),
	BI_CASE(ibv_memcpy_to_dm),
	BI_CASE(ibv_memcpy_from_dm),
	BI_CASE(ibv_reg_dm_mr),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
