/* rdma_bind_addr(3): binds an id to a local address (specific: also to a device; wildcard
 * allowed; port 0 picks a port), on the passive or the active side. */
#include "cmhelp.h"

#include <sys/un.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_bind_addr", argc, argv);
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL, *id2 = NULL, *w = NULL, *z = NULL, *v6 = NULL, *un = NULL;
	struct sockaddr_in a, any;
	struct sockaddr_in6 a6;
	h_sin(&a, "127.0.0.1", conf_port(0));
	h_sin(&any, "0.0.0.0", conf_port(1));
	h_sin6(&a6, "::1", conf_port(2));

	/* RETURN VALUE: 0 on success; DESCRIPTION: a specific address also binds the device. */
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	errno = 0;
	int rc = id ? rdma_bind_addr(id, (struct sockaddr *)&a) : -2;
	CLAUSE("RET-0", rc == 0, "bind 127.0.0.1:%u returned %d (%s)", conf_port(0), rc,
	       conf_errname(errno));
	CLAUSE("DESC-DEVICE", rc == 0 && id->verbs != NULL && id->port_num >= 1,
	       "after a specific bind id->verbs %p, port_num %u", id ? (void *)id->verbs : NULL,
	       id ? id->port_num : 0);
	rdma_create_id(ch, &v6, NULL, RDMA_PS_TCP);
	rc = v6 ? rdma_bind_addr(v6, (struct sockaddr *)&a6) : -2;
	CLAUSE("DESC-IPV6", rc == 0 && v6->verbs != NULL, "bind [::1]:%u returned %d (%s)",
	       conf_port(2), rc, conf_errname(errno));

	/* DESCRIPTION: the address may be wildcarded (then no device is bound yet). */
	rdma_create_id(ch, &w, NULL, RDMA_PS_TCP);
	rc = w ? rdma_bind_addr(w, (struct sockaddr *)&any) : -2;
	CLAUSE("DESC-WILDCARD", rc == 0 && w->verbs == NULL,
	       "bind 0.0.0.0:%u returned %d (%s), id->verbs %p", conf_port(1), rc, conf_errname(errno),
	       w ? (void *)w->verbs : NULL);

	/* NOTES: port 0 makes the rdma_cm select a port, reported by rdma_get_src_port. */
	struct sockaddr_in zero;
	h_sin(&zero, "127.0.0.1", 0);
	rdma_create_id(ch, &z, NULL, RDMA_PS_TCP);
	rc = z ? rdma_bind_addr(z, (struct sockaddr *)&zero) : -2;
	uint16_t p = rc == 0 ? rdma_get_src_port(z) : 0;
	CLAUSE("NOTE-PORT0", rc == 0 && p != 0, "bind to port 0 returned %d, rdma_get_src_port %u", rc,
	       ntohs(p));

	/* RETURN VALUE: -1 and errno: an address already bound (EADDRINUSE) ... */
	rdma_create_id(ch, &id2, NULL, RDMA_PS_TCP);
	errno = 0;
	rc = id2 ? rdma_bind_addr(id2, (struct sockaddr *)&a) : -2;
	CLAUSE("ERR-INUSE", rc == -1 && errno == EADDRINUSE,
	       "second bind of 127.0.0.1:%u returned %d (%s)", conf_port(0), rc, conf_errname(errno));
	/* ... and an address family that is not an RDMA one (EINVAL). */
	struct sockaddr_un sun = { .sun_family = AF_UNIX, .sun_path = "x" };
	rdma_create_id(ch, &un, NULL, RDMA_PS_TCP);
	errno = 0;
	rc = un ? rdma_bind_addr(un, (struct sockaddr *)&sun) : -2;
	CLAUSE("ERR-FAMILY", rc == -1 && errno == EINVAL, "bind of an AF_UNIX address returned %d (%s)",
	       rc, conf_errname(errno));

	/* NOTES: on the active side, a bind before rdma_resolve_addr fixes the source address. */
	struct rdma_cm_id *act = NULL;
	struct sockaddr_in src, dst;
	h_sin(&src, "127.0.0.1", conf_port(3));
	h_sin(&dst, "127.0.0.1", conf_port(4));
	int ok = rdma_create_id(ch, &act, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_bind_addr(act, (struct sockaddr *)&src) == 0 &&
		 rdma_resolve_addr(act, NULL, (struct sockaddr *)&dst, 2000) == 0;
	char err[256] = "";
	int ev = ok && h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0;
	struct sockaddr_in *l = act ? (struct sockaddr_in *)rdma_get_local_addr(act) : NULL;
	CLAUSE("NOTE-ACTIVE", ok && ev && l && l->sin_family == AF_INET && ntohs(l->sin_port) == conf_port(3) &&
	       l->sin_addr.s_addr == htonl(INADDR_LOOPBACK),
	       "bind+resolve ok %d, event %d (%s), local port %u", ok, ev, err,
	       l ? ntohs(l->sin_port) : 0);

	struct rdma_cm_id *all[] = { id, id2, w, z, v6, un, act };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i])
			rdma_destroy_id(all[i]);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
