/* rdma_create_ep(3): from rdma_getaddrinfo results, an active endpoint (QP if attributes are
 * given, with the given or a default PD; ready for rdma_connect without resolving) or a passive
 * one (listen at once; requests get a QP); synchronous ids. */
#include "cmhelp.h"

#include <rdma/rdma_verbs.h>

static struct rdma_addrinfo *ai(const char *node, uint16_t port, int passive)
{
	struct rdma_addrinfo hints = { .ai_port_space = RDMA_PS_TCP, .ai_flags = passive ? RAI_PASSIVE : 0 };
	struct rdma_addrinfo *res = NULL;
	char ps[16];
	snprintf(ps, sizeof ps, "%u", port);
	return rdma_getaddrinfo(node, ps, &hints, &res) == 0 ? res : NULL;
}

struct active {
	uint16_t port;
	struct ibv_pd *pd;
	int rc;
	struct ibv_pd *qp_pd;
};

static void *active_thread(void *arg)
{
	struct active *a = arg;
	struct rdma_addrinfo *res = ai("127.0.0.1", a->port, 0);
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);
	a->rc = -1;
	if (res && rdma_create_ep(&id, res, NULL, &qa) == 0) {
		a->rc = rdma_connect(id, NULL);
		if (a->rc == 0)
			rdma_disconnect(id);
		rdma_destroy_ep(id);
	}
	if (res)
		rdma_freeaddrinfo(res);
	return NULL;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_create_ep", argc, argv);
	char err[256] = "";
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 4, 1);

	/* --- active side, against an asynchronous server thread ---------------------------- */
	struct h_server s = { 0 };
	int srv = h_server_start(&s, conf_port(0)) == 0;
	struct rdma_addrinfo *res = ai("127.0.0.1", conf_port(0), 0);
	struct rdma_cm_id *id = NULL;
	struct ibv_qp_init_attr a1 = qa;
	errno = 0;
	int rc = res ? rdma_create_ep(&id, res, NULL, &a1) : -2;
	CLAUSE("RET-0", rc == 0 && id, "active endpoint: %d (%s)", rc, conf_errname(errno));
	/* NOTES: active side + qp_init_attr: a QP is created, on a default PD when none is given. */
	CLAUSE("NOTE-ACTIVE-QP", rc == 0 && id->qp != NULL, "id->qp %p", id ? (void *)id->qp : NULL);
	CLAUSE("NOTE-DEFAULT-PD", rc == 0 && id->qp && id->qp->pd != NULL && id->qp->pd == id->pd,
	       "QP's PD %p, id->pd %p", id && id->qp ? (void *)id->qp->pd : NULL, id ? (void *)id->pd : NULL);
	/* NOTES: no rdma_resolve_addr/route needed: rdma_connect works right away; the id is
	 * synchronous, so the call blocks until ESTABLISHED (kept in id->event). */
	errno = 0;
	int c = rc == 0 && srv ? rdma_connect(id, NULL) : -2;
	CLAUSE("NOTE-CONNECT", c == 0, "rdma_connect on the new endpoint: %d (%s) %s", c, conf_errname(errno),
	       srv ? "" : s.err);
	CLAUSE("NOTE-SYNC", c == 0 && id->event && id->event->event == RDMA_CM_EVENT_ESTABLISHED,
	       "id->event after connect: %s", id && id->event ? rdma_event_str(id->event->event) : "(none)");
	if (c == 0)
		rdma_disconnect(id);
	if (id)
		rdma_destroy_ep(id);

	/* NOTES: the given protection domain is used for the QP. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *probe = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	struct ibv_pd *pd = NULL;
	if (rdma_create_id(ch, &probe, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(probe, (struct sockaddr *)&lo) == 0)
		pd = ibv_alloc_pd(probe->verbs);
	id = NULL;
	struct ibv_qp_init_attr a2 = qa;
	rc = res && pd ? rdma_create_ep(&id, res, pd, &a2) : -2;
	CLAUSE("NOTE-PD", rc == 0 && id->qp && id->qp->pd == pd, "create_ep with a PD: %d, QP's PD %p, given %p",
	       rc, id && id->qp ? (void *)id->qp->pd : NULL, (void *)pd);
	if (rc == 0)
		rdma_destroy_ep(id);
	/* NOTES: without qp_init_attr, no QP. */
	id = NULL;
	rc = res ? rdma_create_ep(&id, res, NULL, NULL) : -2;
	CLAUSE("NOTE-NO-QP", rc == 0 && id->qp == NULL, "create_ep without attributes: %d, QP %p", rc,
	       id ? (void *)id->qp : NULL);
	if (rc == 0)
		rdma_destroy_ep(id);
	if (res)
		rdma_freeaddrinfo(res);
	h_server_stop(&s);

	/* --- passive side: listen at once (no bind), requests get a QP on the saved PD -------- */
	res = ai("127.0.0.1", conf_port(1), 1);
	struct rdma_cm_id *l = NULL;
	struct ibv_qp_init_attr a3 = qa;
	rc = res && pd ? rdma_create_ep(&l, res, pd, &a3) : -2;
	int lr = rc == 0 ? rdma_listen(l, 4) : -2;
	CLAUSE("NOTE-PASSIVE-LISTEN", rc == 0 && lr == 0 && rdma_get_src_port(l) == htons(conf_port(1)),
	       "passive endpoint %d, listen %d (%s), src port %u", rc, lr, conf_errname(errno),
	       l ? ntohs(rdma_get_src_port(l)) : 0);
	if (lr == 0) {
		struct active act = { .port = conf_port(1) };
		pthread_t th;
		pthread_create(&th, NULL, active_thread, &act);
		struct rdma_cm_id *nid = NULL;
		rc = rdma_get_request(l, &nid);
		CLAUSE("NOTE-PASSIVE-QP", rc == 0 && nid->qp && nid->qp->pd == pd,
		       "get_request %d; new id's QP %p on PD %p (saved %p)", rc, nid ? (void *)nid->qp : NULL,
		       nid && nid->qp ? (void *)nid->qp->pd : NULL, (void *)pd);
		if (rc == 0) {
			rdma_accept(nid, NULL);
			pthread_join(th, NULL);
			rdma_disconnect(nid);
			rdma_destroy_ep(nid);
		} else {
			pthread_join(th, NULL);
		}
	} else {
		CLAUSE_BLOCKED("NOTE-PASSIVE-QP", "no listener");
	}
	/* RETURN VALUE: -1/errno: the passive address is in use (EADDRINUSE). */
	struct rdma_cm_id *dup = NULL;
	errno = 0;
	rc = res ? rdma_create_ep(&dup, res, NULL, NULL) : -2;
	CLAUSE("ERR-INUSE", rc == -1 && errno == EADDRINUSE, "second passive endpoint on port %u: %d (%s)",
	       conf_port(1), rc, conf_errname(errno));
	if (rc == 0)
		rdma_destroy_ep(dup);
	if (l)
		rdma_destroy_ep(l);
	if (res)
		rdma_freeaddrinfo(res);
	if (pd)
		ibv_dealloc_pd(pd);
	if (probe)
		rdma_destroy_id(probe);
	rdma_destroy_event_channel(ch);
	(void)err;
	return conf_end();
}
