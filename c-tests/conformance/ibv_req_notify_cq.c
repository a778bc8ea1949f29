/* ibv_req_notify_cq(3): arms the CQ: the next new CQE (any, or only a solicited one) adds one
 * completion event to the CQ's channel; one shot; 0 or an errno value. */
#include "ibvhelp.h"

static struct ih_dev d;
static struct ibv_comp_channel *ch;
static struct ibv_cq *scq, *rcq;
static struct ih_pair p;
static struct ih_buf b;

/* 1 if an event for `cq` is on the channel within ms (it is acked), 0 if none. */
static int event(struct ibv_cq *cq, int ms)
{
	if (!ih_readable(ch->fd, ms))
		return 0;
	struct ibv_cq *ev;
	void *ctx;
	if (ibv_get_cq_event(ch, &ev, &ctx))
		return 0;
	ibv_ack_cq_events(ev, 1);
	return ev == cq;
}

/* Empties a CQ, waiting up to IH_WAIT_MS for the first completion when `want` is set;
 * returns how many completions it held. */
static int drain(struct ibv_cq *cq, int want)
{
	struct ibv_wc wc;
	int n = 0;
	if (want && ih_poll(cq, &wc, IH_WAIT_MS) == 1)
		n++;
	while (ibv_poll_cq(cq, 1, &wc) == 1)
		n++;
	return n;
}

/* A SEND from QP 0 to QP 1 (a receive is posted first); its send completion is polled. */
static void send_msg(int flags)
{
	struct ibv_sge sge = { (uintptr_t)b.buf, 8, b.mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED | (unsigned)flags;
	ih_post_recv(p.qp[1], b.buf + 1024, 64, b.mr->lkey, 7);
	ibv_post_send(p.qp[0], &wr, &bad);
	struct ibv_wc wc;
	ih_poll(scq, &wc, IH_WAIT_MS);
}

int main(int argc, char **argv)
{
	conf_begin("ibv_req_notify_cq", argc, argv);
	memset(&p, 0, sizeof p);
	int up = ih_dev_open(&d) == 0 && (ch = ibv_create_comp_channel(d.ctx)) &&
		 (scq = ibv_create_cq(d.ctx, 16, NULL, ch, 0)) && (rcq = ibv_create_cq(d.ctx, 16, NULL, ch, 0)) &&
		 ih_pair_make_on(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE, scq, rcq) == 0 &&
		 ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE) == 0;
	if (!up) {
		const char *ids[] = { "RET-0", "DESC-EVENT", "DESC-UNARMED", "NOTE-ONE-SHOT", "SOLICITED-SEND-CQE",
				      "SOLICITED-UNSOLICITED-RECV", "SOLICITED-RECV", "ARM-QUEUED", "ARM-QUEUED-SOLICITED",
				      "SOLICITED-ERROR" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	/* RETURN VALUE: 0 on success. */
	int rc = ibv_req_notify_cq(rcq, 0);
	CLAUSE("RET-0", rc == 0, "ibv_req_notify_cq returned %d (%s)", rc, conf_errname(rc));
	/* DESCRIPTION: a new CQE on an armed CQ adds a completion event to its channel. */
	send_msg(0);
	CLAUSE("DESC-EVENT", event(rcq, IH_WAIT_MS), "no event for the receive completion");
	drain(rcq, 1);
	drain(scq, 0);
	/* Without a request, a new CQE adds no event. */
	send_msg(0);
	CLAUSE("DESC-UNARMED", !event(rcq, IH_QUIET_MS) && drain(rcq, 1) == 1, "an event came without a request");
	drain(scq, 0);
	/* NOTES: one shot: one request, two new CQEs, one event. */
	ibv_req_notify_cq(rcq, 0);
	send_msg(0);
	int e1 = event(rcq, IH_WAIT_MS);
	send_msg(0);
	int e2 = event(rcq, IH_QUIET_MS);
	CLAUSE("NOTE-ONE-SHOT", e1 && !e2, "first CQE: event %d, second: event %d", e1, e2);
	drain(rcq, 1);
	drain(scq, 0);
	/* solicited_only: a successful send completion is unsolicited: no event. */
	ibv_req_notify_cq(scq, 1);
	send_msg(0);
	CLAUSE("SOLICITED-SEND-CQE", !event(scq, IH_QUIET_MS), "a successful send completion raised a solicited-only CQ");
	drain(rcq, 1);
	drain(scq, 0);
	/* solicited_only: a receive of a message without the Solicited Event bit: no event ... */
	ibv_req_notify_cq(rcq, 1);
	send_msg(0);
	int un = event(rcq, IH_QUIET_MS);
	CLAUSE("SOLICITED-UNSOLICITED-RECV", !un, "an unsolicited receive raised a solicited-only CQ");
	/* ... a receive of a message sent with IBV_SEND_SOLICITED: an event (the request is
	 * still pending). */
	send_msg(IBV_SEND_SOLICITED);
	CLAUSE("SOLICITED-RECV", event(rcq, IH_WAIT_MS), "no event for the solicited receive");
	drain(rcq, 1);
	drain(scq, 0);
	/* Beyond the page, as ConnectX hardware (which arms with the consumer index): a CQ armed
	 * while it holds completions the arm asks for raises its event at once. A program that
	 * takes fewer completions than are queued, re-arms and then waits (perftest -e polls 16
	 * at a time) finds the rest instead of waiting forever. */
	for (int i = 0; i < 5; i++)
		send_msg(0); /* five receive completions queued on rcq (each send completed) */
	ibv_req_notify_cq(rcq, 1);
	int sol = event(rcq, IH_QUIET_MS);
	ibv_req_notify_cq(rcq, 0);
	int q1 = event(rcq, IH_WAIT_MS);
	struct ibv_wc two[2];
	int got = ibv_poll_cq(rcq, 2, two);
	ibv_req_notify_cq(rcq, 0);
	int q2 = event(rcq, IH_WAIT_MS);
	int rest = drain(rcq, 0);
	ibv_req_notify_cq(rcq, 0);
	int q3 = event(rcq, IH_QUIET_MS);
	CLAUSE("ARM-QUEUED", q1 && got == 2 && q2 && rest == 3 && !q3,
	       "armed over 5 queued: event %d; took %d, re-armed over the rest: event %d; %d left; armed empty: event %d",
	       q1, got, q2, rest, q3);
	CLAUSE("ARM-QUEUED-SOLICITED", !sol, "solicited-only arm over unsolicited receives raised an event");
	/* The last arm is still pending: a new completion raises it. */
	send_msg(0);
	event(rcq, IH_WAIT_MS);
	drain(rcq, 1);
	drain(scq, 0);
	/* solicited_only: an unsuccessful completion counts as solicited: a receive flushed
	 * when its QP goes to the error state raises the event. */
	ibv_req_notify_cq(rcq, 1);
	ih_post_recv(p.qp[1], b.buf, 64, b.mr->lkey, 8);
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	int m = ibv_modify_qp(p.qp[1], &qa, IBV_QP_STATE);
	CLAUSE("SOLICITED-ERROR", m == 0 && event(rcq, IH_WAIT_MS), "flushed receive: modify %d, no event", m);
	drain(rcq, 1);
	ih_pair_destroy(&p);
	ih_buf_free(&b);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_destroy_comp_channel(ch);
	ih_dev_close(&d);
	return conf_end();
}
