/* rdma_free_devices(3): frees the array only: the devices stay open and usable. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_free_devices", argc, argv);
	struct ibv_context **list = rdma_get_devices(NULL);
	struct ibv_context *first = list ? list[0] : NULL;
	/* DESCRIPTION: frees the array (no crash; under the sanitizers no invalid free) ... */
	if (list)
		rdma_free_devices(list);
	/* ... and only the array: the contexts remain usable. */
	struct ibv_device_attr a;
	int q = first ? ibv_query_device(first, &a) : -2;
	CLAUSE("DESC-ARRAY-ONLY", first && q == 0, "ibv_query_device after rdma_free_devices: %d", q);
	/* Repeated get/free cycles keep handing out the same, open devices. */
	int same = 1, cycles = 0;
	for (int i = 0; i < 100; i++) {
		struct ibv_context **l = rdma_get_devices(NULL);
		if (!l)
			break;
		same &= l[0] == first;
		rdma_free_devices(l);
		cycles++;
	}
	CLAUSE("DESC-REPEAT", cycles == 100 && same, "%d get/free cycles, same device every time %d", cycles, same);
	return conf_end();
}
