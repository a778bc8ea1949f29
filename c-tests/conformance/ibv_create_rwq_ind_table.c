/* ibv_create_rwq_ind_table(3) (and ibv_destroy_rwq_ind_table): receive WQ indirection tables
 * for RSS. A soft device has neither WQs nor RSS (rss_caps 0): the call fails (NULL). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_rwq_ind_table", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("RET-TABLE", err);
		return conf_end();
	}
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(ctx, NULL, &dx);
	struct ibv_rwq_ind_table_init_attr a;
	memset(&a, 0, sizeof a);
	a.log_ind_tbl_size = 0;
	a.ind_tbl = NULL;
	errno = 0;
	struct ibv_rwq_ind_table *t = dx.rss_caps.max_rwq_indirection_tables ? NULL : ibv_create_rwq_ind_table(ctx, &a);
	int e = errno;
	/* RETURN VALUE: NULL when the request fails: without RSS capabilities, always. */
	CLAUSE("RET-TABLE", dx.rss_caps.max_rwq_indirection_tables || (!t && e != 0),
	       "max_rwq_indirection_tables %u: %p (%s)", dx.rss_caps.max_rwq_indirection_tables, (void *)t, conf_errname(e));
	if (t)
		ibv_destroy_rwq_ind_table(t);
	ibv_close_device(ctx);
	return conf_end();
}
