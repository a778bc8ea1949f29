/* c-tests/badinput: a connected pair of CM ids in one process (see cm_pair.h). */
#include "badinput.h"
#include "cm_pair.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

/* The next event on the channel, which must be `type` (for `id` when not NULL); acknowledged.
 * Returns the event's id, or NULL. */
static struct rdma_cm_id *expect_event(struct rdma_event_channel *ch,
				       enum rdma_cm_event_type type, struct rdma_cm_id *id)
{
	struct pollfd pfd = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	struct rdma_cm_id *got;

	if (poll(&pfd, 1, 5000) != 1) {
		printf("# cm_pair: no %s event within 5 s\n", rdma_event_str(type));
		return NULL;
	}
	if (rdma_get_cm_event(ch, &ev)) {
		printf("# cm_pair: rdma_get_cm_event: %s\n", strerror(errno));
		return NULL;
	}
	got = ev->id;
	if (ev->event != type || (id && got != id)) {
		printf("# cm_pair: got %s (status %d), expected %s\n", rdma_event_str(ev->event),
		       ev->status, rdma_event_str(type));
		rdma_ack_cm_event(ev);
		return NULL;
	}
	rdma_ack_cm_event(ev);
	return got;
}

static int create_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	return rdma_create_qp(id, NULL, &a);
}

int cm_pair_connect(struct cm_pair *p)
{
	struct sockaddr_in a;
	struct rdma_conn_param param;
	struct rdma_cm_id *first, *second;

	memset(p, 0, sizeof(*p));
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	memset(&param, 0, sizeof(param));
	param.responder_resources = 1;
	param.initiator_depth = 1;
	param.retry_count = 7;
	param.rnr_retry_count = 7;

	if (!(p->ch = rdma_create_event_channel()) ||
	    rdma_create_id(p->ch, &p->listener, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(p->listener, (struct sockaddr *)&a) || rdma_listen(p->listener, 4) ||
	    rdma_create_id(p->ch, &p->client, NULL, RDMA_PS_TCP)) {
		printf("# cm_pair: listener/client setup: %s\n", strerror(errno));
		return -1;
	}
	a.sin_port = rdma_get_src_port(p->listener);
	if (rdma_resolve_addr(p->client, NULL, (struct sockaddr *)&a, 2000) ||
	    !expect_event(p->ch, RDMA_CM_EVENT_ADDR_RESOLVED, p->client) ||
	    rdma_resolve_route(p->client, 2000) ||
	    !expect_event(p->ch, RDMA_CM_EVENT_ROUTE_RESOLVED, p->client) || create_qp(p->client) ||
	    rdma_connect(p->client, &param)) {
		printf("# cm_pair: client resolve/connect: %s\n", strerror(errno));
		return -1;
	}
	if (!(p->server = expect_event(p->ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL)) ||
	    create_qp(p->server) || rdma_accept(p->server, &param)) {
		printf("# cm_pair: server accept: %s\n", strerror(errno));
		return -1;
	}
	/* Both sides report ESTABLISHED, in either order. */
	if (!(first = expect_event(p->ch, RDMA_CM_EVENT_ESTABLISHED, NULL)) ||
	    !(second = expect_event(p->ch, RDMA_CM_EVENT_ESTABLISHED, NULL)) || first == second ||
	    (first != p->client && first != p->server) ||
	    (second != p->client && second != p->server)) {
		printf("# cm_pair: not established\n");
		return -1;
	}
	if (p->client->qp->state != IBV_QPS_RTS || p->server->qp->state != IBV_QPS_RTS) {
		printf("# cm_pair: QPs not in RTS (%d, %d)\n", p->client->qp->state,
		       p->server->qp->state);
		return -1;
	}
	return 0;
}
