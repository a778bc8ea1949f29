/* rdma_event_str(3): a string for every event type; "UNKNOWN EVENT" otherwise. */
#include "clause.h"

#include <rdma/rdma_cma.h>

static const struct {
	enum rdma_cm_event_type ev;
	const char *name;
} names[] = {
	{ RDMA_CM_EVENT_ADDR_RESOLVED, "RDMA_CM_EVENT_ADDR_RESOLVED" },
	{ RDMA_CM_EVENT_ADDR_ERROR, "RDMA_CM_EVENT_ADDR_ERROR" },
	{ RDMA_CM_EVENT_ROUTE_RESOLVED, "RDMA_CM_EVENT_ROUTE_RESOLVED" },
	{ RDMA_CM_EVENT_ROUTE_ERROR, "RDMA_CM_EVENT_ROUTE_ERROR" },
	{ RDMA_CM_EVENT_CONNECT_REQUEST, "RDMA_CM_EVENT_CONNECT_REQUEST" },
	{ RDMA_CM_EVENT_CONNECT_RESPONSE, "RDMA_CM_EVENT_CONNECT_RESPONSE" },
	{ RDMA_CM_EVENT_CONNECT_ERROR, "RDMA_CM_EVENT_CONNECT_ERROR" },
	{ RDMA_CM_EVENT_UNREACHABLE, "RDMA_CM_EVENT_UNREACHABLE" },
	{ RDMA_CM_EVENT_REJECTED, "RDMA_CM_EVENT_REJECTED" },
	{ RDMA_CM_EVENT_ESTABLISHED, "RDMA_CM_EVENT_ESTABLISHED" },
	{ RDMA_CM_EVENT_DISCONNECTED, "RDMA_CM_EVENT_DISCONNECTED" },
	{ RDMA_CM_EVENT_DEVICE_REMOVAL, "RDMA_CM_EVENT_DEVICE_REMOVAL" },
	{ RDMA_CM_EVENT_MULTICAST_JOIN, "RDMA_CM_EVENT_MULTICAST_JOIN" },
	{ RDMA_CM_EVENT_MULTICAST_ERROR, "RDMA_CM_EVENT_MULTICAST_ERROR" },
	{ RDMA_CM_EVENT_ADDR_CHANGE, "RDMA_CM_EVENT_ADDR_CHANGE" },
	{ RDMA_CM_EVENT_TIMEWAIT_EXIT, "RDMA_CM_EVENT_TIMEWAIT_EXIT" },
};

int main(int argc, char **argv)
{
	conf_begin("rdma_event_str", argc, argv);

	/* DESCRIPTION: a string representation of each asynchronous event type. */
	const char *bad = NULL, *got = NULL;
	for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
		const char *s = rdma_event_str(names[i].ev);
		if (!s || strcmp(s, names[i].name) != 0) {
			bad = names[i].name;
			got = s;
			break;
		}
	}
	CLAUSE("DESC-NAMES", bad == NULL, "event %s is described as \"%s\"", bad ? bad : "",
	       got ? got : "(null)");

	/* RETURN VALUE: a pointer to a static string: the same pointer every time, never NULL. */
	const char *a = rdma_event_str(RDMA_CM_EVENT_ESTABLISHED);
	const char *b = rdma_event_str(RDMA_CM_EVENT_ESTABLISHED);
	CLAUSE("RET-STATIC", a && a == b, "two calls returned %p and %p", (const void *)a,
	       (const void *)b);

	/* Values outside the enumeration (rdma-core: "UNKNOWN EVENT"). */
	const int unknown[] = { 16, 17, 100, -1, 0x7fffffff };
	int all = 1;
	int which = 0;
	const char *us = NULL;
	for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
		us = rdma_event_str((enum rdma_cm_event_type)unknown[i]);
		if (!us || strcmp(us, "UNKNOWN EVENT") != 0) {
			all = 0;
			which = unknown[i];
			break;
		}
	}
	CLAUSE("RET-UNKNOWN", all, "event value %d is described as \"%s\"", which, us ? us : "(null)");

	return conf_end();
}
