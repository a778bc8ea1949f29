/* verbs.h's static inline functions as exported symbols (docs/INLINE-API.md): what an FFI
 * caller (ctypes, Rust, Go) reaches with dlsym instead of compiling the header.
 *
 * Every function below is resolved with dlsym(RTLD_DEFAULT, name), typed from the header's own
 * prototype, and must come from the library under test (argv[1], when given: librdmashim.so,
 * or the drop-in libibverbs.so.1). On the soft provider, an RC pair of one process (CQs from
 * ibv_create_cq_ex, QPs from ibv_create_qp_ex with SEND_OPS_FLAGS) then carries:
 *   - a SEND built and posted through the exported ibv_wr_start/ibv_wr_send/ibv_wr_set_sge/
 *     ibv_wr_complete, its completions polled through the exported ibv_start_poll/
 *     ibv_wc_read_X / ibv_next_poll / ibv_end_poll, each value compared with the inline reader's;
 *   - the same SEND through the inline functions, whose completions must read the same;
 *   - an exported ibv_wr_abort (nothing is posted).
 * Then the exports against the inlines for ibv_query_gid_ex, ibv_query_gid_table,
 * ___ibv_query_port, ibv_query_device_ex, verbs_get_ctx, ibv_cq_ex_to_cq, the pure helpers,
 * and the calls the soft device refuses (flows, counters, WQs, ...: the same NULL/errno or
 * code). Last, the handles where the inline would crash: EINVAL / EOPNOTSUPP, no crash.
 * Exit 0 and "ok" lines on success; "FAIL" and exit 1 otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); exit(1); } } while (0)

#define LEN 100
#define WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | \
		  IBV_WC_EX_WITH_IMM)

static const char *expect_lib; /* realpath of the library the symbols must come from */
static int resolved;

/* The exported symbol `name`, from the library under test. */
static void *resolve(const char *name)
{
	void *p = dlsym(RTLD_DEFAULT, name);
	CHECK(p != NULL, "%s is not exported (%s)", name, dlerror());
	Dl_info di;
	CHECK(dladdr(p, &di) && di.dli_fname, "dladdr(%s)", name);
	if (expect_lib) {
		char got[PATH_MAX];
		CHECK(realpath(di.dli_fname, got) && strcmp(got, expect_lib) == 0,
		      "%s resolves into %s, not %s", name, di.dli_fname, expect_lib);
	}
	resolved++;
	return p;
}

/* A pointer to the exported `name`, typed by the header's prototype of the inline. */
#define EXPORT(name) ((__typeof__(&name))resolve(#name))

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

/* The exports the exchange uses. */
static struct {
	__typeof__(&ibv_wr_start) wr_start;
	__typeof__(&ibv_wr_send) wr_send;
	__typeof__(&ibv_wr_set_sge) wr_set_sge;
	__typeof__(&ibv_wr_complete) wr_complete;
	__typeof__(&ibv_wr_abort) wr_abort;
	__typeof__(&ibv_start_poll) start_poll;
	__typeof__(&ibv_next_poll) next_poll;
	__typeof__(&ibv_end_poll) end_poll;
	__typeof__(&ibv_wc_read_opcode) read_opcode;
	__typeof__(&ibv_wc_read_byte_len) read_byte_len;
	__typeof__(&ibv_wc_read_qp_num) read_qp_num;
	__typeof__(&ibv_wc_read_src_qp) read_src_qp;
	__typeof__(&ibv_wc_read_wc_flags) read_wc_flags;
	__typeof__(&ibv_wc_read_vendor_err) read_vendor_err;
	__typeof__(&ibv_wc_read_cvlan) read_cvlan;
} X;

/* One completion, as read through the exports or through the inlines. */
struct cqe {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, vendor_err;
	unsigned int wc_flags;
};

/* Waits for one completion on cq. Through the exports (`exported`), every value is also read
 * with the inline reader in the same poll and must agree; through the inlines otherwise. */
