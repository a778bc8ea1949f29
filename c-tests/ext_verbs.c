/* Extended verbs in one process, as perftest and ibv_rc_pingpong -N/-t use them:
 * ibv_query_device_ex, the ibv_query_port macro (full struct), ibv_query_gid_ex, ibv_reg_mr_iova2;
 * two RC QPs from ibv_create_qp_ex (PD | SEND_OPS_FLAGS) connected through modify_qp with each
 * other's QPN and GID 0; CQs from ibv_create_cq_ex polled with start/next/end_poll and the
 * ibv_wc_read_* accessors (every value checked); posting with the ibv_wr_* API (send, send_imm,
 * rdma_write, rdma_write_imm, rdma_read, both atomics, set_sge, set_sge_list, set_inline_data,
 * set_inline_data_list), batches, wr_abort and the errors wr_complete reports; the legacy calls
 * (ibv_poll_cq, ibv_req_notify_cq, ibv_get_cq_event, ibv_destroy_cq) on extended CQs; UD QPs
 * from ibv_create_qp_ex posting with ibv_wr_set_ud_addr.
 * Exit 0 and "ok" lines on success; "FAIL" and exit 1 otherwise. */
#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <endian.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); exit(1); } } while (0)

#define BUF 8192
#define WC_FLAGS (IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | \
		  IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_IMM)
#define ALL_OPS (IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_WRITE | \
		 IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ | \
		 IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)

struct side {
	struct ibv_cq_ex *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;
	struct ibv_mr *mr;
	uint8_t *buf;
};

/* One completion as read through the extended API. */
struct cqe {
	uint64_t wr_id;
	enum ibv_wc_status status;
	enum ibv_wc_opcode opcode;
	uint32_t byte_len, qp_num, src_qp, imm;
	unsigned int wc_flags;
	uint64_t ts;
};

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static void read_cqe(struct ibv_cq_ex *cq, struct cqe *e)
{
	e->wr_id = cq->wr_id;
	e->status = cq->status;
	e->opcode = ibv_wc_read_opcode(cq);
	e->byte_len = ibv_wc_read_byte_len(cq);
	e->qp_num = ibv_wc_read_qp_num(cq);
	e->src_qp = ibv_wc_read_src_qp(cq);
	e->wc_flags = ibv_wc_read_wc_flags(cq);
	e->imm = (e->wc_flags & IBV_WC_WITH_IMM) ? be32toh(ibv_wc_read_imm_data(cq)) : 0;
	e->ts = ibv_wc_read_completion_ts(cq);
	CHECK(ibv_wc_read_vendor_err(cq) == 0, "vendor_err");
}

/* Collects exactly n completions (start_poll, then next_poll until ENOENT, end_poll). */
static void collect(struct ibv_cq_ex *cq, struct cqe *out, int n)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	int got = 0;
	uint64_t deadline = now_ns() + 5000000000ull;
	while (got < n) {
		CHECK(now_ns() < deadline, "only %d of %d completions", got, n);
		int r = ibv_start_poll(cq, &attr);
		if (r == ENOENT)
			continue;
		CHECK(r == 0, "ibv_start_poll returned %d", r);
		do {
			CHECK(got < n, "more completions than expected (wr_id %llu)",
			      (unsigned long long)cq->wr_id);
			read_cqe(cq, &out[got++]);
		} while ((r = ibv_next_poll(cq)) == 0);
		CHECK(r == ENOENT, "ibv_next_poll returned %d", r);
		ibv_end_poll(cq);
	}
}

static void expect_empty(struct ibv_cq_ex *cq)
{
	struct ibv_poll_cq_attr attr = { .comp_mask = 0 };
	for (int i = 0; i < 100; i++) {
		int r = ibv_start_poll(cq, &attr);
		if (r == 0) {
			CHECK(0, "unexpected completion wr_id %llu status %d", (unsigned long long)cq->wr_id,
			      cq->status);
		}
		CHECK(r == ENOENT, "ibv_start_poll on an empty CQ returned %d", r);
	}
}

