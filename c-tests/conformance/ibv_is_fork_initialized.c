/* ibv_is_fork_initialized(3): whether fork support is enabled (IBV_FORK_ENABLED), disabled,
 * or unneeded because the kernel copies DMA pages on fork; UNNEEDED takes precedence. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_is_fork_initialized", argc, argv);
	/* RETURN VALUE: one of the three values. */
	enum ibv_fork_status before = ibv_is_fork_initialized();
	CLAUSE("RET-VALUE", before == IBV_FORK_DISABLED || before == IBV_FORK_ENABLED || before == IBV_FORK_UNNEEDED,
	       "status %d", (int)before);
	/* Before ibv_fork_init (and without RDMAV_FORK_SAFE): not enabled. */
	CLAUSE("RET-BEFORE", before != IBV_FORK_ENABLED, "ENABLED before ibv_fork_init");
	int rc = ibv_fork_init();
	enum ibv_fork_status after = ibv_is_fork_initialized();
	/* NOTES: UNNEEDED takes precedence: it stays UNNEEDED whether or not ibv_fork_init was
	 * called; otherwise the call makes it ENABLED. */
	CLAUSE("NOTE-PRECEDENCE", before == IBV_FORK_UNNEEDED ? after == IBV_FORK_UNNEEDED
							       : (rc == 0 && after == IBV_FORK_ENABLED),
	       "before %d, ibv_fork_init %d, after %d", (int)before, rc, (int)after);
	return conf_end();
}
