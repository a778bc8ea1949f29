/*
 * Scale (issue 9): 1,000 RC connections at once between one process pair, through rdma_cm,
 * with the descriptor limit raised. All are resolved, connected and established concurrently,
 * each carries one SEND that the server checks (every index exactly once, on the connection it
 * was sent on), then all are disconnected and destroyed. alarm() turns a hang into a failure.
 *
 *   many_conns [N]     # default 1000
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define WAIT_MS 60000

static int n_conns = 1000;
/* What a side has seen so far, for the message when an event never comes. */
static char progress[160];

static void die(const char *who, const char *what)
{
	fprintf(stderr, "FAIL: %s: %s (%s)\n", who, what, strerror(errno));
	exit(1);
}

/* The next CM event within `ms` (NULL on timeout). */
static struct rdma_cm_event *event_within(struct rdma_event_channel *ch, const char *who, int ms)
{
	struct pollfd p = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) != 1)
		return NULL;
	if (rdma_get_cm_event(ch, &ev))
		die(who, "rdma_get_cm_event");
	return ev;
}

static struct rdma_cm_event *next_event(struct rdma_event_channel *ch, const char *who)
{
	struct rdma_cm_event *ev = event_within(ch, who, WAIT_MS);

	if (!ev) {
		fprintf(stderr, "FAIL: %s: no CM event within %d ms (%s)\n", who, WAIT_MS, progress);
		exit(1);
	}
	return ev;
}

struct shared {
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf;
};

/* One PD, CQ and buffer for all connections of a side; QP i uses slot i of the buffer. */
static void shared_init(struct shared *s, struct ibv_context *ctx, const char *who)
{
	s->pd = ibv_alloc_pd(ctx);
	s->cq = s->pd ? ibv_create_cq(ctx, 2 * n_conns + 16, NULL, NULL, 0) : NULL;
	s->buf = calloc(n_conns, 64);
	s->mr = s->cq && s->buf ? ibv_reg_mr(s->pd, s->buf, (size_t)n_conns * 64,
					     IBV_ACCESS_LOCAL_WRITE)
				: NULL;
	if (!s->mr)
		die(who, "PD, CQ or MR");
}

static void make_qp(struct rdma_cm_id *id, struct shared *s, const char *who)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.send_cq = qa.recv_cq = s->cq;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 2;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, s->pd, &qa))
		die(who, "rdma_create_qp");
}

