/* rdma_get_dst_port(3): the remote port of an id, in network byte order; 0 when not
 * connected. */
#include "cmhelp.h"

static uint16_t asym(uint16_t p)
{
	return (p >> 8) == (p & 0xff) ? (uint16_t)(p + 1) : p;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_get_dst_port", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *fresh = NULL, *b = NULL;

	/* RETURN VALUE: 0 when the id is not connected (fresh, or only bound). */
	rdma_create_id(ch, &fresh, NULL, RDMA_PS_TCP);
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));
	int rc = rdma_create_id(ch, &b, NULL, RDMA_PS_TCP) == 0 ? rdma_bind_addr(b, (struct sockaddr *)&a) : -1;
	uint16_t p1 = fresh ? rdma_get_dst_port(fresh) : 1, p2 = rc == 0 ? rdma_get_dst_port(b) : 1;
	CLAUSE("RET-UNCONNECTED-0", fresh && rc == 0 && p1 == 0 && p2 == 0,
	       "fresh id %u, bound id %u", p1, p2);

	/* DESCRIPTION/RETURN VALUE: the peer's port, network byte order, on both ends. */
	struct h_pair pr;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	uint16_t lport = asym(conf_port(1));
	if (h_pair_open(&pr, lport, &o) != 0) {
		CLAUSE_BLOCKED("RET-PORT-NBO", pr.err);
		CLAUSE_BLOCKED("RET-PASSIVE", pr.err);
	} else {
		uint16_t c = rdma_get_dst_port(pr.cli);
		CLAUSE("RET-PORT-NBO", c == htons(lport),
		       "client: returned 0x%04x, expected 0x%04x (server port %u, network order)", c,
		       htons(lport), lport);
		uint16_t s = rdma_get_dst_port(pr.srv);
		struct sockaddr_in *cl = (struct sockaddr_in *)rdma_get_local_addr(pr.cli);
		CLAUSE("RET-PASSIVE", s != 0 && s == cl->sin_port && s == rdma_get_src_port(pr.cli),
		       "server's id: 0x%04x, client's own port 0x%04x", s, cl->sin_port);
		h_pair_close(&pr);
	}
	if (fresh)
		rdma_destroy_id(fresh);
	if (b)
		rdma_destroy_id(b);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
