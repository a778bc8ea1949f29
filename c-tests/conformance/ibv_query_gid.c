/* ibv_query_gid(3): the GID in an entry of a port's GID table; 0 on success, -1 on error. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_gid", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_port_attr p;
	if (!ctx || ibv_query_port(ctx, 1, &p)) {
		const char *ids[] = { "RET-0", "DESC-GID", "DESC-EX", "ERR-INDEX", "ERR-PORT" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), ctx ? "ibv_query_port failed" : err);
		return conf_end();
	}
	union ibv_gid g;
	memset(&g, 0xa5, sizeof g);
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_query_gid(ctx, 1, 0, &g);
	CLAUSE("RET-0", rc == 0, "ibv_query_gid(1, 0) returned %d (%s)", rc, conf_errname(errno));
	/* DESCRIPTION: the GID value of the entry: entry 0 of an active port holds a GID (not zero). */
	static const union ibv_gid zero;
	CLAUSE("DESC-GID", rc == 0 && memcmp(&g, &zero, sizeof g) != 0, "GID 0 is all zeroes");
	/* The same value as the entry ibv_query_gid_ex reports, for every index of the table. */
	int same = 1, idx = -1;
	for (int i = 0; i < p.gid_tbl_len && same; i++) {
		struct ibv_gid_entry e;
		union ibv_gid gi;
		int r1 = ibv_query_gid(ctx, 1, i, &gi);
		int r2 = ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0);
		if (r1 != 0 || (r2 == 0 && memcmp(&gi, &e.gid, sizeof gi) != 0) ||
		    (r2 == ENODATA && memcmp(&gi, &zero, sizeof gi) != 0) || (r2 != 0 && r2 != ENODATA)) {
			same = 0;
			idx = i;
		}
	}
	CLAUSE("DESC-EX", same, "index %d: ibv_query_gid and ibv_query_gid_ex disagree", idx);
	/* RETURN VALUE: -1 on error: an index beyond the table, a port the device lacks. */
	int bi = ibv_query_gid(ctx, 1, p.gid_tbl_len, &g);
	CLAUSE("ERR-INDEX", bi == -1, "index %d (gid_tbl_len): %d", p.gid_tbl_len, bi);
	int bp = ibv_query_gid(ctx, 2, 0, &g);
	int bp0 = ibv_query_gid(ctx, 0, 0, &g);
	CLAUSE("ERR-PORT", bp == -1 && bp0 == -1, "port 2: %d, port 0: %d", bp, bp0);
	ibv_close_device(ctx);
	return conf_end();
}
