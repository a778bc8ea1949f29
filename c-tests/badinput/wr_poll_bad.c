/*
 * c-tests/badinput/wr_poll_bad.c: the posting builders (ibv_wr_*) and the extended CQ polling
 * calls (ibv_start_poll, ibv_next_poll, ibv_end_poll, ibv_wc_read_*, ibv_cq_ex_to_cq) that
 * <infiniband/verbs.h> defines static inline and librdmashim exports (docs/INLINE-API.md).
 * Every case calls the exported symbol (SYM, verbs_fixtures.h).
 *
 * Where the inline would dereference a NULL or unknown ibv_qp_ex / ibv_cq_ex the export sets
 * errno to EINVAL, and where it would jump through a NULL slot (posting API not enabled, a
 * reader not asked for in wc_flags) to EOPNOTSUPP; the void builders report only through
 * errno, ibv_wr_complete and the polling calls return the errno, the readers return 0.
 */
#include "badinput.h"
#include "verbs_fixtures.h"

#include <stdlib.h>

static struct ibv_qp_ex foreign_qpx;
static struct ibv_cq_ex foreign_cqx;
static struct ibv_mw foreign_mw;

/* Every send op of the posting API the soft device has. */
#define ALL_SEND_OPS                                                                           \
	(IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND | \
	 IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |                             \
	 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |            \
	 IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_SEND_WITH_INV)

/* The objects a posting case starts from. */
struct wr_fixture {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;	 /* buf */
	struct ibv_qp_ex *plain; /* created by ibv_create_qp: posting API not enabled */
	struct ibv_qp_ex *ex;	 /* created with ALL_SEND_OPS, in RESET */
	struct ibv_qp_ex *stale; /* created with the posting API, destroyed */
};

static struct ibv_qp *create_qp_ex(struct wr_fixture *f)
{
	struct ibv_qp_init_attr_ex a;

	memset(&a, 0, sizeof(a));
	a.send_cq = a.recv_cq = f->cq;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 2;
	a.cap.max_inline_data = 64;
	a.qp_type = IBV_QPT_RC;
	a.pd = f->pd;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.send_ops_flags = ALL_SEND_OPS;
	return SYM_OF(ibv_create_qp_ex)(f->ctx, &a);
}

/* 0 with the fixture set up; -1 (the case fails) otherwise. */
static int wr_setup(struct wr_fixture *f)
{
	struct ibv_qp *qp;

	memset(f, 0, sizeof(*f));
	if (!(f->ctx = open_ctx()) || !(f->pd = ibv_alloc_pd(f->ctx)) ||
	    !(f->cq = ibv_create_cq(f->ctx, 8, NULL, NULL, 0)) || !(f->mr = reg(f->pd)))
		return -1;
	/* Every QP of ours is allocated as an ibv_qp_ex; ibv_create_qp leaves its slots NULL. */
	if (!(qp = create_qp(f->pd, f->cq, NULL)))
		return -1;
	f->plain = (struct ibv_qp_ex *)qp;
	if (!(qp = create_qp_ex(f)))
		return -1;
	f->ex = ibv_qp_to_qp_ex(qp);
	if (!(qp = create_qp_ex(f)))
		return -1;
	f->stale = ibv_qp_to_qp_ex(qp);
	if (!f->ex || !f->stale || ibv_destroy_qp(qp))
		return -1;
	return 0;
}

static void wr_teardown(struct wr_fixture *f)
{
	ibv_destroy_qp(&f->ex->qp_base);
	ibv_destroy_qp(&f->plain->qp_base);
	ibv_destroy_cq(f->cq);
	ibv_dereg_mr(f->mr);
	ibv_dealloc_pd(f->pd);
	ibv_close_device(f->ctx);
}

/* A void call: must set errno to one of the list. */
#define EXPECT_ERRNO(call, ...)                                                                \
	do {                                                                                   \
		errno = 0;                                                                     \
		call;                                                                          \
		int bi_e_ = errno;                                                             \
		if (!bi_errno_in(bi_e_, BI_ERRS(__VA_ARGS__)))                                 \
			bi_fail(__FILE__, __LINE__, "%s left errno %s; expected %s", #call,    \
				bi_errname(bi_e_), bi_errs_str(BI_ERRS(__VA_ARGS__)));         \
	} while (0)

