/* The verbs beyond plain MRs, used by a remote peer across network namespaces (RoCEv2 over UDP,
 * issue 13 deliverable 3): the server owns the remote targets and the client reaches them.
 *  - a type 1 memory window bound with ibv_bind_mw, and a type 2 window bound with
 *    IBV_WR_BIND_MW (a new key from ibv_inc_rkey), over two halves of one MR;
 *  - an ODP MR (IBV_ACCESS_ON_DEMAND), an implicit ODP MR (the whole address space) and a
 *    device memory MR (ibv_reg_dm_mr, zero-based);
 *  - each is written with RDMA WRITE, read back with RDMA READ, and checked byte for byte by
 *    both sides (the server reads the DM with ibv_memcpy_from_dm);
 *  - a WRITE that runs past the type 1 window gets IBV_WC_REM_ACCESS_ERR (under faults, a lost
 *    NAK may make it IBV_WC_RETRY_EXC_ERR) and changes nothing;
 *  - SEND_WITH_INV names the type 2 window: the server's receive carries IBV_WC_WITH_INV and
 *    that rkey, and a WRITE through the window afterwards gets IBV_WC_REM_ACCESS_ERR and
 *    changes nothing.
 *
 *   net_verbs server PORT GID_INDEX
 *   net_verbs client HOST PORT GID_INDEX
 * Exit 0 and "net_verbs: OK" on success. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "net_side.h"

enum { T_MW1, T_MW2, T_ODP, T_IMPLICIT, T_DM, TARGETS };
static const char *const NAMES[TARGETS] = { "type 1 window", "type 2 window", "ODP MR", "implicit ODP MR",
					    "device memory MR" };
enum { PIECE = 4096, TIMEOUT_MS = 30000 };

struct info { uint32_t qpn[2], psn; uint8_t gid[16]; };
struct target { uint64_t addr; uint32_t rkey, len; };

static struct ibv_cq *cq;

/* What a target holds once the client wrote it. */
static void fill(uint8_t *p, size_t n, int id)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + id * 31 + 1);
}

static int filled(const uint8_t *p, size_t n, int id)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (uint8_t)(i * 7 + id * 31 + 1))
			return 0;
	return 1;
}

/* The next completion, whatever its status. Spins a little, then yields between polls: two
 * busy-polling processes on a small machine would starve the softirq that carries their
 * packets between the namespaces. */
static struct ibv_wc next_wc(void)
{
	struct ibv_wc wc;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int spin = 0;; spin++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1)
			return wc;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < TIMEOUT_MS,
		      "no completion in %d ms", TIMEOUT_MS);
		if (spin > 1000)
			usleep(50);
	}
}

static struct ibv_wc expect_wc(uint64_t wr_id, enum ibv_wc_status status)
{
	struct ibv_wc wc = next_wc();
	CHECK(wc.wr_id == wr_id && wc.status == status, "wr %llu: %s, expected wr %llu: %s",
	      (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status), (unsigned long long)wr_id,
	      ibv_wc_status_str(status));
	return wc;
}

/* A request the server must refuse: IBV_WC_REM_ACCESS_ERR. Under RDMASHIM_FAULTS the NAK
 * may be lost, and the responder, in the error state after sending it, answers no resend (as
 * on InfiniBand): then the requester's retries run out (IBV_WC_RETRY_EXC_ERR). Either way the
 * server checks that its memory did not change. */
static void expect_refused(uint64_t wr_id)
{
	struct ibv_wc wc = next_wc();
	int lost_nak = getenv("RDMASHIM_FAULTS") && wc.status == IBV_WC_RETRY_EXC_ERR;
	CHECK(wc.wr_id == wr_id && (wc.status == IBV_WC_REM_ACCESS_ERR || lost_nak),
	      "wr %llu: %s, expected wr %llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status),
	      (unsigned long long)wr_id, ibv_wc_status_str(IBV_WC_REM_ACCESS_ERR));
}

static void post(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	wr->send_flags |= IBV_SEND_SIGNALED;
	CHECK(ibv_post_send(qp, wr, &bad) == 0, "post_send (opcode %d)", wr->opcode);
}

static void rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		 const struct target *t, uint64_t offset, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op };
	wr.wr.rdma.remote_addr = t->addr + offset;
	wr.wr.rdma.rkey = t->rkey;
	post(qp, &wr);
}

