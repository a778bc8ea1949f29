/* ibv_modify_qp(3): changes the attributes in attr_mask; the required attributes of each
 * transition (RC, UC, UD tables); an invalid attribute or mask changes nothing; 0 or an errno
 * value; GRH required on a port that says so; resize, alternate paths, rate limits only when
 * the device has them. */
#include "ibvhelp.h"

static struct ih_dev d;
static struct ibv_cq *cq;

static struct ibv_qp *new_qp(enum ibv_qp_type t)
{
	struct ibv_qp_init_attr a = ih_qp_attr(t, cq, 4);
	return ibv_create_qp(d.pd, &a);
}

static struct ibv_qp_attr init_attr(void)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qkey = IH_QKEY;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
	return a;
}

static struct ibv_qp_attr rtr_attr(uint32_t dest)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d.gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d.gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	return a;
}

static struct ibv_qp_attr rts_attr(void)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	return a;
}

#define M_INIT_RC (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)
#define M_RTR_UC (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN)
#define M_RTR_RC (M_RTR_UC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define M_RTS_UC (IBV_QP_STATE | IBV_QP_SQ_PSN)
#define M_RTS_RC (M_RTS_UC | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT)
#define M_INIT_UD (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)

/* Walks a QP through INIT/RTR/RTS with the masks given; returns the first failing step's
 * errno value (0 when all passed), the step in *step. */
static int walk(struct ibv_qp *qp, int mi, int mr, int ms, int *step)
{
	struct ibv_qp_attr a = init_attr();
	int rc = ibv_modify_qp(qp, &a, mi);
	*step = 1;
	if (rc)
		return rc;
	a = rtr_attr(qp->qp_num);
	rc = ibv_modify_qp(qp, &a, mr);
	*step = 2;
	if (rc)
		return rc;
	a = rts_attr();
	*step = 3;
	return ibv_modify_qp(qp, &a, ms);
}

