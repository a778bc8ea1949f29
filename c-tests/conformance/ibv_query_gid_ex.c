/* ibv_query_gid_ex(3): one GID table entry with its index, port, type and net device; 0 or an
 * errno value; ENODATA for an empty entry inside the table. */
#include "ibvhelp.h"

#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>

/* The interface index that holds the IP address of a RoCE GID (0 if none). */
static unsigned ifindex_of_gid(const union ibv_gid *g)
{
	struct ifaddrs *ifa = NULL, *p;
	unsigned idx = 0;
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	if (getifaddrs(&ifa))
		return 0;
	for (p = ifa; p && !idx; p = p->ifa_next) {
		if (!p->ifa_addr)
			continue;
		if (p->ifa_addr->sa_family == AF_INET && memcmp(g->raw, mapped, 12) == 0 &&
		    memcmp(&((struct sockaddr_in *)p->ifa_addr)->sin_addr, g->raw + 12, 4) == 0)
			idx = if_nametoindex(p->ifa_name);
		if (p->ifa_addr->sa_family == AF_INET6 &&
		    memcmp(&((struct sockaddr_in6 *)p->ifa_addr)->sin6_addr, g->raw, 16) == 0)
			idx = if_nametoindex(p->ifa_name);
	}
	freeifaddrs(ifa);
	return idx;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_query_gid_ex", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	struct ibv_port_attr p;
	if (!ctx || ibv_query_port(ctx, 1, &p)) {
		const char *ids[] = { "RET-0", "ARG-ENTRY", "ARG-GID-TYPE", "ARG-NDEV", "ARG-FLAGS", "ERR-ENODATA",
				      "ERR-INDEX" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), ctx ? "ibv_query_port failed" : err);
		return conf_end();
	}
	struct ibv_gid_entry e;
	memset(&e, 0xa5, sizeof e);
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_query_gid_ex(ctx, 1, 0, &e, 0);
	CLAUSE("RET-0", rc == 0, "ibv_query_gid_ex(1, 0) returned %d", rc);
	/* ARGUMENTS: the entry holds the GID and names its own table index and port. */
	union ibv_gid g;
	int q = ibv_query_gid(ctx, 1, 0, &g);
	CLAUSE("ARG-ENTRY", rc == 0 && q == 0 && memcmp(&g, &e.gid, sizeof g) == 0 && e.gid_index == 0 && e.port_num == 1,
	       "gid_index %u, port_num %u, GID %s ibv_query_gid's", e.gid_index, e.port_num,
	       memcmp(&g, &e.gid, sizeof g) ? "differs from" : "equals");
	/* gid_type: IB, RoCE v1 or RoCE v2 (an Ethernet port has no IB GIDs). */
	int tok = e.gid_type == IBV_GID_TYPE_IB || e.gid_type == IBV_GID_TYPE_ROCE_V1 ||
		  e.gid_type == IBV_GID_TYPE_ROCE_V2;
	if (p.link_layer == IBV_LINK_LAYER_ETHERNET)
		tok &= e.gid_type != IBV_GID_TYPE_IB;
	CLAUSE("ARG-GID-TYPE", rc == 0 && tok, "gid_type %u on link layer %u", e.gid_type, p.link_layer);
	/* ndev_ifindex: the interface of the net device behind each RoCE GID (0 if none). */
	int nok = 1, bad_i = -1;
	unsigned got = 0, want = 0;
	for (int i = 0; i < p.gid_tbl_len && nok; i++) {
		struct ibv_gid_entry ei;
		if (ibv_query_gid_ex(ctx, 1, (uint32_t)i, &ei, 0) != 0 || ei.gid_type == IBV_GID_TYPE_IB)
			continue;
		want = ifindex_of_gid(&ei.gid);
		got = ei.ndev_ifindex;
		if (got != want) {
			nok = 0;
			bad_i = i;
		}
	}
	CLAUSE("ARG-NDEV", nok, "GID index %d: ndev_ifindex %u, the interface with its address is %u", bad_i, got, want);
	/* flags: must be 0 for now: other values are refused. */
	int rf = ibv_query_gid_ex(ctx, 1, 0, &e, 1);
	CLAUSE("ARG-FLAGS", rf != 0, "flags 1: %d", rf);
	/* ERRORS: ENODATA for an index inside the table that holds no GID. */
	int empty = -1;
	for (int i = 0; i < p.gid_tbl_len && empty < 0; i++) {
		union ibv_gid gi;
		static const union ibv_gid zero;
		if (ibv_query_gid(ctx, 1, i, &gi) == 0 && memcmp(&gi, &zero, sizeof gi) == 0)
			empty = i;
	}
	if (empty >= 0) {
		int re = ibv_query_gid_ex(ctx, 1, (uint32_t)empty, &e, 0);
		CLAUSE("ERR-ENODATA", re == ENODATA, "empty index %d: %d (%s)", empty, re, conf_errname(re));
	} else {
		CLAUSE("ERR-ENODATA", 0, "no empty entry among %d to query", p.gid_tbl_len);
	}
	/* An index beyond the table is not "no data" but an invalid argument. */
	int ri = ibv_query_gid_ex(ctx, 1, (uint32_t)p.gid_tbl_len, &e, 0);
	CLAUSE("ERR-INDEX", ri != 0 && ri != ENODATA, "index %d (gid_tbl_len): %d (%s)", p.gid_tbl_len, ri,
	       conf_errname(ri));
	ibv_close_device(ctx);
	return conf_end();
}
