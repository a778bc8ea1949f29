/* Verbs helpers for the libibverbs page tests: see ibvhelp.h. */
#include "ibvhelp.h"

#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>

static int fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	if (err && errlen)
		vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

long long ih_now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct ibv_context *ih_open(char *err, size_t errlen)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list || n < 1) {
		fail(err, errlen, "ibv_get_device_list: %d devices (%s)", n, conf_errname(errno));
		if (list)
			ibv_free_device_list(list);
		return NULL;
	}
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		fail(err, errlen, "ibv_open_device: %s", conf_errname(errno));
	ibv_free_device_list(list);
	return ctx;
}

int ih_gid_index(void)
{
	const char *s = getenv("CONF_GID_INDEX");
	return s && *s ? atoi(s) : 0;
}

int ih_dev_open(struct ih_dev *d)
{
	memset(d, 0, sizeof *d);
	d->ctx = ih_open(d->err, sizeof d->err);
	if (!d->ctx)
		return -1;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		return fail(d->err, sizeof d->err, "ibv_alloc_pd: %s", conf_errname(errno));
	d->gid_index = ih_gid_index();
	if (ibv_query_gid(d->ctx, 1, d->gid_index, &d->gid))
		return fail(d->err, sizeof d->err, "ibv_query_gid(1, %d): %s", d->gid_index,
			    conf_errname(errno));
	return 0;
}

void ih_dev_close(struct ih_dev *d)
{
	if (d->pd)
		ibv_dealloc_pd(d->pd);
	if (d->ctx)
		ibv_close_device(d->ctx);
	d->pd = NULL;
	d->ctx = NULL;
}

struct ibv_qp_init_attr ih_qp_attr(enum ibv_qp_type type, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = type;
	a.cap.max_send_wr = (uint32_t)depth;
	a.cap.max_recv_wr = (uint32_t)depth;
	a.cap.max_send_sge = 2;
	a.cap.max_recv_sge = 2;
	a.sq_sig_all = 0;
	return a;
}

int ih_to_init(struct ibv_qp *qp, int access, char *err, size_t errlen)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.pkey_index = 0;
	a.qp_access_flags = (unsigned)access;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
	return rc ? fail(err, errlen, "modify to INIT: %d (%s)", rc, conf_errname(rc)) : 0;
}

int ih_to_rtr(struct ih_dev *d, struct ibv_qp *qp, uint32_t dest_qpn, char *err, size_t errlen)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = 0;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	int rc = ibv_modify_qp(qp, &a, mask);
	return rc ? fail(err, errlen, "modify to RTR: %d (%s)", rc, conf_errname(rc)) : 0;
}

int ih_to_rts(struct ibv_qp *qp, char *err, size_t errlen)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	int mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
	if (qp->qp_type == IBV_QPT_RC) {
		a.timeout = 14;
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	int rc = ibv_modify_qp(qp, &a, mask);
	return rc ? fail(err, errlen, "modify to RTS: %d (%s)", rc, conf_errname(rc)) : 0;
}

int ih_connect(struct ih_dev *d, struct ibv_qp *qp, uint32_t dest_qpn, int access, char *err, size_t errlen)
{
	if (ih_to_init(qp, access, err, errlen) || ih_to_rtr(d, qp, dest_qpn, err, errlen) ||
	    ih_to_rts(qp, err, errlen))
		return -1;
	return 0;
}

int ih_ud_ready(struct ibv_qp *qp, char *err, size_t errlen)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = IH_QKEY;
	int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY);
	if (rc)
		return fail(err, errlen, "UD to INIT: %d (%s)", rc, conf_errname(rc));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE);
	if (rc)
		return fail(err, errlen, "UD to RTR: %d (%s)", rc, conf_errname(rc));
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = 0;
	rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
	return rc ? fail(err, errlen, "UD to RTS: %d (%s)", rc, conf_errname(rc)) : 0;
}

int ih_pair_make(struct ih_dev *d, struct ih_pair *p, enum ibv_qp_type type, int access)
{
	return ih_pair_make_on(d, p, type, access, NULL, NULL);
}

