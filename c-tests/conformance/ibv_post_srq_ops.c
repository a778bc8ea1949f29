/* ibv_post_srq_ops(3): tag-matching list operations on a TM SRQ. The soft device offers no tag
 * matching (tm_caps.max_num_tags 0, no TM SRQ): on a basic SRQ the operations are refused. */
#include "ibvhelp.h"

int main(int argc, char **argv)
{
	conf_begin("ibv_post_srq_ops", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-ERRNO", d.err);
		return conf_end();
	}
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	struct ibv_srq *srq = ibv_create_srq(d.pd, &sa);
	char buf[64];
	struct ibv_sge sge = { (uintptr_t)buf, sizeof buf, 0 };
	struct ibv_ops_wr op, *bad = NULL;
	memset(&op, 0, sizeof op);
	op.opcode = IBV_WR_TAG_ADD;
	op.flags = IBV_OPS_SIGNALED;
	op.tm.add.tag = 1;
	op.tm.add.mask = ~0ull;
	op.tm.add.sg_list = &sge;
	op.tm.add.num_sge = 1;
	int rc = srq ? ibv_post_srq_ops(srq, &op, &bad) : -1;
	/* RETURN VALUE: the errno value on failure: a tag operation on an SRQ that is not a TM
	 * SRQ (the only kind a device without tag matching has) fails, naming the WR. */
	CLAUSE("RET-ERRNO", srq && rc > 0 && (dx.tm_caps.max_num_tags != 0 || bad == &op),
	       "tm_caps.max_num_tags %u: ibv_post_srq_ops on a basic SRQ %d (%s), bad_wr %s", dx.tm_caps.max_num_tags, rc,
	       conf_errname(rc), bad == &op ? "the WR" : "not set");
	if (srq)
		ibv_destroy_srq(srq);
	ih_dev_close(&d);
	return conf_end();
}
