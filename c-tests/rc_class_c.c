/* Class C errors at the responder, as InfiniBand defines them: a request the responder refuses
 * (wrong rkey, out of bounds, access the QP or region does not grant, a SEND longer than the
 * receive) gets a NAK, so the requester completes it with the remote error, and then the
 * *responder* QP moves to ERR with an affiliated async event (IBV_EVENT_QP_ACCESS_ERR for access
 * violations, IBV_EVENT_QP_REQ_ERR for invalid requests): a peer cannot go on guessing rkeys on
 * the same connection. Includes a 1 MiB WRITE (longer than the ring), refused at its first
 * segment while the requester is still writing it. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static struct ibv_context *ctx;
static struct ibv_pd *pd;

struct end {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
};

static struct end make_end(int depth)
{
	struct end e;
	e.cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(e.cq, "create_cq");
	struct ibv_qp_init_attr a = { .send_cq = e.cq, .recv_cq = e.cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = depth, .max_recv_wr = 16, .max_send_sge = 2,
					       .max_recv_sge = 2 } };
	e.qp = ibv_create_qp(pd, &a);
	CHECK(e.qp, "create_qp");
	return e;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest, int access, int rnr_retry, int retry, int timeout,
		   int min_rnr)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = min_rnr;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = timeout;
	a.retry_cnt = retry;
	a.rnr_retry = rnr_retry;
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

static void pair(struct end *a, struct end *b, int access, int rnr_retry)
{
	*a = make_end(4);
	*b = make_end(4);
	to_rts(a->qp, b->qp->qp_num, access, rnr_retry, 7, 14, 1);
	to_rts(b->qp, a->qp->qp_num, access, rnr_retry, 7, 14, 1);
}

static struct ibv_wc wait_wc(struct ibv_cq *cq, int ms)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > ms)
			break;
	}
	wc.status = -1;
	return wc;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = op == IBV_WR_ATOMIC_CMP_AND_SWP ? 5 : 10;
		wr.wr.atomic.swap = 7;
	}
	if (op == IBV_WR_RDMA_WRITE_WITH_IMM)
		wr.imm_data = htonl(0xabcd);
	return ibv_post_send(qp, &wr, &bad);
}

static void post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
}

static enum ibv_qp_state qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;
	CHECK(ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) == 0, "query_qp");
	return a.qp_state;
}


static void expect_event(struct ibv_qp *qp, enum ibv_event_type type)
{
	struct ibv_async_event e;
	CHECK(ibv_get_async_event(ctx, &e) == 0, "get_async_event");
	CHECK(e.event_type == type && e.element.qp == qp, "event %s on %s, expected %s on the responder",
	      ibv_event_type_str(e.event_type), e.element.qp == qp ? "the responder" : "another QP",
	      ibv_event_type_str(type));
	ibv_ack_async_event(&e);
}

/* One refused request: the requester's status, then both QPs in ERR and the responder's event
 * (the requester's own QP_FATAL comes after). */
static void refused(struct end *a, struct end *b, enum ibv_wc_status status, enum ibv_event_type ev,
		    const char *what)
{
	struct ibv_wc wc = wait_wc(a->cq, 5000);
	CHECK(wc.status == status && wc.wr_id == 1, "%s: status %s", what, ibv_wc_status_str(wc.status));
	CHECK(qp_state(b->qp) == IBV_QPS_ERR, "%s: responder QP still in state %d", what, qp_state(b->qp));
	CHECK(qp_state(a->qp) == IBV_QPS_ERR, "%s: requester QP in state %d", what, qp_state(a->qp));
	expect_event(b->qp, ev);
	struct ibv_async_event e;
	CHECK(ibv_get_async_event(ctx, &e) == 0 && e.element.qp == a->qp, "requester event");
	ibv_ack_async_event(&e);
	printf("ok %s: %s at the requester, responder in ERR with %s\n", what, ibv_wc_status_str(status),
	       ibv_event_type_str(ev));
	ibv_destroy_qp(a->qp);
	ibv_destroy_qp(b->qp);
}

int main(void)
{
	alarm(60);
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	CHECK(devs && n > 0, "no device");
	ctx = ibv_open_device(devs[0]);
	CHECK(ctx, "open_device");
	ibv_free_device_list(devs);
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	size_t big = 1 << 20;
	char *local = calloc(1, big), *remote = calloc(1, big), *ro = calloc(1, 4096);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, big, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote, big, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, 4096, 0);
	CHECK(lmr && rmr && romr, "reg_mr");
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	struct end a, b;

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 64, lmr->lkey, (uintptr_t)remote, rmr->rkey ^ 0x5a5a, 1) == 0,
	      "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "WRITE with a wrong rkey");

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, big, lmr->lkey, (uintptr_t)remote, rmr->rkey ^ 0x5a5a, 1) == 0,
	      "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "1 MiB WRITE with a wrong rkey");

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_READ, local, 64, lmr->lkey, (uintptr_t)ro, romr->rkey, 1) == 0, "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "READ of a region without remote read");

	pair(&a, &b, IBV_ACCESS_LOCAL_WRITE, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 64, lmr->lkey, (uintptr_t)remote, rmr->rkey, 1) == 0, "post");
	refused(&a, &b, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR, "WRITE to a QP without remote write");

	pair(&a, &b, all, 7);
	struct ibv_sge rs = { (uintptr_t)remote, 16, rmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b.qp, &rw, &rbad) == 0, "post_recv");
	CHECK(post(a.qp, IBV_WR_SEND, local, 64, lmr->lkey, 0, 0, 1) == 0, "post");
	struct ibv_wc wc = wait_wc(b.cq, 5000);
	CHECK(wc.status == IBV_WC_LOC_LEN_ERR && wc.wr_id == 9, "receive: %s", ibv_wc_status_str(wc.status));
	refused(&a, &b, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR, "SEND longer than the receive");
	puts("ok all");
	return 0;
}
