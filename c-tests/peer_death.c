/*
 * A peer killed mid-transfer (issue 9; across namespaces, issue 8): the survivor streams SENDs,
 * RDMA WRITEs or RDMA READs of 1 MiB to a peer process, which is SIGKILLed (or whose network
 * namespace is deleted) while requests are in flight. The survivor must get exactly one
 * completion per request (successes, then an error: IBV_WC_RETRY_EXC_ERR for the first failed
 * one, IBV_WC_WR_FLUSH_ERR after it), and a CM event (DISCONNECTED, or TIMEWAIT_EXIT /
 * UNREACHABLE) within the QP's timeout x retries (plus a margin); then it disconnects and
 * destroys everything without hanging. alarm() turns a hang into a failure.
 *
 *   peer_death                   # all three (each in a fresh process): send, write, read;
 *                                # the peer is a forked child on loopback, killed by us
 *   peer_death write             # one
 *   peer_death serve IP PORT     # the peer alone, listening on IP:PORT until killed; prints
 *                                # "port N" once it listens
 *   peer_death write IP PORT     # the survivor against that peer (tests/netns/peer_death.py):
 *                                # prints "kill now" once BEFORE_KILL requests succeeded, keeps
 *                                # streaming, and takes a line on stdin as "the peer is dead"
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
#define MARGIN_MS 15000   /* added to timeout x retries: a loaded 2-core host, sanitizers */
#define DEADLINE_MS 20000 /* without a QP timeout to go by (none, or not yet connected) */

static int failures;

#define FAIL(...)                                                                                 \
	do {                                                                                      \
		fprintf(stderr, "FAIL: " __VA_ARGS__);                                            \
		fputc('\n', stderr);                                                              \
		failures++;                                                                       \
	} while (0)

/* The peer's memory, sent as the private data of its accept (REP). */
struct offer {
	uint64_t addr;
	uint32_t rkey;
	uint32_t pad;
};

static long long now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000LL + t.tv_nsec / 1000000;
}

/* IP (v4 or v6) and port as a socket address; -1 if IP is neither. */
static int to_addr(const char *ip, unsigned port, struct sockaddr_storage *ss)
{
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;

	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
		a4->sin_port = htons(port);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
		a6->sin6_family = AF_INET6;
		a6->sin6_port = htons(port);
		return 0;
	}
	return -1;
}

/* The peer: a passive side on IP:PORT that serves its memory and reposts receives until
 * killed. It writes "port N" to `wfd` once it listens. */
static void peer(const char *ip, unsigned port, int wfd)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *listen, *id;
	struct rdma_cm_event *ev;
	struct sockaddr_storage a;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	struct ibv_mr *mr;
	struct ibv_wc wc;
	struct offer o;
	char *buf;
	int i;

	if (!ch || rdma_create_id(ch, &listen, NULL, RDMA_PS_TCP) || to_addr(ip, port, &a))
		_exit(2);
	if (rdma_bind_addr(listen, (struct sockaddr *)&a) || rdma_listen(listen, 4))
		_exit(3);
	if (dprintf(wfd, "port %u\n", ntohs(rdma_get_src_port(listen))) < 0)
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
	memset(&o, 0, sizeof(o));
	o.rkey = mr->rkey;
	o.addr = (uintptr_t)buf;
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 16;
	cp.private_data = &o;
	cp.private_data_len = sizeof(o);
	if (rdma_accept(id, &cp))
		_exit(8);
	if (rdma_get_cm_event(ch, &ev) || ev->event != RDMA_CM_EVENT_ESTABLISHED)
		_exit(9);
	rdma_ack_cm_event(ev);
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

/* The next event must be `want` with status 0; `priv` (if not NULL) receives exactly
 * `priv_len` bytes of its private data, which must hold at least that many. */
static int expect_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want, void *priv,
			size_t priv_len)
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
	if (ok && priv) {
		if (!ev->param.conn.private_data || ev->param.conn.private_data_len < priv_len) {
			FAIL("%s without the peer's %zu bytes of private data", rdma_event_str(want),
			     priv_len);
			ok = 0;
		} else {
			memcpy(priv, ev->param.conn.private_data, priv_len);
		}
	}
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

/* How the survivor kills its peer: a forked child it SIGKILLs itself, or (pid 0) a process
 * elsewhere that its caller kills when told "kill now", answering with a line on stdin. */
struct victim {
	pid_t pid;
};

