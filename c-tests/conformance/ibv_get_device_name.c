/* ibv_get_device_name(3): a human-readable name of the device. */
#include "ibvhelp.h"

#include <ctype.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_get_device_name", argc, argv);
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		CLAUSE_BLOCKED("RET-NAME", "no device");
		CLAUSE_BLOCKED("DESC-READABLE", "no device");
		CLAUSE_BLOCKED("DESC-CONTEXT", "no device");
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the name (the device's name field). */
	const char *n = ibv_get_device_name(list[0]);
	CLAUSE("RET-NAME", n && strcmp(n, list[0]->name) == 0, "name \"%s\", device->name \"%s\"",
	       n ? n : "(null)", list[0]->name);
	/* DESCRIPTION: human-readable: a non-empty string of printable characters. */
	int ok = n && *n;
	for (const char *c = n; ok && *c; c++)
		ok &= isprint((unsigned char)*c) && !isspace((unsigned char)*c);
	CLAUSE("DESC-READABLE", ok, "name \"%s\"", n ? n : "(null)");
	/* The same name through an opened context's device. */
	struct ibv_context *ctx = ibv_open_device(list[0]);
	const char *n2 = ctx ? ibv_get_device_name(ctx->device) : NULL;
	CLAUSE("DESC-CONTEXT", n && n2 && strcmp(n, n2) == 0, "through the context: \"%s\"", n2 ? n2 : "(null)");
	if (ctx)
		ibv_close_device(ctx);
	ibv_free_device_list(list);
	return conf_end();
}