static struct cqe poll_one(struct ibv_cq_ex *cq, int exported)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	uint64_t deadline = now_ns() + 5000000000ull;
	int r;
	for (;;) {
		r = exported ? X.start_poll(cq, &attr) : ibv_start_poll(cq, &attr);
		if (r != ENOENT)
			break;
		CHECK(now_ns() < deadline, "no completion within 5 s");
	}
	CHECK(r == 0, "start_poll (%s) returned %d", exported ? "export" : "inline", r);
	struct cqe e = { .wr_id = cq->wr_id, .status = cq->status };
	if (exported) {
		e.opcode = X.read_opcode(cq);
		e.byte_len = X.read_byte_len(cq);
		e.qp_num = X.read_qp_num(cq);
		e.src_qp = X.read_src_qp(cq);
		e.wc_flags = X.read_wc_flags(cq);
		e.vendor_err = X.read_vendor_err(cq);
		CHECK(e.opcode == ibv_wc_read_opcode(cq) && e.byte_len == ibv_wc_read_byte_len(cq) &&
		      e.qp_num == ibv_wc_read_qp_num(cq) && e.src_qp == ibv_wc_read_src_qp(cq) &&
		      e.wc_flags == ibv_wc_read_wc_flags(cq) && e.vendor_err == ibv_wc_read_vendor_err(cq),
		      "an exported reader differs from the inline one");
		r = X.next_poll(cq);
		CHECK(r == ENOENT, "exported next_poll returned %d (one completion expected)", r);
		X.end_poll(cq);
	} else {
		e.opcode = ibv_wc_read_opcode(cq);
		e.byte_len = ibv_wc_read_byte_len(cq);
		e.qp_num = ibv_wc_read_qp_num(cq);
		e.src_qp = ibv_wc_read_src_qp(cq);
		e.wc_flags = ibv_wc_read_wc_flags(cq);
		e.vendor_err = ibv_wc_read_vendor_err(cq);
		r = ibv_next_poll(cq);
		CHECK(r == ENOENT, "inline next_poll returned %d (one completion expected)", r);
		ibv_end_poll(cq);
	}
	return e;
}

static void expect_empty(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	for (int i = 0; i < 50; i++) {
		int r = X.start_poll(cq, &attr);
		CHECK(r == ENOENT, "exported start_poll on an empty CQ returned %d (wr_id %llu)", r,
		      (unsigned long long)cq->wr_id);
	}
}

static struct ibv_cq_ex *make_cq(struct ibv_context *ctx)
{
	struct ibv_cq_init_attr_ex a = { .cqe = 16, .wc_flags = WC_FLAGS };
	struct ibv_cq_ex *cq = EXPORT(ibv_create_cq_ex)(ctx, &a);
	CHECK(cq != NULL, "exported ibv_create_cq_ex");
	return cq;
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = EXPORT(ibv_cq_ex_to_cq)(cq);
	CHECK(a.send_cq == ibv_cq_ex_to_cq(cq), "ibv_cq_ex_to_cq export vs inline");
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND;
	struct ibv_qp *qp = EXPORT(ibv_create_qp_ex)(ctx, &a);
	CHECK(qp != NULL, "exported ibv_create_qp_ex");
	return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
			    IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "to RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "to RTS");
}

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint8_t *buf, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "ibv_post_recv");
}

static void same_cqe(const struct cqe *a, const struct cqe *b, const char *what)
{
	CHECK(a->status == b->status && a->opcode == b->opcode && a->byte_len == b->byte_len &&
	      a->qp_num == b->qp_num && a->src_qp == b->src_qp && a->wc_flags == b->wc_flags &&
	      a->vendor_err == b->vendor_err,
	      "%s: exports read status %d opcode %d byte_len %u qp %u, inlines %d %d %u %u", what,
	      a->status, a->opcode, a->byte_len, a->qp_num, b->status, b->opcode, b->byte_len,
	      b->qp_num);
}

