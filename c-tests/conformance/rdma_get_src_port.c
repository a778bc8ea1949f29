/* rdma_get_src_port(3): the local port of an id, in network byte order; 0 when not bound. */
#include "cmhelp.h"

/* A port whose two bytes differ, so that a byte-order mistake shows. */
static uint16_t asym(uint16_t p)
{
	return (p >> 8) == (p & 0xff) ? (uint16_t)(p + 1) : p;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_src_port", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *fresh = NULL, *b = NULL, *z = NULL;
	uint16_t port = asym(conf_port(0));

	/* RETURN VALUE: 0 when the id is not bound to a port. */
	rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP);
	uint16_t p = fresh ? rdma_get_src_port(fresh) : 1;
	CLAUSE("RET-UNBOUND-0", fresh && p == 0, "unbound id: %u", p);

	/* DESCRIPTION/RETURN VALUE: the bound port, as a 16-bit value in network byte order. */
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", port);
	int rc = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b, (struct sockaddr *)&a) : -1;
	p = rc == 0 ? rdma_get_src_port(b) : 0;
	CLAUSE("RET-PORT-NBO", rc == 0 && p == htons(port),
	       "bound to port %u (0x%04x): returned 0x%04x, expected 0x%04x (network order)", port, port,
	       p, htons(port));

	/* A port chosen by the rdma_cm (bind to port 0) is reported too. */
	h_sin(&a, "127.0.0.1", 0);
	rc = rdma_create_id(ch, &z, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(z, (struct sockaddr *)&a) : -1;
	p = rc == 0 ? rdma_get_src_port(z) : 0;
	struct sockaddr_in *l = z ? (struct sockaddr_in *)rdma_get_local_addr(z) : NULL;
	CLAUSE("RET-EPHEMERAL", rc == 0 && p != 0 && l && p == l->sin_port,
	       "bound to port 0: returned %u, local address port %u", ntohs(p),
	       l ? ntohs(l->sin_port) : 0);

	/* The id of a connection request reports the listener's port as its local port, and the
	 * active side its own (chosen) port. */
	struct h_pair pr;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	uint16_t lport = asym(conf_port(1));
	if (h_pair_open(&pr, lport, &o) != 0) {
		CLAUSE_BLOCKED("RET-CONNECTED", pr.err);
	} else {
		uint16_t s = rdma_get_src_port(pr.srv), c = rdma_get_src_port(pr.cli);
		uint16_t cd = rdma_get_dst_port(pr.srv);
		CLAUSE("RET-CONNECTED", s == htons(lport) && c != 0 && c == cd,
		       "server id 0x%04x (expected 0x%04x), client id 0x%04x, server's peer port 0x%04x", s,
		       htons(lport), c, cd);
		h_pair_close(&pr);
	}
	struct rdma_cm_id *all[] = { fresh, b, z };
	for (size_t i = 0; i < 3; i++)
		if (all[i])
			rdma_destroy_id(all[i]);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
