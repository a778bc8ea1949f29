/* rdma_set_option(3): RDMA_OPTION_ID_TOS (uint8_t), _REUSEADDR (int: other ids may bind the
 * same address), _AFONLY (int: IPV6_V6ONLY), _ACK_TIMEOUT (uint8_t); 0 on success, -1/errno
 * for a wrong size or an unknown option or level. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_set_option", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	rdma_create_id(ch, &id, NULL, RDMA_PS_TCP);
	uint8_t tos = 32, ack = 14;
	int one = 1;

	/* RETURN VALUE 0 for each option with its documented size. */
	errno = 0;
	int r1 = id ? rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &tos, sizeof tos) : -2;
	CLAUSE("OPT-TOS", r1 == 0, "TOS (uint8_t): %d (%s)", r1, conf_errname(errno));
	errno = 0;
	int r2 = id ? rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &ack, sizeof ack) : -2;
	CLAUSE("OPT-ACK-TIMEOUT", r2 == 0, "ACK_TIMEOUT (uint8_t): %d (%s)", r2, conf_errname(errno));
	/* RETURN VALUE -1/errno: a size other than the documented one (EINVAL) ... */
	int big = 32;
	errno = 0;
	int r3 = id ? rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &big, sizeof big) : -2;
	CLAUSE("ERR-SIZE", r3 == -1 && errno == EINVAL, "TOS with an int: %d (%s)", r3, conf_errname(errno));
	/* ... an unknown option name or level (ENOSYS). */
	errno = 0;
	int r4 = id ? rdma_set_option(id, RDMA_OPTION_ID, 99, &one, sizeof one) : -2;
	int e4 = errno;
	errno = 0;
	int r5 = id ? rdma_set_option(id, 99, 0, &one, sizeof one) : -2;
	int e5 = errno;
	CLAUSE("ERR-UNKNOWN", r4 == -1 && e4 == ENOSYS && r5 == -1 && e5 == ENOSYS,
	       "unknown option: %d (%s); unknown level: %d (%s)", r4, conf_errname(e4), r5, conf_errname(e5));

	/* REUSEADDR: ids that set it can bind the same address (without it: EADDRINUSE). */
	struct sockaddr_in a;
	h_sin(&a, "127.0.0.1", conf_port(0));
	struct rdma_cm_id *x = NULL, *y = NULL;
	int ok = rdma_create_id(ch, &x, NULL, RDMA_PS_TCP) == 0 && rdma_create_id(ch, &y, NULL, RDMA_PS_TCP) == 0;
	int s1 = ok ? rdma_set_option(x, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) : -2;
	int s2 = ok ? rdma_set_option(y, RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &one, sizeof one) : -2;
	int b1 = s1 == 0 ? rdma_bind_addr(x, (struct sockaddr *)&a) : -2;
	errno = 0;
	int b2 = s2 == 0 && b1 == 0 ? rdma_bind_addr(y, (struct sockaddr *)&a) : -2;
	CLAUSE("OPT-REUSEADDR", s1 == 0 && s2 == 0 && b1 == 0 && b2 == 0,
	       "set %d/%d; first bind %d, second bind of the same address %d (%s)", s1, s2, b1, b2,
	       conf_errname(errno));
	if (x)
		rdma_destroy_id(x);
	if (y)
		rdma_destroy_id(y);

	/* AFONLY: an IPv6 wildcard listener with AFONLY set does not take IPv4 connections. */
	struct sockaddr_in6 any6;
	h_sin6(&any6, "::", conf_port(1));
	struct rdma_cm_id *l = NULL;
	struct rdma_event_channel *lch = rdma_create_event_channel();
	ok = rdma_create_id(lch, &l, NULL, RDMA_PS_TCP) == 0;
	int s3 = ok ? rdma_set_option(l, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) : -2;
	ok = s3 == 0 && rdma_bind_addr(l, (struct sockaddr *)&any6) == 0 && rdma_listen(l, 4) == 0;
	struct rdma_cm_id *c = NULL;
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(1));
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 2, 1);
	int conn = ok && rdma_create_id(ch, &c, NULL, RDMA_PS_TCP) == 0 &&
		   rdma_resolve_addr(c, NULL, (struct sockaddr *)&dst, 2000) == 0 &&
		   h_expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		   rdma_resolve_route(c, 2000) == 0 &&
		   h_expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, H_WAIT_MS, NULL, err, sizeof err) == 0 &&
		   rdma_create_qp(c, NULL, &qa) == 0 && rdma_connect(c, NULL) == 0;
	int quiet = conn ? h_quiet(lch, H_QUIET_MS, err, sizeof err) : 0;
	struct rdma_cm_event *ev = conn ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("OPT-AFONLY", s3 == 0 && conn && quiet && ev && ev->event != RDMA_CM_EVENT_ESTABLISHED,
	       "set %d; IPv4 connect to an AFONLY [::] listener: listener %s, client %s", s3,
	       quiet ? "quiet" : "got a request", ev ? rdma_event_str(ev->event) : "(no event)");
	if (ev)
		rdma_ack_cm_event(ev);
	h_quiet(lch, 10, err, sizeof err);
	if (c) {
		if (c->qp)
			rdma_destroy_qp(c);
		rdma_destroy_id(c);
	}
	if (l)
		rdma_destroy_id(l);
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(lch);
	rdma_destroy_event_channel(ch);
	return conf_end();
}
