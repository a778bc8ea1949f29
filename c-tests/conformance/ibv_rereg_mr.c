/* ibv_rereg_mr(3): changes an MR's translation, PD or access in place; 0, or an
 * ibv_rereg_mr_err_code (the old MR valid on an input error); the MR is deregistered after. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_rereg_mr", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	char *a = calloc(1, 8192), *bb = calloc(1, 8192);
	struct ibv_mr *mr = ibv_reg_mr(d.pd, a, 4096, IBV_ACCESS_LOCAL_WRITE);
	/* RETURN VALUE: 0 on success: IBV_REREG_MR_CHANGE_ACCESS gives the MR remote write. */
	int rc = mr ? ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
		    : -100;
	CLAUSE("RET-0", rc == 0, "CHANGE_ACCESS: %d", rc);
	/* CHANGE_TRANSLATION: the MR now describes the new address and length. */
	rc = mr ? ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, bb, 8192, 0) : -100;
	CLAUSE("DESC-TRANSLATION", rc == 0 && mr->addr == bb && mr->length == 8192, "CHANGE_TRANSLATION: %d, addr %s",
	       rc, mr && mr->addr == bb ? "new" : "old");
	/* CHANGE_PD: the MR moves to the new PD. */
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	rc = mr && pd2 ? ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) : -100;
	CLAUSE("DESC-PD", rc == 0 && mr->pd == pd2, "CHANGE_PD: %d", rc);
	/* RETURN VALUE: an input error (no flag, or unknown flags) gives IBV_REREG_MR_ERR_INPUT and
	 * leaves the old MR valid (it can still be deregistered). */
	int r0 = mr ? ibv_rereg_mr(mr, 0, NULL, NULL, 0, 0) : -100;
	int ru = mr ? ibv_rereg_mr(mr, 1 << 20, NULL, NULL, 0, 0) : -100;
	CLAUSE("ERR-INPUT", r0 == IBV_REREG_MR_ERR_INPUT && ru == IBV_REREG_MR_ERR_INPUT, "no flag: %d, unknown flag: %d",
	       r0, ru);
	/* NOTES: even after a failure, ibv_dereg_mr is still needed (and works). */
	rc = mr ? ibv_dereg_mr(mr) : -100;
	CLAUSE("NOTE-DEREG", rc == 0, "ibv_dereg_mr after the reregistrations: %d", rc);
	if (pd2)
		ibv_dealloc_pd(pd2);
	free(a);
	free(bb);
	ih_dev_close(&d);
	return conf_end();
}
