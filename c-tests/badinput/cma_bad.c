/*
 * c-tests/badinput/cma_bad.c: every librdmacm connection-manager function librdmashim exports
 * (<rdma/rdma_cma.h>, plus rdma_create_srq/_ex and rdma_destroy_srq, which rdma-core declares in
 * <rdma/rdma_verbs.h>), called with NULL pointers, destroyed and foreign objects, and in the
 * wrong state.
 *
 * Conventions (man pages of rdma-core 44): 0 / -1 with errno; rdma_create_event_channel and
 * rdma_get_devices return NULL with errno; rdma_get_src_port / rdma_get_dst_port return 0 when
 * there is no port; rdma_getaddrinfo returns 0, -1 with errno, or an EAI_* code; void functions
 * only have to return.
 *
 * Every id is in the TCP port space on the loopback address; nothing here connects to a peer.
 */
#include "badinput.h"
#include "cm_pair.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

/* Objects the library never handed out. */
static struct rdma_event_channel foreign_channel;
static struct rdma_cm_id foreign_id;
static struct rdma_cm_event foreign_event;

/* --- fixtures --------------------------------------------------------------------------- */

static struct sockaddr_in loopback(uint16_t port)
{
	struct sockaddr_in a;

	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_port = htons(port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return a;
}

/* A port nobody listens on (nothing here connects). */
#define NO_LISTENER_PORT 9

/* An id on `ch` (NULL: a synchronous id). */
static struct rdma_cm_id *new_id(struct rdma_event_channel *ch)
{
	struct rdma_cm_id *id = NULL;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return NULL;
	return id;
}

static struct rdma_cm_id *stale_id(void)
{
	struct rdma_cm_id *id = new_id(NULL);

	if (!id || rdma_destroy_id(id))
		return NULL;
	return id;
}

static struct rdma_event_channel *stale_channel(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();

	if (!ch)
		return NULL;
	rdma_destroy_event_channel(ch);
	return ch;
}

/* A synchronous id with its address resolved (to the loopback address). */
static struct rdma_cm_id *addr_resolved_id(void)
{
	struct sockaddr_in dst = loopback(NO_LISTENER_PORT);
	struct rdma_cm_id *id = new_id(NULL);

	if (!id)
		return NULL;
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

/* A synchronous id with its route resolved: it has a device, a PD, and may create a QP. */
static struct rdma_cm_id *route_resolved_id(void)
{
	struct rdma_cm_id *id = addr_resolved_id();