/* A void call that must leave errno 0. */
#define EXPECT_NO_ERRNO(call)                                                                  \
	do {                                                                                   \
		errno = 0;                                                                     \
		call;                                                                          \
		if (errno != 0)                                                                \
			bi_fail(__FILE__, __LINE__, "%s set errno %s", #call,                  \
				bi_errname(errno));                                            \
	} while (0)

/*
 * A builder `call_with_x` on QP x: NULL, destroyed and foreign QPs are EINVAL, a QP without the
 * posting API EOPNOTSUPP. Then, on a QP with it: an operation builder starts a request that
 * wr_complete refuses (EINVAL: the QP is in RESET); a setter without an operation before it in
 * the batch makes wr_complete fail with EINVAL. Nothing is posted either way.
 */
#define EXPECT_BUILDER(call_with_x, is_setter)                                                 \
	do {                                                                                   \
		struct wr_fixture f_;                                                          \
		struct ibv_qp_ex *x;                                                           \
		struct ibv_wc wc_;                                                             \
		REQUIRE(wr_setup(&f_) == 0);                                                   \
		x = NULL;                                                                      \
		EXPECT_ERRNO(call_with_x, EINVAL);                                             \
		x = f_.stale;                                                                  \
		EXPECT_ERRNO(call_with_x, EINVAL);                                             \
		x = &foreign_qpx;                                                              \
		EXPECT_ERRNO(call_with_x, EINVAL);                                             \
		x = f_.plain;                                                                  \
		EXPECT_ERRNO(call_with_x, EOPNOTSUPP);                                         \
		x = f_.ex;                                                                     \
		x->wr_id = 7;                                                                  \
		x->wr_flags = IBV_SEND_SIGNALED;                                               \
		SYM_OF(ibv_wr_start)(x);                                                       \
		EXPECT_NO_ERRNO(call_with_x);                                                  \
		if (!(is_setter))                                                              \
			SYM_OF(ibv_wr_set_sge)(x, f_.mr->lkey, (uintptr_t)buf, 8);                       \
		EXPECT_RET(SYM_OF(ibv_wr_complete)(x), EINVAL);                                \
		EXPECT_EQ(ibv_poll_cq(f_.cq, 1, &wc_), 0);                                     \
		wr_teardown(&f_);                                                              \
	} while (0)

/* --- batches ---------------------------------------------------------------------------- */

static void case_ibv_wr_start(void)
{
	SYM(start, ibv_wr_start);
	SYM(abort_wr, ibv_wr_abort);
	struct wr_fixture f;

	REQUIRE(wr_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_qpx, start(h), EINVAL);
	EXPECT_ERRNO(start(f.plain), EOPNOTSUPP);
	/* A second start in the same thread drops the open batch (never a self-deadlock). */
	EXPECT_NO_ERRNO(start(f.ex));
	EXPECT_NO_ERRNO(start(f.ex));
	abort_wr(f.ex);
	wr_teardown(&f);
}

static void case_ibv_wr_complete(void)
{
	SYM(complete, ibv_wr_complete);
	struct wr_fixture f;

	REQUIRE(wr_setup(&f) == 0);
	EXPECT_BAD_HANDLES(RET, f.stale, &foreign_qpx, complete(h), EINVAL);
	EXPECT_RET(complete(f.plain), EOPNOTSUPP);
	/* No batch open. */
	EXPECT_RET(complete(f.ex), EINVAL);
	wr_teardown(&f);
}

static void case_ibv_wr_abort(void)
{
	SYM(abort_wr, ibv_wr_abort);
	struct wr_fixture f;

	REQUIRE(wr_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_qpx, abort_wr(h), EINVAL);
	EXPECT_ERRNO(abort_wr(f.plain), EOPNOTSUPP);
	/* No batch open: nothing to drop. */
	EXPECT_NO_ERRNO(abort_wr(f.ex));
	wr_teardown(&f);
}

/* --- operations ------------------------------------------------------------------------- */

static void case_ibv_wr_send(void)
{
	SYM(op, ibv_wr_send);
	EXPECT_BUILDER(op(x), 0);
}

static void case_ibv_wr_send_imm(void)
{
	SYM(op, ibv_wr_send_imm);
	EXPECT_BUILDER(op(x, 0x1234), 0);
}

static void case_ibv_wr_send_inv(void)
{
	SYM(op, ibv_wr_send_inv);
	EXPECT_BUILDER(op(x, 0x1234), 0);
}

