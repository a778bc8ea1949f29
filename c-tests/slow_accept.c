/* c-tests/slow_accept.c: a server that takes longer to accept than the CM's request retries
 * last without an MRA (9 response timeouts, ~9.7 s): the passive CM answers the requester's
 * resent REQs with MRAs, so the requester waits and the connection is established when the
 * application finally accepts, as with the kernel's rdma_cm (tests/netns/slow_accept.py runs
 * it across two namespaces).
 *
 *   slow_accept serve ADDR PORT DELAY_S     accept one connection DELAY_S seconds after its
 *                                           request arrives
 *   slow_accept connect ADDR PORT           connect; print the seconds rdma_connect took */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static int fail(const char *what)
{
	perror(what);
	return 1;
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	int serve = argc == 5 && strcmp(argv[1], "serve") == 0;
	if (!serve && !(argc == 4 && strcmp(argv[1], "connect") == 0)) {
		fprintf(stderr, "usage: slow_accept serve ADDR PORT DELAY_S | connect ADDR PORT\n");
		return 2;
	}
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP }, *res;
	if (serve)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(argv[2], argv[3], &hints, &res))
		return fail("rdma_getaddrinfo");
	struct ibv_qp_init_attr attr = {
		.cap = { .max_send_wr = 4, .max_recv_wr = 4, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	struct rdma_cm_id *id;
	if (serve) {
		struct rdma_cm_id *listen_id;
		if (rdma_create_ep(&listen_id, res, NULL, &attr) || rdma_listen(listen_id, 1))
			return fail("listen");
		printf("listening\n");
		if (rdma_get_request(listen_id, &id))
			return fail("rdma_get_request");
		printf("request; accepting in %s s\n", argv[4]);
		sleep((unsigned)atoi(argv[4]));
		if (rdma_accept(id, NULL))
			return fail("rdma_accept");
		printf("accepted\n");
		/* The client disconnects; ours answers it. */
		rdma_disconnect(id);
		rdma_destroy_ep(id);
		rdma_destroy_ep(listen_id);
	} else {
		if (rdma_create_ep(&id, res, NULL, &attr))
			return fail("rdma_create_ep");
		double t0 = now();
		if (rdma_connect(id, NULL))
			return fail("rdma_connect");
		printf("connected after %.1f s\n", now() - t0);
		rdma_disconnect(id);
		rdma_destroy_ep(id);
	}
	rdma_freeaddrinfo(res);
	printf("ok\n");
	return 0;
}
