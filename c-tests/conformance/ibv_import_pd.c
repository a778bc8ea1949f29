/* ibv_import_pd(3) (and ibv_unimport_pd): the PD of a handle in an imported context, usable in
 * every verb that takes a PD; unimport releases it without destroying the object. */
#include "ibvhelp.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_import_pd", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-PD", d.err);
		return conf_end();
	}
	int fd = dup(d.ctx->cmd_fd);
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	/* RETURN VALUE: a PD with the original's handle. */
	errno = 0;
	struct ibv_pd *ip = ic ? ibv_import_pd(ic, d.pd->handle) : NULL;
	CLAUSE("RET-PD", ip && ip->handle == d.pd->handle && ip->context == ic, "imported context %p, PD %p (%s)",
	       (void *)ic, (void *)ip, conf_errname(errno));
	/* DESCRIPTION: the imported PD works in verbs that take a PD (an MR on it). */
	char buf[64];
	struct ibv_mr *mr = ip ? ibv_reg_mr(ip, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	CLAUSE("DESC-USABLE", mr != NULL, "ibv_reg_mr on the imported PD: %p", (void *)mr);
	if (mr)
		ibv_dereg_mr(mr);
	/* ibv_unimport_pd releases it; the original PD lives on. */
	if (ip)
		ibv_unimport_pd(ip);
	struct ibv_mr *m2 = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CLAUSE("DESC-UNIMPORT", ip && m2, "the original PD after the unimport: reg_mr %p", (void *)m2);
	if (m2)
		ibv_dereg_mr(m2);
	if (ic)
		ibv_close_device(ic);
	else if (fd >= 0)
		close(fd);
	ih_dev_close(&d);
	return conf_end();
}
