/* What the two-process tests across network namespaces share: the out-of-band TCP exchange
 * (ibv_rc_pingpong's way of swapping QPN, PSN and GID) and moving an RC QP to RTS toward the
 * peer it names. Used by net_stream.c and net_verbs.c. */
#ifndef NET_SIDE_H
#define NET_SIDE_H
#include <netdb.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

/* Moves n bytes over the side channel (out: write, else read), all or fail. */
static inline void xfer(int fd, void *p, size_t n, int out)
{
	for (size_t d = 0; d < n;) {
		ssize_t r = out ? write(fd, (char *)p + d, n - d) : read(fd, (char *)p + d, n - d);
		CHECK(r > 0, "tcp %s", out ? "write" : "read");
		d += r;
	}
}

/* The side channel: a client (host given) connects, retrying for 10 s; a server accepts one
 * connection on port. */
static inline int tcp(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM,
				  .ai_flags = host ? 0 : AI_PASSIVE }, *res;
	CHECK(getaddrinfo(host, port, &hints, &res) == 0, "getaddrinfo");
	int s = socket(res->ai_family, res->ai_socktype, 0);
	CHECK(s >= 0, "socket");
	if (host) {
		for (int i = 0; connect(s, res->ai_addr, res->ai_addrlen) != 0; i++) {
			CHECK(i < 100, "connect");
			usleep(100000);
		}
		freeaddrinfo(res);
		return s;
	}
	int one = 1;
	setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	CHECK(bind(s, res->ai_addr, res->ai_addrlen) == 0 && listen(s, 1) == 0, "listen");
	freeaddrinfo(res);
	int c = accept(s, NULL, NULL);
	CHECK(c >= 0, "accept");
	close(s);
	return c;
}

/* INIT, RTR toward the peer (its QPN, PSN and GID), RTS: every remote access allowed. */
static inline void net_connect_qp(struct ibv_qp *qp, uint32_t my_psn, uint32_t peer_qpn, uint32_t peer_psn,
				  const uint8_t *peer_gid, int gidx)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1,
				 .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096; /* the route's MTU lowers it */
	a.dest_qp_num = peer_qpn;
	a.rq_psn = peer_psn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer_gid, 16);
	a.ah_attr.grh.sgid_index = gidx;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = 1;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) == 0,
	      "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14; /* 67 ms, what the CM sets on a RoCE route */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 4;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC) == 0,
	      "RTS");
}

#endif