static void check_cqe(const struct cqe *e, uint64_t wr_id, enum ibv_wc_opcode op, uint32_t len,
		      uint32_t qpn, uint64_t t0)
{
	CHECK(e->wr_id == wr_id, "wr_id %llu, expected %llu", (unsigned long long)e->wr_id,
	      (unsigned long long)wr_id);
	CHECK(e->status == IBV_WC_SUCCESS, "wr_id %llu: status %s", (unsigned long long)wr_id,
	      ibv_wc_status_str(e->status));
	CHECK(e->opcode == op, "wr_id %llu: opcode %d, expected %d", (unsigned long long)wr_id,
	      e->opcode, op);
	CHECK(e->byte_len == len, "wr_id %llu: byte_len %u, expected %u", (unsigned long long)wr_id,
	      e->byte_len, len);
	CHECK(e->qp_num == qpn, "wr_id %llu: qp_num %u, expected %u", (unsigned long long)wr_id,
	      e->qp_num, qpn);
	/* CLOCK_MONOTONIC nanoseconds when the completion was produced: after posting, before now. */
	CHECK(e->ts >= t0 && e->ts <= now_ns(), "wr_id %llu: timestamp %llu outside [%llu, now]",
	      (unsigned long long)wr_id, (unsigned long long)e->ts, (unsigned long long)t0);
}

static void post_recv(struct side *s, uint64_t wr_id, size_t off, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + off), .length = len, .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "ibv_post_recv");
}

static struct ibv_cq_ex *make_cq(struct ibv_context *ctx, struct ibv_comp_channel *ch, void *cq_ctx)
{
	struct ibv_cq_init_attr_ex a = {
		.cqe = 64, .cq_context = cq_ctx, .channel = ch, .comp_vector = 0, .wc_flags = WC_FLAGS,
	};
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &a);
	CHECK(cq != NULL, "ibv_create_cq_ex");
	struct ibv_cq *legacy = ibv_cq_ex_to_cq(cq);
	CHECK(legacy->context == ctx && legacy->cq_context == cq_ctx && legacy->channel == ch &&
	      legacy->cqe >= 64, "legacy ibv_cq fields of an extended CQ");
	CHECK(cq->start_poll && cq->next_poll && cq->end_poll && cq->read_opcode &&
	      cq->read_vendor_err && cq->read_wc_flags && cq->read_byte_len && cq->read_imm_data &&
	      cq->read_qp_num && cq->read_src_qp && cq->read_completion_ts,
	      "requested readers missing");
	CHECK(!cq->read_slid && !cq->read_completion_wallclock_ns && !cq->read_cvlan,
	      "readers present that were not requested");
	return cq;
}

static struct ibv_qp *make_qp(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.send_cq = ibv_cq_ex_to_cq(cq);
	a.recv_cq = ibv_cq_ex_to_cq(cq);
	a.cap.max_send_wr = 16;
	a.cap.max_recv_wr = 16;
	a.cap.max_send_sge = 4;
	a.cap.max_recv_sge = 2;
	a.cap.max_inline_data = 64;
	a.qp_type = IBV_QPT_RC;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = pd;
	a.send_ops_flags = ALL_OPS;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &a);
	CHECK(qp != NULL, "ibv_create_qp_ex");
	CHECK(qp->pd == pd && qp->qp_type == IBV_QPT_RC && qp->state == IBV_QPS_RESET,
	      "ibv_qp fields");
	CHECK(a.cap.max_send_wr >= 16 && a.cap.max_send_sge >= 4, "caps not written back");
	return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest_qpn, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.pkey_index = 0;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS) == 0, "to INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
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
	a.sq_psn = 0;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			    IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0, "to RTS");
}

static void fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

