/* rdma_get_local_addr(3): the local address of an id (all zeroes until it is bound). */
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
	conf_begin("rdma_get_local_addr", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *fresh = NULL, *b = NULL, *b6 = NULL, *r = NULL;

	/* RETURN VALUE: an id not bound to an address has an all-zero address. */
	rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP);
	struct sockaddr *s = fresh ? rdma_get_local_addr(fresh) : NULL;
	CLAUSE("RET-UNBOUND-ZERO", s && all_zero(s, sizeof(struct sockaddr_storage)),
	       "unbound id: family %d, not all zero", s ? s->sa_family : -1);

	/* DESCRIPTION: the local IP address (and port) of a bound id: IPv4 ... */
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));
	int rc = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b, (struct sockaddr *)&a) : -1;
	struct sockaddr_in *l = rc == 0 ? (struct sockaddr_in *)rdma_get_local_addr(b) : NULL;
	CLAUSE("RET-BOUND-V4", l && l->sin_family == AF_INET && l->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
	       l->sin_port == htons(conf_port(0)),
	       "bound to 127.0.0.1:%u: family %d, port %u", conf_port(0), l ? l->sin_family : -1,
	       l ? ntohs(l->sin_port) : 0);
	/* ... and IPv6. */
	struct sockaddr_in6 a6;
	h_sin6(&a6, "::1", conf_port(1));
	rc = rdma_create_id(ch, &b6, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b6, (struct sockaddr *)&a6) : -1;
	struct sockaddr_in6 *l6 = rc == 0 ? (struct sockaddr_in6 *)rdma_get_local_addr(b6) : NULL;
	CLAUSE("RET-BOUND-V6", l6 && l6->sin6_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&l6->sin6_addr) &&
	       l6->sin6_port == htons(conf_port(1)),
	       "bound to [::1]:%u: family %d, port %u", conf_port(1), l6 ? l6->sin6_family : -1,
	       l6 ? ntohs(l6->sin6_port) : 0);

	/* An id bound to a device by rdma_resolve_addr has the local address it was given. */
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(2));
	char err[256] = "";
	rc = rdma_create_id(ch, &r, NULL, RDMA_PS_TCP) == 0 ? rdma_resolve_addr(r, NULL, (struct sockaddr *)&dst, 2000) : -1;
	int ev = rc == 0 && h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	l = ev ? (struct sockaddr_in *)rdma_get_local_addr(r) : NULL;
	CLAUSE("RET-RESOLVED", l && l->sin_family == AF_INET && l->sin_addr.s_addr != 0 && l->sin_port != 0,
	       "after ADDR_RESOLVED (%s): family %d, address %s, port %u", err, l ? l->sin_family : -1,
	       l ? inet_ntoa(l->sin_addr) : "-", l ? ntohs(l->sin_port) : 0);

	/* The id of a connection request: the address the listener was reached at. */
	struct h_pair pr;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&pr, conf_port(3), &o) != 0) {
		CLAUSE_BLOCKED("RET-CONNREQ", pr.err);
	} else {
		l = (struct sockaddr_in *)rdma_get_local_addr(pr.srv);
		CLAUSE("RET-CONNREQ", l->sin_family == AF_INET && l->sin_addr.s_addr == htonl(INADDR_LOOPBACK) &&
		       l->sin_port == htons(conf_port(3)),
		       "server id: family %d, %s:%u", l->sin_family, inet_ntoa(l->sin_addr),
		       ntohs(l->sin_port));
		h_pair_close(&pr);
	}
	struct rdma_cm_id *all[] = { fresh, b, b6, r };
	for (size_t i = 0; i < 4; i++)
		if (all[i])
			rdma_destroy_id(all[i]);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
