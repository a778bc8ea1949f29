/* Async connection manager and RC data path in one process: event channels (poll, O_NONBLOCK),
 * listen / connect / accept / reject with private data, SEND/RECV across ring segments, inline
 * sends, exactly one DISCONNECTED per side, receives flushed with a CQ event on disconnect.
 * Exit 0 and "ok" lines on success; "FAIL" and exit 1 otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d %s)\n", errno, strerror(errno)); exit(1); } } while (0)

static struct rdma_cm_event *wait_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1, "no event (wanted %s)", rdma_event_str(want));
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(ch, &e) == 0, "rdma_get_cm_event");
	CHECK(e->event == want, "got %s (status %d), wanted %s", rdma_event_str(e->event), e->status,
	      rdma_event_str(want));
	return e;
}

static void expect_no_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	int r = poll(&p, 1, ms);
	if (r == 1) {
		struct rdma_cm_event *e;
		rdma_get_cm_event(ch, &e);
		CHECK(0, "unexpected event %s", rdma_event_str(e->event));
	}
}

static struct ibv_wc wait_wc(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 5000000; i++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n == 1)
			return wc;
	}
	CHECK(0, "no completion");
	return wc;
}

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = 0; /* inline sends beyond max_inline_data must still work */
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 1;
	return a;
}

static void connect_to(struct rdma_cm_id *id, struct rdma_event_channel *ch, uint16_t port_be)
{
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = port_be };
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED));
	CHECK(id->verbs != NULL && id->port_num == 1, "id not bound to a device");
	CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route");
	rdma_ack_cm_event(wait_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED));
	CHECK(id->route.path_rec != NULL && id->route.num_paths == 1, "route has no path record");
}

static volatile int getter_returned;

static void *block_in_get(void *arg)
{
	struct rdma_cm_event *e;
	rdma_get_cm_event(arg, &e);
	getter_returned = 1;
	return NULL;
}

