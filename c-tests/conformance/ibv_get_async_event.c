/* ibv_get_async_event(3) (and ibv_ack_async_event): waits for the context's next async event
 * (type and the element it concerns); every event is acked; destroying an object waits for
 * its events' acks; one waiting thread gets each event. */
#include "ibvhelp.h"

#include <fcntl.h>
#include <pthread.h>

static struct ih_dev d;

/* A responder QP in error: an RDMA WRITE with a wrong rkey from QP 0 makes QP 1 (the
 * responder) refuse it with an access error. */
static int provoke(struct ih_pair *p, struct ih_buf *b)
{
	if (ih_pair_make(&d, p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))
		return -1;
	if (ih_post_send(p->qp[0], IBV_WR_RDMA_WRITE, b->buf, 8, b->mr->lkey, (uintptr_t)b->buf + 64,
			 b->mr->rkey ^ 0x5a5a00, 1))
		return -1;
	struct ibv_wc wc;
	return ih_poll(p->cq[0], &wc, IH_WAIT_MS) == 1 ? 0 : -1;
}

/* An SRQ with 4 receives and a connected RC pair whose receiving QP uses it: each fire()
 * arms the limit at the number of receives posted and sends one message, so the count drops
 * below the limit: exactly one IBV_EVENT_SRQ_LIMIT_REACHED. */
struct srq_rig {
	struct ibv_srq *srq;
	struct ibv_cq *cq;
	struct ibv_qp *rq, *sq;
	struct ih_buf *b;
};

static int rig_make(struct srq_rig *r, struct ih_buf *b)
{
	memset(r, 0, sizeof *r);
	r->b = b;
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 16;
	sa.attr.max_sge = 1;
	r->srq = ibv_create_srq(d.pd, &sa);
	r->cq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0);
	if (!r->srq || !r->cq)
		return -1;
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, r->cq, 8);
	qa.srq = r->srq;
	r->rq = ibv_create_qp(d.pd, &qa);
	struct ibv_qp_init_attr sqa = ih_qp_attr(IBV_QPT_RC, r->cq, 8);
	r->sq = ibv_create_qp(d.pd, &sqa);
	if (!r->rq || !r->sq || ih_connect(&d, r->rq, r->sq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err) ||
	    ih_connect(&d, r->sq, r->rq->qp_num, IBV_ACCESS_LOCAL_WRITE, d.err, sizeof d.err))
		return -1;
	for (int i = 0; i < 4; i++) {
		struct ibv_sge sge = { (uintptr_t)b->buf + 512, 64, b->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(r->srq, &wr, &bad))
			return -1;
	}
	return 0;
}

static int rig_fire(struct srq_rig *r)
{
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	struct ibv_sge sge = { (uintptr_t)r->b->buf + 512, 64, r->b->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 50, .sg_list = &sge, .num_sge = 1 }, *bad;
	struct ibv_wc wc;
	if (ibv_modify_srq(r->srq, &lim, IBV_SRQ_LIMIT) ||
	    ih_post_send(r->sq, IBV_WR_SEND, r->b->buf, 8, r->b->mr->lkey, 0, 0, 9))
		return -1;
	ih_poll(r->cq, &wc, IH_WAIT_MS);
	ih_poll(r->cq, &wc, IH_WAIT_MS);
	/* Back to 4 receives for the next fire. */
	return ibv_post_srq_recv(r->srq, &wr, &bad);
}

static void rig_destroy(struct srq_rig *r)
{
	if (r->rq)
		ibv_destroy_qp(r->rq);
	if (r->sq)
		ibv_destroy_qp(r->sq);
	if (r->cq)
		ibv_destroy_cq(r->cq);
	if (r->srq)
		ibv_destroy_srq(r->srq);
}

/* Acks every event that arrives within ms; returns how many. */
static int drain_events(int ms)
{
	struct ibv_async_event ev;
	int n = 0;
	while (ih_readable(d.ctx->async_fd, ms) && ibv_get_async_event(d.ctx, &ev) == 0) {
		ibv_ack_async_event(&ev);
		n++;
	}
	return n;
}

struct waiter {
	volatile int got;
	struct ibv_async_event ev;
};

static void *wait_thread(void *arg)
{
	struct waiter *w = arg;
	if (ibv_get_async_event(d.ctx, &w->ev) == 0)
		w->got = 1;
	return NULL;
}

