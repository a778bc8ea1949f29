/* ibv_get_cq_event(3) (and ibv_ack_cq_events): waits for the next completion event of a
 * channel and names its CQ and context; every event must be acked, destroying a CQ waits for
 * the acks. */
#include "ibvhelp.h"

#include <fcntl.h>
#include <pthread.h>

struct destroyer {
	struct ibv_cq *cq;
	volatile int done;
	int rc;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *x = arg;
	x->rc = ibv_destroy_cq(x->cq);
	x->done = 1;
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_get_cq_event", argc, argv);
	struct ih_dev d;
	struct ibv_comp_channel *ch = NULL;
	struct ibv_cq *cq = NULL;
	struct ih_pair p;
	struct ih_buf b;
	int tag;
	memset(&p, 0, sizeof p);
	int up = ih_dev_open(&d) == 0 && (ch = ibv_create_comp_channel(d.ctx)) &&
		 (cq = ibv_create_cq(d.ctx, 16, &tag, ch, 0)) &&
		 ih_pair_make_on(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, cq, NULL) == 0 &&
		 ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0;
	if (!up) {
		const char *ids[] = { "RET-0", "DESC-CQ-CONTEXT", "DESC-WAITS", "ERR-NONBLOCK", "NOTE-DESTROY-WAITS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	struct ibv_wc wc;
	/* RETURN VALUE: 0 on success (an armed CQ got a completion). */
	ibv_req_notify_cq(cq, 0);
	ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, (uintptr_t)b.buf + 64, b.mr->rkey, 1);
	struct ibv_cq *evcq = NULL;
	void *evctx = NULL;
	int rc = ibv_get_cq_event(ch, &evcq, &evctx);
	CLAUSE("RET-0", rc == 0, "ibv_get_cq_event returned %d (%s)", rc, conf_errname(errno));
	/* DESCRIPTION: it names the CQ that got the event and that CQ's context. */
	CLAUSE("DESC-CQ-CONTEXT", rc == 0 && evcq == cq && evctx == &tag, "cq %p (want %p), context %p (want %p)",
	       (void *)evcq, (void *)cq, evctx, (void *)&tag);
	if (rc == 0)
		ibv_ack_cq_events(evcq, 1);
	ih_poll(cq, &wc, IH_WAIT_MS);
	/* DESCRIPTION: it waits for the next event: it returns only once a completion arrives. */
	ibv_req_notify_cq(cq, 0);
	long long t0 = ih_now_ms();
	/* Nothing completes for a while: no event is ready (the call would still be waiting). */
	int quiet = !ih_readable(ch->fd, IH_QUIET_MS);
	ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, (uintptr_t)b.buf + 64, b.mr->rkey, 2);
	rc = ibv_get_cq_event(ch, &evcq, &evctx);
	long long waited = ih_now_ms() - t0;
	CLAUSE("DESC-WAITS", quiet && rc == 0 && evcq == cq && waited >= IH_QUIET_MS,
	       "quiet before the completion: %d, then event %d after %lld ms", quiet, rc, waited);
	if (rc == 0)
		ibv_ack_cq_events(evcq, 1);
	ih_poll(cq, &wc, IH_WAIT_MS);
	/* RETURN VALUE: -1 on error: with the channel's fd non-blocking and no event, -1 (EAGAIN). */
	int fl = fcntl(ch->fd, F_GETFL);
	fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
	errno = 0;
	rc = ibv_get_cq_event(ch, &evcq, &evctx);
	int e = errno;
	fcntl(ch->fd, F_SETFL, fl);
	CLAUSE("ERR-NONBLOCK", rc == -1 && e == EAGAIN, "non-blocking, no event: %d (%s)", rc, conf_errname(e));
	/* NOTES: destroying a CQ waits until all its events are acked. */
	ibv_req_notify_cq(cq, 0);
	ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 8, b.mr->lkey, (uintptr_t)b.buf + 64, b.mr->rkey, 3);
	rc = ibv_get_cq_event(ch, &evcq, &evctx);
	ih_poll(cq, &wc, IH_WAIT_MS);
	ih_pair_destroy(&p); /* the QPs go; the CQ stays (its event not acked) */
	struct destroyer x = { .cq = cq };
	pthread_t th;
	int started = rc == 0 && pthread_create(&th, NULL, destroy_thread, &x) == 0;
	struct timespec t = { 0, IH_QUIET_MS * 1000000L };
	nanosleep(&t, NULL);
	int waiting = started && !x.done;
	if (rc == 0)
		ibv_ack_cq_events(evcq, 1);
	if (started)
		pthread_join(th, NULL);
	CLAUSE("NOTE-DESTROY-WAITS", waiting && x.done && x.rc == 0,
	       "destroy blocked while the event was unacked: %d; after the ack it returned %d", waiting, x.rc);
	if (!started)
		ibv_destroy_cq(cq);
	ih_buf_free(&b);
	ibv_destroy_comp_channel(ch);
	ih_dev_close(&d);
	return conf_end();
}
