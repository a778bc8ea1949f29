/* ibv_get_srq_num(3): the SRQ number of an XRC SRQ (what a sender's XRC QP targets); 0 or an
 * errno value. */
#include "ibvhelp.h"

#include <fcntl.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_get_srq_num", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	struct ibv_cq *cq = ibv_create_cq(d.ctx, 8, NULL, NULL, 0);
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					 .oflags = O_CREAT };
	struct ibv_xrcd *x = ibv_open_xrcd(d.ctx, &xa);
	struct ibv_srq *s[2] = { 0 };
	for (int i = 0; x && i < 2; i++)
		s[i] = ih_xrc_srq(&d, x, cq, 4);
	/* RETURN VALUE: 0 and the number; two XRC SRQs have different numbers. */
	uint32_t n0 = 0, n1 = 0;
	int r0 = s[0] ? ibv_get_srq_num(s[0], &n0) : -1, r1 = s[1] ? ibv_get_srq_num(s[1], &n1) : -1;
	CLAUSE("RET-0", r0 == 0 && r1 == 0 && n0 != n1, "xrcd %p (%s): %d (0x%x), %d (0x%x)", (void *)x, conf_errname(errno),
	       r0, n0, r1, n1);
	/* A basic SRQ has no SRQ number: refused. */
	struct ibv_srq_init_attr ba;
	memset(&ba, 0, sizeof ba);
	ba.attr.max_wr = 4;
	ba.attr.max_sge = 1;
	struct ibv_srq *bs = ibv_create_srq(d.pd, &ba);
	uint32_t bn = 0;
	int rb = bs ? ibv_get_srq_num(bs, &bn) : -1;
	CLAUSE("ERR-BASIC", bs && rb != 0, "ibv_get_srq_num on a basic SRQ: %d", rb);
	if (bs)
		ibv_destroy_srq(bs);
	for (int i = 0; i < 2; i++)
		if (s[i])
			ibv_destroy_srq(s[i]);
	if (x)
		ibv_close_xrcd(x);
	ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