struct destroyer {
	struct ibv_qp *qp;
	volatile int done;
	int rc;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *x = arg;
	x->rc = ibv_destroy_qp(x->qp);
	x->done = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_get_async_event", argc, argv);
	struct ih_buf b;
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	/* NOTES (example): async_fd is a pollable descriptor: quiet with no event; non-blocking,
	 * ibv_get_async_event gives -1 (EAGAIN). */
	int fl = fcntl(d.ctx->async_fd, F_GETFL);
	fcntl(d.ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
	struct ibv_async_event ev;
	errno = 0;
	int rc = ibv_get_async_event(d.ctx, &ev);
	int e = errno;
	fcntl(d.ctx->async_fd, F_SETFL, fl);
	CLAUSE("ERR-NONBLOCK", rc == -1 && e == EAGAIN && !ih_readable(d.ctx->async_fd, 0),
	       "no event, non-blocking: %d (%s)", rc, conf_errname(e));
	/* RETURN VALUE: 0 and the event: a QP event names its QP (the responder that refused the
	 * access: IBV_EVENT_QP_ACCESS_ERR). */
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	int pr = provoke(&p, &b);
	int readable = 0;
	rc = -1;
	/* The requester may report its own error state too (IBV_EVENT_QP_FATAL): take the
	 * responder's event, ack the others. */
	while (pr == 0 && (readable = ih_readable(d.ctx->async_fd, IH_WAIT_MS)) &&
	       (rc = ibv_get_async_event(d.ctx, &ev)) == 0 && ev.element.qp != p.qp[1])
		ibv_ack_async_event(&ev);
	CLAUSE("RET-0", rc == 0, "provoked %d, async_fd readable %d, ibv_get_async_event %d", pr, readable, rc);
	CLAUSE("DESC-QP-EVENT", rc == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == p.qp[1],
	       "event %s for qp %p (responder %p)", rc == 0 ? ibv_event_type_str(ev.event_type) : "-",
	       rc == 0 ? (void *)ev.element.qp : NULL, (void *)p.qp[1]);
	/* NOTES: destroying the QP waits until its events are acked. */
	struct destroyer x = { .qp = p.qp[1] };
	pthread_t th;
	int started = rc == 0 && pthread_create(&th, NULL, destroy_thread, &x) == 0;
	struct timespec t = { 0, IH_QUIET_MS * 1000000L };
	nanosleep(&t, NULL);
	int waiting = started && !x.done;
	if (rc == 0)
		ibv_ack_async_event(&ev);
	if (started) {
		pthread_join(th, NULL);
		p.qp[1] = NULL;
	}
	CLAUSE("NOTE-DESTROY-WAITS", waiting && x.done && x.rc == 0,
	       "destroy waited for the ack: %d; then returned %d", waiting, x.rc);
	ih_pair_destroy(&p);
	drain_events(IH_QUIET_MS);
	/* An SRQ event names its SRQ: the limit is reached when the receives fall below it. */
	struct srq_rig r;
	int rig = rig_make(&r, &b) == 0;
	int srq_ok = 0;
	if (rig && rig_fire(&r) == 0 && ih_readable(d.ctx->async_fd, IH_WAIT_MS) && ibv_get_async_event(d.ctx, &ev) == 0) {
		srq_ok = ev.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ev.element.srq == r.srq;
		ibv_ack_async_event(&ev);
	}
	CLAUSE("DESC-SRQ-EVENT", srq_ok, "no IBV_EVENT_SRQ_LIMIT_REACHED for the SRQ (%s)", d.err);
	/* NOTES: with several threads waiting, one event goes to exactly one of them. */
	struct waiter w[2];
	memset(w, 0, sizeof w);
	pthread_t wt[2];
	int ws = rig && pthread_create(&wt[0], NULL, wait_thread, &w[0]) == 0 &&
		 pthread_create(&wt[1], NULL, wait_thread, &w[1]) == 0;
	nanosleep(&t, NULL);
	if (ws)
		rig_fire(&r);
	long long end = ih_now_ms() + IH_WAIT_MS;
	while (!w[0].got && !w[1].got && ih_now_ms() < end)
		nanosleep(&(struct timespec){ 0, 1000000 }, NULL);
	nanosleep(&t, NULL);
	int one = (w[0].got + w[1].got) == 1;
	int first = w[0].got ? 0 : 1;
	if (w[first].got)
		ibv_ack_async_event(&w[first].ev);
	/* Release the other waiter with a second event. */
	if (ws) {
		rig_fire(&r);
		pthread_join(wt[0], NULL);
		pthread_join(wt[1], NULL);
	}
	if (w[1 - first].got)
		ibv_ack_async_event(&w[1 - first].ev);
	CLAUSE("NOTE-ONE-THREAD", ws && one, "threads that got the first event: %d + %d", w[0].got, w[1].got);
	rig_destroy(&r);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
