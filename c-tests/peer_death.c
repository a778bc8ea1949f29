/*
 * A peer killed mid-transfer (issue 9): the survivor streams SENDs, RDMA WRITEs or RDMA READs
 * of 1 MiB to a peer process, which is SIGKILLed while requests are in flight. The survivor must
 * get exactly one completion per request (successes, then an error: IBV_WC_RETRY_EXC_ERR for the
 * first failed one, IBV_WC_WR_FLUSH_ERR after it), and a CM event (DISCONNECTED, or
 * TIMEWAIT_EXIT / UNREACHABLE) within the QP's timeout x retries; then it disconnects and
 * destroys everything without hanging. alarm() turns a hang into a failure.
 *
 *   peer_death            # all three (each in a fresh process): send, write, read
 *   peer_death write      # one
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define MSG (1 << 20)     /* bytes per request */
#define DEPTH 16          /* requests in flight */
#define BEFORE_KILL 64    /* successful completions before the peer is killed */
#define DEADLINE_MS 20000 /* generous bound for the error completion and the CM event */

static int failures;

#define FAIL(...)                                                                                 \
	do {                                                                                      \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                            \
		fputc('\n', stderr);                                                              \
		failures++;                                                                       \
	} while (0)

struct offer {
	uint16_t port;
	uint32_t rkey;
	uint64_t addr;
};

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* The peer: a passive side that serves its memory and reposts receives until killed. */
static void peer(int wfd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *id;
	struct rdma_cm_event *ev;
	struct sockaddr_in a;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct offer o;
	char *buf;
	int i;

	if (!ch || rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP))
		_exit(2);
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_bind_addr(listen, (struct sockaddr *)&a) || rdma_listen(listen, 4))
		_exit(3);
	o.port = ntohs(rdma_get_src_port(listen));
	if (write(wfd, &o.port, sizeof(o.port)) != sizeof(o.port))
		_exit(3);
	if (rdma_get_cm_event(ch, &ev) || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		_exit(4);
	id = ev->id;
	rdma_ack_cm_event(ev);
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = DEPTH;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &qa))
		_exit(5);
	buf = calloc(1, (size_t)DEPTH * MSG);
	mr = buf ? ibv_reg_mr(id->pd, buf, (size_t)DEPTH * MSG,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				      IBV_ACCESS_REMOTE_READ)
		 : NULL;
	if (!mr)
		_exit(6);
	for (i = 0; i < DEPTH; i++) {
		struct ibv_sge s = { (uintptr_t)buf + (size_t)i * MSG, MSG, mr->lkey };
		struct ibv_recv_wr r = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;

		if (ibv_post_recv(id->qp, &r, &bad))
			_exit(7);
	}
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 16;
	if (rdma_accept(id, &cp))
		_exit(8);
	if (rdma_get_cm_event(ch, &ev) || ev->event != RDMA_CM_EVENT_ESTABLISHED)
		_exit(9);
	rdma_ack_cm_event(ev);
	o.rkey = mr->rkey;
	o.addr = (uintptr_t)buf;
	if (write(wfd, &o, sizeof(o)) != sizeof(o))
		_exit(10);
	/* Serve until killed: receives are reposted, one-sided operations need nothing from us. */
	for (;;) {
		int n = ibv_poll_cq(id->recv_cq, 1, &wc);

		if (n < 0)
			_exit(11);
		if (n == 1 && wc.status == IBV_WC_SUCCESS) {
			struct ibv_sge s = { (uintptr_t)buf + wc.wr_id * MSG, MSG, mr->lkey };
			struct ibv_recv_wr r = { .wr_id = wc.wr_id, .sg_list = &s, .num_sge = 1 },
					   *bad;

			if (ibv_post_recv(id->qp, &r, &bad))
				_exit(12);
		} else if (n == 0) {
			usleep(100);
		}
	}
}

static struct rdma_cm_event *get_event(struct rdma_event_channel *ch, int ms)
{
	struct pollfd p = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *ev;

