/* rdma_getaddrinfo(3): address translation for RDMA: 0 and a result list; -1/errno when
 * nothing is given at all; the EAI_* codes of getaddrinfo returned as they are (errno
 * untouched); passive and active results; the hints' QP type and port space; numeric hosts,
 * families; hints-only resolution. No name needs DNS (numeric hosts, /etc/services). */
#include "cmhelp.h"

#include <netdb.h>
#include <arpa/inet.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_getaddrinfo", argc, argv);
	struct rdma_addrinfo *res = NULL;
	struct rdma_addrinfo hints;
	char port[16];
	snprintf(port, sizeof port, "%u", conf_port(0));

	/* RETURN VALUE 0 and a list (active side: destination address filled in). */
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	errno = 0;
	int rc = rdma_getaddrinfo("127.0.0.1", port, &hints, &res);
	struct sockaddr_in *d = res ? (struct sockaddr_in *)res->ai_dst_addr : NULL;
	CLAUSE("RET-0", rc == 0 && res, "returned %d (%s)", rc, conf_errname(errno));
	CLAUSE("ACTIVE-DST", rc == 0 && !(res->ai_flags & RAI_PASSIVE) && d && d->sin_family == AF_INET &&
	       d->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && d->sin_port == htons(conf_port(0)) &&
	       res->ai_dst_len == sizeof(struct sockaddr_in) && res->ai_family == AF_INET,
	       "flags 0x%x, family %d, dst_len %u, dst family %d port %u", res ? res->ai_flags : 0,
	       res ? res->ai_family : -1, res ? res->ai_dst_len : 0, d ? d->sin_family : -1,
	       d ? ntohs(d->sin_port) : 0);
	/* ai_qp_type / ai_port_space: the hint's port space, the matching (RC) QP type. */
	CLAUSE("HINT-PS", rc == 0 && res->ai_port_space == RDMA_PS_TCP && res->ai_qp_type == IBV_QPT_RC,
	       "port space 0x%x, qp type %d", res ? res->ai_port_space : 0, res ? res->ai_qp_type : -1);
	/* ai_next: NULL at the end of the list; lengths match their pointers. */
	int n = 0, consistent = 1;
	for (struct rdma_addrinfo *r = res; r && n < 100; r = r->ai_next, n++) {
		consistent &= (r->ai_src_len == 0) == (r->ai_src_addr == NULL);
		consistent &= (r->ai_route_len == 0) == (r->ai_route == NULL);
		consistent &= (r->ai_connect_len == 0) == (r->ai_connect == NULL);
	}
	CLAUSE("LIST", rc == 0 && n >= 1 && n < 100 && consistent, "%d entries, lengths consistent %d", n,
	       consistent);
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;

	/* RAI_PASSIVE: results for the passive side: source address set, ai_dst_len 0. */
	hints.ai_flags = RAI_PASSIVE;
	rc = rdma_getaddrinfo("127.0.0.1", port, &hints, &res);
	struct sockaddr_in *s = res ? (struct sockaddr_in *)res->ai_src_addr : NULL;
	CLAUSE("PASSIVE", rc == 0 && (res->ai_flags & RAI_PASSIVE) && res->ai_dst_len == 0 && s &&
	       s->sin_family == AF_INET && s->sin_port == htons(conf_port(0)),
	       "returned %d, flags 0x%x, dst_len %u, src family %d port %u", rc, res ? res->ai_flags : 0,
	       res ? res->ai_dst_len : 0, s ? s->sin_family : -1, s ? ntohs(s->sin_port) : 0);
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;
	/* A passive lookup of the service alone (no node): a wildcard source. */
	rc = rdma_getaddrinfo(NULL, port, &hints, &res);
	CLAUSE("PASSIVE-SERVICE-ONLY", rc == 0 && res && res->ai_src_addr && (res->ai_flags & RAI_PASSIVE),
	       "service only: %d (%s)", rc, conf_errname(errno));
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;

	/* Datagram hints: UD QPs on RDMA_PS_UDP. */
	memset(&hints, 0, sizeof hints);
	hints.ai_qp_type = IBV_QPT_UD;
	hints.ai_port_space = RDMA_PS_UDP;
	rc = rdma_getaddrinfo("127.0.0.1", port, &hints, &res);
	CLAUSE("HINT-UD", rc == 0 && res->ai_qp_type == IBV_QPT_UD && res->ai_port_space == RDMA_PS_UDP,
	       "returned %d, qp type %d, port space 0x%x", rc, res ? res->ai_qp_type : -1, res ? res->ai_port_space : 0);
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;

	/* ai_family / IPv6: a numeric IPv6 node. */
	memset(&hints, 0, sizeof hints);
	hints.ai_flags = RAI_NUMERICHOST | RAI_FAMILY;
	hints.ai_family = AF_INET6;
	hints.ai_port_space = RDMA_PS_TCP;
	rc = rdma_getaddrinfo("::1", port, &hints, &res);
	struct sockaddr_in6 *d6 = res ? (struct sockaddr_in6 *)res->ai_dst_addr : NULL;
	CLAUSE("FAMILY-V6", rc == 0 && res->ai_family == AF_INET6 && d6 && d6->sin6_family == AF_INET6 &&
	       IN6_IS_ADDR_LOOPBACK(&d6->sin6_addr), "returned %d, family %d", rc, res ? res->ai_family : -1);
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;

	/* NOTES: without a node, the hints' addresses are used (here ai_dst_addr). */
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(1));
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	hints.ai_qp_type = IBV_QPT_RC;
	hints.ai_family = AF_INET;
	hints.ai_dst_addr = (struct sockaddr *)&dst;
	hints.ai_dst_len = sizeof dst;
	rc = rdma_getaddrinfo(NULL, NULL, &hints, &res);
	d = res ? (struct sockaddr_in *)res->ai_dst_addr : NULL;
	CLAUSE("NOTE-HINTS-ONLY", rc == 0 && d && d->sin_port == htons(conf_port(1)) &&
	       d->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && res->ai_port_space == RDMA_PS_TCP,
	       "returned %d (%s), dst %s", rc, conf_errname(errno), d ? "set" : "missing");
	if (res)
		rdma_freeaddrinfo(res);
	res = NULL;

	/* RETURN VALUE -1/errno: node, service and hints all missing (EINVAL). */
	errno = 0;
	rc = rdma_getaddrinfo(NULL, NULL, NULL, &res);
	CLAUSE("ERR-NOTHING", rc == -1 && errno == EINVAL, "no node, service or hints: %d (%s)", rc,
	       conf_errname(errno));

	/* RETURN VALUE: the EAI_* codes are returned directly, errno as getaddrinfo leaves it. */
	struct { const char *id, *node, *service; int flags, family, want; } eai[] = {
		/* RAI_NUMERICHOST with a name: the node is not known (no lookup is made) */
		{ CLAUSE_ID("EAI-NONAME"), "localhost", "7471", RAI_NUMERICHOST, 0, EAI_NONAME },
		/* an IPv6 number for an IPv4-only request */
		{ CLAUSE_ID("EAI-ADDRFAMILY"), "::1", "7471", RAI_NUMERICHOST | RAI_FAMILY, AF_INET, EAI_ADDRFAMILY },
		/* a family that is not supported */
		{ CLAUSE_ID("EAI-FAMILY"), "127.0.0.1", "7471", RAI_NUMERICHOST | RAI_FAMILY, AF_UNIX, EAI_FAMILY },
		/* a service name that does not exist */
		{ CLAUSE_ID("EAI-SERVICE"), "127.0.0.1", "no-such-rdma-service", RAI_NUMERICHOST, 0, EAI_SERVICE },
	};
	for (size_t i = 0; i < sizeof eai / sizeof eai[0]; i++) {
		/* what getaddrinfo itself leaves in errno for the same request */
		struct addrinfo gh = { .ai_flags = AI_NUMERICHOST, .ai_family = eai[i].family,
				       .ai_socktype = SOCK_STREAM, .ai_protocol = IPPROTO_TCP }, *gr = NULL;
		errno = 4242;
		if (getaddrinfo(eai[i].node, eai[i].service, &gh, &gr) == 0 && gr)
			freeaddrinfo(gr);
		int want_errno = errno;
		memset(&hints, 0, sizeof hints);
		hints.ai_flags = eai[i].flags;
		hints.ai_family = eai[i].family;
		hints.ai_port_space = RDMA_PS_TCP;
		res = NULL;
		errno = 4242;
		rc = rdma_getaddrinfo(eai[i].node, eai[i].service, &hints, &res);
		int e = errno;
		CLAUSE(eai[i].id, rc == eai[i].want && e == want_errno && res == NULL,
		       "%s/%s: returned %d (%s), want %d (%s); errno %d (getaddrinfo leaves %d)", eai[i].node,
		       eai[i].service, rc, rc < 0 && rc != -1 ? gai_strerror(rc) : "-", eai[i].want,
		       gai_strerror(eai[i].want), e, want_errno);
		if (rc == 0 && res)
			rdma_freeaddrinfo(res);
	}
	return conf_end();
}
