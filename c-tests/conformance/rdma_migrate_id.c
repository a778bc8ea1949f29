/* rdma_migrate_id(3): moves an id (and its pending events) to another channel, or to
 * synchronous operation with NULL; blocks while the id has unacked events on the old channel. */
#include "cmhelp.h"

struct mig {
	struct rdma_cm_id *id;
	struct rdma_event_channel *to;
	int rc;
	volatile int done;
};

static void *mig_thread(void *arg)
{
	struct mig *m = arg;
	m->rc = rdma_migrate_id(m->id, m->to);
	__atomic_store_n(&m->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_migrate_id", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *a = rdma_create_event_channel(), *b = rdma_create_event_channel();
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(0));

	/* RETURN VALUE 0; DESCRIPTION/NOTES: the id's pending event moves to the new channel. */
	struct rdma_cm_id *id = NULL;
	int ok = rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0;
	h_sleep_ms(100); /* let ADDR_RESOLVED queue up on a */
	errno = 0;
	int rc = ok ? rdma_migrate_id(id, b) : -2;
	CLAUSE("RET-0", rc == 0 && id->channel == b, "returned %d (%s), id->channel %s", rc, conf_errname(errno),
	       id && id->channel == b ? "is the new one" : "unchanged");
	int quiet_a = h_quiet(a, 50, err, sizeof err);
	struct rdma_cm_event *ev = rc == 0 ? h_get(b, H_WAIT_MS) : NULL;
	CLAUSE("NOTE-PENDING-MOVED", rc == 0 && quiet_a && ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id,
	       "old channel %s; new channel: %s", quiet_a ? "quiet" : err, ev ? rdma_event_str(ev->event) : "(none)");
	if (ev)
		rdma_ack_cm_event(ev);
	/* Later events of the id are reported on the new channel. */
	int r = rc == 0 ? rdma_resolve_route(id, 2000) : -2;
	ev = r == 0 ? h_get(b, H_WAIT_MS) : NULL;
	CLAUSE("DESC-NEW-CHANNEL", ev && ev->event == RDMA_CM_EVENT_ROUTE_RESOLVED && h_quiet(a, 50, err, sizeof err),
	       "ROUTE_RESOLVED on the new channel: %s", ev ? rdma_event_str(ev->event) : "(none)");
	if (ev)
		rdma_ack_cm_event(ev);
	if (id)
		rdma_destroy_id(id);

	/* NOTES: migration blocks while there are unacked events of the id on the current channel. */
	id = NULL;
	ok = rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0 && rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0;
	ev = ok ? h_get(a, H_WAIT_MS) : NULL;
	if (!ev) {
		CLAUSE_BLOCKED("NOTE-BLOCKS", "no event to hold");
	} else {
		struct mig m = { .id = id, .to = b };
		pthread_t th;
		pthread_create(&th, NULL, mig_thread, &m);
		h_sleep_ms(H_QUIET_MS);
		int early = __atomic_load_n(&m.done, __ATOMIC_SEQ_CST);
		rdma_ack_cm_event(ev);
		long long end = h_now_ms() + H_WAIT_MS;
		while (!__atomic_load_n(&m.done, __ATOMIC_SEQ_CST) && h_now_ms() < end)
			h_sleep_ms(2);
		int late = __atomic_load_n(&m.done, __ATOMIC_SEQ_CST);
		if (late)
			pthread_join(th, NULL);
		else
			pthread_detach(th);
		CLAUSE("NOTE-BLOCKS", !early && late && m.rc == 0, "returned before the ack: %d, after: %d (rc %d)",
		       early, late, m.rc);
		if (late)
			rdma_destroy_id(id);
	}

	/* NOTES: a NULL channel makes the id synchronous: calls block, the event is in id->event. */
	id = NULL;
	ok = rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0;
	rc = ok ? rdma_migrate_id(id, NULL) : -2;
	r = rc == 0 ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -2;
	CLAUSE("NOTE-SYNC", rc == 0 && r == 0 && id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "migrate(NULL) %d (%s), resolve %d, id->event %s", rc, conf_errname(errno), r,
	       id && id->event ? rdma_event_str(id->event->event) : "(none)");
	/* RETURN VALUE -1/errno: an id that is already synchronous cannot migrate to NULL. */
	struct rdma_cm_id *s = NULL;
	ok = rdma_create_id(NULL, &s, NULL, RDMA_PS_TCP) == 0;
	errno = 0;
	int r2 = ok ? rdma_migrate_id(s, NULL) : -2;
	CLAUSE("ERR-SYNC-NULL", r2 == -1 && errno == EINVAL, "sync id to NULL: %d (%s)", r2, conf_errname(errno));
	if (s)
		rdma_destroy_id(s);
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	return conf_end();
}
