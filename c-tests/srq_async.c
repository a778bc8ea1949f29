/* SRQ and asynchronous events with raw verbs: receives posted to an SRQ are consumed by a QP
 * attached to it; an armed SRQ limit raises IBV_EVENT_SRQ_LIMIT_REACHED once; a QP that fails
 * raises IBV_EVENT_QP_FATAL; async_fd is pollable and honours O_NONBLOCK (EAGAIN). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;

static void connect_qp(struct ibv_qp *qp, uint32_t dest)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.port_num = 1;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
					  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER), "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	CHECK(!ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC), "RTS");
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (long i = 0; i < 50000000; i++)
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			return wc;
	CHECK(0, "no completion");
	return wc;
}

static struct ibv_async_event wait_async(void)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	CHECK(poll(&p, 1, 3000) == 1, "async_fd must become readable");
	struct ibv_async_event e;
	CHECK(ibv_get_async_event(ctx, &e) == 0, "get_async_event");
	return e;
}

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "device list");
	ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	pd = ibv_alloc_pd(ctx);
	CHECK(ctx && pd, "open/pd");
	CHECK(fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
	struct ibv_async_event e;
	CHECK(ibv_get_async_event(ctx, &e) == -1 && errno == EAGAIN, "no event yet: EAGAIN");
	puts("ok async_fd honours O_NONBLOCK");

	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "create_srq");
	struct ibv_srq_attr lim = { .srq_limit = 100 };
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == EINVAL, "limit above max_wr: EINVAL");
	lim.srq_limit = 4;
	CHECK(ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT) == 0, "arm limit");
	struct ibv_srq_attr q;
	CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 4 && q.max_wr >= 8, "query_srq");

	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	struct ibv_qp_init_attr qa = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 } };
	struct ibv_qp *a = ibv_create_qp(pd, &qa);
	qa.srq = srq;
	struct ibv_qp *b = ibv_create_qp(pd, &qa);
	CHECK(a && b, "create_qp");
	connect_qp(a, b->qp_num);
	connect_qp(b, a->qp_num);

	static char buf[8][64], out[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *omr = ibv_reg_mr(pd, out, sizeof out, 0);
	CHECK(mr && omr, "reg_mr");
	for (int i = 0; i < 5; i++) {
		struct ibv_sge s = { (uintptr_t)buf[i], 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(ibv_post_srq_recv(srq, &w, &bad) == 0, "post_srq_recv");
	}
	struct ibv_recv_wr rw = { .wr_id = 1 }, *rbad;
	CHECK(ibv_post_recv(b, &rw, &rbad) == EINVAL, "post_recv on a QP with an SRQ: EINVAL");
	for (int i = 0; i < 2; i++) {
		snprintf(out, sizeof out, "message %d", i);
		struct ibv_sge s = { (uintptr_t)out, 16, omr->lkey };
		struct ibv_send_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		CHECK(ibv_post_send(a, &w, &bad) == 0, "post_send");
		int got_recv = 0, got_send = 0;
		while (!got_recv || !got_send) {
			struct ibv_wc wc = wait_wc(cq);
			CHECK(wc.status == IBV_WC_SUCCESS, "wc status %d", wc.status);
			if (wc.opcode == IBV_WC_RECV) {
				CHECK(wc.wr_id == 100 + (uint64_t)i && wc.qp_num == b->qp_num, "SRQ receive order");
				CHECK(!strcmp(buf[i], out), "payload");
				got_recv = 1;
			} else {
				got_send = 1;
			}
		}
	}
	puts("ok receives posted to the SRQ are taken in order by the attached QP");
	e = wait_async();
	CHECK(e.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && e.element.srq == srq, "SRQ limit event");
	ibv_ack_async_event(&e);
	CHECK(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0, "limit disarmed after the event");
	puts("ok IBV_EVENT_SRQ_LIMIT_REACHED once the SRQ drops below its limit; the limit disarms");

	struct ibv_sge s = { (uintptr_t)out, 16, 0xdeadbeef };
	struct ibv_send_wr w = { .wr_id = 9, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED }, *bad;
	CHECK(ibv_post_send(a, &w, &bad) == 0, "post_send");
	struct ibv_wc wc = wait_wc(cq);
	CHECK(wc.status == IBV_WC_LOC_PROT_ERR, "bad lkey: %d", wc.status);
	e = wait_async();
	CHECK(e.event_type == IBV_EVENT_QP_FATAL && e.element.qp == a, "QP fatal event");
	ibv_ack_async_event(&e);
	puts("ok IBV_EVENT_QP_FATAL when a QP fails");

	CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, "destroy qps");
	CHECK(ibv_destroy_srq(srq) == 0, "destroy srq");
	puts("ok all");
	return 0;
}
