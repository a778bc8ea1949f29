/* Verbs are thread-safe: several threads post to RC QPs that share one CQ, three threads poll
 * that CQ (ibv_poll_cq, and two with ibv_start_poll/ibv_next_poll/ibv_end_poll sessions), and a third arms it (ibv_req_notify_cq) and takes its events (ibv_get_cq_event +
 * ibv_ack_cq_events) in a loop, while two more threads create and destroy CQs on the same
 * completion channel (its refcnt moves from several threads). Every message must complete
 * exactly once on both sides. Built with ThreadSanitizer too (c-tests/tsan.py).
 * A deadlock (issue 9 item 1) becomes a failure through alarm(60).
 * Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

#define PAIRS 2
#define SENDERS 4 /* two per sending QP: concurrent posting to one QP too */
#define MSGS 3000 /* per sender */
#define RECV_DEPTH 256
#define POLLERS 3 /* one with ibv_poll_cq, two with poll sessions */

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_cq_ex *cqx; /* the same CQ */
static struct ibv_comp_channel *ch;
static struct ibv_qp *snd[PAIRS], *rcv[PAIRS];

static unsigned char sent[SENDERS][MSGS], got[SENDERS][MSGS];
static long polled, events;
static int done;

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL cq_threads: no progress within 60 s (deadlock)\n";
	if (write(2, m, sizeof m - 1) < 0) {
	}
	_exit(1);
}

static void to_rts(struct ibv_qp *qp, uint32_t dest)
{
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, "query_gid");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
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
	a.rnr_retry = 7; /* receives are reposted by the pollers: wait for them forever */
	a.max_rd_atomic = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 32, .max_recv_wr = RECV_DEPTH, .max_send_sge = 1,
					       .max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	CHECK(qp, "create_qp: %s", strerror(errno));
	return qp;
}

static void post_recv(struct ibv_qp *qp)
{
	struct ibv_recv_wr wr = { .wr_id = 0, .sg_list = NULL, .num_sge = 0 }, *bad;
	int r = ibv_post_recv(qp, &wr, &bad);
	CHECK(r == 0, "post_recv: %s", strerror(r));
}

static void *sender(void *arg)
{
	int t = (int)(intptr_t)arg;
	struct ibv_qp *qp = snd[t / 2];
	for (int i = 0; i < MSGS; i++) {
		struct ibv_send_wr wr = { .wr_id = ((uint64_t)t << 32) | (uint64_t)i, .num_sge = 0,
					  .opcode = IBV_WR_SEND_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
					  .imm_data = htonl(((uint32_t)t << 24) | (uint32_t)i) },
				   *bad;
		int r;
		/* A full send queue frees up as the pollers take completions. */
		while ((r = ibv_post_send(qp, &wr, &bad)) == ENOMEM)
			sched_yield();
		CHECK(r == 0, "post_send: %s", strerror(r));
	}
	return NULL;
}

/* One polled completion: counted exactly once; a receive is reposted. */
static void take(uint64_t wr_id, enum ibv_wc_status status, enum ibv_wc_opcode opcode, unsigned flags,
		 uint32_t imm_be, uint32_t qp_num)
{
	CHECK(status == IBV_WC_SUCCESS, "completion status %s", ibv_wc_status_str(status));
	if (opcode == IBV_WC_SEND) {
		uint32_t t = wr_id >> 32, i = (uint32_t)wr_id;
		CHECK(t < SENDERS && i < MSGS, "send wr_id %llx", (unsigned long long)wr_id);
		CHECK(__atomic_add_fetch(&sent[t][i], 1, __ATOMIC_SEQ_CST) == 1, "send %u/%u completed twice", t,
		      i);
	} else {
		CHECK(opcode == IBV_WC_RECV && (flags & IBV_WC_WITH_IMM), "opcode %d, flags %x", opcode, flags);
		uint32_t v = ntohl(imm_be), t = v >> 24, i = v & 0xffffff;
		CHECK(t < SENDERS && i < MSGS, "imm %x", v);
		CHECK(__atomic_add_fetch(&got[t][i], 1, __ATOMIC_SEQ_CST) == 1, "message %u/%u received twice", t,
		      i);
		CHECK(qp_num == rcv[t / 2]->qp_num, "received on the wrong QP");
		post_recv(rcv[t / 2]);
	}
}

/* Poller 0 uses ibv_poll_cq; the others poll sessions (ibv_start_poll .. ibv_end_poll), which
 * must not see each other's completions. */