	if (poll(&p, 1, ms) != 1 || rdma_get_cm_event(ch, &ev))
		return NULL;
	return ev;
}

static int expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want)
{
	struct rdma_cm_event *ev = get_event(ch, DEADLINE_MS);
	int ok;

	if (!ev) {
		FAIL("no %s event within %d ms", rdma_event_str(want), DEADLINE_MS);
		return -1;
	}
	ok = ev->event == want && ev->status == 0;
	if (!ok)
		FAIL("event %s (status %d), wanted %s", rdma_event_str(ev->event), ev->status,
		     rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok ? 0 : -1;
}

static int post(struct rdma_cm_id *id, struct ibv_mr *mr, char *buf, const struct offer *o,
		enum ibv_wr_opcode op, uint64_t n)
{
	int slot = n % DEPTH;
	struct ibv_sge s = { (uintptr_t)buf + (size_t)slot * MSG, MSG, mr->lkey };
	struct ibv_send_wr w, *bad;

	memset(&w, 0, sizeof(w));
	w.wr_id = n;
	w.sg_list = &s;
	w.num_sge = 1;
	w.opcode = op;
	w.send_flags = IBV_SEND_SIGNALED;
	w.wr.rdma.remote_addr = o->addr + (uint64_t)slot * MSG;
	w.wr.rdma.rkey = o->rkey;
	return ibv_post_send(id->qp, &w, &bad);
}

static void scenario(const char *name, enum ibv_wr_opcode op)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in a;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	struct ibv_mr *mr = NULL;
	struct offer o;
	uint64_t posted = 0, done = 0, ok = 0, errors = 0;
	unsigned first_error = 0;
	int fds[2], status, dead = 0;
	long long t_kill = 0, t_err = 0;
	char *buf = NULL;
	pid_t pid;

	printf("--- %s: the peer is killed while %d requests of %d bytes are in flight\n", name,
	       DEPTH, MSG);
	fflush(stdout);
	if (pipe(fds) || !ch) {
		FAIL("%s: setup", name);
		return;
	}
	pid = fork();
	if (pid == 0) {
		close(fds[0]);
		peer(fds[1]);
	}
	close(fds[1]);
	memset(&o, 0, sizeof(o));
	if (read(fds[0], &o.port, sizeof(o.port)) != sizeof(o.port)) {
		FAIL("%s: the peer did not start", name);
		goto reap;
	}
	memset(&a, 0, sizeof(a));
	a.sin_family = AF_INET;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	a.sin_port = htons(o.port);
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ||
	    expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED) || rdma_resolve_route(id, 2000) ||
	    expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED)) {
		FAIL("%s: resolving the peer", name);
		goto reap;
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = DEPTH;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	buf = calloc(1, (size_t)DEPTH * MSG);
	if (rdma_create_qp(id, NULL, &qa) || !buf ||
	    !(mr = ibv_reg_mr(id->pd, buf, (size_t)DEPTH * MSG, IBV_ACCESS_LOCAL_WRITE))) {
		FAIL("%s: QP or MR", name);
		goto reap;
	}
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 16;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp) || expect_event(ch, RDMA_CM_EVENT_ESTABLISHED) ||
	    read(fds[0], &o, sizeof(o)) != sizeof(o)) {
		FAIL("%s: connecting", name);
		goto reap;
	}
	/* Stream: keep DEPTH requests in flight; kill the peer after BEFORE_KILL completions and
	 * keep streaming until the first error completion; go on until every posted request has
	 * its completion. SIGKILL is asynchronous: the peer may still serve all of the requests in
	 * flight at the kill before it dies (they then succeed, as on hardware), but the requests
	 * posted after its death must fail. */
	while (done < posted || !dead) {
		struct ibv_wc wc[DEPTH];
		int n, i;

		while (!errors && posted - done < DEPTH) {
			if (post(id, mr, buf, &o, op, posted)) {
				FAIL("%s: ibv_post_send failed (%s)", name, strerror(errno));
				goto reap;
			}
			posted++;
		}
		if (!dead && ok >= BEFORE_KILL) {
			kill(pid, SIGKILL);
			t_kill = now_ms();
			dead = 1;
		}
		n = ibv_poll_cq(id->send_cq, DEPTH, wc);
		if (n < 0) {
			FAIL("%s: ibv_poll_cq failed", name);
			goto reap;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].wr_id != done) {
				FAIL("%s: completion for request %llu, expected %llu (order, or a lost "
				     "or duplicated completion)",
				     name, (unsigned long long)wc[i].wr_id, (unsigned long long)done);
				goto reap;
			}
			done++;
			if (wc[i].status == IBV_WC_SUCCESS) {
				if (errors)
					FAIL("%s: a success after an error completion", name);
				ok++;
			} else {
				if (!errors) {
					first_error = wc[i].status;
					t_err = now_ms();
				} else if (wc[i].status != IBV_WC_WR_FLUSH_ERR) {
					FAIL("%s: later error completion %s, expected flushes", name,
					     ibv_wc_status_str(wc[i].status));
				}
				errors++;
			}
		}
		if (dead && now_ms() - t_kill > DEADLINE_MS) {
			FAIL("%s: %llu of %llu requests still without a completion %d ms after the "
			     "peer died",
			     name, (unsigned long long)(posted - done), (unsigned long long)posted,
			     DEADLINE_MS);
			goto reap;
		}
	}
	if (!errors)
		FAIL("%s: no error completion after the peer died", name);
	else if (first_error != IBV_WC_RETRY_EXC_ERR)
		FAIL("%s: first error %s, expected %s", name, ibv_wc_status_str(first_error),
		     ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR));
	printf("%s: %llu requests: %llu succeeded, %llu failed (first: %s, %lld ms after the "
	       "kill)\n",
	       name, (unsigned long long)posted, (unsigned long long)ok,
	       (unsigned long long)errors, errors ? ibv_wc_status_str(first_error) : "-",
	       t_err - t_kill);
	{
		struct rdma_cm_event *ev = get_event(ch, DEADLINE_MS);

		if (!ev) {
			FAIL("%s: no CM event within %d ms of the error", name, DEADLINE_MS);
		} else {
			if (ev->event != RDMA_CM_EVENT_DISCONNECTED &&
			    ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT &&
			    ev->event != RDMA_CM_EVENT_UNREACHABLE)
				FAIL("%s: CM event %s after the peer died", name,
				     rdma_event_str(ev->event));
			else
				printf("%s: CM event %s\n", name, rdma_event_str(ev->event));
			rdma_ack_cm_event(ev);
		}
	}
	/* Tearing down after the peer's death must not hang (alarm() bounds it). */
	rdma_disconnect(id);
	ibv_dereg_mr(mr);
	rdma_destroy_qp(id);
	if (rdma_destroy_id(id))
		FAIL("%s: rdma_destroy_id: %s", name, strerror(errno));
	free(buf);
reap:
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(fds[0]);
	rdma_destroy_event_channel(ch);
	fflush(stdout);
}

/* Each scenario runs in a process of its own that has not used RDMA before it forks the peer. */
static int run_child(const char *self, const char *which)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		execl(self, self, which, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 1;
	return !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(int argc, char **argv)
{
	int bad = 0;

	if (argc < 2) {
		bad |= run_child("/proc/self/exe", "send");
		bad |= run_child("/proc/self/exe", "write");
		bad |= run_child("/proc/self/exe", "read");
		printf("peer_death: %s\n", bad ? "FAIL" : "ok");
		return bad;
	}
	alarm(120);
	if (!strcmp(argv[1], "send"))
		scenario("send", IBV_WR_SEND);
	else if (!strcmp(argv[1], "write"))
		scenario("write", IBV_WR_RDMA_WRITE);
	else if (!strcmp(argv[1], "read"))
		scenario("read", IBV_WR_RDMA_READ);
	else
		FAIL("unknown scenario %s", argv[1]);
	printf("peer_death %s: %s\n", argv[1], failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
