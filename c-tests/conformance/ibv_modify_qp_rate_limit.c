/* ibv_modify_qp_rate_limit(3): packet pacing of a QP. Without packet pacing
 * (packet_pacing_caps.qp_rate_limit_max 0) the device refuses it: EOPNOTSUPP (ENOSYS from old
 * libraries). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_modify_qp_rate_limit", argc, argv);
	struct ih_dev d;
	struct ih_pair u;
	memset(&u, 0, sizeof u);
	if (ih_dev_open(&d) || ih_pair_make(&d, &u, IBV_QPT_UD, 0)) {
		CLAUSE_BLOCKED("ERR-EOPNOTSUPP", d.err);
		return conf_end();
	}
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_qp_rate_limit_attr a = { .rate_limit = 1000, .max_burst_sz = 0, .typical_pkt_sz = 0 };
	int rc = ibv_modify_qp_rate_limit(u.qp[0], &a);
	/* ERRORS: EOPNOTSUPP where it is not implemented for the device; 0 where packet pacing
	 * exists and the rate is within its range. */
	int pacing = dx.packet_pacing_caps.qp_rate_limit_max != 0;
	CLAUSE("ERR-EOPNOTSUPP", pacing ? rc == 0 : (rc == EOPNOTSUPP || rc == ENOSYS),
	       "qp_rate_limit_max %u: %d (%s)", dx.packet_pacing_caps.qp_rate_limit_max, rc, conf_errname(rc));
	ih_pair_destroy(&u);
	ih_dev_close(&d);
	return conf_end();
}
