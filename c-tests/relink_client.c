/*
 * relink_client: the active side of a synchronous rdma_cm exchange over RC, built against
 * rdmashim's include/rdma/rdma_verbs.h, whose helpers (rdma_reg_msgs, rdma_post_recv,
 * rdma_post_send, rdma_get_send_comp, rdma_get_recv_comp, rdma_dereg_mr) are real functions
 * exported by the library rather than rdma-core's static inline code.
 *
 * It connects to relink_server, sends a 16-byte message (inline with no MR when the QP
 * supports 16 bytes of inline data, otherwise from a registered buffer), waits for the echo,
 * checks the bytes and both completions, disconnects and cleans up. A refused connection (the
 * server is not listening yet) is retried with a fresh endpoint.
 * Prints "relink_client: end 0" and exits 0 on success; prints what failed and exits 1
 * otherwise.
 *
 * Usage: relink_client [-s server] [-p port] [-r retries] [-t timeout_seconds]
 * Build: cc -Wall -Werror -Iinclude c-tests/relink_client.c -L<build> -lrdmashim
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define PROG "relink_client"
#define MSG_LEN 16

static void on_alarm(int sig)
{
	static const char msg[] = PROG ": timed out\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0) {
		/* nothing more we can do */
	}
	_exit(1);
}

/* Reports a failed call with errno (negative values are shown as they are). */
static void fail(const char *what)
{
	int err = errno;

	fprintf(stderr, PROG ": %s failed: errno %d (%s)\n", what, err,
		err > 0 ? strerror(err) : "negative errno");
}

/* Checks one completion: status, wr_id (the context pointer posted), opcode and length. */
static int check_wc(const char *what, const struct ibv_wc *wc, const void *ctx,
		    enum ibv_wc_opcode opcode, int check_len)
{
	if (wc->status != IBV_WC_SUCCESS) {
		fprintf(stderr, PROG ": %s completion: status %d, expected IBV_WC_SUCCESS\n", what,
			(int)wc->status);
		return -1;
	}
	if (wc->wr_id != (uint64_t)(uintptr_t)ctx) {
		fprintf(stderr, PROG ": %s completion: wr_id 0x%llx, expected the context %p\n",
			what, (unsigned long long)wc->wr_id, ctx);
		return -1;
	}
	if (wc->opcode != opcode) {
		fprintf(stderr, PROG ": %s completion: opcode %d, expected %d\n", what,
			(int)wc->opcode, (int)opcode);
		return -1;
	}
	if (check_len && wc->byte_len != MSG_LEN) {
		fprintf(stderr, PROG ": %s completion: byte_len %u, expected %d\n", what,
			wc->byte_len, MSG_LEN);
		return -1;
	}
	return 0;
}

struct conn {
	struct rdma_cm_id *id;
	struct ibv_mr *recv_mr;
	struct ibv_mr *send_mr;
	int inline_ok;
};

/* Deregisters the buffers and destroys the endpoint; returns -1 if a deregistration failed. */
static int teardown(struct conn *c)
{
	int ret = 0;

	if (c->send_mr && rdma_dereg_mr(c->send_mr)) {
		fail("rdma_dereg_mr (send buffer)");
		ret = -1;
	}
	if (c->recv_mr && rdma_dereg_mr(c->recv_mr)) {
		fail("rdma_dereg_mr (receive buffer)");
		ret = -1;
	}
	if (c->id)
		rdma_destroy_ep(c->id);
	memset(c, 0, sizeof(*c));
	return ret;
}

/*
 * Creates the endpoint, registers the buffers, posts the receive and connects.
 * Returns 0 when connected, 1 when the server refused (retry), -1 on any other failure.
 */
