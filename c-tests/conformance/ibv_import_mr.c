/* ibv_import_mr(3) (and ibv_unimport_mr): the MR of a handle, on an imported PD (addr not
 * applicable: NULL), with the original's keys; unimport releases it. */
#include "ibvhelp.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_import_mr", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-MR", d.err);
		return conf_end();
	}
	char buf[256];
	struct ibv_mr *mr = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	int fd = dup(d.ctx->cmd_fd);
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	struct ibv_pd *ip = ic ? ibv_import_pd(ic, d.pd->handle) : NULL;
	/* RETURN VALUE: the MR, with the original's handle, keys and length. */
	errno = 0;
	struct ibv_mr *im = ip && mr ? ibv_import_mr(ip, mr->handle) : NULL;
	CLAUSE("RET-MR", im && im->handle == mr->handle && im->lkey == mr->lkey && im->rkey == mr->rkey &&
				 im->length == mr->length,
	       "imported context %p, PD %p, MR %p (%s)", (void *)ic, (void *)ip, (void *)im, conf_errname(errno));
	/* NOTES: addr is not applicable: NULL. */
	CLAUSE("NOTE-ADDR-NULL", im && im->addr == NULL, "imported MR addr %p", im ? im->addr : NULL);
	if (im)
		ibv_unimport_mr(im);
	if (ip)
		ibv_unimport_pd(ip);
	if (ic)
		ibv_close_device(ic);
	else if (fd >= 0)
		close(fd);
	if (mr)
		ibv_dereg_mr(mr);
	ih_dev_close(&d);
	return conf_end();
}
