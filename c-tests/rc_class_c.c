/* Class C errors at the responder, as InfiniBand defines them: a request the responder refuses
 * (wrong rkey, out of bounds, access the QP or region does not grant, a SEND longer than the
 * receive) gets a NAK, so the requester completes it with the remote error, and then the
 * *responder* QP moves to ERR with an affiliated async event (IBV_EVENT_QP_ACCESS_ERR for access
 * violations, IBV_EVENT_QP_REQ_ERR for invalid requests): a peer cannot go on guessing rkeys on
 * the same connection. Includes a 1 MiB WRITE (longer than the ring), refused at its first
 * segment while the requester is still writing it. */
#include <errno.h>
#include <unistd.h>

#include "rc_pair.h"


/* The two QPs' async events, in whichever order they come: the responder's `type` (its class C
 * error) and the requester's own (it failed on the NAK). Both QPs raise theirs independently, so
 * the library promises no order between them. */
static void expect_events(struct ibv_qp *responder, enum ibv_event_type type, struct ibv_qp *requester)
{
	int seen_responder = 0, seen_requester = 0;
	for (int i = 0; i < 2; i++) {
		struct ibv_async_event e;
		CHECK(ibv_get_async_event(ctx, &e) == 0, "get_async_event");
		if (e.element.qp == responder) {
			CHECK(e.event_type == type && !seen_responder, "event %s on the responder, expected %s",
			      ibv_event_type_str(e.event_type), ibv_event_type_str(type));
			seen_responder = 1;
		} else {
			CHECK(e.element.qp == requester && !seen_requester, "event %s on another QP",
			      ibv_event_type_str(e.event_type));
			seen_requester = 1;
		}
		ibv_ack_async_event(&e);
	}
}

/* One refused request: the requester's status, then both QPs in ERR, the responder's event and
 * the requester's own. */
static void refused(struct end *a, struct end *b, enum ibv_wc_status status, enum ibv_event_type ev,
		    const char *what)
{
	struct ibv_wc wc = wait_wc(a->cq, 5000);
	CHECK(wc.status == status && wc.wr_id == 1, "%s: status %s", what, ibv_wc_status_str(wc.status));
	CHECK(qp_state(b->qp) == IBV_QPS_ERR, "%s: responder QP still in state %d", what, qp_state(b->qp));
	CHECK(qp_state(a->qp) == IBV_QPS_ERR, "%s: requester QP in state %d", what, qp_state(a->qp));
	expect_events(b->qp, ev, a->qp);
	printf("ok %s: %s at the requester, responder in ERR with %s\n", what, ibv_wc_status_str(status),
	       ibv_event_type_str(ev));
	ibv_destroy_qp(a->qp);
	ibv_destroy_qp(b->qp);
}

int main(void)
{
	alarm(60);
	open_first_device();
	size_t big = 1 << 20;
	char *local = calloc(1, big), *remote = calloc(1, big), *ro = calloc(1, 4096);
	struct ibv_mr *lmr = ibv_reg_mr(pd, local, big, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(pd, remote, big, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	struct ibv_mr *romr = ibv_reg_mr(pd, ro, 4096, 0);
	CHECK(lmr && rmr && romr, "reg_mr");
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		  IBV_ACCESS_REMOTE_ATOMIC;
	struct end a, b;

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 64, lmr->lkey, (uintptr_t)remote, rmr->rkey ^ 0x5a5a, 1) == 0,
	      "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "WRITE with a wrong rkey");

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, big, lmr->lkey, (uintptr_t)remote, rmr->rkey ^ 0x5a5a, 1) == 0,
	      "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "1 MiB WRITE with a wrong rkey");

	pair(&a, &b, all, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_READ, local, 64, lmr->lkey, (uintptr_t)ro, romr->rkey, 1) == 0, "post");
	refused(&a, &b, IBV_WC_REM_ACCESS_ERR, IBV_EVENT_QP_ACCESS_ERR, "READ of a region without remote read");

	pair(&a, &b, IBV_ACCESS_LOCAL_WRITE, 7);
	CHECK(post(a.qp, IBV_WR_RDMA_WRITE, local, 64, lmr->lkey, (uintptr_t)remote, rmr->rkey, 1) == 0, "post");
	refused(&a, &b, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR, "WRITE to a QP without remote write");

	pair(&a, &b, all, 7);
	struct ibv_sge rs = { (uintptr_t)remote, 16, rmr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &rs, .num_sge = 1 }, *rbad;
	CHECK(ibv_post_recv(b.qp, &rw, &rbad) == 0, "post_recv");
	CHECK(post(a.qp, IBV_WR_SEND, local, 64, lmr->lkey, 0, 0, 1) == 0, "post");
	struct ibv_wc wc = wait_wc(b.cq, 5000);
	CHECK(wc.status == IBV_WC_LOC_LEN_ERR && wc.wr_id == 9, "receive: %s", ibv_wc_status_str(wc.status));
	refused(&a, &b, IBV_WC_REM_INV_REQ_ERR, IBV_EVENT_QP_REQ_ERR, "SEND longer than the receive");
	puts("ok all");
	return 0;
}