static void start_kill(const struct victim *v)
{
	if (v->pid > 0) {
		kill(v->pid, SIGKILL);
		return;
	}
	printf("kill now\n");
	fflush(stdout);
}

/* Whether the peer is dead by now (a forked one at once; else once stdin has a line). */
static int peer_dead(const struct victim *v)
{
	struct pollfd p = { 0, POLLIN, 0 };
	char line[64];

	if (v->pid > 0)
		return 1;
	if (poll(&p, 1, 0) != 1)
		return 0;
	/* EOF (the caller went away) counts too: there is nobody to wait for. */
	if (read(0, line, sizeof(line)) < 0)
		return 0;
	return 1;
}

/* timeout x (retry_cnt + 1) of the QP, in ms, plus the margin; DEADLINE_MS without a timeout. */
static int qp_deadline_ms(struct rdma_cm_id *id)
{
	struct ibv_qp_attr attr;
	struct ibv_qp_init_attr init;
	double ms;

	if (ibv_query_qp(id->qp, &attr, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT, &init) ||
	    !attr.timeout || attr.timeout > 31)
		return DEADLINE_MS;
	ms = 4.096e-3 * (double)(1u << attr.timeout) * (attr.retry_cnt + 1);
	printf("QP timeout %u (%.1f ms) x %u retries: %.0f ms (+ %d ms margin)\n", attr.timeout,
	       4.096e-3 * (double)(1u << attr.timeout), attr.retry_cnt, ms, MARGIN_MS);
	return (int)ms + MARGIN_MS;
}

