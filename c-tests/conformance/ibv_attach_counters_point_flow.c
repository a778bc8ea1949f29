/* ibv_attach_counters_point_flow(3): attaches counters to a flow. It needs a counters object
 * and a flow; a device without flow steering creates neither, so the call is not reachable:
 * the clause checks that both prerequisites are refused the documented way. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_attach_counters_point_flow", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("DESC-NEEDS-COUNTERS", err);
		return conf_end();
	}
	struct ibv_device_attr da;
	ibv_query_device(ctx, &da);
	struct ibv_counters_init_attr a = { .comp_mask = 0 };
	errno = 0;
	struct ibv_counters *c = ibv_create_counters(ctx, &a);
	int e = errno;
	/* With counters, attaching an invalid counter description (an unknown type) gives
	 * ENOTSUP/EINVAL; without, ibv_create_counters said EOPNOTSUPP and there is nothing to
	 * attach. */
	int ok;
	if (c) {
		struct ibv_counter_attach_attr at = { .counter_desc = (enum ibv_counter_description)1000, .index = 0 };
		int rc = ibv_attach_counters_point_flow(c, &at, NULL);
		ok = rc == ENOTSUP || rc == EINVAL;
		ibv_destroy_counters(c);
	} else {
		ok = (e == EOPNOTSUPP || e == ENOSYS) && !(da.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING);
	}
	CLAUSE("DESC-NEEDS-COUNTERS", ok, "counters %p (%s)", (void *)c, conf_errname(e));
	ibv_close_device(ctx);
	return conf_end();
}
