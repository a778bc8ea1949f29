/* ibv_create_flow(3) (and ibv_destroy_flow): flow steering rules, only on devices with
 * IBV_DEVICE_MANAGED_FLOW_STEERING and only for UD or raw packet QPs. A soft device has no
 * Ethernet receive path to steer: it does not advertise the capability and refuses the call. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_flow", argc, argv);
	struct ih_dev d;
	struct ih_pair u;
	memset(&u, 0, sizeof u);
	if (ih_dev_open(&d) || ih_pair_make(&d, &u, IBV_QPT_UD, 0)) {
		CLAUSE_BLOCKED("NOTE-CAPABILITY", d.err);
		return conf_end();
	}
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	int cap = !!(da.device_cap_flags & IBV_DEVICE_MANAGED_FLOW_STEERING);
	/* A rule matching one destination MAC on the UD QP. */
	struct {
		struct ibv_flow_attr attr;
		struct ibv_flow_spec_eth eth;
	} __attribute__((packed, aligned(8))) rule;
	memset(&rule, 0, sizeof rule);
	rule.attr.type = IBV_FLOW_ATTR_NORMAL;
	rule.attr.size = sizeof rule;
	rule.attr.num_of_specs = 1;
	rule.attr.port = 1;
	rule.eth.type = IBV_FLOW_SPEC_ETH;
	rule.eth.size = sizeof rule.eth;
	memset(rule.eth.val.dst_mac, 0x02, 6);
	memset(rule.eth.mask.dst_mac, 0xff, 6);
	errno = 0;
	struct ibv_flow *f = ibv_create_flow(u.qp[1], (struct ibv_flow_attr *)(void *)&rule);
	int e = errno;
	/* NOTES: only with IBV_DEVICE_MANAGED_FLOW_STEERING: without it, NULL and errno
	 * (ENXIO: not supported, or EOPNOTSUPP from libibverbs); with it, the rule is created and
	 * ibv_destroy_flow returns 0. */
	int rc = f ? ibv_destroy_flow(f) : -1;
	CLAUSE("NOTE-CAPABILITY", cap ? (f && rc == 0) : (!f && (e == ENXIO || e == EOPNOTSUPP)),
	       "MANAGED_FLOW_STEERING %d: ibv_create_flow %p (%s), destroy %d", cap, (void *)f, conf_errname(e), rc);
	/* NOTES: only UD or raw packet QPs: an RC QP is refused even where steering exists. */
	struct ibv_qp_init_attr qa = ih_qp_attr(IBV_QPT_RC, u.cq[0], 4);
	struct ibv_qp *rq = ibv_create_qp(d.pd, &qa);
	struct ibv_flow *rf = rq ? ibv_create_flow(rq, (struct ibv_flow_attr *)(void *)&rule) : NULL;
	CLAUSE("NOTE-QP-TYPES", rq && !rf, "a rule on an RC QP: %p (%s)", (void *)rf, conf_errname(errno));
	if (rf)
		ibv_destroy_flow(rf);
	if (rq)
		ibv_destroy_qp(rq);
	ih_pair_destroy(&u);
	ih_dev_close(&d);
	return conf_end();
}
