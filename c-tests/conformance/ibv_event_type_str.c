/* ibv_event_type_str(3) (and ibv_node_type_str, ibv_port_state_str): a constant string
 * describing an enum value. */
#include "ibvhelp.h"

/* Every value gives a non-empty string, distinct values distinct strings. */
static int distinct(const char *(*f)(int), int lo, int hi, int *bad)
{
	for (int i = lo; i <= hi; i++) {
		const char *a = f(i);
		if (!a || !*a) {
			*bad = i;
			return 0;
		}
		for (int j = lo; j < i; j++)
			if (strcmp(a, f(j)) == 0) {
				*bad = i;
				return 0;
			}
	}
	return 1;
}

static const char *ev(int v) { return ibv_event_type_str((enum ibv_event_type)v); }
static const char *node(int v) { return ibv_node_type_str((enum ibv_node_type)v); }
static const char *port(int v) { return ibv_port_state_str((enum ibv_port_state)v); }

int main(int argc, char **argv)
{
	conf_begin("ibv_event_type_str", argc, argv);
	int bad = 0;
	/* ibv_event_type_str: a description of each event type. */
	CLAUSE("DESC-EVENT", distinct(ev, IBV_EVENT_CQ_ERR, IBV_EVENT_WQ_FATAL, &bad),
	       "event type %d: \"%s\"", bad, ev(bad) ? ev(bad) : "(null)");
	/* ibv_node_type_str: a description of each node type. */
	CLAUSE("DESC-NODE", distinct(node, IBV_NODE_CA, IBV_NODE_UNSPECIFIED, &bad), "node type %d: \"%s\"", bad,
	       node(bad) ? node(bad) : "(null)");
	/* ibv_port_state_str: a description of each port state. */
	CLAUSE("DESC-PORT", distinct(port, IBV_PORT_NOP, IBV_PORT_ACTIVE_DEFER, &bad), "port state %d: \"%s\"", bad,
	       port(bad) ? port(bad) : "(null)");
	/* RETURN VALUE: a constant string: the same pointer every time. */
	CLAUSE("RET-CONSTANT",
	       ev(IBV_EVENT_QP_FATAL) == ev(IBV_EVENT_QP_FATAL) && node(IBV_NODE_CA) == node(IBV_NODE_CA) &&
		       port(IBV_PORT_ACTIVE) == port(IBV_PORT_ACTIVE),
	       "two calls gave different pointers");
	/* A value outside the enum still gives a string, one that describes no known value. */
	const char *u[3] = { ev(1000), node(1000), port(1000) };
	int uok = u[0] && u[1] && u[2] && strcmp(u[0], ev(IBV_EVENT_QP_FATAL)) && strcmp(u[1], node(IBV_NODE_CA)) &&
		  strcmp(u[2], port(IBV_PORT_ACTIVE));
	CLAUSE("RET-UNKNOWN", uok, "1000: \"%s\", \"%s\", \"%s\"", u[0] ? u[0] : "(null)", u[1] ? u[1] : "(null)",
	       u[2] ? u[2] : "(null)");
	return conf_end();
}
