/* bench helper: a process that holds N connected RC QPs and then sits idle, so that bench/run
 * can read how much CPU it uses while nothing happens (utime + stime from /proc/<pid>/stat).
 *
 * The process forks first (before any verbs call); parent and child each open the device and
 * create N QPs on one CQ, swap their QP numbers over pipes, move every QP to RTS towards its
 * partner in the other process, and prove each connection with one SEND each way. Then both
 * print "ready <pid>" on stdout and block in read() on stdin until bench/run closes it.
 *
 * Usage: idle_qps [N]   (default 200). Exit status 0 once stdin is closed, 1 on any failure. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define DIE(...) do { fprintf(stderr, "idle_qps[%d]: ", (int)getpid()); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } while (0)

static void write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			DIE("pipe write: %s", strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void read_all(int fd, void *buf, size_t len)
{
	char *p = buf;
	while (len) {
		ssize_t n = read(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			DIE("pipe read: %s", n == 0 ? "peer closed" : strerror(errno));
		p += n;
		len -= (size_t)n;
	}
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *gid)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		DIE("modify_qp INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
				  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		DIE("modify_qp RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		DIE("modify_qp RTS");
}

/* Polls `want` successful completions from cq, for at most 30 seconds. */
static void poll_n(struct ibv_cq *cq, int want)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	struct ibv_wc wc[32];
	while (want > 0) {
		int n = ibv_poll_cq(cq, 32, wc);
		if (n < 0)
			DIE("poll_cq");
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				DIE("completion status %s", ibv_wc_status_str(wc[i].status));
		want -= n;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > 30)
			DIE("%d completions still missing after 30 s", want);
	}
}

static void side(int n, int rfd, int wfd)
{
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1)
		DIE("no RDMA device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	if (!ctx)
		DIE("open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 2 * n + 16, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("alloc_pd/create_cq");
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("reg_mr");
	union ibv_gid gid;
	if (ibv_query_gid(ctx, 1, 0, &gid))
		DIE("query_gid");

	struct ibv_qp **qp = calloc((size_t)n, sizeof *qp);
	uint32_t *mine = calloc((size_t)n, sizeof *mine), *theirs = calloc((size_t)n, sizeof *theirs);
	for (int i = 0; i < n; i++) {
		struct ibv_qp_init_attr a = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					      .cap = { .max_send_wr = 4, .max_recv_wr = 4,
						       .max_send_sge = 1, .max_recv_sge = 1 } };
		qp[i] = ibv_create_qp(pd, &a);
		if (!qp[i])
			DIE("create_qp %d of %d: %s", i + 1, n, strerror(errno));
		mine[i] = qp[i]->qp_num;
	}
	write_all(wfd, mine, (size_t)n * sizeof *mine);
	read_all(rfd, theirs, (size_t)n * sizeof *theirs);

	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	for (int i = 0; i < n; i++) {
		connect_qp(qp[i], theirs[i], &gid);
		struct ibv_recv_wr rwr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1 }, *bad_r;
		if (ibv_post_recv(qp[i], &rwr, &bad_r))
			DIE("post_recv");
	}
	/* Both sides have posted their receives before either sends. */
	char token = 'x';
	write_all(wfd, &token, 1);
	read_all(rfd, &token, 1);
	for (int i = 0; i < n; i++) {
		struct ibv_send_wr swr = { .wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1,
					   .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad_s;
		if (ibv_post_send(qp[i], &swr, &bad_s))
			DIE("post_send");
	}
	poll_n(cq, 2 * n);   /* n sends and n receives: every connection carried a message */
	printf("ready %d %d\n", (int)getpid(), n);
	fflush(stdout);
	char c;
	while (read(0, &c, 1) > 0)   /* idle until bench/run closes stdin */
		;
	for (int i = 0; i < n; i++)
		ibv_destroy_qp(qp[i]);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 200;
	if (n < 1)
		DIE("bad QP count");
	int a[2], b[2];
	if (pipe(a) || pipe(b))
		DIE("pipe");
	pid_t child = fork();
	if (child < 0)
		DIE("fork");
	if (child == 0) {
		close(a[1]);
		close(b[0]);
		side(n, a[0], b[1]);
		return 0;
	}
	close(a[0]);
	close(b[1]);
	side(n, b[0], a[1]);
	int st;
	if (waitpid(child, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		DIE("the other process failed");
	return 0;
}
