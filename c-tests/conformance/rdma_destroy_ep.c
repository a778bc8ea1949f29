/* rdma_destroy_ep(3): destroys the id and everything with it: its QP and SRQ (so their PD can
 * be freed) and its address (so the port can be used again). */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

static struct rdma_addrinfo *ai(uint16_t port, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP, .ai_flags = passive ? RAI_PASSIVE : 0 };
	struct rdma_addrinfo *res = NULL;
	char ps[16];
	snprintf(ps, sizeof ps, "%u", port);
	return rdma_getaddrinfo("127.0.0.1", ps, &hints, &res) == 0 ? res : NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_destroy_ep", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *probe = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	struct ibv_pd *pd = NULL;
	if (rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(probe, (struct sockaddr *)&lo) == 0)
		pd = ibv_alloc_pd(probe->verbs);
	struct rdma_addrinfo *act = ai(conf_port(0), 0), *pas = ai(conf_port(1), 1);

	/* NOTES: the QP goes with the endpoint: afterwards its PD can be deallocated. */
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	int rc = act && pd ? rdma_create_ep(&id, act, pd, &qa) : -2;
	int busy = rc == 0 ? ibv_dealloc_pd(pd) : -2; /* must fail: the QP uses it */
	if (rc == 0)
		rdma_destroy_ep(id);
	int freed = rc == 0 && busy != 0 ? ibv_dealloc_pd(pd) : -2;
	CLAUSE("NOTE-QP", rc == 0 && busy != 0 && freed == 0,
	       "endpoint with QP %d; dealloc_pd while in use %d, after rdma_destroy_ep %d", rc, busy, freed);
	if (freed == 0)
		pd = probe ? ibv_alloc_pd(probe->verbs) : NULL;

	/* NOTES: the SRQ too. */
	id = NULL;
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	rc = act && pd ? rdma_create_ep(&id, act, NULL, NULL) : -2;
	int srq = rc == 0 ? rdma_create_srq(id, pd, &sa) : -2;
	busy = srq == 0 ? ibv_dealloc_pd(pd) : -2;
	if (rc == 0)
		rdma_destroy_ep(id);
	freed = srq == 0 && busy != 0 ? ibv_dealloc_pd(pd) : -2;
	CLAUSE("NOTE-SRQ", srq == 0 && busy != 0 && freed == 0,
	       "endpoint with SRQ %d (%s); dealloc_pd while in use %d, after rdma_destroy_ep %d", srq,
	       conf_errname(errno), busy, freed);
	if (freed == 0)
		pd = NULL;

	/* DESCRIPTION: the identifier and its address are released: a passive endpoint's port can
	 * be used by a new endpoint at once. */
	struct rdma_cm_id *l1 = NULL, *l2 = NULL;
	int r1 = pas ? rdma_create_ep(&l1, pas, NULL, NULL) : -2;
	int lr = r1 == 0 ? rdma_listen(l1, 1) : -2;
	if (r1 == 0)
		rdma_destroy_ep(l1);
	errno = 0;
	int r2 = pas && lr == 0 ? rdma_create_ep(&l2, pas, NULL, NULL) : -2;
	CLAUSE("DESC-RELEASE", r1 == 0 && lr == 0 && r2 == 0,
	       "listening endpoint %d/%d, destroyed, new endpoint on the same port %d (%s)", r1, lr, r2,
	       conf_errname(errno));
	if (r2 == 0)
		rdma_destroy_ep(l2);

	if (act)
		rdma_freeaddrinfo(act);
	if (pas)
		rdma_freeaddrinfo(pas);
	if (pd)
		ibv_dealloc_pd(pd);
	if (probe)
		rdma_destroy_id(probe);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
