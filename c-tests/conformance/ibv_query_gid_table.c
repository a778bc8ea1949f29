/* ibv_query_gid_table(3): the valid GID entries of the device; their number, or a negative
 * errno value (also when the array is too small). */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_gid_table", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_port_attr p;
	if (!ctx || ibv_query_port(ctx, 1, &p)) {
		const char *ids[] = { "RET-COUNT", "DESC-VALID-ONLY", "DESC-ALL-VALID", "ERR-TOO-SMALL", "ARG-MAX-ZERO",
				      "ARG-FLAGS" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), ctx ? "ibv_query_port failed" : err);
		return conf_end();
	}
	size_t max = (size_t)p.gid_tbl_len + 4;
	struct ibv_gid_entry *t = calloc(max, sizeof *t);
	/* RETURN VALUE: the number of entries read, at most max_entries. */
	ssize_t n = ibv_query_gid_table(ctx, t, max, 0);
	CLAUSE("RET-COUNT", n >= 1 && (size_t)n <= max, "returned %zd (max_entries %zu)", n, max);
	/* DESCRIPTION: only valid entries, each as ibv_query_gid_ex reports it. */
	int ok = n >= 1, bad = -1;
	for (ssize_t i = 0; ok && i < n; i++) {
		struct ibv_gid_entry e;
		int r = ibv_query_gid_ex(ctx, t[i].port_num, t[i].gid_index, &e, 0);
		if (r != 0 || memcmp(&e, &t[i], sizeof e) != 0) {
			ok = 0;
			bad = (int)i;
		}
	}
	CLAUSE("DESC-VALID-ONLY", ok, "entry %d is not the valid entry ibv_query_gid_ex reports", bad);
	/* ... and all of them: as many as the indexes of port 1 that hold data. */
	int valid = 0;
	for (int i = 0; i < p.gid_tbl_len; i++) {
		struct ibv_gid_entry e;
		valid += ibv_query_gid_ex(ctx, 1, (uint32_t)i, &e, 0) == 0;
	}
	CLAUSE("DESC-ALL-VALID", n == valid, "%zd entries, %d valid indexes", n, valid);
	/* DESCRIPTION: more valid entries than max_entries: the call fails. */
	ssize_t s = n >= 2 ? ibv_query_gid_table(ctx, t, (size_t)n - 1, 0) : -1;
	CLAUSE("ERR-TOO-SMALL", n >= 2 && s < 0, "max_entries %zd - 1: returned %zd", n, s);
	/* max_entries must not be 0. */
	ssize_t z = ibv_query_gid_table(ctx, t, 0, 0);
	CLAUSE("ARG-MAX-ZERO", z < 0, "max_entries 0: returned %zd", z);
	/* flags must be 0 for now. */
	ssize_t f = ibv_query_gid_table(ctx, t, max, 1);
	CLAUSE("ARG-FLAGS", f < 0, "flags 1: returned %zd", f);
	free(t);
	ibv_close_device(ctx);
	return conf_end();
}
