/* The victim of tests/hardening/malicious_peer.py: one RC QP whose peer is a hostile process
 * that speaks the soft provider's socket and ring protocols itself.
 *
 * The registered region sits inside a larger buffer, between two canary pages, and a canary
 * global lies elsewhere. Protocol on stdin/stdout, one line each:
 *   victim prints  "victim qpn=Q rkey=K addr=A len=L canary=C"
 *   driver sends   "dest D"   -> QP to RTR/RTS towards D, four 64-byte receives at the end of
 *                                the region; prints "ready"
 *   driver may send "read N"  -> posts an N-byte RDMA READ (N <= 64) towards the peer into the
 *                                last N bytes of the region; prints "posted"
 *   driver sends   "check"    -> prints "state=S events=E canaries=ok|BAD honest=ok|FAIL" and
 *                                exits 0 if canaries and the honest pair are fine.
 * alarm() bounds the whole run: a progress thread stuck under the QP lock makes the state query
 * block, and the victim dies instead of answering. */
#include <poll.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

#define PAGE 4096
#define REGION (4 * PAGE)
#define CANARY 0xa5

static unsigned char buffer[PAGE + REGION + PAGE] __attribute__((aligned(PAGE)));
static unsigned char canary_global[2 * PAGE] __attribute__((aligned(PAGE)));
static struct ibv_context *ctx;
static struct ibv_pd *pd;

static int all(const unsigned char *p, size_t n, unsigned char v)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != v)
			return 0;
	return 1;
}

static struct ibv_qp *make_qp(struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
					       .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp, "create_qp");
	struct ibv_qp_attr s = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						    IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC };
	CHECK(ibv_modify_qp(qp, &s, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	return qp;
}

static void to_rts(struct ibv_qp *qp, uint32_t dest)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RTR, .path_mtu = IBV_MTU_1024, .dest_qp_num = dest,
				 .max_dest_rd_atomic = 4, .min_rnr_timer = 1 };
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

/* Waits for n successful completions on cq; 0 on an error completion or after ~5 s. */
static int wait_ok(struct ibv_cq *cq, int n)
{
	for (int spins = 0; n > 0 && spins < 5000; spins++) {
		struct ibv_wc wc;
		int got = ibv_poll_cq(cq, 1, &wc);
		if (got < 0 || (got == 1 && wc.status != IBV_WC_SUCCESS))
			return 0;
		if (got == 1) {
			n--;
			continue;
		}
		usleep(1000);
	}
	return n == 0;
}

/* Two fresh QPs of this process move a SEND and an RDMA WRITE: the provider still works. */
static int honest_pair(struct ibv_mr *mr, unsigned char *region)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_qp *a = make_qp(cq), *b = make_qp(cq);
	to_rts(a, b->qp_num);
	to_rts(b, a->qp_num);
	unsigned char *src = region, *dst = region + 256, *wdst = region + 512;
	memset(src, 0x3c, 64);
	memset(dst, 0, 64);
	memset(wdst, 0, 64);
	struct ibv_sge rs = { (uintptr_t)dst, 64, mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b, &rw, &rbad) == 0, "post_recv");
	struct ibv_sge ss = { (uintptr_t)src, 64, mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &ss, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	CHECK(ibv_post_send(a, &sw, &sbad) == 0, "post_send");
	int ok = wait_ok(cq, 2) && all(dst, 64, 0x3c);
	sw.wr_id = 3;
	sw.opcode = IBV_WR_RDMA_WRITE;
	sw.wr.rdma.remote_addr = (uintptr_t)wdst;
	sw.wr.rdma.rkey = mr->rkey;
	CHECK(ibv_post_send(a, &sw, &sbad) == 0, "post_send write");
	ok = ok && wait_ok(cq, 1) && all(wdst, 64, 0x3c);
	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq);
	return ok;
}

static const char *event_name(enum ibv_event_type t)
{
	switch (t) {
	case IBV_EVENT_QP_FATAL: return "QP_FATAL";
	case IBV_EVENT_QP_REQ_ERR: return "QP_REQ_ERR";
	case IBV_EVENT_QP_ACCESS_ERR: return "QP_ACCESS_ERR";
	default: return "OTHER";
	}
}

int main(void)
{
	alarm(60);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int n;
	struct ibv_device **devs = ibv_get_device_list(&n);
	CHECK(devs && n > 0, "no device");
	ctx = ibv_open_device(devs[0]);
	CHECK(ctx, "open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	memset(buffer, CANARY, sizeof buffer);
	memset(canary_global, CANARY, sizeof canary_global);
	unsigned char *region = buffer + PAGE;
	memset(region, 0, REGION);
	struct ibv_mr *mr = ibv_reg_mr(pd, region, REGION, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "reg_mr");
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_qp *qp = make_qp(cq);
	printf("victim qpn=%u rkey=%u addr=%llu len=%u canary=%llu\n", qp->qp_num, mr->rkey,
	       (unsigned long long)(uintptr_t)region, REGION, (unsigned long long)(uintptr_t)canary_global);

	char line[128];
	unsigned dest;
	CHECK(fgets(line, sizeof line, stdin) && sscanf(line, "dest %u", &dest) == 1, "expected dest");
	to_rts(qp, dest);
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { (uintptr_t)(region + REGION - 64 * (i + 1)), 64, mr->lkey };
		struct ibv_recv_wr w = { .wr_id = 100 + i, .sg_list = &s, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(qp, &w, &bad) == 0, "post_recv");
	}
	puts("ready");

	CHECK(fgets(line, sizeof line, stdin), "expected a command");
	unsigned len;
	if (sscanf(line, "read %u", &len) == 1) {
		/* An RDMA READ towards the attacker into the last len bytes of the region. */
		CHECK(len <= 64, "read length");
		struct ibv_sge s = { (uintptr_t)(region + REGION - len), len, mr->lkey };
		struct ibv_send_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
					 .send_flags = IBV_SEND_SIGNALED }, *bad;
		w.wr.rdma.remote_addr = 0x10000;
		w.wr.rdma.rkey = 0x1234;
		CHECK(ibv_post_send(qp, &w, &bad) == 0, "post read");
		puts("posted");
		CHECK(fgets(line, sizeof line, stdin), "expected check");
	}
	CHECK(!strncmp(line, "check", 5), "expected check");
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	CHECK(ibv_query_qp(qp, &attr, IBV_QP_STATE, &init) == 0, "query_qp"); /* blocks if the lock is held */
	char events[256] = "";
	int fl = fcntl(ctx->async_fd, F_GETFL);
	fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_async_event e;
	while (ibv_get_async_event(ctx, &e) == 0) {
		if (e.element.qp == qp) {
			strncat(events, event_name(e.event_type), sizeof events - strlen(events) - 2);
			strcat(events, ",");
		}
		ibv_ack_async_event(&e);
	}
	int canaries = all(buffer, PAGE, CANARY) && all(buffer + PAGE + REGION, PAGE, CANARY) &&
		       all(canary_global, sizeof canary_global, CANARY);
	int honest = honest_pair(mr, region);
	printf("state=%d events=%s canaries=%s honest=%s\n", attr.qp_state, events[0] ? events : "none",
	       canaries ? "ok" : "BAD", honest ? "ok" : "FAIL");
	return canaries && honest ? 0 : 1;
}
