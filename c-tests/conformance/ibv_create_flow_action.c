/* ibv_create_flow_action(3) (ESP actions, ibv_modify_flow_action, ibv_destroy_flow_action):
 * IPsec offload actions for flow steering. A soft device offers no crypto offload: NULL with
 * errno. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_create_flow_action", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("RET-ERRNO", err);
		return conf_end();
	}
	struct ibv_flow_action_esp_attr a;
	memset(&a, 0, sizeof a);
	errno = 0;
	struct ibv_flow_action *fa = ibv_create_flow_action_esp(ctx, &a);
	int e = errno;
	/* RETURN VALUE: on error NULL, with errno set. */
	CLAUSE("RET-ERRNO", !fa && e != 0, "ibv_create_flow_action_esp: %p (%s)", (void *)fa, conf_errname(e));
	if (fa)
		ibv_destroy_flow_action(fa);
	ibv_close_device(ctx);
	return conf_end();
}