static void sync_byte(int s, char c, int out)
{
	char got = c;
	xfer(s, &got, 1, out);
	CHECK(got == c, "side channel: '%c' where '%c' was due", got, c);
}

struct server {
	struct ibv_pd *pd;
	struct ibv_qp *qp;
	uint8_t *win, *odp, *implicit_buf;
	struct ibv_mr *win_mr, *odp_mr, *implicit_mr, *dm_mr;
	struct ibv_mw *mw1, *mw2;
	struct ibv_dm *dm;
	struct target t[TARGETS];
};

static void make_targets(struct ibv_context *ctx, struct server *sv)
{
	struct ibv_device_attr_ex ax;
	CHECK(ibv_query_device_ex(ctx, NULL, &ax) == 0, "query_device_ex");
	uint32_t rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
	CHECK((ax.odp_caps.general_caps & IBV_ODP_SUPPORT) && (ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) &&
		      (rc & IBV_ODP_SUPPORT_WRITE) && (rc & IBV_ODP_SUPPORT_READ),
	      "ODP for RC WRITE and READ is not advertised");
	CHECK(ax.max_dm_size >= PIECE, "max_dm_size %llu", (unsigned long long)ax.max_dm_size);
	int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

	/* Two windows over the halves of one MR that grants no remote access itself. */
	sv->win = aligned_alloc(4096, 2 * PIECE);
	CHECK(sv->win, "alloc");
	memset(sv->win, 0, 2 * PIECE);
	sv->win_mr = ibv_reg_mr(sv->pd, sv->win, 2 * PIECE, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
	CHECK(sv->win_mr, "reg_mr (MW_BIND)");
	sv->mw1 = ibv_alloc_mw(sv->pd, IBV_MW_TYPE_1);
	sv->mw2 = ibv_alloc_mw(sv->pd, IBV_MW_TYPE_2);
	CHECK(sv->mw1 && sv->mw2, "alloc_mw");
	struct ibv_mw_bind b1 = { .wr_id = 1, .send_flags = IBV_SEND_SIGNALED,
				  .bind_info = { sv->win_mr, (uintptr_t)sv->win, PIECE,
						 IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ } };
	CHECK(ibv_bind_mw(sv->qp, sv->mw1, &b1) == 0, "ibv_bind_mw");
	expect_wc(1, IBV_WC_SUCCESS);
	uint32_t k2 = ibv_inc_rkey(sv->mw2->rkey);
	struct ibv_send_wr b2 = { .wr_id = 2, .opcode = IBV_WR_BIND_MW };
	b2.bind_mw.mw = sv->mw2;
	b2.bind_mw.rkey = k2;
	b2.bind_mw.bind_info = (struct ibv_mw_bind_info){ sv->win_mr, (uintptr_t)sv->win + PIECE, PIECE,
							  IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ };
	post(sv->qp, &b2);
	expect_wc(2, IBV_WC_SUCCESS);
	CHECK(sv->mw2->rkey == k2, "the type 2 window's rkey is 0x%x after binding 0x%x", sv->mw2->rkey, k2);
	sv->t[T_MW1] = (struct target){ (uintptr_t)sv->win, sv->mw1->rkey, PIECE };
	sv->t[T_MW2] = (struct target){ (uintptr_t)sv->win + PIECE, k2, PIECE };

	sv->odp = aligned_alloc(4096, PIECE);
	CHECK(sv->odp, "alloc");
	memset(sv->odp, 0, PIECE);
	sv->odp_mr = ibv_reg_mr(sv->pd, sv->odp, PIECE, remote | IBV_ACCESS_ON_DEMAND);
	CHECK(sv->odp_mr, "reg_mr (ON_DEMAND)");
	sv->t[T_ODP] = (struct target){ (uintptr_t)sv->odp, sv->odp_mr->rkey, PIECE };

	/* Implicit ODP: the key covers the address space; the target is ordinary heap. */
	sv->implicit_buf = calloc(1, PIECE);
	CHECK(sv->implicit_buf, "alloc");
	sv->implicit_mr = ibv_reg_mr(sv->pd, NULL, SIZE_MAX, remote | IBV_ACCESS_ON_DEMAND);
	CHECK(sv->implicit_mr, "reg_mr (implicit ODP)");
	sv->t[T_IMPLICIT] = (struct target){ (uintptr_t)sv->implicit_buf, sv->implicit_mr->rkey, PIECE };

	struct ibv_alloc_dm_attr da = { .length = PIECE };
	sv->dm = ibv_alloc_dm(ctx, &da);
	CHECK(sv->dm, "alloc_dm");
	uint8_t zero[PIECE] = { 0 };
	CHECK(ibv_memcpy_to_dm(sv->dm, 0, zero, PIECE) == 0, "memcpy_to_dm");
	sv->dm_mr = ibv_reg_dm_mr(sv->pd, sv->dm, 0, PIECE, remote | IBV_ACCESS_ZERO_BASED);
	CHECK(sv->dm_mr, "reg_dm_mr");
	sv->t[T_DM] = (struct target){ 0, sv->dm_mr->rkey, PIECE };
}

/* Whether target id holds what the client wrote (or, unwritten, zeros). */
static int target_holds(struct server *sv, int id, int written)
{
	uint8_t copy[PIECE], *p;
	switch (id) {
	case T_MW1: p = sv->win; break;
	case T_MW2: p = sv->win + PIECE; break;
	case T_ODP: p = sv->odp; break;
	case T_IMPLICIT: p = sv->implicit_buf; break;
	default:
		CHECK(ibv_memcpy_from_dm(copy, sv->dm, 0, PIECE) == 0, "memcpy_from_dm");
		p = copy;
	}
	if (written)
		return filled(p, PIECE, id);
	for (int i = 0; i < PIECE; i++)
		if (p[i])
			return 0;
	return 1;
}

static void all_hold(struct server *sv, const char *when)
{
	for (int id = 0; id < TARGETS; id++)
		CHECK(target_holds(sv, id, 1), "%s: the %s does not hold what the client wrote", when, NAMES[id]);
}

static void serve(int s, struct server *sv)
{
	uint8_t *inbox = calloc(1, 64);
	struct ibv_mr *inbox_mr = ibv_reg_mr(sv->pd, inbox, 64, IBV_ACCESS_LOCAL_WRITE);
	CHECK(inbox && inbox_mr, "inbox");
	struct ibv_sge sge = { (uintptr_t)inbox, 64, inbox_mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 100, .sg_list = &sge, .num_sge = 1 }, *bad;
	CHECK(ibv_post_recv(sv->qp, &rw, &bad) == 0, "post_recv");
	for (int id = 0; id < TARGETS; id++)
		CHECK(target_holds(sv, id, 0), "the %s is not zero before the client writes", NAMES[id]);
	xfer(s, sv->t, sizeof sv->t, 1);

	sync_byte(s, 'w', 0); /* the client wrote every target and read each back */
	all_hold(sv, "after the WRITEs");
	sync_byte(s, 'k', 1);

	sync_byte(s, 'o', 0); /* a WRITE past the type 1 window was refused */
	all_hold(sv, "after the WRITE past the type 1 window");

	struct ibv_wc wc = expect_wc(100, IBV_WC_SUCCESS); /* the SEND with invalidate */
	CHECK(wc.opcode == IBV_WC_RECV && (wc.wc_flags & IBV_WC_WITH_INV) && wc.invalidated_rkey == sv->t[T_MW2].rkey,
	      "SEND_WITH_INV received: opcode %d, flags 0x%x, rkey 0x%x (window 0x%x)", wc.opcode, wc.wc_flags,
	      wc.invalidated_rkey, sv->t[T_MW2].rkey);
	CHECK(!strcmp((char *)inbox, "invalidate"), "SEND_WITH_INV payload");
	sync_byte(s, 'i', 1);

	sync_byte(s, 'e', 0); /* a WRITE through the invalidated window was refused */
	all_hold(sv, "after the WRITE through the invalidated window");
	CHECK(ibv_dealloc_mw(sv->mw1) == 0 && ibv_dealloc_mw(sv->mw2) == 0, "dealloc_mw");
	CHECK(ibv_dereg_mr(sv->win_mr) == 0 && ibv_dereg_mr(sv->odp_mr) == 0 && ibv_dereg_mr(sv->implicit_mr) == 0 &&
		      ibv_dereg_mr(sv->dm_mr) == 0 && ibv_free_dm(sv->dm) == 0 && ibv_dereg_mr(inbox_mr) == 0,
	      "teardown");
	free(sv->win);
	free(sv->odp);
	free(sv->implicit_buf);
	free(inbox);
	sync_byte(s, 'd', 1);
}

static void reach(int s, struct ibv_pd *pd, struct ibv_qp *qp_a, struct ibv_qp *qp_b)
{
	struct target t[TARGETS];
	xfer(s, t, sizeof t, 0);
	uint8_t *out = aligned_alloc(4096, 2 * PIECE), *back = out + PIECE;
	CHECK(out, "alloc");
	struct ibv_mr *mr = ibv_reg_mr(pd, out, 2 * PIECE, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr, "reg_mr");
	for (int id = 0; id < TARGETS; id++) {
		fill(out, PIECE, id);
		memset(back, 0, PIECE);
		/* Two WRITEs (the second of several packets), then one READ of the whole. */
		rdma(qp_a, IBV_WR_RDMA_WRITE, out, 64, mr->lkey, &t[id], 0, 10 + id);
		expect_wc(10 + id, IBV_WC_SUCCESS);
		rdma(qp_a, IBV_WR_RDMA_WRITE, out + 64, PIECE - 64, mr->lkey, &t[id], 64, 20 + id);
		expect_wc(20 + id, IBV_WC_SUCCESS);
		rdma(qp_a, IBV_WR_RDMA_READ, back, PIECE, mr->lkey, &t[id], 0, 30 + id);
		expect_wc(30 + id, IBV_WC_SUCCESS);
		CHECK(filled(back, PIECE, id), "the %s read back differs from what was written", NAMES[id]);
	}
	sync_byte(s, 'w', 1);
	sync_byte(s, 'k', 0);

	/* 16 bytes from 8 before the type 1 window's end: refused whole. */
	memset(out, 0xee, PIECE);
	rdma(qp_b, IBV_WR_RDMA_WRITE, out, 16, mr->lkey, &t[T_MW1], PIECE - 8, 40);
	expect_refused(40);
	sync_byte(s, 'o', 1);

	strcpy((char *)out, "invalidate");
	struct ibv_sge sge = { (uintptr_t)out, 11, mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 50, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_INV,
				  .invalidate_rkey = t[T_MW2].rkey };
	post(qp_a, &wr);
	expect_wc(50, IBV_WC_SUCCESS);
	sync_byte(s, 'i', 0);

	rdma(qp_a, IBV_WR_RDMA_WRITE, out, 16, mr->lkey, &t[T_MW2], 0, 60);
	expect_refused(60);
	sync_byte(s, 'e', 1);
	sync_byte(s, 'd', 0);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	free(out);
}

int main(int argc, char **argv)
{
	int server = argc == 4 && !strcmp(argv[1], "server");
	CHECK(server || (argc == 5 && !strcmp(argv[1], "client")),
	      "usage: net_verbs server PORT GIDX | net_verbs client HOST PORT GIDX");
	int gidx = atoi(argv[argc - 1]);
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "no device");
	struct ibv_context *ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	CHECK(pd && cq, "pd/cq");
	struct ibv_qp *qp[2];
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
					       .cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1,
							.max_recv_sge = 1 } };
		qp[i] = ibv_create_qp(pd, &ia);
		CHECK(qp[i], "create_qp");
	}
	struct info me = { .qpn = { qp[0]->qp_num, qp[1]->qp_num }, .psn = (uint32_t)getpid() & 0xffffff }, peer;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, gidx, &gid) == 0, "query_gid");
	memcpy(me.gid, gid.raw, 16);
	int s = server ? tcp(NULL, argv[2]) : tcp(argv[2], argv[3]);
	xfer(s, &me, sizeof me, 1);
	xfer(s, &peer, sizeof peer, 0);
	for (int i = 0; i < 2; i++)
		net_connect_qp(qp[i], me.psn, peer.qpn[i], peer.psn, peer.gid, gidx);
	sync_byte(s, 'g', server); /* both sides at RTS before anything is sent */
	sync_byte(s, 'g', !server);
	if (server) {
		struct server sv = { .pd = pd, .qp = qp[0] };
		make_targets(ctx, &sv);
		serve(s, &sv);
	} else {
		reach(s, pd, qp[0], qp[1]);
	}
	close(s);
	for (int i = 0; i < 2; i++)
		CHECK(ibv_destroy_qp(qp[i]) == 0, "destroy_qp");
	CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0 && ibv_close_device(ctx) == 0, "teardown");
	ibv_free_device_list(list);
	printf("net_verbs: OK\n");
	return 0;
}
