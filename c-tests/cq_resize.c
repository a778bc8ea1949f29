/* ibv_resize_cq(3): "cqe ... must be at least the number of work completions the CQ holds";
 * a smaller value fails with EINVAL and leaves the CQ as it was. The CQ is filled without
 * polling: receives posted to a QP in the error state complete at once with
 * IBV_WC_WR_FLUSH_ERR. Prints "ok ..." lines; exits 1 with "FAIL" on the first failed check. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
	fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); exit(1); } } while (0)

#define HELD 3

int main(void)
{
	int n;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n >= 1, "device list");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	CHECK(pd, "alloc_pd");
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	CHECK(cq, "create_cq");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = 4, .max_recv_wr = 8, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "create_qp");
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_INIT, .port_num = 1 };
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0,
	      "INIT");
	a.qp_state = IBV_QPS_ERR;
	CHECK(ibv_modify_qp(qp, &a, IBV_QP_STATE) == 0, "ERR");
	for (int i = 0; i < HELD; i++) {
		struct ibv_recv_wr wr = { .wr_id = i }, *bad;
		CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
	}

	int r = ibv_resize_cq(cq, HELD - 1);
	CHECK(r == EINVAL, "resize to %d with %d completions held: %d (%s), want EINVAL", HELD - 1, HELD, r,
	      strerror(r));
	CHECK(cq->cqe >= HELD, "cqe %d after the refused resize", cq->cqe);
	printf("ok resize below the %d completions held: EINVAL, cqe still %d\n", HELD, cq->cqe);

	r = ibv_resize_cq(cq, HELD);
	CHECK(r == 0 && cq->cqe >= HELD, "resize to %d: %d (%s), cqe %d", HELD, r, strerror(r), cq->cqe);
	struct ibv_wc wc[HELD + 1];
	n = ibv_poll_cq(cq, HELD + 1, wc);
	CHECK(n == HELD, "polled %d, want the %d held", n, HELD);
	for (int i = 0; i < n; i++)
		CHECK(wc[i].status == IBV_WC_WR_FLUSH_ERR && wc[i].wr_id == (uint64_t)i, "completion %d", i);
	r = ibv_resize_cq(cq, 1);
	CHECK(r == 0 && cq->cqe >= 1, "resize to 1 when empty: %d (%s)", r, strerror(r));
	printf("ok resize to the number held, then smaller once polled\n");

	CHECK(ibv_destroy_qp(qp) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0, "destroy_cq");
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
