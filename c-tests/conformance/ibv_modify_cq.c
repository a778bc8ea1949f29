/* ibv_modify_cq(3): CQ moderation (completions per event, period), per attr_mask; 0 or an
 * errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_modify_cq", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	/* RETURN VALUE: 0 on success: moderation within the device's cq_mod_caps. */
	struct ibv_modify_cq_attr a = { .attr_mask = IBV_CQ_ATTR_MODERATE, .moderate = { .cq_count = 4, .cq_period = 10 } };
	int rc = cq ? ibv_modify_cq(cq, &a) : -1;
	CLAUSE("RET-0", rc == 0 && dx.cq_mod_caps.max_cq_count >= 4, "cq_mod_caps count %u period %u, modify %d (%s)",
	       dx.cq_mod_caps.max_cq_count, dx.cq_mod_caps.max_cq_period, rc, conf_errname(rc));
	/* The errno value on failure: an unknown attr_mask bit. */
	struct ibv_modify_cq_attr u = { .attr_mask = IBV_CQ_ATTR_RESERVED, .moderate = { 1, 1 } };
	int ru = cq ? ibv_modify_cq(cq, &u) : 0;
	CLAUSE("ERR-MASK", cq && ru > 0, "unknown attr_mask bit: %d", ru);
	if (cq)
		ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
