/* Blocking calls and signals, as with the kernel-backed originals (which block in read()/write()
 * on a device fd): a signal whose handler was installed without SA_RESTART ends the call with
 * -1/EINTR; with SA_RESTART the call goes on waiting and returns the event that comes later.
 * Each case runs the call in a thread and sends it SIGUSR1 whenever it is seen asleep, until the
 * call returns. SIGALRM (alarm(60)) is only the safety net that turns a call that never returns
 * into a failure. Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

static const char *step = "setup";
static int handled; /* atomic: the handler runs on the blocked thread */

static void on_usr1(int sig)
{
	(void)sig;
	__atomic_add_fetch(&handled, 1, __ATOMIC_SEQ_CST);
}

static void on_alarm(int sig)
{
	(void)sig;
	static const char m[] = "FAIL signals: a blocked call ignored the signal (60 s safety net): ";
	if (write(2, m, sizeof m - 1) < 0 || write(2, step, strlen(step)) < 0 || write(2, "\n", 1) < 0) {
	}
	_exit(1);
}

static void handler(int flags)
{
	struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = flags };
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0, "sigaction");
}

/* One blocking call, run in a thread. */
struct call {
	int (*fn)(void *);
	void *arg;
	pid_t tid;
	int rc, err;
	volatile int started, returned;
};