static void exchange(struct ibv_context *ctx, struct ibv_pd *pd)
{
	X.wr_start = EXPORT(ibv_wr_start);
	X.wr_send = EXPORT(ibv_wr_send);
	X.wr_set_sge = EXPORT(ibv_wr_set_sge);
	X.wr_complete = EXPORT(ibv_wr_complete);
	X.wr_abort = EXPORT(ibv_wr_abort);
	X.start_poll = EXPORT(ibv_start_poll);
	X.next_poll = EXPORT(ibv_next_poll);
	X.end_poll = EXPORT(ibv_end_poll);
	X.read_opcode = EXPORT(ibv_wc_read_opcode);
	X.read_byte_len = EXPORT(ibv_wc_read_byte_len);
	X.read_qp_num = EXPORT(ibv_wc_read_qp_num);
	X.read_src_qp = EXPORT(ibv_wc_read_src_qp);
	X.read_wc_flags = EXPORT(ibv_wc_read_wc_flags);
	X.read_vendor_err = EXPORT(ibv_wc_read_vendor_err);
	X.read_cvlan = EXPORT(ibv_wc_read_cvlan);

	static uint8_t src[LEN], dst[2][LEN];
	struct ibv_mr *smr = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dmr = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
	CHECK(smr && dmr, "ibv_reg_mr");
	struct ibv_cq_ex *cqa = make_cq(ctx), *cqb = make_cq(ctx);
	struct ibv_qp *a = make_qp(ctx, pd, cqa), *b = make_qp(ctx, pd, cqb);
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	to_rts(a, b->qp_num, &gid);
	to_rts(b, a->qp_num, &gid);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(a);
	CHECK(x != NULL, "ibv_qp_to_qp_ex");
	post_recv(b, dmr, dst[0], 100);
	post_recv(b, dmr, dst[1], 101);

	/* 1. A SEND through the exports, polled through the exports. */
	for (int i = 0; i < LEN; i++)
		src[i] = (uint8_t)(i * 3 + 1);
	X.wr_start(x);
	x->wr_id = 1;
	x->wr_flags = IBV_SEND_SIGNALED;
	X.wr_send(x);
	X.wr_set_sge(x, smr->lkey, (uintptr_t)src, LEN);
	int r = X.wr_complete(x);
	CHECK(r == 0, "exported ibv_wr_complete returned %d", r);
	struct cqe xs = poll_one(cqa, 1), xr = poll_one(cqb, 1);
	CHECK(xs.wr_id == 1 && xs.status == IBV_WC_SUCCESS && xs.opcode == IBV_WC_SEND &&
	      xs.qp_num == a->qp_num, "send completion: wr_id %llu status %d opcode %d",
	      (unsigned long long)xs.wr_id, xs.status, xs.opcode);
	CHECK(xr.wr_id == 100 && xr.status == IBV_WC_SUCCESS && xr.opcode == IBV_WC_RECV &&
	      xr.byte_len == LEN && xr.qp_num == b->qp_num && xr.src_qp == a->qp_num,
	      "receive completion: wr_id %llu status %d opcode %d byte_len %u",
	      (unsigned long long)xr.wr_id, xr.status, xr.opcode, xr.byte_len);
	CHECK(memcmp(dst[0], src, LEN) == 0, "payload sent through the exports differs");
	printf("ok exchange through the exports: wr_start/wr_send/wr_set_sge/wr_complete, "
	       "start_poll/wc_read_*/next_poll/end_poll\n");

	/* 2. The same SEND through the inlines: the completions read the same. */
	for (int i = 0; i < LEN; i++)
		src[i] = (uint8_t)(i * 5 + 2);
	ibv_wr_start(x);
	x->wr_id = 2;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, LEN);
	CHECK(ibv_wr_complete(x) == 0, "inline ibv_wr_complete");
	struct cqe is = poll_one(cqa, 0), ir = poll_one(cqb, 0);
	CHECK(is.wr_id == 2 && ir.wr_id == 101, "inline run: wr_ids %llu %llu",
	      (unsigned long long)is.wr_id, (unsigned long long)ir.wr_id);
	same_cqe(&xs, &is, "send completion");
	same_cqe(&xr, &ir, "receive completion");
	CHECK(memcmp(dst[1], src, LEN) == 0, "payload sent through the inlines differs");
	printf("ok the same exchange through the inlines reads the same completions\n");

	/* 3. An exported abort posts nothing. */
	X.wr_start(x);
	x->wr_id = 3;
	x->wr_flags = IBV_SEND_SIGNALED;
	X.wr_send(x);
	X.wr_set_sge(x, smr->lkey, (uintptr_t)src, LEN);
	X.wr_abort(x);
	expect_empty(cqa);
	expect_empty(cqb);
	printf("ok exported wr_abort posts nothing\n");

	/* 4. No CVLAN reader (not in wc_flags): the inline would jump through NULL; the export
	 * answers 0 with EOPNOTSUPP. Handles the inline would dereference: EINVAL. */
	CHECK(cqa->read_cvlan == NULL, "a CVLAN reader on a CQ created without it");
	errno = 0;
	CHECK(X.read_cvlan(cqa) == 0 && errno == EOPNOTSUPP, "exported read_cvlan without the reader");
	errno = 0;
	CHECK(X.read_opcode(NULL) == 0 && errno == EINVAL, "exported read_opcode(NULL)");
	CHECK(X.start_poll(NULL, NULL) == EINVAL, "exported start_poll(NULL)");
	CHECK(X.wr_complete(NULL) == EINVAL, "exported wr_complete(NULL)");
	errno = 0;
	X.wr_send(NULL);
	CHECK(errno == EINVAL, "exported wr_send(NULL) errno");
	CHECK(EXPORT(ibv_cq_ex_to_cq)(NULL) == NULL, "ibv_cq_ex_to_cq(NULL)");
	printf("ok NULL handles and missing readers: EINVAL / EOPNOTSUPP, no crash\n");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cqa)) == 0 && ibv_destroy_cq(ibv_cq_ex_to_cq(cqb)) == 0,
	      "ibv_destroy_cq");
	CHECK(ibv_dereg_mr(smr) == 0 && ibv_dereg_mr(dmr) == 0, "ibv_dereg_mr");
}

