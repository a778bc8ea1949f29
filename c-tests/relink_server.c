/*
 * relink_server: the passive side of a synchronous rdma_cm exchange over RC, built against
 * rdmashim's include/rdma/rdma_verbs.h, whose helpers (rdma_reg_msgs, rdma_post_recv,
 * rdma_post_send, rdma_get_send_comp, rdma_get_recv_comp, rdma_dereg_mr) are real functions
 * exported by the library rather than rdma-core's static inline code.
 *
 * It accepts one connection, receives a 16-byte message, checks it and its completion,
 * sends it back, checks the send completion, disconnects and cleans up.
 * Prints "relink_server: end 0" and exits 0 on success; prints what failed and exits 1
 * otherwise.
 *
 * Usage: relink_server [-p port] [-t timeout_seconds]
 * Build: cc -Wall -Werror -Iinclude c-tests/relink_server.c -L<build> -lrdmashim
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

#define PROG "relink_server"
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

int main(int argc, char **argv)
{
	const char *port = "7471";
	unsigned int timeout = 60;
	struct rdma_addrinfo hints, *res = NULL;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *listen_id = NULL, *id = NULL;
	struct ibv_mr *recv_mr = NULL, *send_mr = NULL;
	uint8_t recv_buf[MSG_LEN], send_buf[MSG_LEN], expected[MSG_LEN];
	int recv_ctx = 0, send_ctx = 0; /* their addresses are the work request contexts */
	struct ibv_wc wc;
	int ret, i, op;
	int status = 1;

	while ((op = getopt(argc, argv, "p:t:")) != -1) {
		switch (op) {
		case 'p':
			port = optarg;
			break;
		case 't':
			timeout = (unsigned int)strtoul(optarg, NULL, 0);
			break;
		default:
			fprintf(stderr, "usage: %s [-p port] [-t timeout_seconds]\n", argv[0]);
			return 1;
		}
	}

	printf(PROG ": start\n");
	fflush(stdout);
	signal(SIGALRM, on_alarm);
	alarm(timeout);

	/* The message the client sends. */
	for (i = 0; i < MSG_LEN; i++)
		expected[i] = (uint8_t)(0xa0 + i);
	memset(recv_buf, 0, sizeof(recv_buf));
	memset(send_buf, 0, sizeof(send_buf));

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags = RAI_PASSIVE;
	hints.ai_port_space = RDMA_PS_TCP;
	ret = rdma_getaddrinfo(NULL, port, &hints, &res);
	if (ret) {
		fprintf(stderr, PROG ": rdma_getaddrinfo(port %s) failed: ret %d, errno %d (%s)\n",
			port, ret, errno, strerror(errno));
		goto out;
	}

	memset(&attr, 0, sizeof(attr));
	attr.cap.max_send_wr = 1;
	attr.cap.max_recv_wr = 1;
	attr.cap.max_send_sge = 1;
	attr.cap.max_recv_sge = 1;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&listen_id, res, NULL, &attr)) {
		fail("rdma_create_ep (listen)");
		goto out;
	}
	if (rdma_listen(listen_id, 0)) {
		fail("rdma_listen");
		goto out;
	}
	if (rdma_get_request(listen_id, &id)) {
		fail("rdma_get_request");
		goto out;
	}
	if (!id->qp) {
		fprintf(stderr, PROG ": rdma_get_request returned an id without a QP\n");
		goto out;
	}

	recv_mr = rdma_reg_msgs(id, recv_buf, sizeof(recv_buf));
	if (!recv_mr) {
		fail("rdma_reg_msgs (receive buffer)");
		goto out;
	}
	send_mr = rdma_reg_msgs(id, send_buf, sizeof(send_buf));
	if (!send_mr) {
		fail("rdma_reg_msgs (send buffer)");
		goto out;
	}
	if (rdma_post_recv(id, &recv_ctx, recv_buf, sizeof(recv_buf), recv_mr)) {
		fail("rdma_post_recv");
		goto out;
	}
	if (rdma_accept(id, NULL)) {
		fail("rdma_accept");
		goto out;
	}

	memset(&wc, 0, sizeof(wc));
	ret = rdma_get_recv_comp(id, &wc);
	if (ret != 1) {
		if (ret < 0)
			fail("rdma_get_recv_comp");
		else
			fprintf(stderr, PROG ": rdma_get_recv_comp returned %d, expected 1\n", ret);
		goto out;
	}
	if (check_wc("receive", &wc, &recv_ctx, IBV_WC_RECV, 1))
		goto out;
	if (memcmp(recv_buf, expected, MSG_LEN)) {
		fprintf(stderr, PROG ": received bytes differ from what the client sends\n");
		goto out;
	}

	/* Echo the message back through the registered send buffer (not inline). */
	memcpy(send_buf, recv_buf, MSG_LEN);
	if (rdma_post_send(id, &send_ctx, send_buf, sizeof(send_buf), send_mr, 0)) {
		fail("rdma_post_send");
		goto out;
	}
	memset(&wc, 0, sizeof(wc));
	ret = rdma_get_send_comp(id, &wc);
	if (ret != 1) {
		if (ret < 0)
			fail("rdma_get_send_comp");
		else
			fprintf(stderr, PROG ": rdma_get_send_comp returned %d, expected 1\n", ret);
		goto out;
	}
	if (check_wc("send", &wc, &send_ctx, IBV_WC_SEND, 0))
		goto out;

	if (rdma_disconnect(id)) {
		fail("rdma_disconnect");
		goto out;
	}
	status = 0;

out:
	if (send_mr && rdma_dereg_mr(send_mr)) {
		fail("rdma_dereg_mr (send buffer)");
		status = 1;
	}
	if (recv_mr && rdma_dereg_mr(recv_mr)) {
		fail("rdma_dereg_mr (receive buffer)");
		status = 1;
	}
	if (id)
		rdma_destroy_ep(id);
	if (listen_id)
		rdma_destroy_ep(listen_id);
	if (res)
		rdma_freeaddrinfo(res);
	printf(PROG ": end %d\n", status);
	return status;
}
