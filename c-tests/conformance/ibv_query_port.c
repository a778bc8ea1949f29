/* ibv_query_port(3): the attributes of a port; 0 on success, an errno value on failure. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_query_port", argc, argv);
	struct ih_dev d;
	int up = ih_dev_open(&d) == 0;
	struct ibv_port_attr p;
	memset(&p, 0xa5, sizeof p);
	/* RETURN VALUE: 0 on success. */
	int rc = up ? ibv_query_port(d.ctx, 1, &p) : -1;
	CLAUSE("RET-0", rc == 0, "ibv_query_port(1) returned %d (%s)", rc, up ? conf_errname(rc) : d.err);
	if (rc != 0) {
		const char *ids[] = { "DESC-STATE", "DESC-MTU", "DESC-GID-TBL-LEN", "DESC-PKEY-TBL-LEN", "DESC-MAX-MSG-SZ",
				      "DESC-LINK-LAYER", "FLAG-GRH-REQUIRED", "ERR-PORT" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), "no port attributes");
		return conf_end();
	}
	/* state: a logical port state; the port is usable (ACTIVE) here. */
	CLAUSE("DESC-STATE", p.state == IBV_PORT_ACTIVE, "state %d (%s)", (int)p.state, ibv_port_state_str(p.state));
	/* max_mtu / active_mtu: MTU enums, the active one not above the maximum. */
	CLAUSE("DESC-MTU", p.max_mtu >= IBV_MTU_256 && p.max_mtu <= IBV_MTU_4096 && p.active_mtu >= IBV_MTU_256 &&
				   p.active_mtu <= p.max_mtu,
	       "max_mtu %d, active_mtu %d", (int)p.max_mtu, (int)p.active_mtu);
	/* gid_tbl_len: the length of the GID table: index gid_tbl_len-1 can be queried, index
	 * gid_tbl_len cannot. */
	union ibv_gid g;
	int in = p.gid_tbl_len > 0 ? ibv_query_gid(d.ctx, 1, p.gid_tbl_len - 1, &g) : -2;
	int out = ibv_query_gid(d.ctx, 1, p.gid_tbl_len, &g);
	CLAUSE("DESC-GID-TBL-LEN", p.gid_tbl_len > 0 && in == 0 && out != 0,
	       "gid_tbl_len %d: query_gid(last) %d, query_gid(len) %d", p.gid_tbl_len, in, out);
	/* pkey_tbl_len: the same for the partition table. */
	__be16 pk;
	in = p.pkey_tbl_len > 0 ? ibv_query_pkey(d.ctx, 1, p.pkey_tbl_len - 1, &pk) : -2;
	out = ibv_query_pkey(d.ctx, 1, p.pkey_tbl_len, &pk);
	CLAUSE("DESC-PKEY-TBL-LEN", p.pkey_tbl_len > 0 && in == 0 && out != 0,
	       "pkey_tbl_len %u: query_pkey(last) %d, query_pkey(len) %d", p.pkey_tbl_len, in, out);
	/* max_msg_sz: the largest message: at least one path MTU. */
	CLAUSE("DESC-MAX-MSG-SZ", p.max_msg_sz >= 4096u, "max_msg_sz %u", p.max_msg_sz);
	/* link_layer: InfiniBand, Ethernet or unspecified. */
	CLAUSE("DESC-LINK-LAYER", p.link_layer == IBV_LINK_LAYER_INFINIBAND || p.link_layer == IBV_LINK_LAYER_ETHERNET ||
					  p.link_layer == IBV_LINK_LAYER_UNSPECIFIED,
	       "link_layer %u", p.link_layer);
	/* flags: IBV_QPF_GRH_REQUIRED means every AH needs a GRH: one without is refused (and an
	 * Ethernet port, routed by GID, requires it). */
	struct ibv_ah_attr aa;
	memset(&aa, 0, sizeof aa);
	aa.port_num = 1;
	aa.dlid = 1;
	struct ibv_ah *ah = ibv_create_ah(d.pd, &aa);
	int req = !!(p.flags & IBV_QPF_GRH_REQUIRED);
	CLAUSE("FLAG-GRH-REQUIRED",
	       (!req || !ah) && (p.link_layer != IBV_LINK_LAYER_ETHERNET || req),
	       "flags 0x%x (link layer %u), an AH without GRH %s", p.flags, p.link_layer,
	       ah ? "was created" : "was refused");
	if (ah)
		ibv_destroy_ah(ah);
	/* RETURN VALUE: failure returns the errno value (a port the device does not have). */
	errno = 0;
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	int bad = ibv_query_port(d.ctx, (uint8_t)(da.phys_port_cnt + 1), &p);
	int bad0 = ibv_query_port(d.ctx, 0, &p);
	CLAUSE("ERR-PORT", bad > 0 && bad0 > 0, "port %u: %d, port 0: %d (errno %s)", da.phys_port_cnt + 1, bad, bad0,
	       conf_errname(errno));
	ih_dev_close(&d);
	return conf_end();
}