static int setup(struct conn *c, struct rdma_addrinfo *res, uint8_t *recv_buf,
		 uint8_t *send_buf, int *recv_ctx)
{
	struct ibv_qp_init_attr attr;

	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = 1;
	attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = MSG_LEN;
	attr.qp_context = NULL;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&c->id, res, NULL, &attr)) {
		fail("rdma_create_ep");
		return -1;
	}
	if (!c->id->qp) {
		fprintf(stderr, PROG ": rdma_create_ep returned an id without a QP\n");
		return -1;
	}
	c->inline_ok = attr.cap.max_inline_data >= MSG_LEN;

	c->recv_mr = rdma_reg_msgs(c->id, recv_buf, MSG_LEN);
	if (!c->recv_mr) {
		fail("rdma_reg_msgs (receive buffer)");
		return -1;
	}
	c->send_mr = rdma_reg_msgs(c->id, send_buf, MSG_LEN);
	if (!c->send_mr) {
		fail("rdma_reg_msgs (send buffer)");
		return -1;
	}
	if (rdma_post_recv(c->id, recv_ctx, recv_buf, MSG_LEN, c->recv_mr)) {
		fail("rdma_post_recv");
		return -1;
	}
	if (rdma_connect(c->id, NULL)) {
		if (errno == ECONNREFUSED)
			return 1;
		fail("rdma_connect");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const char *server = "127.0.0.1";
	const char *port = "7471";
	unsigned int timeout = 60;
	int retries = 50;
	struct rdma_addrinfo hints, *res = NULL;
	struct conn c;
	uint8_t recv_buf[MSG_LEN], send_buf[MSG_LEN];
	int recv_ctx = 0, send_ctx = 0; /* their addresses are the work request contexts */
	struct ibv_wc wc;
	int ret, i, op, attempt;
	int status = 1;

	memset(&c, 0, sizeof(c));
	while ((op = getopt(argc, argv, "s:p:r:t:")) != -1) {
		switch (op) {
		case 's':
			server = optarg;
			break;
		case 'p':
			port = optarg;
			break;
		case 'r':
			retries = atoi(optarg);
			break;
		case 't':
			timeout = (unsigned int)strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr,
				"usage: %s [-s server] [-p port] [-r retries] [-t timeout_seconds]\n",
				argv[0]);
			return 1;
		}
	}

	printf(PROG ": start\n");
	fflush(stdout);
	signal(SIGALRM, on_alarm);
	alarm(timeout);

	memset(&hints, 0, sizeof(hints));
	hints.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo(server, port, &hints, &res);
	if (ret) {
		fprintf(stderr, PROG ": rdma_getaddrinfo(%s, port %s) failed: ret %d, errno %d (%s)\n",
			server, port, ret, errno, strerror(errno));
		goto out;
	}

	for (attempt = 0;; attempt++) {
		memset(recv_buf, 0, sizeof(recv_buf));
		ret = setup(&c, res, recv_buf, send_buf, &recv_ctx);
		if (ret == 0)
			break;
		if (ret < 0)
			goto out;
		if (teardown(&c))
			goto out;
		if (attempt >= retries) {
			fprintf(stderr, PROG ": rdma_connect: refused %d times, giving up\n",
				attempt + 1);
			goto out;
		}
		usleep(100 * 1000);
	}

	for (i = 0; i < MSG_LEN; i++)
		send_buf[i] = (uint8_t)(0xa0 + i);
	/* Like rdma-core's rdma_client: inline data needs no MR (lkey 0). */
	if (c.inline_ok)
		ret = rdma_post_send(c.id, &send_ctx, send_buf, MSG_LEN, NULL, IBV_SEND_INLINE);
	else
		ret = rdma_post_send(c.id, &send_ctx, send_buf, MSG_LEN, c.send_mr, 0);
	if (ret) {
		fail("rdma_post_send");
		goto out;
	}

	memset(&wc, 0, sizeof(wc));
	ret = rdma_get_send_comp(c.id, &wc);
	if (ret != 1) {
		if (ret < 0)
			fail("rdma_get_send_comp");
		else
			fprintf(stderr, PROG ": rdma_get_send_comp returned %d, expected 1\n", ret);
		goto out;
	}
	if (check_wc("send", &wc, &send_ctx, IBV_WC_SEND, 0))
		goto out;

	memset(&wc, 0, sizeof(wc));
	ret = rdma_get_recv_comp(c.id, &wc);
	if (ret != 1) {
		if (ret < 0)
			fail("rdma_get_recv_comp");
		else
			fprintf(stderr, PROG ": rdma_get_recv_comp returned %d, expected 1\n", ret);
		goto out;
	}
	if (check_wc("receive", &wc, &recv_ctx, IBV_WC_RECV, 1))
		goto out;
	if (memcmp(recv_buf, send_buf, MSG_LEN)) {
		fprintf(stderr, PROG ": the echoed bytes differ from the bytes sent\n");
		goto out;
	}

	if (rdma_disconnect(c.id)) {
		fail("rdma_disconnect");
		goto out;
	}
	status = 0;

out:
	if (teardown(&c))
		status = 1;
	if (res)
		rdma_freeaddrinfo(res);
	printf(PROG ": end %d\n", status);
	return status;
}
