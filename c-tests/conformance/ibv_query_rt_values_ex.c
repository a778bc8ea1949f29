/* ibv_query_rt_values_ex(3): real-time values of the device (the raw clock), marked in
 * comp_mask by the provider; 0 or an errno value. */
#include "ibvhelp.h"

#include <time.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_query_rt_values_ex", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("RET-0", err);
		return conf_end();
	}
	struct ibv_values_ex v;
	memset(&v, 0, sizeof v);
	v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
	/* RETURN VALUE: 0 on success; NOTES: the provider marks the values it filled in. */
	int rc = ibv_query_rt_values_ex(ctx, &v);
	CLAUSE("RET-0", rc == 0 && (v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK), "rc %d (%s), comp_mask 0x%x", rc,
	       conf_errname(rc), v.comp_mask);
	/* The raw clock advances. */
	struct ibv_values_ex v2;
	memset(&v2, 0, sizeof v2);
	v2.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
	struct timespec t = { 0, 2000000 };
	nanosleep(&t, NULL);
	int rc2 = ibv_query_rt_values_ex(ctx, &v2);
	long long a = (long long)v.raw_clock.tv_sec * 1000000000LL + v.raw_clock.tv_nsec;
	long long b2 = (long long)v2.raw_clock.tv_sec * 1000000000LL + v2.raw_clock.tv_nsec;
	CLAUSE("DESC-RAW-CLOCK", rc == 0 && rc2 == 0 && b2 > a, "raw clock %lld then %lld", a, b2);
	ibv_close_device(ctx);
	return conf_end();
}