/* Stream `op` to the peer at ip:port, kill it mid-transfer, check what the survivor gets. */
static void scenario(const char *name, enum ibv_wr_opcode op, const char *ip, unsigned port,
		     const struct victim *v)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id;
	struct sockaddr_storage a;
	struct ibv_qp_init_attr qa;
	struct rdma_conn_param cp;
	struct ibv_mr *mr = NULL;
	struct offer o;
	uint64_t posted = 0, done = 0, ok = 0, errors = 0;
	unsigned first_error = 0;
	int dead = 0, killing = 0, deadline_ms;
	uint64_t posted_at_death = 0;
	long long t_kill = 0, t_err = 0;
	char *buf = NULL;

	printf("--- %s: the peer is killed while %d requests of %d bytes are in flight\n", name,
	       DEPTH, MSG);
	fflush(stdout);
	if (!ch || to_addr(ip, port, &a)) {
		FAIL("%s: setup", name);
		return;
	}
	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&a, 2000) ||
	    expect_event(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, 0) ||
	    rdma_resolve_route(id, 2000) ||
	    expect_event(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, 0)) {
		FAIL("%s: resolving the peer", name);
		goto out;
	}
	memset(&qa, 0, sizeof(qa));
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = DEPTH;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	buf = calloc(1, (size_t)DEPTH * MSG);
	if (rdma_create_qp(id, NULL, &qa) || !buf ||
	    !(mr = ibv_reg_mr(id->pd, buf, (size_t)DEPTH * MSG, IBV_ACCESS_LOCAL_WRITE))) {
		FAIL("%s: QP or MR", name);
		goto out;
	}
	memset(&cp, 0, sizeof(cp));
	cp.responder_resources = cp.initiator_depth = 16;
	cp.retry_count = 7;
	cp.rnr_retry_count = 7;
	if (rdma_connect(id, &cp) || expect_event(ch, RDMA_CM_EVENT_ESTABLISHED, &o, sizeof(o))) {
		FAIL("%s: connecting", name);
		goto out;
	}
	deadline_ms = qp_deadline_ms(id);
	/* Stream: keep DEPTH requests in flight; kill the peer after BEFORE_KILL completions and
	 * keep streaming until the first error completion; go on until every posted request has
	 * its completion. A kill is asynchronous: the peer may still serve all of the requests in
	 * flight at the kill before it dies (they then succeed, as on hardware), but the requests
	 * posted after its death must fail. */
	/* Until an error, or a request posted after the death has its completion: with the
	 * direct path a WRITE completes as it is posted, so every request of the moment of
	 * death may be done already. */
	while (done < posted || !dead || (!errors && done <= posted_at_death)) {
		struct ibv_wc wc[DEPTH];
		int n, i;

		while (!errors && posted - done < DEPTH) {
			if (post(id, mr, buf, &o, op, posted)) {
				FAIL("%s: ibv_post_send failed (%s)", name, strerror(errno));
				goto out;
			}
			posted++;
		}
		if (!killing && ok >= BEFORE_KILL) {
			start_kill(v);
			killing = 1;
		}
		if (killing && !dead && peer_dead(v)) {
			t_kill = now_ms();
			dead = 1;
			posted_at_death = posted;
		}
		n = ibv_poll_cq(id->send_cq, DEPTH, wc);
		if (n < 0) {
			FAIL("%s: ibv_poll_cq failed", name);
			goto out;
		}
		for (i = 0; i < n; i++) {
			if (wc[i].wr_id != done) {
				FAIL("%s: completion for request %llu, expected %llu (order, or a lost "
				     "or duplicated completion)",
				     name, (unsigned long long)wc[i].wr_id, (unsigned long long)done);
				goto out;
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
		if (dead && now_ms() - t_kill > deadline_ms && done == posted) {
			FAIL("%s: requests still succeed %d ms after the peer died", name, deadline_ms);
			goto out;
		}
		if (dead && now_ms() - t_kill > deadline_ms) {
			FAIL("%s: %llu of %llu requests still without a completion %d ms after the "
			     "peer died",
			     name, (unsigned long long)(posted - done), (unsigned long long)posted,
			     deadline_ms);
			goto out;
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
		long long left = t_kill + deadline_ms - now_ms();
		struct rdma_cm_event *ev = get_event(ch, left > 0 ? (int)left : 0);

		if (!ev) {
			FAIL("%s: no CM event within %d ms of the peer's death", name, deadline_ms);
		} else {
			if (ev->event != RDMA_CM_EVENT_DISCONNECTED &&
			    ev->event != RDMA_CM_EVENT_TIMEWAIT_EXIT &&
			    ev->event != RDMA_CM_EVENT_UNREACHABLE)
				FAIL("%s: CM event %s after the peer died", name,
				     rdma_event_str(ev->event));
			else
				printf("%s: CM event %s, %lld ms after the kill\n", name,
				       rdma_event_str(ev->event), now_ms() - t_kill);
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
out:
	rdma_destroy_event_channel(ch);
	fflush(stdout);
}

/* The same-host scenario: the peer is a forked child on loopback. */
static void forked(const char *name, enum ibv_wr_opcode op)
{
	struct victim v;
	unsigned port = 0;
	char line[32];
	int fds[2], status;
	ssize_t n;

	if (pipe(fds)) {
		FAIL("%s: pipe", name);
		return;
	}
	v.pid = fork();
	if (v.pid == 0) {
		close(fds[0]);
		peer("127.0.0.1", 0, fds[1]);
	}
	close(fds[1]);
	n = v.pid > 0 ? read(fds[0], line, sizeof(line) - 1) : -1;
	if (n > 0)
		line[n] = 0;
	if (n <= 0 || sscanf(line, "port %u", &port) != 1)
		FAIL("%s: the peer did not start", name);
	else
		scenario(name, op, "127.0.0.1", port, &v);
	if (v.pid > 0) {
		kill(v.pid, SIGKILL);
		waitpid(v.pid, &status, 0);
	}
	close(fds[0]);
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

static int opcode_of(const char *name, enum ibv_wr_opcode *op)
{
	if (!strcmp(name, "send"))
		*op = IBV_WR_SEND;
	else if (!strcmp(name, "write"))
		*op = IBV_WR_RDMA_WRITE;
	else if (!strcmp(name, "read"))
		*op = IBV_WR_RDMA_READ;
	else
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	enum ibv_wr_opcode op;
	int bad = 0;

	if (argc < 2) {
		bad |= run_child("/proc/self/exe", "send");
		bad |= run_child("/proc/self/exe", "write");
		bad |= run_child("/proc/self/exe", "read");
		printf("peer_death: %s\n", bad ? "FAIL" : "ok");
		return bad;
	}
	if (argc == 4 && !strcmp(argv[1], "serve")) {
		setvbuf(stdout, NULL, _IONBF, 0);
		peer(argv[2], (unsigned)atoi(argv[3]), 1);
	}
	alarm(120);
	if (opcode_of(argv[1], &op) || (argc != 2 && argc != 4)) {
		fprintf(stderr, "usage: peer_death [send|write|read [IP PORT]] | peer_death serve IP "
				"PORT\n");
		return 2;
	}
	if (argc == 2) {
		forked(argv[1], op);
	} else {
		struct victim v = { 0 };

		scenario(argv[1], op, argv[2], (unsigned)atoi(argv[3]), &v);
	}
	printf("peer_death %s: %s\n", argv[1], failures ? "FAIL" : "ok");
	return failures ? 1 : 0;
}
