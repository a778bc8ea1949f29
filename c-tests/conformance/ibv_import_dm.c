/* ibv_import_dm(3) (and ibv_unimport_dm): the device memory of a handle in an imported
 * context; NULL with errno on failure. */
#include "ibvhelp.h"

#include <unistd.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_import_dm", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("RET-DM", err);
		return conf_end();
	}
	struct ibv_alloc_dm_attr a = { .length = 64 };
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &a);
	int fd = dup(ctx->cmd_fd);
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	/* RETURN VALUE: a DM with the original's handle; its bytes are the original's. */
	errno = 0;
	struct ibv_dm *id = ic && dm ? ibv_import_dm(ic, dm->handle) : NULL;
	char in[8] = "";
	int same = id && ibv_memcpy_to_dm(dm, 0, "shared!", 8) == 0 && ibv_memcpy_from_dm(in, id, 0, 8) == 0 &&
		   memcmp(in, "shared!", 8) == 0;
	CLAUSE("RET-DM", id && same, "DM %p, imported context %p, imported DM %p (%s)", (void *)dm, (void *)ic, (void *)id,
	       conf_errname(errno));
	/* RETURN VALUE: NULL with errno for a handle that is no DM. */
	errno = 0;
	struct ibv_dm *bad = ic ? ibv_import_dm(ic, 0xdead) : NULL;
	CLAUSE("ERR-HANDLE", ic && !bad && errno != 0, "handle 0xdead: %p (%s)", (void *)bad, conf_errname(errno));
	if (id)
		ibv_unimport_dm(id);
	if (ic)
		ibv_close_device(ic);
	else if (fd >= 0)
		close(fd);
	if (dm)
		ibv_free_dm(dm);
	ibv_close_device(ctx);
	return conf_end();
}
