/* ibv_query_device_ex(3): the extended attributes; orig_attr is ibv_query_device's; the
 * capability fields say what the device offers (0 = unsupported). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_device_ex", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_device_attr_ex x;
	struct ibv_device_attr a;
	memset(&x, 0xa5, sizeof x);
	/* RETURN VALUE: 0 on success (input may be NULL). */
	int rc = ctx ? ibv_query_device_ex(ctx, NULL, &x) : -1;
	CLAUSE("RET-0", rc == 0, "ibv_query_device_ex returned %d (%s)", rc, ctx ? conf_errname(rc) : err);
	if (rc != 0 || ibv_query_device(ctx, &a) != 0) {
		const char *ids[] = { "DESC-ORIG-ATTR", "DESC-PORT-CNT-EX", "DESC-ODP-CAPS", "DESC-TIMESTAMP-MASK",
				      "DESC-CORE-CLOCK", "DESC-MAX-DM-SIZE", "DESC-TSO-CAPS", "DESC-RSS-CAPS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), "no device attributes");
		return conf_end();
	}
	/* orig_attr: what ibv_query_device reports. */
	CLAUSE("DESC-ORIG-ATTR", memcmp(&x.orig_attr, &a, sizeof a) == 0,
	       "orig_attr differs from ibv_query_device (max_qp %d vs %d, max_cqe %d vs %d)", x.orig_attr.max_qp,
	       a.max_qp, x.orig_attr.max_cqe, a.max_cqe);
	/* phys_port_cnt_ex: the port count, not below orig_attr.phys_port_cnt. */
	CLAUSE("DESC-PORT-CNT-EX", x.phys_port_cnt_ex == a.phys_port_cnt, "phys_port_cnt_ex %u, phys_port_cnt %u",
	       x.phys_port_cnt_ex, a.phys_port_cnt);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	/* odp_caps: IBV_ODP_SUPPORT says whether on-demand paging is supported: an ON_DEMAND
	 * registration succeeds exactly when it is advertised. */
	char *buf = calloc(1, 8192);
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND) : NULL;
	int odp = !!(x.odp_caps.general_caps & IBV_ODP_SUPPORT);
	CLAUSE("DESC-ODP-CAPS", pd && odp == (mr != NULL),
	       "general_caps 0x%llx, an ON_DEMAND registration %s", (unsigned long long)x.odp_caps.general_caps,
	       mr ? "succeeded" : "failed");
	if (mr)
		ibv_dereg_mr(mr);
	free(buf);
	/* completion_timestamp_mask (0 = unsupported): a CQ with completion timestamps can be
	 * created exactly when it is not 0. */
	struct ibv_cq_init_attr_ex ca;
	memset(&ca, 0, sizeof ca);
	ca.cqe = 4;
	ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
	struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
	CLAUSE("DESC-TIMESTAMP-MASK", (x.completion_timestamp_mask != 0) == (cq != NULL),
	       "completion_timestamp_mask 0x%llx, a CQ with timestamps %s",
	       (unsigned long long)x.completion_timestamp_mask, cq ? "was created" : "was refused");
	if (cq)
		ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
	/* hca_core_clock (kHz, 0 = unsupported): with a clock, the device's raw clock can be read. */
	struct ibv_values_ex v;
	memset(&v, 0, sizeof v);
	v.comp_mask = IBV_VALUES_MASK_RAW_CLOCK;
	int vr = ibv_query_rt_values_ex(ctx, &v);
	int clock = vr == 0 && (v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK);
	CLAUSE("DESC-CORE-CLOCK", (x.hca_core_clock != 0) == clock,
	       "hca_core_clock %llu kHz, ibv_query_rt_values_ex %d (comp_mask 0x%x)",
	       (unsigned long long)x.hca_core_clock, vr, v.comp_mask);
	/* max_dm_size: device memory can be allocated exactly when it is not 0. */
	struct ibv_alloc_dm_attr da = { .length = 64 };
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	CLAUSE("DESC-MAX-DM-SIZE", (x.max_dm_size >= 64) == (dm != NULL), "max_dm_size %llu, ibv_alloc_dm(64) %s",
	       (unsigned long long)x.max_dm_size, dm ? "succeeded" : "failed");
	if (dm)
		ibv_free_dm(dm);
	/* tso_caps: no TSO without a maximum payload and QP types (a soft device has none). */
	CLAUSE("DESC-TSO-CAPS", (x.tso_caps.max_tso == 0) == (x.tso_caps.supported_qpts == 0),
	       "max_tso %u, supported_qpts 0x%x", x.tso_caps.max_tso, x.tso_caps.supported_qpts);
	/* rss_caps: indirection tables of a size, or none at all. */
	CLAUSE("DESC-RSS-CAPS",
	       (x.rss_caps.max_rwq_indirection_tables == 0) == (x.rss_caps.max_rwq_indirection_table_size == 0),
	       "max_rwq_indirection_tables %u, size %u", x.rss_caps.max_rwq_indirection_tables,
	       x.rss_caps.max_rwq_indirection_table_size);
	if (pd)
		ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return conf_end();
}
