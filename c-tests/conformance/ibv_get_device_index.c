/* ibv_get_device_index(3): a stable device index, or -1 without kernel support. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_get_device_index", argc, argv);
	int num = 0;
	struct ibv_device **list = ibv_get_device_list(&num);
	if (!list || num < 1) {
		CLAUSE_BLOCKED("RET-INDEX", "no device");
		CLAUSE_BLOCKED("DESC-STABLE", "no device");
		CLAUSE_BLOCKED("DESC-DISTINCT", "no device");
		return conf_end();
	}
	/* RETURN VALUE: an index (>= 0), or -1 when indexes are not supported. */
	int idx = ibv_get_device_index(list[0]);
	CLAUSE("RET-INDEX", idx >= -1, "index %d", idx);
	/* DESCRIPTION: stable: the same index for the device in a later list. */
	struct ibv_device **l2 = ibv_get_device_list(NULL);
	int idx2 = l2 && l2[0] ? ibv_get_device_index(l2[0]) : -2;
	CLAUSE("DESC-STABLE", idx2 == idx, "index %d, then %d", idx, idx2);
	/* Indexes of different devices differ (when supported). */
	int distinct = 1;
	for (int i = 0; i < num; i++)
		for (int j = i + 1; j < num; j++) {
			int a = ibv_get_device_index(list[i]), b = ibv_get_device_index(list[j]);
			distinct &= a < 0 || a != b;
		}
	CLAUSE("DESC-DISTINCT", distinct, "%d devices, distinct indexes: %d", num, distinct);
	if (l2)
		ibv_free_device_list(l2);
	ibv_free_device_list(list);
	return conf_end();
}