	if (!id)
		return NULL;
	if (rdma_resolve_route(id, 1000)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

/* An id on `ch` (NULL: synchronous) listening on the loopback address, ephemeral port. */
static struct rdma_cm_id *listening_id(struct rdma_event_channel *ch)
{
	struct sockaddr_in a = loopback(0);
	struct rdma_cm_id *id = new_id(ch);

	if (!id)
		return NULL;
	if (rdma_bind_addr(id, (struct sockaddr *)&a) || rdma_listen(id, 4)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

static void qp_init_attr(struct ibv_qp_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->cap.max_send_wr = 4;
	a->cap.max_recv_wr = 4;
	a->cap.max_send_sge = 1;
	a->cap.max_recv_sge = 1;
	a->qp_type = IBV_QPT_RC;
}

static void srq_init_attr(struct ibv_srq_init_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->attr.max_wr = 4;
	a->attr.max_sge = 1;
}

static int set_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* --- event channels ---------------------------------------------------------------------- */

static void case_rdma_create_event_channel(void)
{
	struct rdma_event_channel *ch;

	/* No arguments to get wrong: it works and gives a real descriptor. */
	ch = rdma_create_event_channel();
	REQUIRE(ch != NULL);
	CHECK(ch->fd >= 0 && fcntl(ch->fd, F_GETFD) >= 0);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_destroy_event_channel(void)
{
	struct rdma_event_channel *stale = stale_channel();

	REQUIRE(stale != NULL);
	EXPECT_RETURNS(rdma_destroy_event_channel(NULL));
	EXPECT_RETURNS(rdma_destroy_event_channel(stale));
	EXPECT_RETURNS(rdma_destroy_event_channel(&foreign_channel));
}

static void case_rdma_get_cm_event(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_event_channel *stale = stale_channel();
	struct rdma_cm_event *ev = NULL;

	REQUIRE(ch != NULL && stale != NULL);
	EXPECT_M1(rdma_get_cm_event(NULL, &ev), EINVAL);
	EXPECT_M1(rdma_get_cm_event(ch, NULL), EINVAL);
	EXPECT_M1(rdma_get_cm_event(stale, &ev), EINVAL);
	EXPECT_M1(rdma_get_cm_event(&foreign_channel, &ev), EINVAL);
	/* No event on a non-blocking channel: EAGAIN, not a block. */
	REQUIRE(set_nonblocking(ch->fd) == 0);
	EXPECT_M1(rdma_get_cm_event(ch, &ev), EAGAIN);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_ack_cm_event(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct sockaddr_in dst = loopback(NO_LISTENER_PORT);
	struct rdma_cm_event *ev = NULL;
	struct rdma_cm_id *id;

	REQUIRE(ch != NULL);
	REQUIRE((id = new_id(ch)) != NULL);
	REQUIRE(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0);
	REQUIRE(rdma_get_cm_event(ch, &ev) == 0);
	EXPECT_M1(rdma_ack_cm_event(NULL), EINVAL);
	EXPECT_M1(rdma_ack_cm_event(&foreign_event), EINVAL);
	EXPECT_EQ(rdma_ack_cm_event(ev), 0);
	/* Acknowledged twice: the event is gone. */
	EXPECT_M1(rdma_ack_cm_event(ev), EINVAL);
	EXPECT_EQ(rdma_destroy_id(id), 0);
	rdma_destroy_event_channel(ch);
}

/* --- ids --------------------------------------------------------------------------------- */

static void case_rdma_create_id(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_event_channel *stale = stale_channel();
	struct rdma_cm_id *id = NULL;

	REQUIRE(ch != NULL && stale != NULL);
	EXPECT_M1(rdma_create_id(ch, NULL, NULL, RDMA_PS_TCP), EINVAL);
	EXPECT_M1(rdma_create_id(stale, &id, NULL, RDMA_PS_TCP), EINVAL);
	EXPECT_M1(rdma_create_id(&foreign_channel, &id, NULL, RDMA_PS_TCP), EINVAL);
	EXPECT_M1(rdma_create_id(ch, &id, NULL, (enum rdma_port_space)0x7777), EINVAL);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_destroy_id(void)
{
	struct rdma_cm_id *stale = stale_id();

	REQUIRE(stale != NULL);
	EXPECT_M1(rdma_destroy_id(NULL), EINVAL);
	EXPECT_M1(rdma_destroy_id(stale), EINVAL);
	EXPECT_M1(rdma_destroy_id(&foreign_id), EINVAL);
}

static void case_rdma_bind_addr(void)
{
	struct sockaddr_in a = loopback(0);
	struct sockaddr_un un;
	struct rdma_cm_id *id, *stale;
	struct cm_pair p;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	EXPECT_M1(rdma_bind_addr(NULL, (struct sockaddr *)&a), EINVAL);
	EXPECT_M1(rdma_bind_addr(id, NULL), EINVAL);
	EXPECT_M1(rdma_bind_addr(stale, (struct sockaddr *)&a), EINVAL);
	EXPECT_M1(rdma_bind_addr(&foreign_id, (struct sockaddr *)&a), EINVAL);
	EXPECT_M1(rdma_bind_addr(id, (struct sockaddr *)&un), EINVAL, EAFNOSUPPORT);
	/* Bound twice; already connected (both sides). */
	REQUIRE(rdma_bind_addr(id, (struct sockaddr *)&a) == 0);
	EXPECT_M1(rdma_bind_addr(id, (struct sockaddr *)&a), EINVAL);
	EXPECT_M1(rdma_bind_addr(p.client, (struct sockaddr *)&a), EINVAL);
	EXPECT_M1(rdma_bind_addr(p.server, (struct sockaddr *)&a), EINVAL);
	rdma_destroy_id(id);
}

static void case_rdma_resolve_addr(void)
{
	struct sockaddr_in dst = loopback(NO_LISTENER_PORT);
	struct sockaddr_un un;
	struct rdma_cm_id *id, *listener, *stale;
	struct cm_pair p;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	memset(&un, 0, sizeof(un));
	un.sun_family = AF_UNIX;
	EXPECT_M1(rdma_resolve_addr(NULL, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_addr(id, NULL, NULL, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_addr(stale, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_addr(&foreign_id, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_addr(id, NULL, (struct sockaddr *)&un, 1000), EINVAL,
		  EAFNOSUPPORT);
	/* A listening id does not resolve addresses. */
	EXPECT_M1(rdma_resolve_addr(listener, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	/* Nor does a connected one. */
	EXPECT_M1(rdma_resolve_addr(p.client, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_addr(p.server, NULL, (struct sockaddr *)&dst, 1000), EINVAL);
	rdma_destroy_id(listener);
	rdma_destroy_id(id);
}

static void case_rdma_resolve_route(void)
{
	struct rdma_cm_id *id, *listener, *stale;
	struct cm_pair p;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_resolve_route(NULL, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_route(stale, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_route(&foreign_id, 1000), EINVAL);
	/* Before address resolution; on a listener; once connected. */
	EXPECT_M1(rdma_resolve_route(id, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_route(listener, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_route(p.client, 1000), EINVAL);
	EXPECT_M1(rdma_resolve_route(p.server, 1000), EINVAL);
	rdma_destroy_id(listener);
	rdma_destroy_id(id);
}

static void case_rdma_listen(void)
{
	struct rdma_cm_id *resolved, *stale;
	struct cm_pair p;

	REQUIRE((resolved = addr_resolved_id()) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_listen(NULL, 4), EINVAL);
	EXPECT_M1(rdma_listen(stale, 4), EINVAL);
	EXPECT_M1(rdma_listen(&foreign_id, 4), EINVAL);
	/* An id resolved towards a peer (active side) cannot listen. */
	EXPECT_M1(rdma_listen(resolved, 4), EINVAL);
	/* Nor can a connected one. */
	EXPECT_M1(rdma_listen(p.client, 4), EINVAL);
	EXPECT_M1(rdma_listen(p.server, 4), EINVAL);
	rdma_destroy_id(resolved);
}

static void case_rdma_connect(void)
{
	struct rdma_conn_param p;
	struct rdma_cm_id *idle, *resolved, *listener, *stale;
	struct cm_pair pair;

	memset(&p, 0, sizeof(p));
	p.qp_num = 1;
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((resolved = addr_resolved_id()) != NULL);
	REQUIRE((listener = listening_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&pair) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_connect(NULL, &p), EINVAL);
	EXPECT_M1(rdma_connect(stale, &p), EINVAL);
	EXPECT_M1(rdma_connect(&foreign_id, &p), EINVAL);
	/* Before route resolution (nothing resolved, only the address), on a listener. */
	EXPECT_M1(rdma_connect(idle, &p), EINVAL);
	EXPECT_M1(rdma_connect(resolved, &p), EINVAL);
	EXPECT_M1(rdma_connect(listener, &p), EINVAL);
	/* Already connected: either side. */
	EXPECT_M1(rdma_connect(pair.client, &p), EINVAL);
	EXPECT_M1(rdma_connect(pair.server, &p), EINVAL);
	rdma_destroy_id(listener);
	rdma_destroy_id(resolved);
	rdma_destroy_id(idle);
}

static void case_rdma_accept(void)
{
	struct rdma_conn_param p;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle, *listener, *route, *stale;
	struct cm_pair pair;

	memset(&p, 0, sizeof(p));
	p.qp_num = 1;
	REQUIRE(ch != NULL);
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(ch)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE(cm_pair_connect(&pair) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_accept(NULL, &p), EINVAL);
	EXPECT_M1(rdma_accept(stale, &p), EINVAL);
	EXPECT_M1(rdma_accept(&foreign_id, &p), EINVAL);
	/* Only an id of a connection request accepts: not the listener, not an active id. */
	EXPECT_M1(rdma_accept(listener, &p), EINVAL);
	EXPECT_M1(rdma_accept(listener, NULL), EINVAL);
	EXPECT_M1(rdma_accept(idle, &p), EINVAL);
	EXPECT_M1(rdma_accept(route, &p), EINVAL);
	/* Accepted twice; the connected active side. */
	EXPECT_M1(rdma_accept(pair.server, &p), EINVAL);
	EXPECT_M1(rdma_accept(pair.client, &p), EINVAL);
	rdma_destroy_id(route);
	rdma_destroy_id(listener);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_reject(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle, *listener, *stale;
	struct cm_pair pair;

	REQUIRE(ch != NULL);
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(ch)) != NULL);
	REQUIRE(cm_pair_connect(&pair) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_reject(NULL, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject(stale, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject(&foreign_id, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject(listener, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject(idle, "x", 1), EINVAL);
	/* Already accepted (connected); the active side. */
	EXPECT_M1(rdma_reject(pair.server, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject(pair.client, NULL, 0), EINVAL);
	rdma_destroy_id(listener);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_reject_ece(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle, *listener, *stale;
	struct cm_pair pair;

	REQUIRE(ch != NULL);
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(ch)) != NULL);
	REQUIRE(cm_pair_connect(&pair) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_reject_ece(NULL, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject_ece(stale, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject_ece(&foreign_id, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject_ece(listener, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject_ece(idle, "x", 1), EINVAL);
	/* Already accepted (connected); the active side. */
	EXPECT_M1(rdma_reject_ece(pair.server, NULL, 0), EINVAL);
	EXPECT_M1(rdma_reject_ece(pair.client, NULL, 0), EINVAL);
	rdma_destroy_id(listener);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_establish(void)
{
	struct rdma_cm_id *idle, *route, *stale;
	struct cm_pair p;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_establish(NULL), EINVAL);
	EXPECT_M1(rdma_establish(stale), EINVAL);
	EXPECT_M1(rdma_establish(&foreign_id), EINVAL);
	/* Only after a CONNECT_RESPONSE. */
	EXPECT_M1(rdma_establish(idle), EINVAL);
	EXPECT_M1(rdma_establish(route), EINVAL);
	/* Connected with a QP: the CM established it already. */
	EXPECT_M1(rdma_establish(p.client), EINVAL);
	EXPECT_M1(rdma_establish(p.server), EINVAL);
	rdma_destroy_id(route);
	rdma_destroy_id(idle);
}

static void case_rdma_notify(void)
{
	struct rdma_cm_id *stale = stale_id();

	REQUIRE(stale != NULL);
	EXPECT_M1(rdma_notify(NULL, IBV_EVENT_COMM_EST), EINVAL);
	EXPECT_M1(rdma_notify(stale, IBV_EVENT_COMM_EST), EINVAL);
	EXPECT_M1(rdma_notify(&foreign_id, IBV_EVENT_COMM_EST), EINVAL);
}

static void case_rdma_disconnect(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle, *listener, *route, *stale;

	REQUIRE(ch != NULL);
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((listener = listening_id(ch)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_disconnect(NULL), EINVAL);
	EXPECT_M1(rdma_disconnect(stale), EINVAL);
	EXPECT_M1(rdma_disconnect(&foreign_id), EINVAL);
	/* Not connected: an idle id (rdma-core dereferences its NULL device), a listener, an id
	 * with its route resolved but never connected. */
	EXPECT_M1(rdma_disconnect(idle), EINVAL);
	EXPECT_M1(rdma_disconnect(listener), EINVAL);
	EXPECT_M1(rdma_disconnect(route), EINVAL);
	rdma_destroy_id(route);
	rdma_destroy_id(listener);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_get_request(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *idle, *async_listener, *sync_listener, *stale, *out = NULL;

	REQUIRE(ch != NULL);
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((async_listener = listening_id(ch)) != NULL);
	REQUIRE((sync_listener = listening_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_get_request(NULL, &out), EINVAL);
	EXPECT_M1(rdma_get_request(sync_listener, NULL), EINVAL);
	EXPECT_M1(rdma_get_request(stale, &out), EINVAL);
	EXPECT_M1(rdma_get_request(&foreign_id, &out), EINVAL);
	/* Only synchronous listeners hand out requests. */
	EXPECT_M1(rdma_get_request(async_listener, &out), EINVAL);
	EXPECT_M1(rdma_get_request(idle, &out), EINVAL);
	rdma_destroy_id(sync_listener);
	rdma_destroy_id(async_listener);
	rdma_destroy_id(idle);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_get_src_port(void)
{
	struct rdma_cm_id *idle, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	/* No error value: 0 (no port) with errno. */
	EXPECT_VAL(rdma_get_src_port(NULL), 0, EINVAL);
	EXPECT_VAL(rdma_get_src_port(stale), 0, EINVAL);
	EXPECT_VAL(rdma_get_src_port(&foreign_id), 0, EINVAL);
	/* Not bound: 0 (rdma_get_src_port(3)). */
	EXPECT_EQ(rdma_get_src_port(idle), 0);
	rdma_destroy_id(idle);
}

static void case_rdma_get_dst_port(void)
{
	struct rdma_cm_id *idle, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_VAL(rdma_get_dst_port(NULL), 0, EINVAL);
	EXPECT_VAL(rdma_get_dst_port(stale), 0, EINVAL);
	EXPECT_VAL(rdma_get_dst_port(&foreign_id), 0, EINVAL);
	/* Not connected: 0 (rdma_get_dst_port(3)). */
	EXPECT_EQ(rdma_get_dst_port(idle), 0);
	rdma_destroy_id(idle);
}

static void case_rdma_set_option(void)
{
	struct rdma_cm_id *id, *stale;
	uint8_t tos = 0;
	int on = 1;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_set_option(NULL, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)),
		  EINVAL);
	EXPECT_M1(rdma_set_option(stale, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof(tos)),
		  EINVAL);
	EXPECT_M1(rdma_set_option(&foreign_id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos,
				  sizeof(tos)),
		  EINVAL);
	EXPECT_M1(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, NULL, sizeof(tos)),
		  EINVAL);
	EXPECT_M1(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, NULL, sizeof(on)),
		  EINVAL);
	/* Wrong sizes: TOS is a uint8_t, REUSEADDR an int. */
	EXPECT_M1(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &on, sizeof(on)),
		  EINVAL);
	EXPECT_M1(rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &tos, sizeof(tos)),
		  EINVAL);
	/* Unknown level or option: the kernel's rdma_cm answers ENOSYS for both. */
	EXPECT_M1(rdma_set_option(id, 0x7777, 0, &on, sizeof(on)), ENOSYS);
	EXPECT_M1(rdma_set_option(id, RDMA_OPTION_ID, 0x7777, &on, sizeof(on)), ENOSYS);
	rdma_destroy_id(id);
}

/* --- devices, strings, addrinfo ------------------------------------------------------------ */

static void case_rdma_get_devices(void)
{
	struct ibv_context **list;

	/* num_devices is optional. */
	list = rdma_get_devices(NULL);
	REQUIRE(list != NULL);
	CHECK(list[0] != NULL);
	rdma_free_devices(list);
}

static void case_rdma_free_devices(void)
{
	struct ibv_context *foreign[2] = { NULL, NULL };
	struct ibv_context **list = rdma_get_devices(NULL);

	EXPECT_RETURNS(rdma_free_devices(NULL));
	/* A list we never handed out, and one freed twice: ignored, never a heap corruption. */
	EXPECT_RETURNS(rdma_free_devices(foreign));
	REQUIRE(list != NULL);
	EXPECT_RETURNS(rdma_free_devices(list));
	EXPECT_RETURNS(rdma_free_devices(list));
}

static void case_rdma_event_str(void)
{
	EXPECT_NONNULL(rdma_event_str((enum rdma_cm_event_type)-1));
	EXPECT_NONNULL(rdma_event_str((enum rdma_cm_event_type)9999));
}

static void case_rdma_getaddrinfo(void)
{
	struct rdma_addrinfo hints, *res = NULL;
	int r;

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	EXPECT_M1(rdma_getaddrinfo("127.0.0.1", "7471", &hints, NULL), EINVAL);
	EXPECT_M1(rdma_getaddrinfo("127.0.0.1", "7471", NULL, NULL), EINVAL);
	/* Neither node nor service: an error (-1 with errno, or an EAI_* code), no result. */
	errno = 0;
	r = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	if (r == 0 || (r == -1 && errno == 0))
		bi_fail(__FILE__, __LINE__,
			"rdma_getaddrinfo(NULL, NULL, NULL, &res) returned %d with errno %s; "
			"expected an error",
			r, bi_errname(errno));
	if (r == 0 && res)
		rdma_freeaddrinfo(res);
}

static void case_rdma_freeaddrinfo(void)
{
	EXPECT_RETURNS(rdma_freeaddrinfo(NULL));
}

/* --- QPs and SRQs through the CM ----------------------------------------------------------- */

static void case_rdma_create_qp(void)
{
	struct ibv_qp_init_attr a;
	struct ibv_pd *stale_pd, foreign_pd;
	struct ibv_cq *stale_cq;
	struct rdma_cm_id *idle, *route, *stale;

	memset(&foreign_pd, 0, sizeof(foreign_pd));
	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	REQUIRE((stale_pd = ibv_alloc_pd(route->verbs)) != NULL);
	REQUIRE(ibv_dealloc_pd(stale_pd) == 0);
	REQUIRE((stale_cq = ibv_create_cq(route->verbs, 4, NULL, NULL, 0)) != NULL);
	REQUIRE(ibv_destroy_cq(stale_cq) == 0);
	/* Destroyed CQs given in the attributes (both, so that the CM makes no CQ that could
	 * reuse the address). */
	qp_init_attr(&a);
	a.send_cq = a.recv_cq = stale_cq;
	EXPECT_M1(rdma_create_qp(route, NULL, &a), EINVAL);
	CHECK(route->qp == NULL);
	qp_init_attr(&a);
	EXPECT_M1(rdma_create_qp(NULL, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_qp(stale, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_qp(&foreign_id, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_qp(route, NULL, NULL), EINVAL);
	EXPECT_M1(rdma_create_qp(route, stale_pd, &a), EINVAL);
	EXPECT_M1(rdma_create_qp(route, &foreign_pd, &a), EINVAL);
	/* No device yet (rdma-core passes the id's NULL PD on). */
	qp_init_attr(&a);
	EXPECT_M1(rdma_create_qp(idle, NULL, &a), EINVAL);
	/* A second QP on the same id. */
	qp_init_attr(&a);
	REQUIRE(rdma_create_qp(route, NULL, &a) == 0);
	qp_init_attr(&a);
	EXPECT_M1(rdma_create_qp(route, NULL, &a), EINVAL);
	rdma_destroy_qp(route);
	rdma_destroy_id(route);
	rdma_destroy_id(idle);
}

static void case_rdma_create_qp_ex(void)
{
	struct ibv_qp_init_attr_ex a;
	struct rdma_cm_id *idle, *route, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	memset(&a, 0, sizeof(a));
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = route->pd;
	EXPECT_M1(rdma_create_qp_ex(NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_qp_ex(stale, &a), EINVAL);
	EXPECT_M1(rdma_create_qp_ex(&foreign_id, &a), EINVAL);
	EXPECT_M1(rdma_create_qp_ex(route, NULL), EINVAL);
	a.pd = NULL;
	a.comp_mask = 0;
	EXPECT_M1(rdma_create_qp_ex(idle, &a), EINVAL);
	rdma_destroy_id(route);
	rdma_destroy_id(idle);
}

static void case_rdma_destroy_qp(void)
{
	struct ibv_qp_init_attr a;
	struct rdma_cm_id *idle, *route, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	qp_init_attr(&a);
	REQUIRE(rdma_create_qp(route, NULL, &a) == 0);
	EXPECT_RETURNS(rdma_destroy_qp(NULL));
	EXPECT_RETURNS(rdma_destroy_qp(stale));
	EXPECT_RETURNS(rdma_destroy_qp(&foreign_id));
	/* An id without a QP; a QP destroyed twice. */
	EXPECT_RETURNS(rdma_destroy_qp(idle));
	EXPECT_RETURNS(rdma_destroy_qp(route));
	CHECK(route->qp == NULL);
	EXPECT_RETURNS(rdma_destroy_qp(route));
	/* The QP destroyed by the application with ibv_destroy_qp first. */
	qp_init_attr(&a);
	REQUIRE(rdma_create_qp(route, NULL, &a) == 0);
	REQUIRE(ibv_destroy_qp(route->qp) == 0);
	EXPECT_RETURNS(rdma_destroy_qp(route));
	EXPECT_EQ(rdma_destroy_id(route), 0);
	EXPECT_EQ(rdma_destroy_id(idle), 0);
}

static void case_rdma_create_srq(void)
{
	struct ibv_srq_init_attr a;
	struct rdma_cm_id *idle, *route, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	srq_init_attr(&a);
	EXPECT_M1(rdma_create_srq(NULL, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_srq(stale, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_srq(&foreign_id, NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_srq(route, NULL, NULL), EINVAL);
	/* No device (and so no PD) yet. */
	EXPECT_M1(rdma_create_srq(idle, NULL, &a), EINVAL);
	/* A second SRQ on the same id. */
	REQUIRE(rdma_create_srq(route, NULL, &a) == 0);
	srq_init_attr(&a);
	EXPECT_M1(rdma_create_srq(route, NULL, &a), EINVAL);
	rdma_destroy_srq(route);
	rdma_destroy_id(route);
	rdma_destroy_id(idle);
}

static void case_rdma_create_srq_ex(void)
{
	struct ibv_srq_init_attr_ex a;
	struct rdma_cm_id *route, *stale;

	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 4;
	a.attr.max_sge = 1;
	a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE;
	a.srq_type = IBV_SRQT_BASIC;
	EXPECT_M1(rdma_create_srq_ex(NULL, &a), EINVAL);
	EXPECT_M1(rdma_create_srq_ex(stale, &a), EINVAL);
	EXPECT_M1(rdma_create_srq_ex(&foreign_id, &a), EINVAL);
	EXPECT_M1(rdma_create_srq_ex(route, NULL), EINVAL);
	/* Without IBV_SRQ_INIT_ATTR_TYPE the type is unknown. */
	a.comp_mask = 0;
	EXPECT_M1(rdma_create_srq_ex(route, &a), EINVAL);
	rdma_destroy_id(route);
}

static void case_rdma_destroy_srq(void)
{
	struct ibv_srq_init_attr a;
	struct rdma_cm_id *idle, *route, *stale;

	REQUIRE((idle = new_id(NULL)) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	srq_init_attr(&a);
	REQUIRE(rdma_create_srq(route, NULL, &a) == 0);
	EXPECT_RETURNS(rdma_destroy_srq(NULL));
	EXPECT_RETURNS(rdma_destroy_srq(stale));
	EXPECT_RETURNS(rdma_destroy_srq(&foreign_id));
	EXPECT_RETURNS(rdma_destroy_srq(idle));
	EXPECT_RETURNS(rdma_destroy_srq(route));
	CHECK(route->srq == NULL);
	EXPECT_RETURNS(rdma_destroy_srq(route));
	EXPECT_EQ(rdma_destroy_id(route), 0);
	EXPECT_EQ(rdma_destroy_id(idle), 0);
}

/* --- endpoints ------------------------------------------------------------------------------ */

static void case_rdma_create_ep(void)
{
	struct sockaddr_in a = loopback(NO_LISTENER_PORT);
	struct rdma_addrinfo ai;
	struct rdma_cm_id *id = NULL;
	struct ibv_context **devs;
	struct ibv_pd *stale_pd;
	struct ibv_qp_init_attr qa;

	memset(&ai, 0, sizeof(ai));
	ai.ai_family = AF_INET;
	ai.ai_qp_type = IBV_QPT_RC;
	ai.ai_port_space = RDMA_PS_TCP;
	ai.ai_dst_addr = (struct sockaddr *)&a;
	ai.ai_dst_len = sizeof(a);
	EXPECT_M1(rdma_create_ep(NULL, &ai, NULL, NULL), EINVAL);
	EXPECT_M1(rdma_create_ep(&id, NULL, NULL, NULL), EINVAL);
	/* Active without a destination; passive without a source. */
	ai.ai_dst_addr = NULL;
	ai.ai_dst_len = 0;
	EXPECT_M1(rdma_create_ep(&id, &ai, NULL, NULL), EINVAL);
	ai.ai_flags = RAI_PASSIVE;
	EXPECT_M1(rdma_create_ep(&id, &ai, NULL, NULL), EINVAL);
	CHECK(id == NULL);
	/* Active, with a destroyed PD for its QP. */
	ai.ai_flags = 0;
	ai.ai_dst_addr = (struct sockaddr *)&a;
	ai.ai_dst_len = sizeof(a);
	REQUIRE((devs = rdma_get_devices(NULL)) != NULL && devs[0] != NULL);
	REQUIRE((stale_pd = ibv_alloc_pd(devs[0])) != NULL);
	REQUIRE(ibv_dealloc_pd(stale_pd) == 0);
	memset(&qa, 0, sizeof(qa));
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	qa.qp_type = IBV_QPT_RC;
	EXPECT_M1(rdma_create_ep(&id, &ai, stale_pd, &qa), EINVAL);
	CHECK(id == NULL);
	rdma_free_devices(devs);
}

static void case_rdma_destroy_ep(void)
{
	struct rdma_cm_id *stale = stale_id();

	REQUIRE(stale != NULL);
	EXPECT_RETURNS(rdma_destroy_ep(NULL));
	EXPECT_RETURNS(rdma_destroy_ep(stale));
	EXPECT_RETURNS(rdma_destroy_ep(&foreign_id));
}

/* --- ECE --------------------------------------------------------------------------------- */

static void case_rdma_get_remote_ece(void)
{
	struct ibv_ece ece;
	struct rdma_cm_id *id, *stale;
	struct cm_pair p;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_get_remote_ece(NULL, &ece), EINVAL);
	EXPECT_M1(rdma_get_remote_ece(id, NULL), EINVAL);
	EXPECT_M1(rdma_get_remote_ece(stale, &ece), EINVAL);
	EXPECT_M1(rdma_get_remote_ece(&foreign_id, &ece), EINVAL);
	/* ECE is for ids without a QP (the application's own QP). */
	EXPECT_M1(rdma_get_remote_ece(p.client, &ece), EINVAL);
	rdma_destroy_id(id);
}

static void case_rdma_set_local_ece(void)
{
	struct ibv_ece ece;
	struct rdma_cm_id *id, *stale;
	struct cm_pair p;

	memset(&ece, 0, sizeof(ece));
	ece.vendor_id = 0x15b3;
	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_set_local_ece(NULL, &ece), EINVAL);
	EXPECT_M1(rdma_set_local_ece(id, NULL), EINVAL);
	EXPECT_M1(rdma_set_local_ece(stale, &ece), EINVAL);
	EXPECT_M1(rdma_set_local_ece(&foreign_id, &ece), EINVAL);
	/* ECE is for ids without a QP (the application's own QP). */
	EXPECT_M1(rdma_set_local_ece(p.client, &ece), EINVAL);
	rdma_destroy_id(id);
}

/* --- multicast, migration, QP attributes -------------------------------------------------- */

static void case_rdma_join_multicast(void)
{
	struct sockaddr_in mc;
	struct rdma_cm_id *id, *stale;

	memset(&mc, 0, sizeof(mc));
	mc.sin_family = AF_INET;
	mc.sin_addr.s_addr = inet_addr("239.1.2.3");
	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_join_multicast(NULL, (struct sockaddr *)&mc, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast(id, NULL, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast(stale, (struct sockaddr *)&mc, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast(&foreign_id, (struct sockaddr *)&mc, NULL), EINVAL);
	/* Not a multicast address. */
	mc.sin_addr.s_addr = inet_addr("127.0.0.1");
	EXPECT_M1(rdma_join_multicast(id, (struct sockaddr *)&mc, NULL), EINVAL);
	rdma_destroy_id(id);
}

static void case_rdma_join_multicast_ex(void)
{
	struct sockaddr_in mc;
	struct rdma_cm_join_mc_attr_ex attr;
	struct rdma_cm_id *id, *stale;

	memset(&mc, 0, sizeof(mc));
	mc.sin_family = AF_INET;
	mc.sin_addr.s_addr = inet_addr("239.1.2.3");
	memset(&attr, 0, sizeof(attr));
	attr.comp_mask = RDMA_CM_JOIN_MC_ATTR_ADDRESS | RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS;
	attr.join_flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
	attr.addr = (struct sockaddr *)&mc;
	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_join_multicast_ex(NULL, &attr, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast_ex(id, NULL, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast_ex(stale, &attr, NULL), EINVAL);
	EXPECT_M1(rdma_join_multicast_ex(&foreign_id, &attr, NULL), EINVAL);
	rdma_destroy_id(id);
}

static void case_rdma_leave_multicast(void)
{
	struct sockaddr_in mc;
	struct rdma_cm_id *id, *stale;

	memset(&mc, 0, sizeof(mc));
	mc.sin_family = AF_INET;
	mc.sin_addr.s_addr = inet_addr("239.1.2.3");
	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_leave_multicast(NULL, (struct sockaddr *)&mc), EINVAL);
	EXPECT_M1(rdma_leave_multicast(id, NULL), EINVAL);
	EXPECT_M1(rdma_leave_multicast(stale, (struct sockaddr *)&mc), EINVAL);
	EXPECT_M1(rdma_leave_multicast(&foreign_id, (struct sockaddr *)&mc), EINVAL);
	/* A group that was never joined (rdma-core: EADDRNOTAVAIL). */
	EXPECT_M1(rdma_leave_multicast(id, (struct sockaddr *)&mc), EADDRNOTAVAIL, EINVAL);
	rdma_destroy_id(id);
}

static void case_rdma_migrate_id(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_event_channel *stale_ch = stale_channel();
	struct rdma_cm_id *id, *stale;

	REQUIRE(ch != NULL && stale_ch != NULL);
	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_M1(rdma_migrate_id(NULL, ch), EINVAL);
	EXPECT_M1(rdma_migrate_id(stale, ch), EINVAL);
	EXPECT_M1(rdma_migrate_id(&foreign_id, ch), EINVAL);
	EXPECT_M1(rdma_migrate_id(id, stale_ch), EINVAL);
	EXPECT_M1(rdma_migrate_id(id, &foreign_channel), EINVAL);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
}

static void case_rdma_init_qp_attr(void)
{
	struct ibv_qp_attr attr;
	int mask = 0;
	struct rdma_cm_id *id, *stale;

	REQUIRE((id = new_id(NULL)) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_INIT;
	EXPECT_M1(rdma_init_qp_attr(NULL, &attr, &mask), EINVAL);
	EXPECT_M1(rdma_init_qp_attr(id, NULL, &mask), EINVAL);
	EXPECT_M1(rdma_init_qp_attr(id, &attr, NULL), EINVAL);
	EXPECT_M1(rdma_init_qp_attr(stale, &attr, &mask), EINVAL);
	EXPECT_M1(rdma_init_qp_attr(&foreign_id, &attr, &mask), EINVAL);
	/* Wrong state: an id that is neither bound to a device nor connected has no attributes. */
	EXPECT_M1(rdma_init_qp_attr(id, &attr, &mask), EINVAL);
	attr.qp_state = IBV_QPS_RTR;
	EXPECT_M1(rdma_init_qp_attr(id, &attr, &mask), EINVAL);
	rdma_destroy_id(id);
}

static const struct bi_case cases[] = {
	BI_CASE(rdma_create_event_channel),
	BI_CASE(rdma_destroy_event_channel),
	BI_CASE(rdma_get_cm_event),
	BI_CASE(rdma_ack_cm_event),
	BI_CASE(rdma_create_id),
	BI_CASE(rdma_destroy_id),
	BI_CASE(rdma_bind_addr),
	BI_CASE(rdma_resolve_addr),
	BI_CASE(rdma_resolve_route),
	BI_CASE(rdma_listen),
	BI_CASE(rdma_connect),
	BI_CASE(rdma_accept),
	BI_CASE(rdma_reject),
	BI_CASE(rdma_reject_ece),
	BI_CASE(rdma_establish),
	BI_CASE(rdma_notify),
	BI_CASE(rdma_disconnect),
	BI_CASE(rdma_get_request),
	BI_CASE(rdma_get_src_port),
	BI_CASE(rdma_get_dst_port),
	BI_CASE(rdma_set_option),
	BI_CASE(rdma_get_devices),
	BI_CASE(rdma_free_devices),
	BI_CASE(rdma_event_str),
	BI_CASE(rdma_getaddrinfo),
	BI_CASE(rdma_freeaddrinfo),
	BI_CASE(rdma_create_qp),
	BI_CASE(rdma_create_qp_ex),
	BI_CASE(rdma_destroy_qp),
	BI_CASE(rdma_create_srq),
	BI_CASE(rdma_create_srq_ex),
	BI_CASE(rdma_destroy_srq),
	BI_CASE(rdma_create_ep),
	BI_CASE(rdma_destroy_ep),
	BI_CASE(rdma_get_remote_ece),
	BI_CASE(rdma_set_local_ece),
	BI_CASE(rdma_join_multicast),
	BI_CASE(rdma_join_multicast_ex),
	BI_CASE(rdma_leave_multicast),
	BI_CASE(rdma_migrate_id),
	BI_CASE(rdma_init_qp_attr),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