static void case_ibv_wr_send_tso(void)
{
	SYM(op, ibv_wr_send_tso);
	struct wr_fixture f;
	char hdr[16];

	/* TSO is for UD/raw packet QPs, not among the soft device's send ops: wr_complete refuses it. */
	REQUIRE(wr_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_qpx, op(h, hdr, sizeof(hdr), 1000), EINVAL);
	EXPECT_ERRNO(op(f.plain, hdr, sizeof(hdr), 1000), EOPNOTSUPP);
	SYM_OF(ibv_wr_start)(f.ex);
	EXPECT_NO_ERRNO(op(f.ex, hdr, sizeof(hdr), 1000));
	EXPECT_RET(SYM_OF(ibv_wr_complete)(f.ex), EOPNOTSUPP);
	wr_teardown(&f);
}

static void case_ibv_wr_rdma_write(void)
{
	SYM(op, ibv_wr_rdma_write);
	EXPECT_BUILDER(op(x, 0x1234, (uintptr_t)buf), 0);
}

static void case_ibv_wr_rdma_write_imm(void)
{
	SYM(op, ibv_wr_rdma_write_imm);
	EXPECT_BUILDER(op(x, 0x1234, (uintptr_t)buf, 0x99), 0);
}

static void case_ibv_wr_rdma_read(void)
{
	SYM(op, ibv_wr_rdma_read);
	EXPECT_BUILDER(op(x, 0x1234, (uintptr_t)buf), 0);
}

static void case_ibv_wr_atomic_cmp_swp(void)
{
	SYM(op, ibv_wr_atomic_cmp_swp);
	EXPECT_BUILDER(op(x, 0x1234, (uintptr_t)buf, 1, 2), 0);
}

static void case_ibv_wr_atomic_fetch_add(void)
{
	SYM(op, ibv_wr_atomic_fetch_add);
	EXPECT_BUILDER(op(x, 0x1234, (uintptr_t)buf, 1), 0);
}

static void case_ibv_wr_atomic_write(void)
{
	SYM(op, ibv_wr_atomic_write);
	struct wr_fixture f;
	uint64_t v = 1;

	/* Not among the soft device's send ops (IBV_QP_EX_WITH_ATOMIC_WRITE): wr_complete refuses it. */
	REQUIRE(wr_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_qpx, op(h, 0x1234, (uintptr_t)buf, &v), EINVAL);
	EXPECT_ERRNO(op(f.plain, 0x1234, (uintptr_t)buf, &v), EOPNOTSUPP);
	SYM_OF(ibv_wr_start)(f.ex);
	EXPECT_NO_ERRNO(op(f.ex, 0x1234, (uintptr_t)buf, &v));
	EXPECT_RET(SYM_OF(ibv_wr_complete)(f.ex), EOPNOTSUPP);
	wr_teardown(&f);
}

static void case_ibv_wr_bind_mw(void)
{
	SYM(op, ibv_wr_bind_mw);
	struct ibv_mw_bind_info info;

	memset(&info, 0, sizeof(info));
	EXPECT_BUILDER(op(x, &foreign_mw, 0x1234, &info), 0);
}

static void case_ibv_wr_local_inv(void)
{
	SYM(op, ibv_wr_local_inv);
	EXPECT_BUILDER(op(x, 0x1234), 0);
}

/* --- setters: data and address of the request being built ------------------------------- */

static void case_ibv_wr_set_sge(void)
{
	SYM(set, ibv_wr_set_sge);
	EXPECT_BUILDER(set(x, 0, (uintptr_t)buf, 8), 1);
}

static void case_ibv_wr_set_sge_list(void)
{
	SYM(set, ibv_wr_set_sge_list);
	struct ibv_sge sge[2] = { { (uintptr_t)buf, 8, 0 }, { (uintptr_t)buf + 8, 8, 0 } };

	EXPECT_BUILDER(set(x, 2, sge), 1);
}

static void case_ibv_wr_set_inline_data(void)
{
	SYM(set, ibv_wr_set_inline_data);
	EXPECT_BUILDER(set(x, buf, 8), 1);
}

static void case_ibv_wr_set_inline_data_list(void)
{
	SYM(set, ibv_wr_set_inline_data_list);
	struct ibv_data_buf d[2] = { { buf, 8 }, { buf + 8, 8 } };

	EXPECT_BUILDER(set(x, 2, d), 1);
}

static void case_ibv_wr_set_ud_addr(void)
{
	SYM(set, ibv_wr_set_ud_addr);
	EXPECT_BUILDER(set(x, &foreign_ah, 5, 0x11111111), 1);
}