static void check_device(struct ibv_context *ctx)
{
	struct ibv_device_attr_ex ax;
	memset(&ax, 0xa5, sizeof ax);
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "ibv_query_device_ex");
	struct ibv_device_attr a;
	CHECK(ibv_query_device(ctx, &a) == 0, "ibv_query_device");
	CHECK(strcmp(a.fw_ver, ax.orig_attr.fw_ver) == 0 && a.node_guid == ax.orig_attr.node_guid &&
	      a.vendor_id == ax.orig_attr.vendor_id && a.max_qp == ax.orig_attr.max_qp &&
	      a.max_qp_wr == ax.orig_attr.max_qp_wr && a.max_sge == ax.orig_attr.max_sge &&
	      a.max_cqe == ax.orig_attr.max_cqe && a.atomic_cap == ax.orig_attr.atomic_cap &&
	      a.max_qp_rd_atom == ax.orig_attr.max_qp_rd_atom && ax.orig_attr.phys_port_cnt == 1,
	      "orig_attr differs from ibv_query_device");
	CHECK(ax.comp_mask == 0 && ax.completion_timestamp_mask != 0 && ax.hca_core_clock != 0,
	      "completion timestamps not advertised");
	/* Device memory (ibv_alloc_dm) and ODP, explicit and implicit, are offered (odp_verbs). */
	CHECK((ax.odp_caps.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT)) ==
			      (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT) &&
		      ax.max_dm_size != 0 && ax.phys_port_cnt_ex == 1,
	      "extended attributes: ODP, device memory, one port");
	struct ibv_query_device_ex_input in = { .comp_mask = 1 };
	CHECK(ibv_query_device_ex(ctx, &in, &ax) == EINVAL, "input comp_mask accepted");

	struct ibv_port_attr pa;
	memset(&pa, 0xa5, sizeof pa);
	CHECK(ibv_query_port(ctx, 1, &pa) == 0, "ibv_query_port");
	CHECK(pa.state == IBV_PORT_ACTIVE && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
	      pa.active_mtu == IBV_MTU_4096 && pa.gid_tbl_len > 0 && pa.port_cap_flags2 == 0,
	      "port attributes (state %d, link layer %d, flags2 %u)", pa.state, pa.link_layer,
	      pa.port_cap_flags2);
	CHECK(ibv_query_port(ctx, 2, &pa) != 0, "port 2 answered");

	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	struct ibv_gid_entry ge;
	CHECK(ibv_query_gid_ex(ctx, 1, 0, &ge, 0) == 0, "ibv_query_gid_ex");
	CHECK(memcmp(&ge.gid, &gid, sizeof gid) == 0 && ge.gid_index == 0 && ge.port_num == 1 &&
	      ge.gid_type == IBV_GID_TYPE_ROCE_V2, "gid entry");
	printf("ok device: query_device_ex, query_port (full struct), query_gid_ex\n");
}

static void check_create_errors(struct ibv_context *ctx, struct ibv_pd *pd, struct ibv_cq_ex *cq)
{
	struct ibv_cq_init_attr_ex ca = { .cqe = 4, .wc_flags = IBV_WC_EX_WITH_CVLAN };
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EOPNOTSUPP, "CVLAN wc_flag accepted");
	ca.wc_flags = 0;
	ca.comp_mask = 1u << 7;
	errno = 0;
	CHECK(ibv_create_cq_ex(ctx, &ca) == NULL && errno == EINVAL, "unknown comp_mask accepted");

	struct ibv_qp_init_attr_ex qa;
	memset(&qa, 0, sizeof qa);
	qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cq);
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	qa.pd = pd;
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	qa.send_ops_flags = IBV_QP_EX_WITH_TSO; /* memory windows are supported, TSO is not */
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qa) == NULL && errno == EOPNOTSUPP, "TSO send op accepted");
	qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	qa.create_flags = IBV_QP_CREATE_SCATTER_FCS;
	errno = 0;
	CHECK(ibv_create_qp_ex(ctx, &qa) == NULL && errno == EOPNOTSUPP, "SCATTER_FCS accepted");
	qa.create_flags = 0;
	struct ibv_qp *qp = ibv_create_qp_ex(ctx, &qa);
	CHECK(qp != NULL, "CREATE_FLAGS=0 refused");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy");

	/* A legacy QP has an ibv_qp_ex too; foreign pointers do not. */
	struct ibv_qp_init_attr la;
	memset(&la, 0, sizeof la);
	la.send_cq = la.recv_cq = ibv_cq_ex_to_cq(cq);
	la.cap.max_send_wr = la.cap.max_recv_wr = la.cap.max_send_sge = la.cap.max_recv_sge = 1;
	la.qp_type = IBV_QPT_RC;
	qp = ibv_create_qp(pd, &la);
	CHECK(qp != NULL, "ibv_create_qp");
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	CHECK(x == (struct ibv_qp_ex *)qp && x->wr_start && x->wr_complete && x->wr_send &&
	      x->wr_set_sge && x->wr_set_ud_addr, "ibv_qp_to_qp_ex of a legacy QP");
	CHECK(ibv_qp_to_qp_ex(qp) == x, "ibv_qp_to_qp_ex not idempotent");
	CHECK(ibv_destroy_qp(qp) == 0, "destroy");
	errno = 0;
	CHECK(ibv_qp_to_qp_ex(NULL) == NULL && errno == EINVAL, "ibv_qp_to_qp_ex(NULL)");
	struct ibv_qp foreign;
	memset(&foreign, 0, sizeof foreign);
	errno = 0;
	CHECK(ibv_qp_to_qp_ex(&foreign) == NULL && errno == EINVAL, "ibv_qp_to_qp_ex(foreign)");
	printf("ok create errors: wc_flags, comp_mask, send_ops_flags, create_flags, qp_to_qp_ex\n");
}

