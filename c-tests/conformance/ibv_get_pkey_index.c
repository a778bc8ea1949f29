/* ibv_get_pkey_index(3): the index of a P_Key (network byte order) in a port's table; -1 on
 * error. */
#include "ibvhelp.h"

#include <arpa/inet.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_get_pkey_index", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_port_attr p;
	if (!ctx || ibv_query_port(ctx, 1, &p)) {
		const char *ids[] = { "RET-INDEX", "DESC-EVERY-ENTRY", "ERR-UNKNOWN", "ERR-PORT" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), ctx ? "ibv_query_port failed" : err);
		return conf_end();
	}
	__be16 pk0;
	int q = ibv_query_pkey(ctx, 1, 0, &pk0);
	/* RETURN VALUE: the index of the key: entry 0's key is at index 0. */
	int i0 = q == 0 ? ibv_get_pkey_index(ctx, 1, pk0) : -2;
	CLAUSE("RET-INDEX", i0 == 0, "key 0x%04x of entry 0: index %d", ntohs(pk0), i0);
	/* DESCRIPTION: each key of the table leads back to the first index that holds it. */
	int ok = 1, bad = -1;
	for (int i = 0; i < p.pkey_tbl_len && ok; i++) {
		__be16 k;
		if (ibv_query_pkey(ctx, 1, i, &k) != 0 || k == 0)
			continue;
		int j = ibv_get_pkey_index(ctx, 1, k);
		__be16 kj = 0;
		if (j < 0 || j > i || ibv_query_pkey(ctx, 1, j, &kj) != 0 || kj != k) {
			ok = 0;
			bad = i;
		}
	}
	CLAUSE("DESC-EVERY-ENTRY", ok, "entry %d does not lead back to its key", bad);
	/* RETURN VALUE: -1 for a key that is not in the table. */
	__be16 missing = 0;
	for (uint16_t cand = 0x1234; cand < 0x1300; cand++) {
		int found = 0;
		for (int i = 0; i < p.pkey_tbl_len; i++) {
			__be16 k;
			found |= ibv_query_pkey(ctx, 1, i, &k) == 0 && k == htons(cand);
		}
		if (!found) {
			missing = htons(cand);
			break;
		}
	}
	int mi = ibv_get_pkey_index(ctx, 1, missing);
	CLAUSE("ERR-UNKNOWN", missing && mi == -1, "key 0x%04x (not in the table): %d", ntohs(missing), mi);
	/* -1 on a port the device lacks. */
	int bp = ibv_get_pkey_index(ctx, 2, pk0);
	CLAUSE("ERR-PORT", bp == -1, "port 2: %d", bp);
	ibv_close_device(ctx);
	return conf_end();
}