static void case_ibv_wr_set_xrc_srqn(void)
{
	SYM(set, ibv_wr_set_xrc_srqn);
	EXPECT_BUILDER(set(x, 5), 1);
}

/* --- extended CQ polling ---------------------------------------------------------------- */

/* A CQ created by ibv_create_cq_ex with `wc_flags`. */
static struct ibv_cq_ex *create_cq_ex(struct ibv_context *ctx, uint64_t wc_flags)
{
	struct ibv_cq_init_attr_ex a = { .cqe = 4, .wc_flags = wc_flags };

	return SYM_OF(ibv_create_cq_ex)(ctx, &a);
}

static struct ibv_cq_ex *stale_cq_ex(struct ibv_context *ctx)
{
	struct ibv_cq_ex *cq = create_cq_ex(ctx, 0);

	if (!cq || ibv_destroy_cq(SYM_OF(ibv_cq_ex_to_cq)(cq)))
		return NULL;
	return cq;
}

static void case_ibv_cq_ex_to_cq(void)
{
	SYM(to_cq, ibv_cq_ex_to_cq);
	struct ibv_context *ctx = open_ctx();
	struct ibv_cq_ex *cq, *stale;

	REQUIRE(ctx != NULL && (cq = create_cq_ex(ctx, 0)) != NULL);
	REQUIRE((stale = stale_cq_ex(ctx)) != NULL);
	/* The inline's cast: the same address, checked by nothing, read by nothing. */
	EXPECT_EQ(to_cq(NULL), 0);
	CHECK((void *)to_cq(&foreign_cqx) == (void *)&foreign_cqx);
	CHECK((void *)to_cq(stale) == (void *)stale);
	CHECK((void *)to_cq(cq) == (void *)cq);
	ibv_destroy_cq(to_cq(cq));
	ibv_close_device(ctx);
}

/* The objects a polling case starts from; 0 when set up. */
struct cq_fixture {
	struct ibv_context *ctx;
	struct ibv_cq_ex *cq;	 /* no optional fields: wc_flags 0 */
	struct ibv_cq_ex *stale; /* destroyed */
};

static int cq_setup(struct cq_fixture *f)
{
	memset(f, 0, sizeof(*f));
	if (!(f->ctx = open_ctx()) || !(f->cq = create_cq_ex(f->ctx, 0)) ||
	    !(f->stale = stale_cq_ex(f->ctx)))
		return -1;
	return 0;
}

static void cq_teardown(struct cq_fixture *f)
{
	ibv_destroy_cq(SYM_OF(ibv_cq_ex_to_cq)(f->cq));
	ibv_close_device(f->ctx);
}

static void case_ibv_start_poll(void)
{
	SYM(start, ibv_start_poll);
	struct cq_fixture f;
	struct ibv_poll_cq_attr a = { .comp_mask = 0 };
	struct ibv_poll_cq_attr mask = { .comp_mask = 1 };

	REQUIRE(cq_setup(&f) == 0);
	EXPECT_BAD_HANDLES(RET, f.stale, &foreign_cqx, start(h, &a), EINVAL);
	/* ibv_create_cq_ex(3): comp_mask must be 0. */
	EXPECT_RET(start(f.cq, &mask), EINVAL);
	/* An empty CQ: ENOENT, and no poll is open (ibv_end_poll must not follow). */
	EXPECT_RET(start(f.cq, &a), ENOENT);
	cq_teardown(&f);
}

static void case_ibv_next_poll(void)
{
	SYM(next, ibv_next_poll);
	struct cq_fixture f;

	REQUIRE(cq_setup(&f) == 0);
	EXPECT_BAD_HANDLES(RET, f.stale, &foreign_cqx, next(h), EINVAL);
	/* Outside a poll: there is nothing to step to. */
	EXPECT_RET(next(f.cq), ENOENT, EINVAL);
	cq_teardown(&f);
}

static void case_ibv_end_poll(void)
{
	SYM(end, ibv_end_poll);
	struct cq_fixture f;

	REQUIRE(cq_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_cqx, end(h), EINVAL);
	/* Outside a poll: nothing to end, and the CQ still works. */
	EXPECT_RETURNS(end(f.cq));
	EXPECT_RET(SYM_OF(ibv_start_poll)(f.cq, &(struct ibv_poll_cq_attr){ 0 }), ENOENT);
	cq_teardown(&f);
}

/*
 * A reader: 0 with EINVAL for NULL, destroyed and foreign CQs; on a CQ without the field in its
 * wc_flags (`optional`), 0 with EOPNOTSUPP.
 */
