/* rdma_migrate_id on synchronous ids (issue 9 item 7): an id created with a NULL channel, or by
 * rdma_create_ep, holds the event of its last call in id->event. librdmacm acknowledges that
 * event before moving the id, so the call returns at once; later events come on the new channel
 * and the id can still connect. A listener in a thread of this process (127.0.0.1, ephemeral
 * port) accepts. alarm(30) turns a hang into a failure.
 * Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static const char *step = "setup";

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL migrate_sync: no progress within 30 s in: ";
	if (write(2, m, sizeof m - 1) < 0 || write(2, step, strlen(step)) < 0 || write(2, "\n", 1) < 0) {
	}
	_exit(1);
}

static struct rdma_event_channel *sch;
static struct rdma_cm_id *listener;
static volatile int accepted;

static struct ibv_qp_init_attr qp_attr(void)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
					       .max_recv_sge = 1 } };
	return a;
}

/* Accepts every request with a QP; counts ESTABLISHED. */
static void *server(void *arg)
{
	(void)arg;
	struct rdma_cm_event *ev;
	while (rdma_get_cm_event(sch, &ev) == 0) {
		if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST) {
			struct ibv_qp_init_attr a = qp_attr();
			struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1 };
			CHECK(rdma_create_qp(ev->id, NULL, &a) == 0, "server create_qp: %s", strerror(errno));
			CHECK(rdma_accept(ev->id, &p) == 0, "accept: %s", strerror(errno));
		} else if (ev->event == RDMA_CM_EVENT_ESTABLISHED) {
			__atomic_add_fetch(&accepted, 1, __ATOMIC_SEQ_CST);
		}
		rdma_ack_cm_event(ev);
	}
	return NULL;
}

static void expect(struct rdma_event_channel *ch, struct rdma_cm_id *id, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev;
	CHECK(rdma_get_cm_event(ch, &ev) == 0, "get_cm_event: %s", strerror(errno));
	CHECK(ev->event == want && ev->id == id && ev->status == 0, "%s (status %d), want %s",
	      rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	rdma_ack_cm_event(ev);
}

/* Migrates a sync id holding an event, then connects it on the new channel. */
static void migrate_and_connect(struct rdma_cm_id *id, const char *how, int route_done)
{
	CHECK(id->event != NULL, "%s: the sync call left no event in id->event", how);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	CHECK(ch, "create_event_channel");
	step = how;
	CHECK(rdma_migrate_id(id, ch) == 0, "%s: migrate_id: %s", how, strerror(errno));
	CHECK(id->channel == ch && id->event == NULL, "%s: after migrate: channel %s, event %p", how,
	      id->channel == ch ? "new" : "old", (void *)id->event);
	printf("ok %s: rdma_migrate_id returned 0 with id->event acknowledged\n", how);
	if (!route_done) {
		/* Asynchronous now: the call returns at once and the event comes on ch. */
		CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route: %s", strerror(errno));
		expect(ch, id, RDMA_CM_EVENT_ROUTE_RESOLVED);
		struct ibv_qp_init_attr a = qp_attr();
		CHECK(rdma_create_qp(id, NULL, &a) == 0, "create_qp: %s", strerror(errno));
	}
	int before = __atomic_load_n(&accepted, __ATOMIC_SEQ_CST);
	struct rdma_conn_param p = { .responder_resources = 1, .initiator_depth = 1, .retry_count = 5 };
	CHECK(rdma_connect(id, &p) == 0, "connect: %s", strerror(errno));
	expect(ch, id, RDMA_CM_EVENT_ESTABLISHED);
	while (__atomic_load_n(&accepted, __ATOMIC_SEQ_CST) == before)
		usleep(1000);
	printf("ok %s: later events on the new channel; connected and accepted\n", how);
	CHECK(rdma_disconnect(id) == 0, "disconnect: %s", strerror(errno));
	expect(ch, id, RDMA_CM_EVENT_DISCONNECTED);
	rdma_destroy_qp(id);
	CHECK(rdma_destroy_id(id) == 0, "destroy_id");
	rdma_destroy_event_channel(ch);
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	alarm(30);

	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	sch = rdma_create_event_channel();
	CHECK(sch, "create_event_channel");
	CHECK(rdma_create_id(sch, &listener, NULL, RDMA_PS_TCP) == 0, "create_id");
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&sin) == 0, "bind: %s", strerror(errno));
	CHECK(rdma_listen(listener, 8) == 0, "listen");
	sin.sin_port = rdma_get_src_port(listener);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, server, NULL) == 0, "thread");

	/* rdma_create_id with a NULL channel: rdma_resolve_addr blocks and leaves ADDR_RESOLVED in
	 * id->event. */
	step = "sync id";
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP) == 0, "create_id(NULL channel)");
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&sin, 2000) == 0, "resolve_addr: %s",
	      strerror(errno));
	migrate_and_connect(id, "rdma_create_id(NULL channel)", 0);

	/* rdma_create_ep: address and route resolved, ROUTE_RESOLVED in id->event, QP created. */
	step = "rdma_create_ep";
	char port[16];
	snprintf(port, sizeof port, "%u", ntohs(sin.sin_port));
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *rai;
	CHECK(rdma_getaddrinfo("127.0.0.1", port, &hints, &rai) == 0, "getaddrinfo");
	struct ibv_qp_init_attr a = qp_attr();
	CHECK(rdma_create_ep(&id, rai, NULL, &a) == 0, "create_ep: %s", strerror(errno));
	rdma_freeaddrinfo(rai);
	migrate_and_connect(id, "rdma_create_ep", 1);
	return 0;
}