static void queries(struct ibv_context *ctx)
{
	struct ibv_gid_entry ge_x, ge_i;
	memset(&ge_x, 0x5a, sizeof ge_x);
	memset(&ge_i, 0x5a, sizeof ge_i);
	int rx = EXPORT(ibv_query_gid_ex)(ctx, 1, 0, &ge_x, 0);
	int ri = ibv_query_gid_ex(ctx, 1, 0, &ge_i, 0);
	CHECK(rx == 0 && ri == 0 && memcmp(&ge_x, &ge_i, sizeof ge_x) == 0,
	      "ibv_query_gid_ex: export %d vs inline %d, or the entries differ", rx, ri);
	rx = EXPORT(ibv_query_gid_ex)(ctx, 1, 0, &ge_x, 1);
	ri = ibv_query_gid_ex(ctx, 1, 0, &ge_i, 1);
	CHECK(rx == ri && rx != 0, "ibv_query_gid_ex with flags: export %d vs inline %d", rx, ri);

	struct ibv_gid_entry tx[64], ti[64];
	memset(tx, 0, sizeof tx);
	memset(ti, 0, sizeof ti);
	ssize_t nx = EXPORT(ibv_query_gid_table)(ctx, tx, 64, 0);
	ssize_t ni = ibv_query_gid_table(ctx, ti, 64, 0);
	CHECK(nx > 0 && nx == ni && memcmp(tx, ti, sizeof tx) == 0,
	      "ibv_query_gid_table: export %zd vs inline %zd", nx, ni);

	struct ibv_port_attr px, pi;
	memset(&px, 0xa5, sizeof px);
	memset(&pi, 0xa5, sizeof pi);
	rx = EXPORT(___ibv_query_port)(ctx, 1, &px);
	ri = ibv_query_port(ctx, 1, &pi); /* the macro: the inline ___ibv_query_port */
	CHECK(rx == 0 && ri == 0 && memcmp(&px, &pi, sizeof px) == 0,
	      "___ibv_query_port: export %d vs inline %d, or the attributes differ", rx, ri);

	struct ibv_device_attr_ex dx, di;
	memset(&dx, 0, sizeof dx);
	memset(&di, 0, sizeof di);
	rx = EXPORT(ibv_query_device_ex)(ctx, NULL, &dx);
	ri = ibv_query_device_ex(ctx, NULL, &di);
	CHECK(rx == 0 && ri == 0 && memcmp(&dx.orig_attr, &di.orig_attr, sizeof dx.orig_attr) == 0 &&
	      dx.completion_timestamp_mask == di.completion_timestamp_mask &&
	      dx.max_dm_size == di.max_dm_size && dx.odp_caps.general_caps == di.odp_caps.general_caps,
	      "ibv_query_device_ex: export %d vs inline %d, or the attributes differ", rx, ri);
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(EXPORT(ibv_query_device_ex)(ctx, &in, &dx) == ibv_query_device_ex(ctx, &in, &di),
	      "ibv_query_device_ex with an input comp_mask");

	CHECK(EXPORT(verbs_get_ctx)(ctx) == verbs_get_ctx(ctx) && verbs_get_ctx(ctx) != NULL,
	      "verbs_get_ctx: export %p vs inline %p", (void *)EXPORT(verbs_get_ctx)(ctx),
	      (void *)verbs_get_ctx(ctx));
	printf("ok queries: query_gid_ex, query_gid_table, ___ibv_query_port, query_device_ex, "
	       "verbs_get_ctx (export == inline)\n");

	static const uint32_t v[] = { 0, 1, 0xff, 0x100, 0x3fff, 0x4000, 0xabcde, 0xfffff, 0x12345678,
				      0xffffffff };
	__typeof__(&ibv_inc_rkey) inc = EXPORT(ibv_inc_rkey);
	__typeof__(&ibv_flow_label_to_udp_sport) sport = EXPORT(ibv_flow_label_to_udp_sport);
	__typeof__(&ibv_is_qpt_supported) qpt = EXPORT(ibv_is_qpt_supported);
	for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
		CHECK(inc(v[i]) == ibv_inc_rkey(v[i]), "ibv_inc_rkey(%#x): %#x vs %#x", v[i], inc(v[i]),
		      ibv_inc_rkey(v[i]));
		CHECK(sport(v[i]) == ibv_flow_label_to_udp_sport(v[i]),
		      "ibv_flow_label_to_udp_sport(%#x): %#x vs %#x", v[i], sport(v[i]),
		      ibv_flow_label_to_udp_sport(v[i]));
		for (int t = IBV_QPT_RC; t <= IBV_QPT_XRC_RECV; t++)
			CHECK(qpt(v[i], t) == ibv_is_qpt_supported(v[i], t),
			      "ibv_is_qpt_supported(%#x, %d)", v[i], t);
	}
	printf("ok pure helpers: inc_rkey, flow_label_to_udp_sport, is_qpt_supported\n");
}

