/*
 * A connected peer that vanishes, for the CM across namespaces (tests/netns/cm_cross.py,
 * scenario "vanished"): the server accepts one connection and then only sleeps (the test
 * SIGKILLs it); the client connects, waits for a line on stdin (sent once the server is dead),
 * calls rdma_disconnect and must get DISCONNECTED: its DREQ is never answered, so only the CM's
 * resends running out can report it. alarm() turns a hang into a failure.
 *
 *   cm_vanish server <ip> <port>
 *   cm_vanish client <ip> <port>      # prints "established", then "disconnected after N ms"
 */
#define _GNU_SOURCE
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

static struct rdma_event_channel *ch;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* The next event of `want` (anything else is fatal); NULL if none within `ms`. */
static struct rdma_cm_event *expect(enum rdma_cm_event_type want, int ms)
{
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) <= 0)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		die("rdma_get_cm_event");
	if (ev->event != want) {
		fprintf(stderr, "FAIL: got %s (status %d), wanted %s\n", rdma_event_str(ev->event),
			ev->status, rdma_event_str(want));
		exit(1);
	}
	return ev;
}

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr a = { .qp_type = IBV_QPT_RC,
				      .cap = { .max_send_wr = 4, .max_recv_wr = 4,
					       .max_send_sge = 1, .max_recv_sge = 1 } };

	if (rdma_create_qp(id, NULL, &a))
		die("rdma_create_qp");
}

static long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	struct rdma_addrinfo hints = { 0 }, *ai;
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	char line[16];
	int server;
	long t0;

	if (argc != 4 || (strcmp(argv[1], "server") && strcmp(argv[1], "client"))) {
		fprintf(stderr, "usage: %s server|client <ip> <port>\n", argv[0]);
		return 2;
	}
	alarm(60);
	server = !strcmp(argv[1], "server");
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_flags = server ? RAI_PASSIVE : 0;
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &ai))
		die("rdma_getaddrinfo");
	ch = rdma_create_event_channel();
	if (!ch || rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		die("rdma_create_id");
	if (server) {
		if (rdma_bind_addr(id, ai->ai_src_addr) || rdma_listen(id, 1))
			die("rdma_listen");
		ev = expect(RDMA_CM_EVENT_CONNECT_REQUEST, 30000);
		if (!ev)
			die("no connect request");
		make_qp(ev->id);
		if (rdma_accept(ev->id, NULL))
			die("rdma_accept");
		rdma_ack_cm_event(ev);
		ev = expect(RDMA_CM_EVENT_ESTABLISHED, 30000);
		if (!ev)
			die("not established");
		rdma_ack_cm_event(ev);
		printf("established\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	if (rdma_resolve_addr(id, NULL, ai->ai_dst_addr, 2000))
		die("rdma_resolve_addr");
	if (!(ev = expect(RDMA_CM_EVENT_ADDR_RESOLVED, 5000)))
		die("address not resolved");
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(id, 2000))
		die("rdma_resolve_route");
	if (!(ev = expect(RDMA_CM_EVENT_ROUTE_RESOLVED, 5000)))
		die("route not resolved");
	rdma_ack_cm_event(ev);
	make_qp(id);
	if (rdma_connect(id, NULL))
		die("rdma_connect");
	if (!(ev = expect(RDMA_CM_EVENT_ESTABLISHED, 30000)))
		die("not established");
	rdma_ack_cm_event(ev);
	printf("established\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		die("stdin");
	t0 = now_ms();
	if (rdma_disconnect(id))
		die("rdma_disconnect");
	if (!(ev = expect(RDMA_CM_EVENT_DISCONNECTED, 45000))) {
		fprintf(stderr, "FAIL: no DISCONNECTED within 45 s\n");
		return 1;
	}
	rdma_ack_cm_event(ev);
	printf("disconnected after %ld ms\n", now_ms() - t0);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_freeaddrinfo(ai);
	rdma_destroy_event_channel(ch);
	return 0;
}