static int server(uint16_t *port_out, int wfd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen;
	struct sockaddr_in a;
	struct shared s;
	char *seen = calloc(n_conns, 1);
	int accepted = 0, established = 0, received = 0, disconnected = 0, i;

	(void)port_out;
	if (!ch || !seen || rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP))
		die("server", "listener");
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_bind_addr(listen, (struct sockaddr *)&a) || rdma_listen(listen, 1024))
		die("server", "bind/listen");
	shared_init(&s, listen->verbs, "server");
	{
		uint16_t port = ntohs(rdma_get_src_port(listen));

		if (write(wfd, &port, sizeof(port)) != sizeof(port))
			die("server", "write port");
	}
	while (disconnected < n_conns) {
		struct rdma_cm_event *ev = next_event(ch, "server");
		struct rdma_cm_id *id = ev->id;
		struct rdma_conn_param cp;

		switch (ev->event) {
		case RDMA_CM_EVENT_CONNECT_REQUEST: {
			struct ibv_sge sge;
			struct ibv_recv_wr r, *bad;
			int k = accepted++;

			if (k >= n_conns)
				die("server", "more connection requests than clients");
			make_qp(id, &s, "server");
			id->context = (void *)(uintptr_t)k;
			sge.addr = (uintptr_t)s.buf + (size_t)k * 64;
			sge.length = 64;
			sge.lkey = s.mr->lkey;
			memset(&r, 0, sizeof(r));
			r.wr_id = k;
			r.sg_list = &sge;
			r.num_sge = 1;
			if (ibv_post_recv(id->qp, &r, &bad))
				die("server", "ibv_post_recv");
			memset(&cp, 0, sizeof(cp));
			if (rdma_accept(id, &cp))
				die("server", "rdma_accept");
			break;
		}
		case RDMA_CM_EVENT_ESTABLISHED:
			established++;
			break;
		case RDMA_CM_EVENT_DISCONNECTED:
			disconnected++;
			rdma_ack_cm_event(ev);
			ev = NULL;
			rdma_destroy_qp(id);
			rdma_destroy_id(id);
			break;
		default:
			fprintf(stderr, "FAIL: server: unexpected %s (status %d)\n",
				rdma_event_str(ev->event), ev->status);
			exit(1);
		}
		if (ev)
			rdma_ack_cm_event(ev);
		/* Receives complete as the client sends; check each as it comes. */
		for (;;) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(s.cq, 1, &wc);
			unsigned idx;

			if (n <= 0)
				break;
			if (wc.status != IBV_WC_SUCCESS)
				continue; /* flushes of torn-down QPs: all messages were counted */
			if (memcmp(s.buf + wc.wr_id * 64, "conn ", 5) ||
			    sscanf(s.buf + wc.wr_id * 64 + 5, "%u", &idx) != 1 ||
			    idx >= (unsigned)n_conns || seen[idx]) {
				fprintf(stderr, "FAIL: server: bad or duplicate message %.20s\n",
					s.buf + wc.wr_id * 64);
				exit(1);
			}
			seen[idx] = 1;
			received++;
		}
	}
	for (i = 0; i < n_conns; i++)
		if (!seen[i]) {
			fprintf(stderr, "FAIL: server: connection %d's message never arrived\n", i);
			exit(1);
		}
	printf("server: %d requests accepted, %d established, %d messages, %d disconnected\n",
	       accepted, established, received, disconnected);
	return 0;
}

static void raise_nofile(void)
{
	struct rlimit r;
	rlim_t want = 16 * (rlim_t)n_conns + 1024;

	if (getrlimit(RLIMIT_NOFILE, &r))
		die("main", "getrlimit");
	if (r.rlim_cur < want) {
		r.rlim_cur = r.rlim_max == RLIM_INFINITY || r.rlim_max >= want ? want : r.rlim_max;
		if (r.rlim_cur < want) {
			r.rlim_max = want; /* root may raise the hard limit */
			r.rlim_cur = want;
		}
		if (setrlimit(RLIMIT_NOFILE, &r)) {
			printf("SKIP: cannot raise RLIMIT_NOFILE to %llu for %d connections\n",
			       (unsigned long long)want, n_conns);
			exit(77);
		}
	}
}

