/* rdma_get_request(3): on a synchronous listener, blocks until a connection request and
 * returns its new id, which holds the request event (until accept/reject/destroy) and a QP
 * when the listener has QP attributes; refused on asynchronous listeners. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

struct client {
	uint16_t port;
	int delay_ms;
	int rc;
	const char *data;
};

/* An active endpoint (rdma_create_ep, synchronous) that connects after delay_ms. */
static void *client_thread(void *arg)
{
	struct client *c = arg;
	h_sleep_ms(c->delay_ms);
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res = NULL;
	char port[16];
	snprintf(port, sizeof port, "%u", c->port);
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	c->rc = -1;
	if (rdma_getaddrinfo("127.0.0.1", port, &hints, &res) != 0)
		return NULL;
	if (rdma_create_ep(&id, res, NULL, &qa) == 0) {
		struct rdma_conn_param cp = { .private_data = c->data,
					      .private_data_len = (uint8_t)(strlen(c->data) + 1),
					      .retry_count = 7, .rnr_retry_count = 7 };
		c->rc = rdma_connect(id, &cp);
		if (c->rc == 0)
			rdma_disconnect(id);
		rdma_destroy_ep(id);
	}
	rdma_freeaddrinfo(res);
	return NULL;
}

static struct rdma_cm_id *passive_ep(uint16_t port, struct ibv_qp_init_attr *qa, char *err, size_t len)
{
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *res = NULL;
	char ps[16];
	snprintf(ps, sizeof ps, "%u", port);
	struct rdma_cm_id *l = NULL;
	int rc = rdma_getaddrinfo("127.0.0.1", ps, &hints, &res);
	if (rc != 0) {
		snprintf(err, len, "rdma_getaddrinfo: %d (%s)", rc, conf_errname(errno));
		return NULL;
	}
	if (rdma_create_ep(&l, res, NULL, qa) != 0 || rdma_listen(l, 4) != 0) {
		snprintf(err, len, "passive endpoint: %s", conf_errname(errno));
		l = NULL;
	}
	rdma_freeaddrinfo(res);
	return l;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_request", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);

	/* --- listener with QP attributes ----------------------------------------------------- */
	struct rdma_cm_id *l = passive_ep(conf_port(0), &qa, err, sizeof err);
	if (!l) {
		const char *ids[] = { "RET-0", "DESC-BLOCKS", "NOTE-EVENT-HELD", "NOTE-QP", "NOTE-EVENT-RELEASED" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(ids[i], err);
	} else {
		struct client c = { .port = conf_port(0), .delay_ms = H_QUIET_MS, .data = "hello listener" };
		pthread_t th;
		pthread_create(&th, NULL, client_thread, &c);
		long long t0 = h_now_ms();
		struct rdma_cm_id *id = NULL;
		errno = 0;
		int rc = rdma_get_request(l, &id);
		long long took = h_now_ms() - t0;
		CLAUSE("RET-0", rc == 0 && id && id != l, "returned %d (%s), id %p", rc, conf_errname(errno),
		       (void *)id);
		/* DESCRIPTION: blocks until a request arrives (the client waits before connecting). */
		CLAUSE("DESC-BLOCKS", rc == 0 && took >= H_QUIET_MS - 20, "returned after %lld ms; the request "
		       "was sent after %d ms", took, H_QUIET_MS);
		/* NOTES: the new id references the request's event until accept/reject/destroy. */
		struct rdma_cm_event *ev = id ? id->event : NULL;
		CLAUSE("NOTE-EVENT-HELD", ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->id == id &&
		       ev->listen_id == l && ev->param.conn.private_data &&
		       strcmp(ev->param.conn.private_data, "hello listener") == 0,
		       "id->event %s", ev ? rdma_event_str(ev->event) : "(none)");
		/* NOTES: QP attributes on the listening endpoint give the new id a QP. */
		CLAUSE("NOTE-QP", id && id->qp != NULL && id->qp->qp_type == IBV_QPT_RC,
		       "new id's QP %p", id ? (void *)id->qp : NULL);
		rc = id ? rdma_accept(id, NULL) : -2;
		ev = id ? id->event : NULL;
		CLAUSE("NOTE-EVENT-RELEASED", rc == 0 && (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST),
		       "accept %d; id->event afterwards %s", rc, ev ? rdma_event_str(ev->event) : "(none)");
		pthread_join(th, NULL);
		if (id) {
			rdma_disconnect(id); /* the client disconnected: this picks up DISCONNECTED */
			rdma_destroy_ep(id);
		}
		rdma_destroy_ep(l);
	}

	/* --- listener without QP attributes: no QP on the new id ------------------------------ */
	l = passive_ep(conf_port(1), NULL, err, sizeof err);
	if (!l) {
		CLAUSE_BLOCKED("NOTE-NO-QP", err);
	} else {
		struct client c = { .port = conf_port(1), .delay_ms = 0, .data = "x" };
		pthread_t th;
		pthread_create(&th, NULL, client_thread, &c);
		struct rdma_cm_id *id = NULL;
		int rc = rdma_get_request(l, &id);
		CLAUSE("NOTE-NO-QP", rc == 0 && id && id->qp == NULL, "get_request %d, QP %p", rc,
		       id ? (void *)id->qp : NULL);
		if (id)
			rdma_reject(id, NULL, 0);
		pthread_join(th, NULL);
		if (id)
			rdma_destroy_id(id);
		rdma_destroy_ep(l);
	}

	/* NOTES: only for synchronous listeners: an asynchronous one gives -1/EINVAL. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *al = NULL, *got = NULL;
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(2));
	int ok = rdma_create_id(ch, &al, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(al, (struct sockaddr *)&a) == 0 &&
		 rdma_listen(al, 4) == 0;
	errno = 0;
	int rc = ok ? rdma_get_request(al, &got) : -2;
	CLAUSE("NOTE-SYNC-ONLY", rc == -1 && errno == EINVAL, "on an asynchronous listener: %d (%s)", rc,
	       conf_errname(errno));
	if (al)
		rdma_destroy_id(al);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
