/* ibv_create_ah(3) (and ibv_destroy_ah): an address handle of the PD for UD sends; a GRH is
 * required where the port says so; destroy returns 0. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_ah", argc, argv);
	struct ih_dev d;
	struct ih_pair u;
	struct ih_buf b;
	memset(&u, 0, sizeof u);
	if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) || ih_pair_make(&d, &u, IBV_QPT_UD, 0)) {
		CLAUSE_BLOCKED("RET-AH", d.err);
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the AH, of the PD. */
	errno = 0;
	struct ibv_ah *ah = ih_ah(&d, &d.gid);
	CLAUSE("RET-AH", ah && ah->pd == d.pd && ah->context == d.ctx, "ibv_create_ah: %p (%s)", (void *)ah,
	       conf_errname(errno));
	/* DESCRIPTION: the AH addresses UD sends: a datagram through it arrives. */
	int got = 0;
	struct ibv_wc wc;
	memcpy(b.buf, "datagram", 9);
	if (ah && ih_post_recv(u.qp[1], b.buf + 1024, 40 + 64, b.mr->lkey, 1) == 0 &&
	    ih_post_ud(u.qp[0], ah, u.qp[1]->qp_num, b.buf, 9, b.mr->lkey, 2) == 0 && ih_poll(u.cq[1], &wc, IH_WAIT_MS) == 1)
		got = wc.status == IBV_WC_SUCCESS && memcmp(b.buf + 1064, "datagram", 9) == 0;
	ih_poll(u.cq[0], &wc, IH_QUIET_MS);
	CLAUSE("DESC-SEND", got, "a UD SEND through the AH did not arrive");
	/* NOTES: with IBV_QPF_GRH_REQUIRED on the port, an AH without a GRH is refused. */
	struct ibv_port_attr pa;
	ibv_query_port(d.ctx, 1, &pa);
	struct ibv_ah_attr na;
	memset(&na, 0, sizeof na);
	na.dlid = 1;
	na.port_num = 1;
	struct ibv_ah *nah = ibv_create_ah(d.pd, &na);
	CLAUSE("NOTE-GRH-REQUIRED", (pa.flags & IBV_QPF_GRH_REQUIRED) ? !nah : nah != NULL,
	       "port flags 0x%x, AH without GRH: %p", pa.flags, (void *)nah);
	if (nah)
		ibv_destroy_ah(nah);
	/* RETURN VALUE: NULL when the request fails: a port or a source GID index the device
	 * does not have. */
	struct ibv_ah_attr ba;
	memset(&ba, 0, sizeof ba);
	ba.is_global = 1;
	ba.grh.dgid = d.gid;
	ba.port_num = 2;
	struct ibv_ah *bp = ibv_create_ah(d.pd, &ba);
	ba.port_num = 1;
	ba.grh.sgid_index = (uint8_t)pa.gid_tbl_len;
	struct ibv_ah *bg = pa.gid_tbl_len < 256 ? ibv_create_ah(d.pd, &ba) : NULL;
	CLAUSE("ERR-ATTR", !bp && !bg, "port 2: %p, sgid_index %d: %p", (void *)bp, pa.gid_tbl_len, (void *)bg);
	if (bp)
		ibv_destroy_ah(bp);
	if (bg)
		ibv_destroy_ah(bg);
	/* NOTES: ibv_destroy_ah returns 0 on success. */
	int rc = ah ? ibv_destroy_ah(ah) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_ah returned %d (%s)", rc, conf_errname(rc));
	ih_pair_destroy(&u);
	ih_buf_free(&b);
	ih_dev_close(&d);
	return conf_end();
}
