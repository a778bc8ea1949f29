/* ibv_query_pkey(3): the P_Key in an entry of a port's partition table, network byte order;
 * 0 on success, -1 on error. */
#include "ibvhelp.h"

#include <arpa/inet.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_query_pkey", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_port_attr p;
	if (!ctx || ibv_query_port(ctx, 1, &p)) {
		const char *ids[] = { "RET-0", "DESC-NETWORK-ORDER", "ERR-INDEX", "ERR-PORT" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), ctx ? "ibv_query_port failed" : err);
		return conf_end();
	}
	__be16 pk = 0x5a5a;
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_query_pkey(ctx, 1, 0, &pk);
	CLAUSE("RET-0", rc == 0, "ibv_query_pkey(1, 0) returned %d", rc);
	/* DESCRIPTION: network byte order: entry 0 holds the default P_Key 0xffff (full member)
	 * on a port with one partition, and in general a key with bits set in its 15-bit number;
	 * ibv_get_pkey_index takes it as it is. */
	uint16_t host = ntohs(pk);
	CLAUSE("DESC-NETWORK-ORDER", rc == 0 && (host & 0x7fff) != 0 && ibv_get_pkey_index(ctx, 1, pk) == 0,
	       "entry 0: 0x%04x in host order, ibv_get_pkey_index %d", host, ibv_get_pkey_index(ctx, 1, pk));
	/* RETURN VALUE: -1 on error: an index beyond the table, a port the device lacks. */
	int bi = ibv_query_pkey(ctx, 1, p.pkey_tbl_len, &pk);
	CLAUSE("ERR-INDEX", bi == -1, "index %u (pkey_tbl_len): %d", p.pkey_tbl_len, bi);
	int bp = ibv_query_pkey(ctx, 2, 0, &pk);
	CLAUSE("ERR-PORT", bp == -1, "port 2: %d", bp);
	ibv_close_device(ctx);
	return conf_end();
}
