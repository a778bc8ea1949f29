/* ibv_create_counters(3) (and ibv_destroy_counters): counters objects, attached to flows.
 * Without flow steering there is nothing to count: EOPNOTSUPP, as the page's ERRORS say for a
 * device that does not support them. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_counters", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("ERR-EOPNOTSUPP", err);
		return conf_end();
	}
	struct ibv_device_attr da;
	ibv_query_device(ctx, &da);
	int steering = !!(da.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING);
	struct ibv_counters_init_attr a = { .comp_mask = 0 };
	errno = 0;
	struct ibv_counters *c = ibv_create_counters(ctx, &a);
	int e = errno;
	int rc = c ? ibv_destroy_counters(c) : -1;
	/* RETURN VALUE / ERRORS: NULL with EOPNOTSUPP (ENOSYS from old libraries) where counters
	 * are not supported; otherwise a counters object that ibv_destroy_counters frees (0). */
	CLAUSE("ERR-EOPNOTSUPP", c ? rc == 0 && steering : (e == EOPNOTSUPP || e == ENOSYS),
	       "flow steering %d: ibv_create_counters %p (%s), destroy %d", steering, (void *)c, conf_errname(e), rc);
	ibv_close_device(ctx);
	return conf_end();
}