/* What the soft device does not offer: the exports answer as the inlines do. */
static void refusals(struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	CHECK(cq != NULL, "ibv_create_cq");
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_UD,
				       .cap = { .max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &qa);
	CHECK(qp != NULL, "ibv_create_qp");
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq != NULL, "ibv_create_srq");

	/* NULL + errno */
#define SAME_NULL(call_x, call_i, what) do { \
		errno = 0; void *px = (void *)(call_x); int ex = errno; \
		errno = 0; void *pi = (void *)(call_i); int ei = errno; \
		CHECK(px == NULL && pi == NULL && ex == ei && ex == EOPNOTSUPP, \
		      "%s: export %p errno %d, inline %p errno %d", what, px, ex, pi, ei); \
	} while (0)
	struct ibv_flow_attr fa = { .size = sizeof fa, .port = 1 };
	SAME_NULL(EXPORT(ibv_create_flow)(qp, &fa), ibv_create_flow(qp, &fa), "ibv_create_flow");
	struct ibv_counters_init_attr ca = { 0 };
	SAME_NULL(EXPORT(ibv_create_counters)(ctx, &ca), ibv_create_counters(ctx, &ca),
		  "ibv_create_counters");
	struct ibv_wq_init_attr wa = { .wq_type = IBV_WQT_RQ, .max_wr = 1, .max_sge = 1, .pd = pd,
				       .cq = cq };
	SAME_NULL(EXPORT(ibv_create_wq)(ctx, &wa), ibv_create_wq(ctx, &wa), "ibv_create_wq");
	struct ibv_rwq_ind_table_init_attr ra = { 0 };
	SAME_NULL(EXPORT(ibv_create_rwq_ind_table)(ctx, &ra), ibv_create_rwq_ind_table(ctx, &ra),
		  "ibv_create_rwq_ind_table");
	struct ibv_flow_action_esp_attr ea;
	memset(&ea, 0, sizeof ea);
	SAME_NULL(EXPORT(ibv_create_flow_action_esp)(ctx, &ea), ibv_create_flow_action_esp(ctx, &ea),
		  "ibv_create_flow_action_esp");

	/* the returned code */
	struct ibv_qp_rate_limit_attr rl = { .rate_limit = 1000 };
	int rx = EXPORT(ibv_modify_qp_rate_limit)(qp, &rl), ri = ibv_modify_qp_rate_limit(qp, &rl);
	CHECK(rx == ri && rx == EOPNOTSUPP, "ibv_modify_qp_rate_limit: export %d vs inline %d", rx, ri);
	struct ibv_ops_wr op = { .wr_id = 7 }, *bad_x = NULL, *bad_i = NULL;
	rx = EXPORT(ibv_post_srq_ops)(srq, &op, &bad_x);
	ri = ibv_post_srq_ops(srq, &op, &bad_i);
	CHECK(rx == ri && rx == EOPNOTSUPP && bad_x == &op && bad_i == &op,
	      "ibv_post_srq_ops: export %d vs inline %d", rx, ri);
	printf("ok refusals: create_flow, create_counters, create_wq, create_rwq_ind_table, "
	       "create_flow_action_esp, modify_qp_rate_limit, post_srq_ops (export == inline)\n");

	/* Objects the device never makes: NULL is EINVAL where the inline would crash. */
	CHECK(EXPORT(ibv_destroy_flow)(NULL) == EINVAL && EXPORT(ibv_destroy_wq)(NULL) == EINVAL &&
	      EXPORT(ibv_destroy_counters)(NULL) == EINVAL &&
	      EXPORT(ibv_post_wq_recv)(NULL, NULL, NULL) == EINVAL,
	      "NULL flow / WQ / counters");

	CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_qp(qp) == 0 && ibv_destroy_cq(cq) == 0,
	      "destroy");
}

int main(int argc, char **argv)
{
	char want[PATH_MAX];
	if (argc > 1) {
		CHECK(realpath(argv[1], want) != NULL, "realpath(%s)", argv[1]);
		expect_lib = want;
	}
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "ibv_get_device_list");
	int nx = -1;
	/* Declared only with RDMA_STATIC_PROVIDERS; the prototype is ibv_get_device_list's. */
	__typeof__(&ibv_get_device_list) get_list = (__typeof__(&ibv_get_device_list))resolve(
		"__ibv_get_device_list");
	struct ibv_device **list_x = get_list(&nx);
	CHECK(list_x && nx == n && list_x[0] == list[0], "__ibv_get_device_list");
	ibv_free_device_list(list_x);
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL, "ibv_open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "ibv_alloc_pd");

	exchange(ctx, pd);
	queries(ctx);
	refusals(ctx, pd);

	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	ibv_free_device_list(list);
	printf("ok %d exported symbols resolved%s%s\n", resolved, expect_lib ? " from " : "",
	       expect_lib ? expect_lib : "");
	return 0;
}