/* UD QPs from ibv_create_qp_ex, posting with ibv_wr_set_ud_addr. */
static void ud_section(struct ibv_context *ctx, struct ibv_pd *pd, const union ibv_gid *gid)
{
	const uint32_t qkey = 0x11111111;
	struct ibv_cq_ex *cq = make_cq(ctx, NULL, NULL);
	struct ibv_qp *u[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr_ex a;
		memset(&a, 0, sizeof a);
		a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cq);
		a.cap.max_send_wr = a.cap.max_recv_wr = 8;
		a.cap.max_send_sge = a.cap.max_recv_sge = 1;
		a.qp_type = IBV_QPT_UD;
		a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
		a.pd = pd;
		a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
		u[i] = ibv_create_qp_ex(ctx, &a);
		CHECK(u[i] != NULL && u[i]->qp_type == IBV_QPT_UD, "ibv_create_qp_ex (UD)");
		struct ibv_qp_attr m;
		memset(&m, 0, sizeof m);
		m.qp_state = IBV_QPS_INIT;
		m.port_num = 1;
		m.qkey = qkey;
		CHECK(ibv_modify_qp(u[i], &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				    IBV_QP_QKEY) == 0, "UD to INIT");
		m.qp_state = IBV_QPS_RTR;
		CHECK(ibv_modify_qp(u[i], &m, IBV_QP_STATE) == 0, "UD to RTR");
		m.qp_state = IBV_QPS_RTS;
		m.sq_psn = 0;
		CHECK(ibv_modify_qp(u[i], &m, IBV_QP_STATE | IBV_QP_SQ_PSN) == 0, "UD to RTS");
	}
	uint8_t *buf = calloc(1, 4096);
	CHECK(buf != NULL, "alloc");
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr != NULL, "ibv_reg_mr");
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.is_global = 1;
	aa.grh.dgid = *gid;
	aa.grh.sgid_index = 0;
	aa.grh.hop_limit = 1;
	aa.port_num = 1;
	/* A RoCE port routes by GID only: no GRH, or another port, is refused as on hardware. */
	aa.is_global = 0;
	errno = 0;
	CHECK(ibv_create_ah(pd, &aa) == NULL && errno == EINVAL, "ibv_create_ah without a GRH");
	aa.is_global = 1;
	aa.port_num = 2;
	errno = 0;
	CHECK(ibv_create_ah(pd, &aa) == NULL && errno == EINVAL, "ibv_create_ah on port 2");
	aa.port_num = 1;
	struct ibv_ah *ah = ibv_create_ah(pd, &aa);
	CHECK(ah != NULL, "ibv_create_ah");
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(buf + 2048 + 1024 * i), .length = 1024,
				       .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 400 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(u[1], &wr, &bad) == 0, "ibv_post_recv (UD)");
	}
	fill(buf, 64, 90);
	uint8_t small[16];
	fill(small, sizeof small, 120);
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(u[0]);
	CHECK(x == (struct ibv_qp_ex *)u[0], "ibv_qp_to_qp_ex (UD)");

	/* Errors first: no destination, and a destination that is not an address handle. */
	ibv_wr_start(x);
	x->wr_id = 39;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(x);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 8);
	CHECK(ibv_wr_complete(x) == EINVAL, "UD send without wr_set_ud_addr accepted");
	struct ibv_ah bogus;
	memset(&bogus, 0, sizeof bogus);
	ibv_wr_start(x);
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, &bogus, u[1]->qp_num, qkey);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 8);
	CHECK(ibv_wr_complete(x) == EINVAL, "UD send to a foreign AH accepted");
	expect_empty(cq);

	uint64_t t0 = now_ns();
	ibv_wr_start(x);
	x->wr_id = 40;
	x->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(x, htobe32(99));
	ibv_wr_set_ud_addr(x, ah, u[1]->qp_num, qkey);
	ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf, 64);
	x->wr_id = 41;
	ibv_wr_send(x);
	ibv_wr_set_ud_addr(x, ah, u[1]->qp_num, qkey);
	ibv_wr_set_inline_data(x, small, sizeof small);
	CHECK(ibv_wr_complete(x) == 0, "wr_complete (UD)");
	struct cqe e[4];
	collect(cq, e, 4);
	/* One CQ for both QPs: sort sends (wr_id 40, 41) from receives (400, 401). */
	struct cqe *sends[2] = { NULL, NULL }, *recvs[2] = { NULL, NULL };
	for (int i = 0; i < 4; i++) {
		if (e[i].wr_id == 40 || e[i].wr_id == 41)
			sends[e[i].wr_id - 40] = &e[i];
		else if (e[i].wr_id == 400 || e[i].wr_id == 401)
			recvs[e[i].wr_id - 400] = &e[i];
	}
	CHECK(sends[0] && sends[1] && recvs[0] && recvs[1], "UD completions");
	check_cqe(sends[0], 40, IBV_WC_SEND, 64, u[0]->qp_num, t0);
	check_cqe(sends[1], 41, IBV_WC_SEND, 16, u[0]->qp_num, t0);
	check_cqe(recvs[0], 400, IBV_WC_RECV, 40 + 64, u[1]->qp_num, t0);
	check_cqe(recvs[1], 401, IBV_WC_RECV, 40 + 16, u[1]->qp_num, t0);
	CHECK(recvs[0]->src_qp == u[0]->qp_num && recvs[1]->src_qp == u[0]->qp_num, "UD src_qp");
	CHECK((recvs[0]->wc_flags & IBV_WC_GRH) && (recvs[0]->wc_flags & IBV_WC_WITH_IMM) &&
	      recvs[0]->imm == 99 && !(recvs[1]->wc_flags & IBV_WC_WITH_IMM), "UD wc_flags / imm");
	CHECK(memcmp(buf + 2048 + 40, buf, 64) == 0, "UD payload");
	CHECK(memcmp(buf + 3072 + 40, small, 16) == 0, "UD inline payload");

	CHECK(ibv_destroy_qp(u[0]) == 0 && ibv_destroy_qp(u[1]) == 0, "destroy UD QPs");
	CHECK(ibv_destroy_ah(ah) == 0, "ibv_destroy_ah");
	CHECK(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)) == 0, "ibv_destroy_cq (UD)");
	free(buf);
	printf("ok UD: ibv_create_qp_ex, wr_send_imm/wr_send + wr_set_ud_addr, GRH receives\n");
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx != NULL, "ibv_open_device");
	ibv_free_device_list(list);
	check_device(ctx);

	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd != NULL, "ibv_alloc_pd");
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	CHECK(ch != NULL, "ibv_create_comp_channel");

	struct side A, B;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		     IBV_ACCESS_REMOTE_ATOMIC;
	CHECK(posix_memalign((void **)&A.buf, 4096, BUF) == 0, "alloc");
	CHECK(posix_memalign((void **)&B.buf, 4096, BUF) == 0, "alloc");
	memset(A.buf, 0, BUF);
	memset(B.buf, 0, BUF);
	A.mr = ibv_reg_mr(pd, A.buf, BUF, access);
	CHECK(A.mr != NULL, "ibv_reg_mr");
	B.mr = ibv_reg_mr_iova2(pd, B.buf, BUF, (uintptr_t)B.buf, access);
	CHECK(B.mr != NULL && B.mr->addr == B.buf && B.mr->length == BUF, "ibv_reg_mr_iova2");

	A.cq = make_cq(ctx, NULL, &A);
	B.cq = make_cq(ctx, ch, &B);
	check_create_errors(ctx, pd, A.cq);
	A.qp = make_qp(ctx, pd, A.cq);
	B.qp = make_qp(ctx, pd, B.cq);
	A.qpx = ibv_qp_to_qp_ex(A.qp);
	B.qpx = ibv_qp_to_qp_ex(B.qp);
	CHECK(A.qpx == (struct ibv_qp_ex *)A.qp && B.qpx == (struct ibv_qp_ex *)B.qp,
	      "ibv_qp_to_qp_ex");

	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "ibv_query_gid");
	to_rts(A.qp, B.qp->qp_num, &gid);
	to_rts(B.qp, A.qp->qp_num, &gid);
	CHECK(A.qp->state == IBV_QPS_RTS && B.qp->state == IBV_QPS_RTS, "not RTS");
	expect_empty(A.cq);
	printf("ok connected: qpn %u <-> %u\n", A.qp->qp_num, B.qp->qp_num);

	/* --- Batch 1: send (set_sge), send_imm (set_sge_list), send (set_inline_data),
	 * send (set_inline_data_list); one batch, one wr_complete. */
	fill(A.buf, 256, 1);
	for (int i = 0; i < 4; i++)
		post_recv(&B, 100 + i, 1024 * i, 1024);
	uint8_t inl[40], inl2a[10], inl2b[20];
	fill(inl, sizeof inl, 50);
	fill(inl2a, sizeof inl2a, 60);
	fill(inl2b, sizeof inl2b, 70);
	struct ibv_sge two[2] = {
		{ .addr = (uintptr_t)(A.buf + 64), .length = 16, .lkey = A.mr->lkey },
		{ .addr = (uintptr_t)(A.buf + 128), .length = 32, .lkey = A.mr->lkey },
	};
	struct ibv_data_buf bufs[2] = { { inl2a, sizeof inl2a }, { inl2b, sizeof inl2b } };
	uint64_t t0 = now_ns();
	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 1;
	A.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(A.qpx);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)A.buf, 64);
	A.qpx->wr_id = 2;
	A.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED;
	ibv_wr_send_imm(A.qpx, htobe32(0x12345678));
	ibv_wr_set_sge_list(A.qpx, 2, two);
	A.qpx->wr_id = 3;
	A.qpx->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
	ibv_wr_send(A.qpx);
	ibv_wr_set_inline_data(A.qpx, inl, sizeof inl);
	A.qpx->wr_id = 4;
	A.qpx->wr_flags = 0; /* unsignaled: no send completion */
	ibv_wr_send(A.qpx);
	ibv_wr_set_inline_data_list(A.qpx, 2, bufs);
	CHECK(ibv_wr_complete(A.qpx) == 0, "wr_complete batch 1");
	memset(inl, 0, sizeof inl); /* inline data was copied at post time */
	memset(inl2a, 0, sizeof inl2a);

	struct cqe s[8], r[8];
	collect(A.cq, s, 3);
	check_cqe(&s[0], 1, IBV_WC_SEND, 64, A.qp->qp_num, t0);
	check_cqe(&s[1], 2, IBV_WC_SEND, 48, A.qp->qp_num, t0);
	check_cqe(&s[2], 3, IBV_WC_SEND, 40, A.qp->qp_num, t0);
	collect(B.cq, r, 4);
	check_cqe(&r[0], 100, IBV_WC_RECV, 64, B.qp->qp_num, t0);
	check_cqe(&r[1], 101, IBV_WC_RECV, 48, B.qp->qp_num, t0);
	check_cqe(&r[2], 102, IBV_WC_RECV, 40, B.qp->qp_num, t0);
	check_cqe(&r[3], 103, IBV_WC_RECV, 30, B.qp->qp_num, t0);
	for (int i = 0; i < 4; i++)
		CHECK(r[i].src_qp == A.qp->qp_num, "recv %d: src_qp %u", i, r[i].src_qp);
	CHECK(!(r[0].wc_flags & IBV_WC_WITH_IMM) && (r[1].wc_flags & IBV_WC_WITH_IMM) &&
	      r[1].imm == 0x12345678, "immediate data (flags %u, imm %#x)", r[1].wc_flags, r[1].imm);
	CHECK(r[0].ts <= r[1].ts && r[1].ts <= r[2].ts && r[2].ts <= r[3].ts,
	      "receive timestamps out of order");
	uint8_t want[64];
	fill(want, 64, 1);
	CHECK(memcmp(B.buf, want, 64) == 0, "send payload");
	CHECK(memcmp(B.buf + 1024, A.buf + 64, 16) == 0 && memcmp(B.buf + 1040, A.buf + 128, 32) == 0,
	      "send_imm gathered payload");
	fill(want, 40, 50);
	CHECK(memcmp(B.buf + 2048, want, 40) == 0, "inline payload");
	fill(want, 10, 60);
	fill(want + 10, 20, 70);
	CHECK(memcmp(B.buf + 3072, want, 30) == 0, "inline list payload");
	expect_empty(A.cq);
	expect_empty(B.cq);
	printf("ok batch 1: send, send_imm, inline, inline list; start/next/end_poll and readers\n");

	/* --- Batch 2: rdma_write, rdma_write_imm (0 bytes and 100 bytes), rdma_read, fetch_add,
	 * cmp_swp. B's counter sits 8-byte aligned at offset 4096. */
	uint64_t *counter = (uint64_t *)(B.buf + 4096);
	*counter = 1000;
	fill(A.buf + 512, 200, 9);
	fill(B.buf + 5000, 300, 33);
	post_recv(&B, 200, 0, 16);
	post_recv(&B, 201, 0, 16);
	uint64_t rbase = (uintptr_t)B.buf;
	uint32_t rkey = B.mr->rkey;
	t0 = now_ns();
	ibv_wr_start(A.qpx);
	A.qpx->wr_flags = IBV_SEND_SIGNALED;
	A.qpx->wr_id = 10;
	ibv_wr_rdma_write(A.qpx, rkey, rbase + 6000);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 512), 200);
	A.qpx->wr_id = 11;
	ibv_wr_rdma_write_imm(A.qpx, rkey, rbase + 6400, htobe32(0xabcd));
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 512), 100);
	A.qpx->wr_id = 12;
	ibv_wr_rdma_write_imm(A.qpx, rkey, rbase, htobe32(7));
	ibv_wr_set_sge_list(A.qpx, 0, NULL);
	A.qpx->wr_id = 13;
	ibv_wr_rdma_read(A.qpx, rkey, rbase + 5000);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 1024), 300);
	A.qpx->wr_id = 14;
	ibv_wr_atomic_fetch_add(A.qpx, rkey, rbase + 4096, 5);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 2048), 8);
	A.qpx->wr_id = 15;
	ibv_wr_atomic_cmp_swp(A.qpx, rkey, rbase + 4096, 1005, 77);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 2056), 8);
	CHECK(ibv_wr_complete(A.qpx) == 0, "wr_complete batch 2");
	collect(A.cq, s, 6);
	check_cqe(&s[0], 10, IBV_WC_RDMA_WRITE, 200, A.qp->qp_num, t0);
	check_cqe(&s[1], 11, IBV_WC_RDMA_WRITE, 100, A.qp->qp_num, t0);
	check_cqe(&s[2], 12, IBV_WC_RDMA_WRITE, 0, A.qp->qp_num, t0);
	check_cqe(&s[3], 13, IBV_WC_RDMA_READ, 300, A.qp->qp_num, t0);
	check_cqe(&s[4], 14, IBV_WC_FETCH_ADD, 8, A.qp->qp_num, t0);
	check_cqe(&s[5], 15, IBV_WC_COMP_SWAP, 8, A.qp->qp_num, t0);
	collect(B.cq, r, 2);
	check_cqe(&r[0], 200, IBV_WC_RECV_RDMA_WITH_IMM, 100, B.qp->qp_num, t0);
	check_cqe(&r[1], 201, IBV_WC_RECV_RDMA_WITH_IMM, 0, B.qp->qp_num, t0);
	CHECK((r[0].wc_flags & IBV_WC_WITH_IMM) && r[0].imm == 0xabcd && r[1].imm == 7 &&
	      r[0].src_qp == A.qp->qp_num, "write_imm completions");
	CHECK(memcmp(B.buf + 6000, A.buf + 512, 200) == 0, "rdma_write payload");
	CHECK(memcmp(B.buf + 6400, A.buf + 512, 100) == 0, "rdma_write_imm payload");
	CHECK(memcmp(A.buf + 1024, B.buf + 5000, 300) == 0, "rdma_read payload");
	uint64_t fa, cs;
	memcpy(&fa, A.buf + 2048, 8);
	memcpy(&cs, A.buf + 2056, 8);
	CHECK(fa == 1000 && cs == 1005 && *counter == 77, "atomics: fetched %llu, compared %llu, now %llu",
	      (unsigned long long)fa, (unsigned long long)cs, (unsigned long long)*counter);
	printf("ok batch 2: rdma_write, rdma_write_imm (100 and 0 bytes), rdma_read, fetch_add, cmp_swp\n");

	/* --- wr_abort drops the batch; wr_complete reports builder errors and posts nothing. */
	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 20;
	A.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(A.qpx);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)A.buf, 8);
	ibv_wr_abort(A.qpx);
	CHECK(ibv_wr_complete(A.qpx) == EINVAL, "wr_complete after wr_abort");

	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 21;
	ibv_wr_send(A.qpx);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)A.buf, 8);
	A.qpx->wr_id = 22;
	ibv_wr_atomic_fetch_add(A.qpx, rkey, rbase + 4096, 1);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)(A.buf + 2048), 4); /* atomics need 8 bytes */
	CHECK(ibv_wr_complete(A.qpx) == EINVAL, "short atomic accepted");

	ibv_wr_start(A.qpx);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)A.buf, 8); /* data before any operation */
	CHECK(ibv_wr_complete(A.qpx) == EINVAL, "set_sge without an operation accepted");

	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 23;
	ibv_wr_rdma_read(A.qpx, rkey, rbase);
	ibv_wr_set_inline_data(A.qpx, inl, 8); /* READ has no inline data */
	CHECK(ibv_wr_complete(A.qpx) == EINVAL, "inline READ accepted");

	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 24;
	ibv_wr_send(A.qpx);
	struct ibv_sge five[5];
	for (int i = 0; i < 5; i++)
		five[i] = (struct ibv_sge){ .addr = (uintptr_t)A.buf, .length = 1, .lkey = A.mr->lkey };
	ibv_wr_set_sge_list(A.qpx, 5, five); /* max_send_sge is 4 */
	CHECK(ibv_wr_complete(A.qpx) == EINVAL, "too many SGEs accepted");

	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 25;
	ibv_wr_send_tso(A.qpx, inl, 8, 64); /* not supported: reported, not a crash */
	CHECK(ibv_wr_complete(A.qpx) == EOPNOTSUPP, "send_tso accepted");
	expect_empty(A.cq);
	expect_empty(B.cq);
	printf("ok wr_abort and wr_complete errors (nothing posted)\n");

	/* --- Legacy calls on extended CQs: ibv_poll_cq, and a completion event through the channel. */
	CHECK(ibv_req_notify_cq(ibv_cq_ex_to_cq(B.cq), 0) == 0, "ibv_req_notify_cq");
	post_recv(&B, 300, 0, 64);
	ibv_wr_start(A.qpx);
	A.qpx->wr_id = 30;
	A.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(A.qpx);
	ibv_wr_set_sge(A.qpx, A.mr->lkey, (uintptr_t)A.buf, 32);
	CHECK(ibv_wr_complete(A.qpx) == 0, "wr_complete");
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1, "no CQ event");
	struct ibv_cq *ev_cq;
	void *ev_ctx;
	CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0, "ibv_get_cq_event");
	CHECK(ev_cq == ibv_cq_ex_to_cq(B.cq) && ev_ctx == &B, "event for the wrong CQ");
	ibv_ack_cq_events(ev_cq, 1);
	struct ibv_wc wc;
	int got = 0;
	for (int i = 0; i < 5000000 && got == 0; i++)
		got = ibv_poll_cq(ibv_cq_ex_to_cq(B.cq), 1, &wc);
	CHECK(got == 1 && wc.wr_id == 300 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV &&
	      wc.byte_len == 32 && wc.src_qp == A.qp->qp_num, "ibv_poll_cq on an extended CQ");
	got = 0;
	for (int i = 0; i < 5000000 && got == 0; i++)
		got = ibv_poll_cq(ibv_cq_ex_to_cq(A.cq), 1, &wc);
	CHECK(got == 1 && wc.wr_id == 30 && wc.opcode == IBV_WC_SEND, "send completion via ibv_poll_cq");
	printf("ok legacy ibv_poll_cq / ibv_req_notify_cq / ibv_get_cq_event on extended CQs\n");

	ud_section(ctx, pd, &gid);

	/* --- Teardown: a CQ in use cannot go; then everything goes. */
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(A.cq)) == EBUSY, "CQ destroyed while a QP uses it");
	CHECK(ibv_destroy_qp(A.qp) == 0 && ibv_destroy_qp(B.qp) == 0, "ibv_destroy_qp");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(A.cq)) == 0, "ibv_destroy_cq A");
	CHECK(ibv_destroy_cq(ibv_cq_ex_to_cq(B.cq)) == 0, "ibv_destroy_cq B");
	CHECK(ibv_dereg_mr(A.mr) == 0 && ibv_dereg_mr(B.mr) == 0, "ibv_dereg_mr");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "ibv_destroy_comp_channel");
	CHECK(ibv_dealloc_pd(pd) == 0, "ibv_dealloc_pd");
	CHECK(ibv_close_device(ctx) == 0, "ibv_close_device");
	free(A.buf);
	free(B.buf);
	printf("ok teardown\n");
	return 0;
}
