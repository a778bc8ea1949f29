/* ibv_import_device(3): a context for a duplicated command fd (cmd_fd dup'd, e.g. into another
 * process), closed with ibv_close_device. */
#include "ibvhelp.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_import_device", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("DESC-CMD-FD", err);
		return conf_end();
	}
	/* DESCRIPTION: cmd_fd is a descriptor that can be dup'd. */
	int fd = dup(ctx->cmd_fd);
	CLAUSE("DESC-CMD-FD", fd >= 0, "dup(cmd_fd %d): %d (%s)", ctx->cmd_fd, fd, conf_errname(errno));
	/* RETURN VALUE: a pointer to a context of the same device. */
	errno = 0;
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	CLAUSE("RET-CTX", ic && ic->device && strcmp(ibv_get_device_name(ic->device), ibv_get_device_name(ctx->device)) == 0,
	       "ibv_import_device: %p (%s)", (void *)ic, conf_errname(errno));
	/* ibv_close_device ends it (0). */
	int rc = ic ? ibv_close_device(ic) : -1;
	CLAUSE("DESC-CLOSE", rc == 0, "ibv_close_device of the imported context: %d", rc);
	if (!ic && fd >= 0)
		close(fd);
	ibv_close_device(ctx);
	return conf_end();
}
