/* ibv_query_ece(3): the QP's current ECE options (vendor id, options, comp_mask); 0 or an errno
 * value (EOPNOTSUPP where not supported). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_ece", argc, argv);
	struct ih_dev d;
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	if (ih_dev_open(&d) || ih_pair_make(&d, &p, IBV_QPT_RC, 0)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_ece e;
	memset(&e, 0xa5, sizeof e);
	/* RETURN VALUE: 0, and the QP's ECE state. */
	int rc = ibv_query_ece(p.qp[0], &e);
	CLAUSE("RET-0", rc == 0, "ibv_query_ece: %d (%s)", rc, conf_errname(rc));
	/* ARGUMENTS: the provider's vendor id, as ibv_query_device reports it. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	CLAUSE("ARG-VENDOR-ID", rc == 0 && e.vendor_id == da.vendor_id, "vendor_id 0x%x, device 0x%x", e.vendor_id,
	       da.vendor_id);
	ih_pair_destroy(&p);
	ih_dev_close(&d);
	return conf_end();
}
