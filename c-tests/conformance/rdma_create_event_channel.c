/* rdma_create_event_channel(3): a channel is a pointer backed by an ordinary file descriptor
 * that can be polled, selected and made non-blocking; events go to their id's channel only. */
#include "cmhelp.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/select.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_create_event_channel", argc, argv);
	char err[512] = "";

	errno = 0;
	struct rdma_event_channel *a = rdma_create_event_channel();
	CLAUSE("RET-PTR", a != NULL, "returned NULL (%s)", conf_errname(errno));
	struct rdma_event_channel *b = rdma_create_event_channel();
	if (!a || !b) {
		CLAUSE_BLOCKED("NOTE-FD", "no channels");
		CLAUSE_BLOCKED("NOTE-FD-DISTINCT", "no channels");
		CLAUSE_BLOCKED("NOTE-NONBLOCK", "no channels");
		CLAUSE_BLOCKED("NOTE-POLL", "no channels");
		CLAUSE_BLOCKED("NOTE-SELECT", "no channels");
		CLAUSE_BLOCKED("NOTE-PER-CHANNEL", "no channels");
		return conf_end();
	}

	/* NOTES: each channel is mapped to a file descriptor. */
	int fl = fcntl(a->fd, F_GETFL);
	CLAUSE("NOTE-FD", a->fd >= 0 && fl != -1, "channel fd %d, F_GETFL %d (%s)", a->fd, fl,
	       conf_errname(errno));
	CLAUSE("NOTE-FD-DISTINCT", a->fd != b->fd, "two channels share fd %d", a->fd);

	/* NOTES: the fd can be made non-blocking: then no pending event means -1/EAGAIN. */
	int ok = fcntl(a->fd, F_SETFL, fl | O_NONBLOCK) == 0;
	struct rdma_cm_event *ev = NULL;
	long long t0 = h_now_ms();
	errno = 0;
	int rc = ok ? rdma_get_cm_event(a, &ev) : 0;
	int saved = errno;
	long long took = h_now_ms() - t0;
	CLAUSE("NOTE-NONBLOCK", ok && rc == -1 && saved == EAGAIN && took < H_NOBLOCK_MS,
	       "fcntl ok %d; rdma_get_cm_event returned %d, errno %s after %lld ms", ok, rc,
	       conf_errname(saved), took);
	if (rc == 0 && ev)
		rdma_ack_cm_event(ev);
	fcntl(a->fd, F_SETFL, fl);

	/* NOTES: poll/select: not readable while nothing is pending, readable once an event is. */
	struct pollfd pfd = { .fd = a->fd, .events = POLLIN };
	int idle = poll(&pfd, 1, 0);
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(0));
	int started = rdma_create_id(a, &id, NULL, RDMA_PS_TCP) == 0 &&
		      rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0;
	pfd.revents = 0;
	int ready = started ? poll(&pfd, 1, H_WAIT_MS) : -1;
	CLAUSE("NOTE-POLL", started && idle == 0 && ready == 1 && (pfd.revents & POLLIN),
	       "resolve started %d; poll before the event %d, after %d (revents 0x%x)", started, idle,
	       ready, pfd.revents);
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(a->fd, &rs);
	struct timeval tv = { 2, 0 };
	int sel = select(a->fd + 1, &rs, NULL, NULL, &tv);
	CLAUSE("NOTE-SELECT", started && sel == 1 && FD_ISSET(a->fd, &rs),
	       "select returned %d with an event pending", sel);

	/* NOTES: events of an id are directed to its own channel: b stays quiet. */
	struct pollfd pb = { .fd = b->fd, .events = POLLIN };
	int other = poll(&pb, 1, H_QUIET_MS);
	ev = h_get(a, H_WAIT_MS);
	CLAUSE("NOTE-PER-CHANNEL",
	       other == 0 && ev && ev->id == id && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "other channel readable: %d; own channel event %s for %s id", other,
	       ev ? rdma_event_str(ev->event) : "(none)", ev && ev->id == id ? "this" : "another");
	if (ev)
		rdma_ack_cm_event(ev);
	(void)err;

	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(a);
	rdma_destroy_event_channel(b);
	return conf_end();
}
