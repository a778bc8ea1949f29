/* rdma_resolve_addr(3): maps a destination to an RDMA address, binding the id to a device
 * (and to the source address if one is given); ADDR_RESOLVED reports the result. */
#include "cmhelp.h"

#include <sys/un.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_resolve_addr", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL, *sid = NULL, *bid = NULL, *v6 = NULL, *fam = NULL, *mix = NULL;
	struct sockaddr_in dst, src;
	h_sin(&dst, "127.0.0.1", conf_port(0));

	/* RETURN VALUE 0; the result arrives as ADDR_RESOLVED (status 0) for this id. */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	errno = 0;
	int rc = id ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -2;
	CLAUSE("RET-0", rc == 0, "returned %d (%s)", rc, conf_errname(errno));
	struct rdma_cm_event *ev = rc == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("EV-RESOLVED", ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->status == 0 && ev->id == id,
	       "event %s status %d", ev ? rdma_event_str(ev->event) : "(none)", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	/* DESCRIPTION: if successful, the id is bound to a local device. */
	CLAUSE("DESC-DEVICE", ev && id->verbs != NULL && id->port_num >= 1,
	       "id->verbs %p, port_num %u", id ? (void *)id->verbs : NULL, id ? id->port_num : 0);
	/* NOTES: with no source address and no earlier bind, a source is chosen (routing). */
	struct sockaddr_in *l = id ? (struct sockaddr_in *)rdma_get_local_addr(id) : NULL;
	CLAUSE("NOTE-AUTO-SOURCE", ev && l && l->sin_family == AF_INET && l->sin_addr.s_addr != 0 &&
	       l->sin_port != 0, "local address family %d, port %u", l ? l->sin_family : -1,
	       l ? ntohs(l->sin_port) : 0);

	/* NOTES: a given source address binds the id as rdma_bind_addr would. */
	h_sin(&src, "127.0.0.1", conf_port(1));
	rc = rdma_create_id(ch, &sid, NULL, RDMA_PS_TCP) == 0 ?
		     rdma_resolve_addr(sid, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000) : -2;
	int ok = rc == 0 && h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	CLAUSE("NOTE-SOURCE-BINDS", ok && rdma_get_src_port(sid) == htons(conf_port(1)),
	       "resolve with source port %u: %d (%s), src port now %u", conf_port(1), rc, err,
	       sid ? ntohs(rdma_get_src_port(sid)) : 0);
	/* NOTES: an id bound before keeps its source address. */
	h_sin(&src, "127.0.0.1", conf_port(2));
	rc = rdma_create_id(ch, &bid, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(bid, (struct sockaddr *)&src) == 0 ?
		     rdma_resolve_addr(bid, NULL, (struct sockaddr *)&dst, 2000) : -2;
	ok = rc == 0 && h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	CLAUSE("NOTE-BOUND-KEPT", ok && rdma_get_src_port(bid) == htons(conf_port(2)),
	       "bound to %u then resolved: %d (%s), src port %u", conf_port(2), rc, err,
	       bid ? ntohs(rdma_get_src_port(bid)) : 0);

	/* IPv6 destinations resolve too. */
	struct sockaddr_in6 d6;
	h_sin6(&d6, "::1", conf_port(3));
	rc = rdma_create_id(ch, &v6, NULL, RDMA_PS_TCP) == 0 ? rdma_resolve_addr(v6, NULL, (struct sockaddr *)&d6, 2000) : -2;
	ok = rc == 0 && h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	CLAUSE("DESC-IPV6", ok && rdma_get_local_addr(v6)->sa_family == AF_INET6 && v6->verbs,
	       "resolve [::1]: %d (%s)", rc, err);

	/* RETURN VALUE: -1 and errno: a destination that is not an IP address (EINVAL) ... */
	struct sockaddr_un un = { .sun_family = AF_UNIX, .sun_path = "x" };
	errno = 0;
	rc = rdma_create_id(ch, &fam, NULL, RDMA_PS_TCP) == 0 ? rdma_resolve_addr(fam, NULL, (struct sockaddr *)&un, 2000) : -2;
	CLAUSE("ERR-FAMILY", rc == -1 && errno == EINVAL, "AF_UNIX destination: %d (%s)", rc,
	       conf_errname(errno));
	/* ... and a source of another family than the destination (EINVAL). */
	struct sockaddr_in6 s6;
	h_sin6(&s6, "::1", 0);
	errno = 0;
	rc = rdma_create_id(ch, &mix, NULL, RDMA_PS_TCP) == 0 ?
		     rdma_resolve_addr(mix, (struct sockaddr *)&s6, (struct sockaddr *)&dst, 2000) : -2;
	CLAUSE("ERR-MIXED", rc == -1 && errno == EINVAL, "[::1] source, 127.0.0.1 destination: %d (%s)",
	       rc, conf_errname(errno));
	h_quiet(ch, 50, err, sizeof err);

	struct rdma_cm_id *all[] = { id, sid, bid, v6, fam, mix };
	for (size_t i = 0; i < 6; i++)
		if (all[i])
			rdma_destroy_id(all[i]);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
