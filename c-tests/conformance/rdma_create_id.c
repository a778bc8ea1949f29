/* rdma_create_id(3): allocation, context/channel/port-space bookkeeping, synchronous ids
 * (NULL channel) that block and keep their event in id->event, message-based PS_TCP. */
#include "cmhelp.h"

#include <stdlib.h>

int main(int argc, char **argv)
{
	conf_begin("rdma_create_id", argc, argv);
	char err[512] = "";
	int ctx_token;
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;

	/* RETURN VALUE: 0 and a new id. */
	errno = 0;
	int rc = rdma_create_id(ch, &id, &ctx_token, RDMA_PS_TCP);
	CLAUSE("RET-0", ch && rc == 0 && id != NULL, "returned %d (%s), id %p", rc,
	       conf_errname(errno), (void *)id);
	/* ARGUMENTS: the context, channel and port space are those given. */
	CLAUSE("ARG-CONTEXT", id && id->context == &ctx_token, "id->context %p, expected %p",
	       id ? id->context : NULL, (void *)&ctx_token);
	CLAUSE("ARG-CHANNEL", id && id->channel == ch, "id->channel %p, expected %p",
	       id ? (void *)id->channel : NULL, (void *)ch);
	CLAUSE("ARG-PS", id && id->ps == RDMA_PS_TCP, "id->ps 0x%x", id ? (unsigned)id->ps : 0u);
	/* PORT SPACE: TCP is reliable connected (RC), UDP unreliable datagram (UD), IB any. */
	CLAUSE("PS-TCP-RC", id && id->qp_type == IBV_QPT_RC, "qp_type %d for RDMA_PS_TCP",
	       id ? (int)id->qp_type : -1);
	struct rdma_cm_id *uid = NULL, *iid = NULL;
	rc = rdma_create_id(ch, &uid, NULL, RDMA_PS_UDP);
	CLAUSE("PS-UDP-UD", rc == 0 && uid && uid->qp_type == IBV_QPT_UD && uid->ps == RDMA_PS_UDP,
	       "returned %d (%s), qp_type %d", rc, conf_errname(errno), uid ? (int)uid->qp_type : -1);
	rc = rdma_create_id(ch, &iid, NULL, RDMA_PS_IB);
	CLAUSE("PS-IB", rc == 0 && iid && iid->ps == RDMA_PS_IB, "returned %d (%s)", rc,
	       conf_errname(errno));
	if (uid)
		rdma_destroy_id(uid);
	if (iid)
		rdma_destroy_id(iid);

	/* RETURN VALUE: -1 and errno on error (a port space that does not exist). */
	struct rdma_cm_id *bad = NULL;
	errno = 0;
	rc = rdma_create_id(ch, &bad, NULL, (enum rdma_port_space)0x7777);
	CLAUSE("ERR-PS", rc == -1 && errno == EINVAL, "returned %d (%s) for port space 0x7777", rc,
	       conf_errname(errno));
	if (rc == 0 && bad)
		rdma_destroy_id(bad);

	/* NOTES: with a channel, operations are asynchronous: the call returns and the event
	 * arrives on the channel; id->event is not used. */
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(0));
	rc = id ? rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) : -1;
	struct rdma_cm_event *ev = rc == 0 ? h_get(ch, H_WAIT_MS) : NULL;
	CLAUSE("NOTE-ASYNC", rc == 0 && ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id &&
	       id->event == NULL, "resolve returned %d; channel event %s; id->event %p", rc,
	       ev ? rdma_event_str(ev->event) : "(none)", id ? (void *)id->event : NULL);
	if (ev)
		rdma_ack_cm_event(ev);

	/* NOTES: with a NULL channel the id is synchronous: the call blocks until the operation
	 * completes, and the event is returned in id->event. */
	struct rdma_cm_id *sid = NULL;
	rc = rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP);
	int r1 = rc == 0 ? rdma_resolve_addr(sid, NULL, (struct sockaddr *)&dst, 2000) : -1;
	struct rdma_cm_event *held = sid && r1 == 0 ? sid->event : NULL;
	CLAUSE("NOTE-SYNC-BLOCKS", rc == 0 && r1 == 0 && held && held->event == RDMA_CM_EVENT_ADDR_RESOLVED &&
	       held->status == 0 && held->id == sid,
	       "create %d, resolve_addr %d (%s), id->event %s", rc, r1, conf_errname(errno),
	       held ? rdma_event_str(held->event) : "(none)");
	/* NOTES: ... and stays available until another rdma_cm call is made on it. */
	int r2 = r1 == 0 ? rdma_resolve_route(sid, 2000) : -1;
	held = sid && r2 == 0 ? sid->event : NULL;
	CLAUSE("NOTE-SYNC-EVENT", r2 == 0 && held && held->event == RDMA_CM_EVENT_ROUTE_RESOLVED,
	       "resolve_route %d (%s), id->event now %s", r2, conf_errname(errno),
	       held ? rdma_event_str(held->event) : "(none)");
	CLAUSE("NOTE-SYNC-CHANNEL", sid && sid->channel != NULL,
	       "a synchronous id has no channel of its own (id->channel NULL)");
	if (sid)
		rdma_destroy_id(sid);
	if (id)
		rdma_destroy_id(id);

	/* PORT SPACE: RDMA_PS_TCP is message based, not a stream: two sends arrive as two
	 * receives of their own lengths. */
	struct h_pair p;
	struct ibv_qp_init_attr qa = h_qp_attr(IBV_QPT_RC, 8, 1);
	struct h_pair_opts o = { .cli_qp = &qa, .srv_qp = &qa };
	if (h_pair_open(&p, conf_port(1), &o) != 0) {
		CLAUSE_BLOCKED("PS-TCP-MESSAGES", p.err);
	} else {
		char sbuf[64], rbuf[2][64];
		memset(sbuf, 'm', sizeof sbuf);
		struct ibv_mr *smr = ibv_reg_mr(p.cli->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
		struct ibv_mr *rmr = ibv_reg_mr(p.srv->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
		int ok = smr && rmr;
		for (int i = 0; ok && i < 2; i++) {
			struct ibv_sge sg = { (uintptr_t)rbuf[i], 64, rmr->lkey };
			struct ibv_recv_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1 }, *b;
			ok = ibv_post_recv(p.srv->qp, &wr, &b) == 0;
		}
		const uint32_t lens[2] = { 10, 20 };
		for (int i = 0; ok && i < 2; i++) {
			struct ibv_sge sg = { (uintptr_t)sbuf, lens[i], smr->lkey };
			struct ibv_send_wr wr = { .wr_id = (uint64_t)i, .sg_list = &sg, .num_sge = 1,
						  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *b;
			ok = ibv_post_send(p.cli->qp, &wr, &b) == 0;
		}
		uint32_t got[2] = { 0, 0 };
		for (int i = 0; ok && i < 2; i++) {
			struct ibv_wc wc;
			ok = h_poll(p.srv->recv_cq, &wc, H_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS;
			if (ok)
				got[i] = wc.byte_len;
		}
		CLAUSE("PS-TCP-MESSAGES", ok && got[0] == 10 && got[1] == 20,
		       "two sends of 10 and 20 bytes arrived as receives of %u and %u bytes (ok %d)",
		       got[0], got[1], ok);
		struct ibv_wc wc;
		for (int i = 0; i < 2; i++)
			h_poll(p.cli->send_cq, &wc, 100);
		if (smr)
			ibv_dereg_mr(smr);
		if (rmr)
			ibv_dereg_mr(rmr);
		h_pair_close(&p);
	}
	(void)err;
	rdma_destroy_event_channel(ch);
	return conf_end();
}