int main(int argc, char **argv)
{
	struct rdma_event_channel *ch;
	struct rdma_cm_id **ids;
	struct sockaddr_in a;
	struct shared s;
	uint16_t port;
	time_t idle_since;
	int fds[2], i, addr = 0, route = 0, est = 0, sent = 0, disc = 0, status;
	pid_t pid;

	if (argc > 1)
		n_conns = atoi(argv[1]);
	raise_nofile();
	alarm(300);
	if (pipe(fds))
		die("main", "pipe");
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		exit(server(NULL, fds[1]));
	}
	close(fds[1]);
	if (read(fds[0], &port, sizeof(port)) != sizeof(port))
		die("client", "the server did not start");
	ch = rdma_create_event_channel();
	ids = calloc(n_conns, sizeof(*ids));
	if (!ch || !ids)
		die("client", "setup");
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(port);
	for (i = 0; i < n_conns; i++) {
		if (rdma_create_id(ch, &ids[i], (void *)(uintptr_t)i, RDMA_PS_TCP))
			die("client", "rdma_create_id");
		if (rdma_resolve_addr(ids[i], NULL, (struct sockaddr *)&a, 5000))
			die("client", "rdma_resolve_addr");
	}
	/* Everything happens at once: each id moves on as its events arrive. */
	/* Send completions may follow the last CM event: the CQ is polled between waits too, and
	 * the deadline counts from the last progress of either kind. */
	idle_since = time(NULL);
	while (disc < n_conns) {
		struct rdma_cm_event *ev = event_within(ch, "client", 100);
		struct rdma_cm_id *id;
		int k;
		struct rdma_conn_param cp;

		if (!ev) {
			if (time(NULL) - idle_since > WAIT_MS / 1000) {
				fprintf(stderr, "FAIL: client: nothing happened for %d ms (%s)\n",
					WAIT_MS, progress);
				return 1;
			}
			goto poll_cq;
		}
		idle_since = time(NULL);
		id = ev->id;
		k = (int)(uintptr_t)id->context;
		switch (ev->event) {
		case RDMA_CM_EVENT_ADDR_RESOLVED:
			if (addr++ == 0)
				shared_init(&s, id->verbs, "client");
			if (rdma_resolve_route(id, 5000))
				die("client", "rdma_resolve_route");
			break;
		case RDMA_CM_EVENT_ROUTE_RESOLVED:
			route++;
			make_qp(id, &s, "client");
			memset(&cp, 0, sizeof(cp));
			cp.retry_count = 7;
			if (rdma_connect(id, &cp))
				die("client", "rdma_connect");
			break;
		case RDMA_CM_EVENT_ESTABLISHED: {
			struct ibv_sge sge;
			struct ibv_send_wr w, *bad;

			est++;
			snprintf(s.buf + (size_t)k * 64, 64, "conn %d", k);
			sge.addr = (uintptr_t)s.buf + (size_t)k * 64;
			sge.length = 64;
			sge.lkey = s.mr->lkey;
			memset(&w, 0, sizeof(w));
			w.wr_id = k;
			w.sg_list = &sge;
			w.num_sge = 1;
			w.opcode = IBV_WR_SEND;
			w.send_flags = IBV_SEND_SIGNALED;
			if (ibv_post_send(id->qp, &w, &bad))
				die("client", "ibv_post_send");
			break;
		}
		case RDMA_CM_EVENT_DISCONNECTED:
			disc++;
			break;
		default:
			fprintf(stderr, "FAIL: client: connection %d: unexpected %s (status %d)\n", k,
				rdma_event_str(ev->event), ev->status);
			exit(1);
		}
		rdma_ack_cm_event(ev);
		snprintf(progress, sizeof(progress),
			 "%d resolved, %d routed, %d established, %d sent, %d disconnected", addr, route,
			 est, sent, disc);
		/* A connection is closed once its SEND completed (the server has the message). */
poll_cq:
		for (;;) {
			struct ibv_wc wc;
			int n = ibv_poll_cq(s.cq, 1, &wc);

			if (n <= 0)
				break;
			if (wc.status != IBV_WC_SUCCESS) {
				fprintf(stderr, "FAIL: client: connection %llu: %s\n",
					(unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
				exit(1);
			}
			sent++;
			idle_since = time(NULL);
			snprintf(progress, sizeof(progress),
				 "%d resolved, %d routed, %d established, %d sent, %d disconnected", addr,
				 route, est, sent, disc);
			if (rdma_disconnect(ids[wc.wr_id]))
				die("client", "rdma_disconnect");
		}
	}
	for (i = 0; i < n_conns; i++) {
		rdma_destroy_qp(ids[i]);
		if (rdma_destroy_id(ids[i]))
			die("client", "rdma_destroy_id");
	}
	free(ids);
	rdma_destroy_event_channel(ch);
	printf("client: %d resolved, %d routed, %d established, %d sent, %d disconnected\n", addr,
	       route, est, sent, disc);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "FAIL: the server failed\n");
		return 1;
	}
	if (sent != n_conns || est != n_conns) {
		fprintf(stderr, "FAIL: %d established, %d sent, of %d\n", est, sent, n_conns);
		return 1;
	}
	printf("many_conns: ok (%d connections)\n", n_conns);
	return 0;
}
