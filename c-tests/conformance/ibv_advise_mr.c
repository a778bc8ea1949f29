/* ibv_advise_mr(3): prefetch advice on ranges of ODP MRs (their lkeys); 0 or an errno value. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_advise_mr", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-0", d.err);
		return conf_end();
	}
	char *buf = calloc(1, 1 << 16);
	struct ibv_mr *odp = ibv_reg_mr(d.pd, buf, 1 << 16, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	struct ibv_sge sge = { (uintptr_t)buf, 1 << 16, odp ? odp->lkey : 0 };
	/* RETURN VALUE: 0 for a prefetch (synchronous: FLUSH) of an ODP MR's range. */
	int rc = odp ? ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1) : -1;
	CLAUSE("RET-0", rc == 0, "ODP MR %p, ibv_advise_mr: %d (%s)", (void *)odp, rc, conf_errname(rc));
	/* ARGUMENTS: the lkeys must be of ODP MRs: a regular MR's is refused. */
	struct ibv_mr *reg = ibv_reg_mr(d.pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_sge rs = { (uintptr_t)buf, 4096, reg ? reg->lkey : 0 };
	int rr = reg ? ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &rs, 1) : 0;
	CLAUSE("ARG-ODP-ONLY", reg && rr != 0, "prefetch of a non-ODP MR: %d", rr);
	if (reg)
		ibv_dereg_mr(reg);
	if (odp)
		ibv_dereg_mr(odp);
	free(buf);
	ih_dev_close(&d);
	return conf_end();
}