int main(void)
{
	struct rdma_event_channel *sch = rdma_create_event_channel();
	struct rdma_event_channel *cch = rdma_create_event_channel();
	CHECK(sch && cch, "create_event_channel");
	CHECK(fcntl(cch->fd, F_SETFL, fcntl(cch->fd, F_GETFL) | O_NONBLOCK) == 0, "fcntl");
	struct rdma_cm_event *e;
	CHECK(rdma_get_cm_event(cch, &e) == -1 && errno == EAGAIN, "non-blocking channel must give EAGAIN");
	puts("ok O_NONBLOCK channel gives EAGAIN");

	struct rdma_cm_id *listener, *cid, *sid;
	CHECK(rdma_create_id(sch, &listener, (void *)0x1234, RDMA_PS_TCP) == 0, "create_id");
	struct sockaddr_in any = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.0.1", &any.sin_addr);
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&any) == 0, "bind");
	uint16_t port = rdma_get_src_port(listener);
	CHECK(port != 0, "ephemeral port");
	struct sockaddr_in *la = (struct sockaddr_in *)rdma_get_local_addr(listener);
	CHECK(la->sin_port == port, "rdma_get_src_port must be network order");
	CHECK(rdma_listen(listener, 4) == 0, "listen");
	puts("ok bind ephemeral port and listen");

	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "create_id");
	connect_to(cid, cch, port);
	struct ibv_qp_init_attr ca = qp_attr();
	CHECK(rdma_create_qp(cid, NULL, &ca) == 0, "client create_qp");
	CHECK(cid->qp && cid->send_cq && cid->recv_cq && cid->send_cq_channel && cid->recv_cq_channel,
	      "rdma_create_qp must create CQs and channels");
	CHECK(cid->qp->state == IBV_QPS_INIT, "QP must be in INIT");
	puts("ok resolve addr/route, create_qp with rdma_cm CQs");

	struct rdma_conn_param cp = { .private_data = "hello", .private_data_len = 6,
				      .responder_resources = 1, .initiator_depth = 1,
				      .retry_count = 7, .rnr_retry_count = 7 };
	CHECK(rdma_connect(cid, &cp) == 0, "connect");
	e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	CHECK(e->listen_id == listener && e->id != listener, "listen_id / new id");
	CHECK(e->param.conn.private_data_len >= 6 && !strcmp(e->param.conn.private_data, "hello"),
	      "REQ private data");
	sid = e->id;
	CHECK(sid->context == (void *)0x1234, "new id inherits the listener's context");
	CHECK(sid->verbs != NULL, "new id bound to the device");
	struct ibv_qp_init_attr sa = qp_attr();
	CHECK(rdma_create_qp(sid, NULL, &sa) == 0, "server create_qp");
	rdma_ack_cm_event(e);

	/* Server posts receives before accepting. */
	static char sbuf[4][16384], cbuf[4][16384];
	struct ibv_mr *smr = ibv_reg_mr(sid->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *cmr = ibv_reg_mr(cid->pd, cbuf, sizeof cbuf, IBV_ACCESS_LOCAL_WRITE);
	CHECK(smr && cmr, "reg_mr");
	for (int i = 0; i < 3; i++) {
		struct ibv_sge sge = { (uintptr_t)sbuf[i], 16384, smr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(sid->qp, &wr, &bad) == 0, "post_recv");
	}
	struct rdma_conn_param ap = { .private_data = "world", .private_data_len = 6,
				      .responder_resources = 1, .initiator_depth = 1 };
	CHECK(rdma_accept(sid, &ap) == 0, "accept");
	e = wait_event(cch, RDMA_CM_EVENT_ESTABLISHED);
	CHECK(e->param.conn.private_data_len >= 6 && !strcmp(e->param.conn.private_data, "world"),
	      "REP private data");
	rdma_ack_cm_event(e);
	rdma_ack_cm_event(wait_event(sch, RDMA_CM_EVENT_ESTABLISHED));
	CHECK(cid->qp->state == IBV_QPS_RTS && sid->qp->state == IBV_QPS_RTS, "QPs in RTS");
	puts("ok connect/accept with private data both ways, ESTABLISHED on both sides");

	/* Client -> server: 10 bytes registered, 10000 bytes (several ring slots), 100 bytes inline
	 * from stack memory with mr == NULL on a QP created with max_inline_data 0. */
	size_t sizes[3] = { 10, 10000, 100 };
	for (int i = 0; i < 3; i++) {
		for (size_t j = 0; j < sizes[i]; j++)
			cbuf[i][j] = (char)(i * 31 + j * 7);
		char stackbuf[128];
		memcpy(stackbuf, cbuf[i], sizes[i] < 128 ? sizes[i] : 0);
		int inl = i == 2;
		struct ibv_sge sge = { inl ? (uintptr_t)stackbuf : (uintptr_t)cbuf[i], sizes[i], inl ? 0 : cmr->lkey };
		struct ibv_send_wr wr = { .wr_id = 200 + i, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = inl ? IBV_SEND_INLINE : 0 }, *bad;
		CHECK(ibv_post_send(cid->qp, &wr, &bad) == 0, "post_send %d", i);
		if (inl)
			memset(stackbuf, 0, sizeof stackbuf); /* inline data was copied at post time */
		struct ibv_wc wc = wait_wc(sid->recv_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 100 + (uint64_t)i && wc.opcode == IBV_WC_RECV &&
		      wc.byte_len == sizes[i] && wc.qp_num == sid->qp->qp_num && wc.src_qp == cid->qp->qp_num,
		      "recv wc %d: status %d wr_id %lu opcode %d len %u", i, wc.status, wc.wr_id, wc.opcode,
		      wc.byte_len);
		CHECK(!memcmp(sbuf[i], cbuf[i], sizes[i]), "payload %d differs", i);
		wc = wait_wc(cid->send_cq);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 200 + (uint64_t)i && wc.opcode == IBV_WC_SEND,
		      "send wc %d", i);
	}
	puts("ok SEND/RECV: exact bytes and completions (multi-segment, inline beyond max_inline_data)");

	/* Unregistered memory: error completion, not a crash, QP to ERR. Done on a second pair later;
	 * here check disconnect semantics first. Client posts two receives, arms its CQ, then
	 * disconnects: both receives flush with IBV_WC_WR_FLUSH_ERR and raise a CQ event. */
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { (uintptr_t)cbuf[3], 16, cmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 300 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_recv(cid->qp, &wr, &bad) == 0, "post_recv");
	}
	CHECK(ibv_req_notify_cq(cid->recv_cq, 0) == 0, "req_notify");
	CHECK(rdma_disconnect(cid) == 0, "client disconnect");
	CHECK(cid->qp->state == IBV_QPS_ERR, "disconnect moves the QP to ERR");
	struct pollfd p = { .fd = cid->recv_cq_channel->fd, .events = POLLIN };
	CHECK(poll(&p, 1, 5000) == 1, "flush must raise a CQ event");
	struct ibv_cq *ecq;
	void *ectx;
	CHECK(ibv_get_cq_event(cid->recv_cq_channel, &ecq, &ectx) == 0 && ecq == cid->recv_cq && ectx == cid,
	      "get_cq_event (cq_context must be the id)");
	ibv_ack_cq_events(ecq, 1);
	for (int i = 0; i < 2; i++) {
		struct ibv_wc wc = wait_wc(cid->recv_cq);
		CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 300 + (uint64_t)i, "flush wc %d", i);
	}
	rdma_ack_cm_event(wait_event(sch, RDMA_CM_EVENT_DISCONNECTED));
	CHECK(rdma_disconnect(sid) == 0, "server disconnect after peer");
	rdma_ack_cm_event(wait_event(cch, RDMA_CM_EVENT_DISCONNECTED));
	expect_no_event(sch, 200);
	expect_no_event(cch, 200);
	puts("ok disconnect: QP to ERR, receives flushed with a CQ event, one DISCONNECTED per side");

	rdma_destroy_qp(cid);
	rdma_destroy_qp(sid);
	CHECK(rdma_destroy_id(cid) == 0 && rdma_destroy_id(sid) == 0, "destroy ids");

	/* Reject with private data. */
	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_TCP) == 0, "create_id");
	connect_to(cid, cch, port);
	ca = qp_attr();
	CHECK(rdma_create_qp(cid, NULL, &ca) == 0, "create_qp");
	CHECK(rdma_connect(cid, NULL) == 0, "connect (NULL param with a QP)");
	e = wait_event(sch, RDMA_CM_EVENT_CONNECT_REQUEST);
	sid = e->id;
	rdma_ack_cm_event(e);
	CHECK(rdma_reject(sid, "nope", 5) == 0, "reject");
	e = wait_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->status == 28 && e->param.conn.private_data_len >= 5 && !strcmp(e->param.conn.private_data, "nope"),
	      "REJECTED status %d", e->status);
	rdma_ack_cm_event(e);
	CHECK(rdma_destroy_id(sid) == 0, "destroy rejected id");
	rdma_destroy_qp(cid);
	CHECK(rdma_destroy_id(cid) == 0, "destroy");
	puts("ok reject: REJECTED with consumer reason 28 and private data");

	/* Same port, other port space: no listener there. */
	CHECK(rdma_create_id(cch, &cid, NULL, RDMA_PS_IB) == 0, "create_id PS_IB");
	connect_to(cid, cch, port);
	cp.qp_num = 0x123;
	CHECK(rdma_connect(cid, &cp) == 0, "connect");
	e = wait_event(cch, RDMA_CM_EVENT_REJECTED);
	CHECK(e->status == 8, "no listener: REJECTED status %d", e->status);
	rdma_ack_cm_event(e);
	CHECK(rdma_destroy_id(cid) == 0, "destroy");
	puts("ok port spaces are separate: no listener gives REJECTED");

	ibv_dereg_mr(smr);
	ibv_dereg_mr(cmr);
	CHECK(rdma_destroy_id(listener) == 0, "destroy listener");
	rdma_destroy_event_channel(sch);
	rdma_destroy_event_channel(cch);
	/* A thread blocked in rdma_get_cm_event stays blocked when the channel is destroyed under it,
	 * as with the kernel (rping's teardown relies on it), instead of returning an error. */
	struct rdma_event_channel *tch = rdma_create_event_channel();
	pthread_t t;
	CHECK(tch && pthread_create(&t, NULL, block_in_get, tch) == 0, "thread");
	usleep(100 * 1000);
	rdma_destroy_event_channel(tch);
	usleep(300 * 1000);
	CHECK(!getter_returned, "rdma_get_cm_event returned after its channel was destroyed");
	puts("ok a thread blocked in rdma_get_cm_event stays blocked when the channel is destroyed");

	puts("ok all");
	return 0;
}
