/* ibv_get_device_list(3) (and ibv_free_device_list): a NULL-terminated array of the devices,
 * the count in *num_devices when given; devices opened before the list is freed stay usable. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_get_device_list", argc, argv);
	int num = -1;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	int count = 0;
	while (list && list[count] && count < 64)
		count++;
	/* DESCRIPTION / RETURN VALUE: an array of the available devices, NULL-terminated. */
	CLAUSE("RET-ARRAY", list && count >= 1 && list[count] == NULL, "returned %p (%s), %d entries",
	       (void *)list, conf_errname(errno), count);
	/* DESCRIPTION: num_devices, when not NULL, receives the number of devices in the array. */
	CLAUSE("ARG-NUM", list && num == count, "num_devices %d, entries %d", num, count);
	/* DESCRIPTION: num_devices is optional. */
	struct ibv_device **l2 = ibv_get_device_list(NULL);
	CLAUSE("ARG-NUM-NULL", l2 && l2[0], "ibv_get_device_list(NULL): %p", (void *)l2);
	/* Each entry is a device: it has a name and can be opened. */
	int named = 1;
	for (int i = 0; i < count; i++)
		named &= list[i]->name[0] != 0 && ibv_get_device_name(list[i]) != NULL;
	CLAUSE("DESC-DEVICES", list && count >= 1 && named, "every entry named: %d", named);
	/* NOTES: a device opened before ibv_free_device_list stays usable after it. */
	struct ibv_context *ctx = list && count ? ibv_open_device(list[0]) : NULL;
	if (l2)
		ibv_free_device_list(l2);
	if (list)
		ibv_free_device_list(list);
	struct ibv_device_attr attr;
	int q = ctx ? ibv_query_device(ctx, &attr) : -1;
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	CLAUSE("NOTE-OPEN-KEPT", ctx && q == 0 && pd, "after the free: query_device %d, alloc_pd %p", q, (void *)pd);
	/* The device behind the context is still the one listed (a new list shows it again). */
	struct ibv_device **l3 = ibv_get_device_list(&num);
	int same = l3 && ctx && num >= 1 && strcmp(l3[0]->name, ctx->device->name) == 0;
	CLAUSE("DESC-AGAIN", same, "a new list: %d devices, first %s, context's device %s", num,
	       l3 && l3[0] ? l3[0]->name : "-", ctx ? ctx->device->name : "-");
	if (l3)
		ibv_free_device_list(l3);
	if (pd)
		ibv_dealloc_pd(pd);
	if (ctx)
		ibv_close_device(ctx);
	return conf_end();
}
