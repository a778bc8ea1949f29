/* ibv_get_device_guid(3): the device's GUID, in network byte order. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_get_device_guid", argc, argv);
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	struct ibv_context *ctx = list && num > 0 ? ibv_open_device(list[0]) : NULL;
	struct ibv_device_attr a;
	if (!ctx || ibv_query_device(ctx, &a)) {
		CLAUSE_BLOCKED("RET-GUID", "no device to open");
		CLAUSE_BLOCKED("RET-NETWORK-ORDER", "no device to open");
		CLAUSE_BLOCKED("DESC-STABLE", "no device to open");
		return conf_end();
	}
	uint64_t g = ibv_get_device_guid(list[0]);
	/* DESCRIPTION: the GUID of the device: not zero, the node GUID ibv_query_device reports. */
	CLAUSE("RET-GUID", g != 0 && g == a.node_guid, "guid 0x%016llx, node_guid 0x%016llx",
	       (unsigned long long)g, (unsigned long long)a.node_guid);
	/* RETURN VALUE: network byte order: its bytes in memory are the GUID's, most significant
	 * first, as the node_guid (also network order) of ibv_query_device. */
	const uint8_t *b = (const uint8_t *)&g, *na = (const uint8_t *)&a.node_guid;
	CLAUSE("RET-NETWORK-ORDER", memcmp(b, na, 8) == 0 && (be64toh(g) >> 56) == b[0],
	       "first byte 0x%02x, be64toh 0x%016llx", b[0], (unsigned long long)be64toh(g));
	/* The same GUID each time, and for the device behind the context. */
	uint64_t g2 = ibv_get_device_guid(ctx->device);
	CLAUSE("DESC-STABLE", g2 == g, "0x%016llx, then 0x%016llx", (unsigned long long)g, (unsigned long long)g2);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return conf_end();
}