int ih_pair_make_on(struct ih_dev *d, struct ih_pair *p, enum ibv_qp_type type, int access, struct ibv_cq *cq0,
		    struct ibv_cq *cq1)
{
	memset(p, 0, sizeof *p);
	for (int i = 0; i < 2; i++) {
		p->cq[i] = i ? cq1 : cq0;
		if (!p->cq[i]) {
			p->cq[i] = ibv_create_cq(d->ctx, 64, NULL, NULL, 0);
			p->own_cq[i] = 1;
		}
		if (!p->cq[i])
			return fail(d->err, sizeof d->err, "ibv_create_cq: %s", conf_errname(errno));
		struct ibv_qp_init_attr a = ih_qp_attr(type, p->cq[i], 16);
		p->qp[i] = ibv_create_qp(d->pd, &a);
		if (!p->qp[i])
			return fail(d->err, sizeof d->err, "ibv_create_qp: %s", conf_errname(errno));
	}
	for (int i = 0; i < 2; i++) {
		int rc = type == IBV_QPT_UD
			? ih_ud_ready(p->qp[i], d->err, sizeof d->err)
			: ih_connect(d, p->qp[i], p->qp[1 - i]->qp_num, access, d->err, sizeof d->err);
		if (rc)
			return -1;
	}
	return 0;
}

void ih_pair_destroy(struct ih_pair *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->qp[i])
			ibv_destroy_qp(p->qp[i]);
		if (p->cq[i] && p->own_cq[i])
			ibv_destroy_cq(p->cq[i]);
		p->qp[i] = NULL;
		p->cq[i] = NULL;
	}
}

int ih_buf_make(struct ih_dev *d, struct ih_buf *b, size_t len, int access)
{
	memset(b, 0, sizeof *b);
	b->buf = calloc(1, len);
	b->len = len;
	if (!b->buf)
		return fail(d->err, sizeof d->err, "calloc(%zu) failed", len);
	b->mr = ibv_reg_mr(d->pd, b->buf, len, access);
	if (!b->mr)
		return fail(d->err, sizeof d->err, "ibv_reg_mr: %s", conf_errname(errno));
	return 0;
}

void ih_buf_free(struct ih_buf *b)
{
	if (b->mr)
		ibv_dereg_mr(b->mr);
	free(b->buf);
	memset(b, 0, sizeof *b);
}

int ih_post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		 uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
		wr.wr.atomic.swap = 2;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	return ibv_post_send(qp, &wr, &bad);
}

int ih_post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	return ibv_post_recv(qp, &wr, &bad);
}

struct ibv_ah *ih_ah(struct ih_dev *d, const union ibv_gid *gid)
{
	struct ibv_ah_attr a;
	memset(&a, 0, sizeof a);
	a.is_global = 1;
	a.grh.dgid = *gid;
	a.grh.sgid_index = (uint8_t)d->gid_index;
	a.grh.hop_limit = 1;
	a.port_num = 1;
	return ibv_create_ah(d->pd, &a);
}

int ih_post_ud(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, void *buf, uint32_t len, uint32_t lkey,
	       uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.ud.ah = ah;
	wr.wr.ud.remote_qpn = qpn;
	wr.wr.ud.remote_qkey = IH_QKEY;
	return ibv_post_send(qp, &wr, &bad);
}

struct ibv_srq *ih_xrc_srq(struct ih_dev *d, struct ibv_xrcd *x, struct ibv_cq *cq, uint32_t max_wr)
{
	struct ibv_srq_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.attr.max_wr = max_wr;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	a.srq_type = IBV_SRQT_XRC;
	a.pd = d->pd;
	a.xrcd = x;
	a.cq = cq;
	return ibv_create_srq_ex(d->ctx, &a);
}

int ih_poll(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	long long end = ih_now_ms() + ms;
	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n != 0)
			return n < 0 ? -1 : 1;
		if (ih_now_ms() > end)
			return 0;
		struct timespec t = { 0, 50000 };
		nanosleep(&t, NULL);
	}
}

int ih_qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -1;
	return (int)a.qp_state;
}

int ih_readable(int fd, int ms)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	return poll(&p, 1, ms) == 1 && (p.revents & POLLIN);
}