#define EXPECT_READER(fn, optional)                                                            \
	do {                                                                                   \
		struct cq_fixture f_;                                                          \
		REQUIRE(cq_setup(&f_) == 0);                                                   \
		EXPECT_BAD_HANDLES(VAL, f_.stale, &foreign_cqx, fn(h), 0, EINVAL);            \
		if (optional)                                                                  \
			EXPECT_VAL(fn(f_.cq), 0, EOPNOTSUPP);                                  \
		cq_teardown(&f_);                                                              \
	} while (0)

#define READER_CASE(field, optional)                                                           \
	static void case_ibv_wc_read_##field(void)                                             \
	{                                                                                      \
		SYM(read, ibv_wc_read_##field);                                                \
		EXPECT_READER(read, optional);                                                 \
	}

/* opcode, vendor_err and wc_flags are always there, as with the hardware providers. */
READER_CASE(opcode, 0)
READER_CASE(vendor_err, 0)
READER_CASE(wc_flags, 0)
READER_CASE(byte_len, 1)
READER_CASE(imm_data, 1)
READER_CASE(invalidated_rkey, 1)
READER_CASE(qp_num, 1)
READER_CASE(src_qp, 1)
READER_CASE(slid, 1)
READER_CASE(sl, 1)
READER_CASE(dlid_path_bits, 1)
READER_CASE(completion_ts, 1)
READER_CASE(completion_wallclock_ns, 1)
READER_CASE(cvlan, 1)
READER_CASE(flow_tag, 1)

static void case_ibv_wc_read_tm_info(void)
{
	SYM(read, ibv_wc_read_tm_info);
	struct cq_fixture f;
	struct ibv_wc_tm_info tm;

	REQUIRE(cq_setup(&f) == 0);
	EXPECT_BAD_HANDLES(ERRNO, f.stale, &foreign_cqx, read(h, &tm), EINVAL);
	/* No tag matching on the soft device. */
	EXPECT_ERRNO(read(f.cq, &tm), EOPNOTSUPP);
	cq_teardown(&f);
}

static const struct bi_case cases[] = {
	BI_CASE(ibv_wr_start),
	BI_CASE(ibv_wr_complete),
	BI_CASE(ibv_wr_abort),
	BI_CASE(ibv_wr_send),
	BI_CASE(ibv_wr_send_imm),
	BI_CASE(ibv_wr_send_inv),
	BI_CASE(ibv_wr_send_tso),
	BI_CASE(ibv_wr_rdma_write),
	BI_CASE(ibv_wr_rdma_write_imm),
	BI_CASE(ibv_wr_rdma_read),
	BI_CASE(ibv_wr_atomic_cmp_swp),
	BI_CASE(ibv_wr_atomic_fetch_add),
	BI_CASE(ibv_wr_atomic_write),
	BI_CASE(ibv_wr_bind_mw),
	BI_CASE(ibv_wr_local_inv),
	BI_CASE(ibv_wr_set_sge),
	BI_CASE(ibv_wr_set_sge_list),
	BI_CASE(ibv_wr_set_inline_data),
	BI_CASE(ibv_wr_set_inline_data_list),
	BI_CASE(ibv_wr_set_ud_addr),
	BI_CASE(ibv_wr_set_xrc_srqn),
	BI_CASE(ibv_cq_ex_to_cq),
	BI_CASE(ibv_start_poll),
	BI_CASE(ibv_next_poll),
	BI_CASE(ibv_end_poll),
	BI_CASE(ibv_wc_read_opcode),
	BI_CASE(ibv_wc_read_vendor_err),
	BI_CASE(ibv_wc_read_byte_len),
	BI_CASE(ibv_wc_read_imm_data),
	BI_CASE(ibv_wc_read_invalidated_rkey),
	BI_CASE(ibv_wc_read_qp_num),
	BI_CASE(ibv_wc_read_src_qp),
	BI_CASE(ibv_wc_read_wc_flags),
	BI_CASE(ibv_wc_read_slid),
	BI_CASE(ibv_wc_read_sl),
	BI_CASE(ibv_wc_read_dlid_path_bits),
	BI_CASE(ibv_wc_read_completion_ts),
	BI_CASE(ibv_wc_read_completion_wallclock_ns),
	BI_CASE(ibv_wc_read_cvlan),
	BI_CASE(ibv_wc_read_flow_tag),
	BI_CASE(ibv_wc_read_tm_info),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
