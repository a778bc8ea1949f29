/* ibv_read_counters(3): reads a counters object. A device without flow steering creates no
 * counters (EOPNOTSUPP), so there is nothing to read: the clause checks that refusal. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_read_counters", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("DESC-NEEDS-COUNTERS", err);
		return conf_end();
	}
	struct ibv_counters_init_attr a = { .comp_mask = 0 };
	errno = 0;
	struct ibv_counters *c = ibv_create_counters(ctx, &a);
	int e = errno;
	int ok;
	if (c) {
		/* A fresh object with no counting point: reading it returns 0 (success). */
		uint64_t v[1] = { 0 };
		ok = ibv_read_counters(c, v, 1, IBV_READ_COUNTERS_ATTR_PREFER_CACHED) == 0;
		ibv_destroy_counters(c);
	} else {
		ok = e == EOPNOTSUPP || e == ENOSYS;
	}
	CLAUSE("DESC-NEEDS-COUNTERS", ok, "counters %p (%s)", (void *)c, conf_errname(e));
	ibv_close_device(ctx);
	return conf_end();
}