static void *run(void *p)
{
	struct call *c = p;
	c->tid = (pid_t)syscall(SYS_gettid);
	__atomic_store_n(&c->started, 1, __ATOMIC_SEQ_CST);
	errno = 0;
	c->rc = c->fn(c->arg);
	c->err = errno;
	__atomic_store_n(&c->returned, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/* Whether thread tid of this process is asleep (state S in /proc). */
static int asleep(pid_t tid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
	FILE *f = fopen(path, "r");
	if (!f)
		return 0;
	size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	char *e = strrchr(buf, ')');
	return e && e[1] == ' ' && e[2] == 'S';
}

static void nap(void)
{
	struct timespec t = { 0, 5 * 1000 * 1000 };
	nanosleep(&t, NULL);
}

/* Starts the call; sends SIGUSR1 each time it is seen asleep, `signals` times (0: until it
 * returns); returns with the call still running (signals > 0) or finished. */
static void start(struct call *c, pthread_t *th, int signals)
{
	CHECK(pthread_create(th, NULL, run, c) == 0, "pthread_create");
	while (!__atomic_load_n(&c->started, __ATOMIC_SEQ_CST))
		nap();
	for (int sent = 0; signals == 0 || sent < signals;) {
		if (__atomic_load_n(&c->returned, __ATOMIC_SEQ_CST))
			break;
		if (asleep(c->tid)) {
			int before = __atomic_load_n(&handled, __ATOMIC_SEQ_CST);
			pthread_kill(*th, SIGUSR1);
			sent++;
			while (__atomic_load_n(&handled, __ATOMIC_SEQ_CST) == before)
				nap();
		}
		nap();
	}
}

static void expect_eintr(const char *name, int (*fn)(void *), void *arg)
{
	step = name;
	struct call c = { .fn = fn, .arg = arg };
	pthread_t th;
	start(&c, &th, 0);
	pthread_join(th, NULL);
	CHECK(c.rc == -1 && c.err == EINTR, "%s: returned %d, errno %s (want -1, EINTR)", name, c.rc,
	      strerror(c.err));
	printf("ok %s: -1/EINTR on a signal without SA_RESTART\n", name);
}

static struct rdma_event_channel *cm_ch;
static struct ibv_comp_channel *comp_ch;
static struct ibv_context *vctx;
static struct rdma_cm_id *listener, *client;
static struct rdma_cm_event *got_ev;

static int get_cm_event(void *a)
{
	(void)a;
	return rdma_get_cm_event(cm_ch, &got_ev);
}

static int get_cq_event(void *a)
{
	(void)a;
	struct ibv_cq *cq;
	void *ctx;
	return ibv_get_cq_event(comp_ch, &cq, &ctx);
}

static int get_async_event(void *a)
{
	(void)a;
	struct ibv_async_event ev;
	return ibv_get_async_event(vctx, &ev);
}

static int get_request(void *a)
{
	(void)a;
	struct rdma_cm_id *id;
	return rdma_get_request(listener, &id);
}

static int get_recv_comp(void *a)
{
	(void)a;
	struct ibv_wc wc;
	return rdma_get_recv_comp(client, &wc);
}

static int connect_sync(void *a)
{
	(void)a;
	return rdma_connect(client, NULL);
}

int main(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	sigaction(SIGALRM, &sa, NULL);
	alarm(60);
	handler(0);

	/* An event channel with nothing pending. */
	cm_ch = rdma_create_event_channel();
	CHECK(cm_ch, "create_event_channel");
	expect_eintr("rdma_get_cm_event", get_cm_event, NULL);

	/* A completion channel with nothing pending, and a context's async events. */
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "device list");
	vctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	CHECK(vctx, "open_device");
	comp_ch = ibv_create_comp_channel(vctx);
	CHECK(comp_ch, "create_comp_channel");
	expect_eintr("ibv_get_cq_event", get_cq_event, NULL);
	expect_eintr("ibv_get_async_event", get_async_event, NULL);

	/* Synchronous ids (rdma_create_ep): a listener that no one connects to, then a client with
	 * a QP whose receive CQ stays empty, then a connect that no one accepts. */
	struct rdma_addrinfo hints = { .ai_flags = RAI_PASSIVE, .ai_port_space = RDMA_PS_TCP }, *rai;
	CHECK(rdma_getaddrinfo("127.0.0.1", "0", &hints, &rai) == 0, "getaddrinfo passive");
	CHECK(rdma_create_ep(&listener, rai, NULL, NULL) == 0, "create_ep listener: %s", strerror(errno));
	rdma_freeaddrinfo(rai);
	CHECK(rdma_listen(listener, 4) == 0, "listen");
	expect_eintr("rdma_get_request", get_request, NULL);

	char port[16];
	snprintf(port, sizeof port, "%u", ntohs(rdma_get_src_port(listener)));
	struct rdma_addrinfo ah = { .ai_port_space = RDMA_PS_TCP };
	CHECK(rdma_getaddrinfo("127.0.0.1", port, &ah, &rai) == 0, "getaddrinfo active");
	struct ibv_qp_init_attr qa = { .qp_type = IBV_QPT_RC, .sq_sig_all = 1,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	CHECK(rdma_create_ep(&client, rai, NULL, &qa) == 0, "create_ep client: %s", strerror(errno));
	rdma_freeaddrinfo(rai);
	expect_eintr("rdma_get_recv_comp", get_recv_comp, NULL);
	expect_eintr("rdma_connect (sync id)", connect_sync, NULL);

	/* SA_RESTART: the signals are handled and the call keeps waiting; it returns the event
	 * that arrives afterwards. */
	step = "rdma_get_cm_event with SA_RESTART";
	handler(SA_RESTART);
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(cm_ch, &id, NULL, RDMA_PS_TCP) == 0, "create_id");
	struct call c = { .fn = get_cm_event };
	pthread_t th;
	int before = __atomic_load_n(&handled, __ATOMIC_SEQ_CST);
	start(&c, &th, 3);
	CHECK(!__atomic_load_n(&c.returned, __ATOMIC_SEQ_CST), "returned on a signal with SA_RESTART");
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr");
	pthread_join(th, NULL);
	CHECK(c.rc == 0 && got_ev && got_ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	      "after %d handled signals: returned %d (%s)", __atomic_load_n(&handled, __ATOMIC_SEQ_CST) - before, c.rc, strerror(c.err));
	printf("ok rdma_get_cm_event: %d signals with SA_RESTART handled while blocked, then the event\n",
	       __atomic_load_n(&handled, __ATOMIC_SEQ_CST) - before);
	rdma_ack_cm_event(got_ev);
	rdma_destroy_id(id);
	return 0;
}