int main(int argc, char **argv)
{
	conf_begin("ibv_modify_qp", argc, argv);
	if (ih_dev_open(&d) || !(cq = ibv_create_cq(d.ctx, 32, NULL, NULL, 0))) {
		CLAUSE_BLOCKED("TABLE-RC", d.err);
		return conf_end();
	}
	int step = 0, rc;
	/* NOTES (tables): each transport reaches RTS with exactly the attributes its table
	 * requires (RETURN VALUE: 0 each time). */
	struct ibv_qp *rc_qp = new_qp(IBV_QPT_RC);
	rc = rc_qp ? walk(rc_qp, M_INIT_RC, M_RTR_RC, M_RTS_RC, &step) : -1;
	CLAUSE("TABLE-RC", rc == 0 && ih_qp_state(rc_qp) == IBV_QPS_RTS, "RC: step %d gave %d (%s)", step, rc,
	       conf_errname(rc));
	struct ibv_qp *uc_qp = new_qp(IBV_QPT_UC);
	rc = uc_qp ? walk(uc_qp, M_INIT_RC, M_RTR_UC, M_RTS_UC, &step) : -1;
	CLAUSE("TABLE-UC", rc == 0 && ih_qp_state(uc_qp) == IBV_QPS_RTS, "UC: step %d gave %d (%s)", step, rc,
	       conf_errname(rc));
	struct ibv_qp *ud_qp = new_qp(IBV_QPT_UD);
	rc = ud_qp ? walk(ud_qp, M_INIT_UD, IBV_QP_STATE, M_RTS_UC, &step) : -1;
	CLAUSE("TABLE-UD", rc == 0 && ih_qp_state(ud_qp) == IBV_QPS_RTS, "UD: step %d gave %d (%s)", step, rc,
	       conf_errname(rc));
	/* A required attribute missing from the mask: the transition fails (RC INIT without
	 * ACCESS_FLAGS, RC RTR without MIN_RNR_TIMER, RC RTS without TIMEOUT, UD INIT without
	 * QKEY), and the QP stays where it was. */
	struct ibv_qp *q1 = new_qp(IBV_QPT_RC), *q2 = new_qp(IBV_QPT_RC), *q3 = new_qp(IBV_QPT_RC),
		      *q4 = new_qp(IBV_QPT_UD);
	int r1 = walk(q1, M_INIT_RC & ~IBV_QP_ACCESS_FLAGS, M_RTR_RC, M_RTS_RC, &step), s1 = step;
	int r2 = walk(q2, M_INIT_RC, M_RTR_RC & ~IBV_QP_MIN_RNR_TIMER, M_RTS_RC, &step), s2 = step;
	int r3 = walk(q3, M_INIT_RC, M_RTR_RC, M_RTS_RC & ~IBV_QP_TIMEOUT, &step), s3 = step;
	int r4 = walk(q4, M_INIT_UD & ~IBV_QP_QKEY, IBV_QP_STATE, M_RTS_UC, &step), s4 = step;
	CLAUSE("TABLE-REQUIRED", r1 && s1 == 1 && r2 && s2 == 2 && r3 && s3 == 3 && r4 && s4 == 1 &&
					 ih_qp_state(q1) == IBV_QPS_RESET && ih_qp_state(q2) == IBV_QPS_INIT &&
					 ih_qp_state(q3) == IBV_QPS_RTR,
	       "without ACCESS_FLAGS: %d at %d; MIN_RNR_TIMER: %d at %d; TIMEOUT: %d at %d; UD QKEY: %d at %d", r1,
	       s1, r2, s2, r3, s3, r4, s4);
	/* RETURN VALUE: the errno value on failure: an invalid transition (RESET to RTS). */
	struct ibv_qp *q5 = new_qp(IBV_QPT_RC);
	struct ibv_qp_attr a = rts_attr();
	rc = ibv_modify_qp(q5, &a, M_RTS_RC);
	CLAUSE("ERR-TRANSITION", rc == EINVAL && ih_qp_state(q5) == IBV_QPS_RESET, "RESET to RTS: %d (%s)", rc,
	       conf_errname(rc));
	/* NOTES: an invalid attribute changes nothing, not even the state: INIT on port 2 fails
	 * and the QP is still RESET; a later valid INIT shows the old access flags untouched. */
	a = init_attr();
	a.port_num = 2;
	a.qp_access_flags = IBV_ACCESS_REMOTE_READ;
	rc = ibv_modify_qp(q5, &a, M_INIT_RC);
	int st5 = ih_qp_state(q5);
	CLAUSE("NOTE-ALL-OR-NOTHING", rc != 0 && st5 == IBV_QPS_RESET, "INIT on port 2: %d, state %d", rc, st5);
	/* ... and an invalid mask bit for the transition (RQ_PSN on RESET to INIT) too. */
	a = init_attr();
	rc = ibv_modify_qp(q5, &a, M_INIT_RC | IBV_QP_RQ_PSN);
	CLAUSE("NOTE-INVALID-MASK", rc != 0 && ih_qp_state(q5) == IBV_QPS_RESET, "INIT with RQ_PSN: %d, state %d", rc,
	       ih_qp_state(q5));
	/* NOTES: on a port with IBV_QPF_GRH_REQUIRED the address vector must carry a GRH. */
	struct ibv_port_attr pa;
	ibv_query_port(d.ctx, 1, &pa);
	struct ibv_qp *q6 = new_qp(IBV_QPT_RC);
	a = init_attr();
	ibv_modify_qp(q6, &a, M_INIT_RC);
	a = rtr_attr(q6->qp_num);
	a.ah_attr.is_global = 0;
	a.ah_attr.dlid = 1;
	rc = ibv_modify_qp(q6, &a, M_RTR_RC);
	CLAUSE("NOTE-GRH-REQUIRED", !(pa.flags & IBV_QPF_GRH_REQUIRED) || (rc != 0 && ih_qp_state(q6) == IBV_QPS_INIT),
	       "port flags 0x%x, RTR without GRH: %d", pa.flags, rc);
	/* NOTES: resizing (IBV_QP_CAP) only where IBV_DEVICE_RESIZE_MAX_WR is set. */
	struct ibv_device_attr da;
	ibv_query_device(d.ctx, &da);
	memset(&a, 0, sizeof a);
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	rc = ibv_modify_qp(rc_qp, &a, IBV_QP_CAP);
	CLAUSE("NOTE-RESIZE", (da.device_cap_flags & IBV_DEVICE_RESIZE_MAX_WR) ? rc == 0 : rc != 0,
	       "device_cap_flags 0x%x, IBV_QP_CAP: %d", da.device_cap_flags, rc);
	/* NOTES: alternate paths only where IBV_DEVICE_AUTO_PATH_MIG is set. */
	memset(&a, 0, sizeof a);
	a.alt_ah_attr = rtr_attr(rc_qp->qp_num).ah_attr;
	a.alt_port_num = 1;
	a.alt_timeout = 14;
	rc = ibv_modify_qp(rc_qp, &a, IBV_QP_ALT_PATH);
	CLAUSE("NOTE-ALT-PATH", (da.device_cap_flags & IBV_DEVICE_AUTO_PATH_MIG) ? rc == 0 : rc != 0,
	       "device_cap_flags 0x%x, IBV_QP_ALT_PATH: %d", da.device_cap_flags, rc);
	/* IBV_QP_RATE_LIMIT needs packet pacing (ibv_query_device_ex packet_pacing_caps). */
	struct ibv_device_attr_ex dx;
	memset(&dx, 0, sizeof dx);
	ibv_query_device_ex(d.ctx, NULL, &dx);
	memset(&a, 0, sizeof a);
	a.rate_limit = 1000;
	rc = ibv_modify_qp(ud_qp, &a, IBV_QP_RATE_LIMIT);
	CLAUSE("ARG-RATE-LIMIT", dx.packet_pacing_caps.qp_rate_limit_max ? rc == 0 : rc != 0,
	       "qp_rate_limit_max %u, IBV_QP_RATE_LIMIT: %d", dx.packet_pacing_caps.qp_rate_limit_max, rc);
	/* Any state may go to ERR, and ERR to RESET; from RESET the QP starts over. */
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	int e1 = ibv_modify_qp(rc_qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_RESET;
	int e2 = ibv_modify_qp(rc_qp, &a, IBV_QP_STATE);
	int e3 = walk(rc_qp, M_INIT_RC, M_RTR_RC, M_RTS_RC, &step);
	CLAUSE("DESC-ERR-RESET", e1 == 0 && e2 == 0 && e3 == 0 && ih_qp_state(rc_qp) == IBV_QPS_RTS,
	       "to ERR %d, to RESET %d, to RTS again %d (step %d)", e1, e2, e3, step);
	/* DESCRIPTION: the attributes in the mask are applied: the QKEY of a UD QP changes. */
	memset(&a, 0, sizeof a);
	a.qkey = 0x22222222;
	rc = ibv_modify_qp(ud_qp, &a, IBV_QP_QKEY);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qia;
	int q = ibv_query_qp(ud_qp, &qa, IBV_QP_QKEY, &qia);
	CLAUSE("DESC-APPLIED", rc == 0 && q == 0 && qa.qkey == 0x22222222, "modify QKEY %d, query %d: qkey 0x%x", rc, q,
	       qa.qkey);
	struct ibv_qp *all[] = { rc_qp, uc_qp, ud_qp, q1, q2, q3, q4, q5, q6 };
	for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
		if (all[i])
			ibv_destroy_qp(all[i]);
	ibv_destroy_cq(cq);
	ih_dev_close(&d);
	return conf_end();
}
