/* rdma_get_peer_addr(3): the remote address of a connected id (all zeroes otherwise). */
#include "cmhelp.h"

#include <arpa/inet.h>

static int all_zero(const void *p, size_t n)
{
	const unsigned char *c = p;
	for (size_t i = 0; i < n; i++)
		if (c[i])
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_peer_addr", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *fresh = NULL, *b = NULL;

	/* RETURN VALUE: not connected: all zeroes (fresh id, bound id). */
	rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP);
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));
	int rc = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b, (struct sockaddr *)&a) : -1;
	struct sockaddr *s1 = fresh ? rdma_get_peer_addr(fresh) : NULL;
	struct sockaddr *s2 = rc == 0 ? rdma_get_peer_addr(b) : NULL;
	CLAUSE("RET-UNCONNECTED-ZERO", s1 && s2 && all_zero(s1, sizeof(struct sockaddr_storage)) &&
	       all_zero(s2, sizeof(struct sockaddr_storage)),
	       "fresh id zero %d, bound id zero %d", s1 && all_zero(s1, sizeof(struct sockaddr_storage)),
	       s2 && all_zero(s2, sizeof(struct sockaddr_storage)));

	/* RETURN VALUE: the connected peer's address, on both ends (IPv4 and IPv6). */
	for (int v6 = 0; v6 <= 1; v6++) {
		const char *id = v6 ? CLAUSE_ID("RET-CONNECTED-V6") : CLAUSE_ID("RET-CONNECTED-V4");
		struct h_pair pr;
		struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
		struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa, .family = v6 ? AF_INET6 : AF_INET };
		uint16_t port = conf_port(1 + v6);
		if (h_pair_open(&pr, port, &o) != 0) {
			CLAUSE_BLOCKED(id, pr.err);
			continue;
		}
		struct sockaddr *cp = rdma_get_peer_addr(pr.cli), *sp = rdma_get_peer_addr(pr.srv);
		struct sockaddr *cl = rdma_get_local_addr(pr.cli);
		int ok;
		if (v6) {
			struct sockaddr_in6 *c6 = (void *)cp, *s6 = (void *)sp, *l6 = (void *)cl;
			ok = c6->sin6_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&c6->sin6_addr) &&
			     c6->sin6_port == htons(port) && s6->sin6_family == AF_INET6 &&
			     IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr) && s6->sin6_port == l6->sin6_port;
		} else {
			struct sockaddr_in *c4 = (void *)cp, *s4 = (void *)sp, *l4 = (void *)cl;
			ok = c4->sin_family == AF_INET && c4->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
			     c4->sin_port == htons(port) && s4->sin_family == AF_INET &&
			     s4->sin_addr.s_addr == l4->sin_addr.s_addr && s4->sin_port == l4->sin_port;
		}
		CLAUSE(id, ok, "client's peer family %d, server's peer family %d (expected the other end's "
		       "address and port)", cp->sa_family, sp->sa_family);
		h_pair_close(&pr);
	}
	if (fresh)
		rdma_destroy_id(fresh);
	if (b)
		rdma_destroy_id(b);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