static void *poller(void *arg)
{
	int kind = (int)(intptr_t)arg;
	const long total = 2L * SENDERS * MSGS;
	struct ibv_wc wc[8];
	while (__atomic_load_n(&polled, __ATOMIC_SEQ_CST) < total) {
		int n = 0;
		if (kind == 0) {
			n = ibv_poll_cq(cq, 8, wc);
			CHECK(n >= 0, "poll_cq");
			for (int k = 0; k < n; k++)
				take(wc[k].wr_id, wc[k].status, wc[k].opcode, wc[k].wc_flags, wc[k].imm_data,
				     wc[k].qp_num);
		} else {
			struct ibv_poll_cq_attr pa = { .comp_mask = 0 };
			int r = ibv_start_poll(cqx, &pa);
			CHECK(r == 0 || r == ENOENT, "start_poll: %s", strerror(r));
			if (r == ENOENT)
				continue;
			do {
				take(cqx->wr_id, cqx->status, ibv_wc_read_opcode(cqx), ibv_wc_read_wc_flags(cqx),
				     ibv_wc_read_imm_data(cqx), ibv_wc_read_qp_num(cqx));
				n++;
			} while (n < 8 && (r = ibv_next_poll(cqx)) == 0);
			CHECK(r == 0 || r == ENOENT, "next_poll: %s", strerror(r));
			ibv_end_poll(cqx);
		}
		__atomic_add_fetch(&polled, n, __ATOMIC_SEQ_CST);
	}
	return NULL;
}

#define CHURN 200

/* CQs created and destroyed on the shared channel: its refcnt changes from two threads. */
static void *churn(void *arg)
{
	(void)arg;
	for (int i = 0; i < CHURN; i++) {
		struct ibv_cq *c = ibv_create_cq(ctx, 1, NULL, ch, 0);
		CHECK(c, "create_cq on the shared channel: %s", strerror(errno));
		CHECK(ibv_destroy_cq(c) == 0, "destroy_cq");
	}
	return NULL;
}

static void *notifier(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST)) {
		CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
		/* Wait for the event, or for the end of the run (the fd is non-blocking). */
		struct pollfd p = { .fd = ch->fd, .events = POLLIN };
		while (!__atomic_load_n(&done, __ATOMIC_SEQ_CST) && poll(&p, 1, 100) == 0) {
		}
		struct ibv_cq *ev_cq;
		void *ev_ctx;
		if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0) {
			CHECK(ev_cq == cq, "event for another CQ");
			ibv_ack_cq_events(cq, 1);
			events++;
		} else {
			CHECK(errno == EAGAIN, "get_cq_event: %s", strerror(errno));
		}
	}
	return NULL;
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	alarm(60);
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "device list");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	ch = ibv_create_comp_channel(ctx);
	CHECK(ch, "create_comp_channel");
	CHECK(fcntl(ch->fd, F_SETFL, fcntl(ch->fd, F_GETFL) | O_NONBLOCK) == 0, "O_NONBLOCK");
	struct ibv_cq_init_attr_ex ca = { .cqe = 4096, .channel = ch,
					  .wc_flags = IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM };
	cqx = ibv_create_cq_ex(ctx, &ca);
	CHECK(cqx, "create_cq_ex: %s", strerror(errno));
	cq = ibv_cq_ex_to_cq(cqx);
	for (int p = 0; p < PAIRS; p++) {
		snd[p] = make_qp();
		rcv[p] = make_qp();
		to_rts(snd[p], rcv[p]->qp_num);
		to_rts(rcv[p], snd[p]->qp_num);
		for (int i = 0; i < RECV_DEPTH; i++)
			post_recv(rcv[p]);
	}
	pthread_t s[SENDERS], pl[POLLERS], nt, cc[2];
	CHECK(pthread_create(&nt, NULL, notifier, NULL) == 0, "thread");
	for (int i = 0; i < 2; i++)
		CHECK(pthread_create(&cc[i], NULL, churn, NULL) == 0, "thread");
	for (int i = 0; i < POLLERS; i++)
		CHECK(pthread_create(&pl[i], NULL, poller, (void *)(intptr_t)i) == 0, "thread");
	for (int t = 0; t < SENDERS; t++)
		CHECK(pthread_create(&s[t], NULL, sender, (void *)(intptr_t)t) == 0, "thread");
	for (int t = 0; t < SENDERS; t++)
		pthread_join(s[t], NULL);
	for (int i = 0; i < POLLERS; i++)
		pthread_join(pl[i], NULL);
	for (int i = 0; i < 2; i++)
		pthread_join(cc[i], NULL);
	__atomic_store_n(&done, 1, __ATOMIC_SEQ_CST);
	pthread_join(nt, NULL);
	CHECK(ch->refcnt == 1, "channel refcnt %d with one CQ left on it", ch->refcnt);
	for (int t = 0; t < SENDERS; t++)
		for (int i = 0; i < MSGS; i++)
			CHECK(sent[t][i] == 1 && got[t][i] == 1, "message %d/%d: sent %d, received %d", t, i,
			      sent[t][i], got[t][i]);
	printf("ok %d messages from %d threads, each completed once on both sides; %ld CQ events\n",
	       SENDERS * MSGS, SENDERS, events);
	for (int p = 0; p < PAIRS; p++) {
		CHECK(ibv_destroy_qp(snd[p]) == 0 && ibv_destroy_qp(rcv[p]) == 0, "destroy_qp");
	}
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	CHECK(ibv_destroy_comp_channel(ch) == 0, "destroy_comp_channel");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
