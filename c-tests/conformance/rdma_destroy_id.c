/* rdma_destroy_id(3): returns 0, cancels outstanding operations (their events never arrive),
 * waits for reported events to be acknowledged, releases the id's address. */
#include "cmhelp.h"

#include <poll.h>

struct destroyer {
	struct rdma_cm_id *id;
	volatile int done;
	int rc;
};

static void *destroy_thread(void *arg)
{
	struct destroyer *d = arg;
	d->rc = rdma_destroy_id(d->id);
	__atomic_store_n(&d->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_destroy_id", argc, argv);
	char err[512] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst, own;
	h_sin(&dst, "127.0.0.1", conf_port(0));
	h_sin(&own, "127.0.0.1", conf_port(1));

	/* RETURN VALUE: 0 on success. */
	struct rdma_cm_id *id = NULL;
	int rc = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	errno = 0;
	int d = rc == 0 ? rdma_destroy_id(id) : -2;
	CLAUSE("RET-0", d == 0, "returned %d (%s)", d, conf_errname(errno));

	/* DESCRIPTION: outstanding asynchronous operations are cancelled: an id destroyed right
	 * after rdma_resolve_addr gets no event, and destroying it does not wait for one. */
	id = NULL;
	rc = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	int r = rc == 0 ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -1;
	long long t0 = h_now_ms();
	d = r == 0 ? rdma_destroy_id(id) : -2;
	long long took = h_now_ms() - t0;
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	int readable = poll(&pfd, 1, H_QUIET_MS);
	int quiet = h_quiet(ch, 10, err, sizeof err);
	CLAUSE("DESC-CANCEL", r == 0 && d == 0 && took < H_NOBLOCK_MS && quiet && readable == 0,
	       "resolve %d, destroy %d after %lld ms; afterwards the channel fd %s and %s", r, d,
	       took, readable ? "signals an event" : "is quiet",
	       quiet ? "no event can be fetched" : err);

	/* NOTES: events reported for the id must be acked: destroy blocks until they are. */
	id = NULL;
	rc = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	r = rc == 0 ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -1;
	struct rdma_cm_event *ev = r == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	if (!ev) {
		CLAUSE_BLOCKED("NOTE-ACK", "no ADDR_RESOLVED event to hold");
	} else {
		struct destroyer dd = { .id = id };
		pthread_t th;
		pthread_create(&th, NULL, destroy_thread, &dd);
		h_sleep_ms(H_QUIET_MS);
		int early = __atomic_load_n(&dd.done, __ATOMIC_SEQ_CST);
		rdma_ack_cm_event(ev);
		long long t1 = h_now_ms();
		while (!__atomic_load_n(&dd.done, __ATOMIC_SEQ_CST) && h_now_ms() - t1 < H_WAIT_MS)
			h_sleep_ms(2);
		int late = __atomic_load_n(&dd.done, __ATOMIC_SEQ_CST);
		if (late)
			pthread_join(th, NULL);
		CLAUSE("NOTE-ACK", !early && late && dd.rc == 0,
		       "destroy returned before the ack: %d; after the ack: %d (rc %d)", early, late, dd.rc);
		if (!late)
			pthread_detach(th);
	}

	/* DESCRIPTION: the identifier is released, with its address: the port can be bound again. */
	struct rdma_cm_id *a = NULL, *b = NULL;
	int ok = rdma_create_id(ch, &a, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_bind_addr(a, (struct sockaddr *)&own) == 0 && rdma_listen(a, 1) == 0;
	int d2 = ok ? rdma_destroy_id(a) : -2;
	errno = 0;
	int rb = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b, (struct sockaddr *)&own) : -2;
	CLAUSE("DESC-RELEASE-ADDR", ok && d2 == 0 && rb == 0,
	       "listener set up %d, destroyed %d, binding its port again returned %d (%s)", ok, d2, rb,
	       conf_errname(errno));
	if (b)
		rdma_destroy_id(b);

	/* A synchronous id still holding its last event (id->event) is destroyed without waiting
	 * for an ack the application cannot give. */
	struct rdma_cm_id *sid = NULL;
	rc = rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP);
	r = rc == 0 ? rdma_resolve_addr(sid, NULL, (struct sockaddr *)&dst, 2000) : -1;
	int holding = r == 0 && sid->event != NULL;
	t0 = h_now_ms();
	d = r == 0 ? rdma_destroy_id(sid) : -2;
	took = h_now_ms() - t0;
	CLAUSE("SYNC-HELD-EVENT", holding && d == 0 && took < H_NOBLOCK_MS,
	       "sync id holding its event %d; destroy returned %d after %lld ms", holding, d, took);

	rdma_destroy_event_channel(ch);
	return conf_end();
}
