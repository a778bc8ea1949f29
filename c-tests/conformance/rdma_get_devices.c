/* rdma_get_devices(3): a NULL-terminated array of opened devices (count in *num_devices when
 * given), the same devices the ids use; they stay open. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_get_devices", argc, argv);
	int num = -1;
	errno = 0;
	struct ibv_context **list = rdma_get_devices(&num);
	/* RETURN VALUE: an array of devices, NULL-terminated; num_devices is set to the count. */
	int count = 0;
	while (list && list[count] && count < 64)
		count++;
	CLAUSE("RET-ARRAY", list && count >= 1 && list[count] == NULL, "returned %p (%s), %d entries",
	       (void *)list, conf_errname(errno), count);
	CLAUSE("ARG-NUM", list && num == count, "num_devices %d, entries %d", num, count);
	/* DESCRIPTION: the devices are opened (usable contexts). */
	int usable = 1;
	for (int i = 0; i < count; i++) {
		struct ibv_device_attr a;
		usable &= ibv_query_device(list[i], &a) == 0;
	}
	CLAUSE("DESC-OPENED", list && count >= 1 && usable, "ibv_query_device on every entry: %d", usable);
	/* ARGUMENTS: num_devices may be NULL. */
	struct ibv_context **l2 = rdma_get_devices(NULL);
	CLAUSE("ARG-NUM-NULL", l2 && l2[0], "rdma_get_devices(NULL): %p", (void *)l2);
	/* NOTES: devices remain opened: the same contexts again. */
	CLAUSE("NOTE-SAME", l2 && list && l2[0] == list[0], "first entry %p, then %p", list ? (void *)list[0] : NULL,
	       l2 ? (void *)l2[0] : NULL);
	/* DESCRIPTION: resources shared across ids: an id bound to the loopback address uses one
	 * of the listed devices. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in lo;
	h_sin(&lo, "127.0.0.1", 0);
	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 && rdma_bind_addr(id, (struct sockaddr *)&lo) == 0;
	int found = 0;
	for (int i = 0; ok && i < count; i++)
		found |= list[i] == id->verbs;
	CLAUSE("DESC-SHARED", ok && found, "id->verbs %p is %sone of the listed devices", id ? (void *)id->verbs : NULL,
	       found ? "" : "not ");
	if (id)
		rdma_destroy_id(id);
	rdma_destroy_event_channel(ch);
	if (l2)
		rdma_free_devices(l2);
	if (list)
		rdma_free_devices(list);
	return conf_end();
}
