/*
 * c-tests/badinput/inline_bad.c: the 15 functions rdma-core's <rdma/rdma_verbs.h> defines static
 * inline, which librdmashim exports as real functions (include/rdma/rdma_verbs.h declares them;
 * <repo>/include comes first on the include path, so the calls below are calls of the exported
 * symbols). Called with NULL pointers, destroyed and foreign ids and MRs, and in the wrong state.
 *
 * Conventions: 0 / -1 with errno for the post functions and rdma_dereg_mr, NULL with errno for
 * rdma_reg_*, the count (0 or 1) / -1 with errno for rdma_get_*_comp. The deviations from
 * rdma-core's inline code (EINVAL where it crashes or asserts) are docs/INLINE-API.md's.
 */
#include "badinput.h"
#include "cm_pair.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>

#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#ifndef RDMA_SEND_INLINE_LENGTH
#define RDMA_SEND_INLINE_LENGTH 16
#endif

static struct rdma_cm_id foreign_id;
static struct ibv_mr foreign_mr;
static char buf[4096];

/* --- fixtures --------------------------------------------------------------------------- */

static struct rdma_cm_id *new_id(void)
{
	struct rdma_cm_id *id = NULL;

	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return NULL;
	return id;
}

static struct rdma_cm_id *stale_id(void)
{
	struct rdma_cm_id *id = new_id();

	if (!id || rdma_destroy_id(id))
		return NULL;
	return id;
}

/* A synchronous id with its route resolved to the loopback address: it has a device and a PD. */
static struct rdma_cm_id *route_resolved_id(void)
{
	struct sockaddr_in dst;
	struct rdma_cm_id *id = new_id();

	if (!id)
		return NULL;
	memset(&dst, 0, sizeof(dst));
	dst.sin_family = AF_INET;
	dst.sin_port = htons(9);
	dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) ||
	    rdma_resolve_route(id, 1000)) {
		rdma_destroy_id(id);
		return NULL;
	}
	return id;
}

/* Creates the id's QP (in INIT, as rdma_create_qp leaves it) on `cq` (NULL: CQs and completion
 * channels made by the CM). */
static int create_qp(struct rdma_cm_id *id, struct ibv_cq *cq)
{
	struct ibv_qp_init_attr a;

	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.recv_cq = cq;
	a.cap.max_send_wr = 4;
	a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	a.qp_type = IBV_QPT_RC;
	return rdma_create_qp(id, NULL, &a);
}

/* The fixture of the post and completion cases. */
struct fx {
	struct rdma_cm_id *idle;   /* no device, no QP */
	struct rdma_cm_id *noqp;   /* route resolved, no QP */
	struct rdma_cm_id *init;   /* route resolved, QP in INIT (CM-made CQs with channels) */
	struct rdma_cm_id *stale;  /* destroyed */
	struct ibv_mr *mr;         /* on init's PD, covers buf */
};

/* An MR registered on the id's PD and deregistered again. */
static struct ibv_mr *stale_mr(struct rdma_cm_id *id)
{
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof(buf));

	if (!mr || rdma_dereg_mr(mr))
		return NULL;
	return mr;
}

static int fx_setup(struct fx *f)
{
	memset(f, 0, sizeof(*f));
	if (!(f->idle = new_id()) || !(f->noqp = route_resolved_id()) ||
	    !(f->init = route_resolved_id()) || create_qp(f->init, NULL) ||
	    !(f->mr = rdma_reg_msgs(f->init, buf, sizeof(buf))) || !(f->stale = stale_id()))
		return -1;
	return 0;
}

static void fx_teardown(struct fx *f)
{
	if (f->mr)
		rdma_dereg_mr(f->mr);
	if (f->init) {
		rdma_destroy_qp(f->init);
		rdma_destroy_id(f->init);
	}
	if (f->noqp)
		rdma_destroy_id(f->noqp);
	if (f->idle)
		rdma_destroy_id(f->idle);
}

/* --- memory registration ------------------------------------------------------------------- */

typedef struct ibv_mr *(*reg_fn)(struct rdma_cm_id *, void *, size_t);

static void check_reg(reg_fn reg)
{
	struct rdma_cm_id *idle, *route, *stale;

	REQUIRE((idle = new_id()) != NULL);
	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = stale_id()) != NULL);
	EXPECT_NULL(reg(NULL, buf, sizeof(buf)), EINVAL);
	EXPECT_NULL(reg(stale, buf, sizeof(buf)), EINVAL);
	EXPECT_NULL(reg(&foreign_id, buf, sizeof(buf)), EINVAL);
	/* No device yet, so no PD (rdma-core hands the NULL PD to ibv_reg_mr). */
	EXPECT_NULL(reg(idle, buf, sizeof(buf)), EINVAL);
	/* A NULL buffer of non-zero length. */
	EXPECT_NULL(reg(route, NULL, sizeof(buf)), EINVAL);
	rdma_destroy_id(route);
	rdma_destroy_id(idle);
}

static void case_rdma_reg_msgs(void)
{
	check_reg(rdma_reg_msgs);
}

static void case_rdma_reg_read(void)
{
	check_reg(rdma_reg_read);
}

static void case_rdma_reg_write(void)
{
	check_reg(rdma_reg_write);
}

static void case_rdma_dereg_mr(void)
{
	struct rdma_cm_id *route;
	struct ibv_mr *stale;

	REQUIRE((route = route_resolved_id()) != NULL);
	REQUIRE((stale = rdma_reg_msgs(route, buf, sizeof(buf))) != NULL);
	REQUIRE(rdma_dereg_mr(stale) == 0);
	EXPECT_M1(rdma_dereg_mr(NULL), EINVAL);
	EXPECT_M1(rdma_dereg_mr(stale), EINVAL);
	EXPECT_M1(rdma_dereg_mr(&foreign_mr), EINVAL);
	rdma_destroy_id(route);
}

/* --- posts ------------------------------------------------------------------------------- */

static void case_rdma_post_recvv(void)
{
	struct fx f;
	struct ibv_sge sge;

	REQUIRE(fx_setup(&f) == 0);
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = f.mr->lkey;
	EXPECT_M1(rdma_post_recvv(NULL, NULL, &sge, 1), EINVAL);
	EXPECT_M1(rdma_post_recvv(f.stale, NULL, &sge, 1), EINVAL);
	EXPECT_M1(rdma_post_recvv(&foreign_id, NULL, &sge, 1), EINVAL);
	/* Neither SRQ nor QP. */
	EXPECT_M1(rdma_post_recvv(f.idle, NULL, &sge, 1), EINVAL);
	EXPECT_M1(rdma_post_recvv(f.noqp, NULL, &sge, 1), EINVAL);
	/* A NULL list of one entry; a negative count. */
	EXPECT_M1(rdma_post_recvv(f.init, NULL, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_recvv(f.init, NULL, &sge, -1), EINVAL);
	/* After rdma_destroy_qp the id has no QP again. */
	rdma_destroy_qp(f.init);
	EXPECT_M1(rdma_post_recvv(f.init, NULL, &sge, 1), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_sendv(void)
{
	struct fx f;
	struct ibv_sge sge;

	REQUIRE(fx_setup(&f) == 0);
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = f.mr->lkey;
	EXPECT_M1(rdma_post_sendv(NULL, NULL, &sge, 1, 0), EINVAL);
	EXPECT_M1(rdma_post_sendv(f.stale, NULL, &sge, 1, 0), EINVAL);
	EXPECT_M1(rdma_post_sendv(&foreign_id, NULL, &sge, 1, 0), EINVAL);
	EXPECT_M1(rdma_post_sendv(f.idle, NULL, &sge, 1, 0), EINVAL);
	EXPECT_M1(rdma_post_sendv(f.noqp, NULL, &sge, 1, 0), EINVAL);
	/* The QP is in INIT (not connected): no send. */
	EXPECT_M1(rdma_post_sendv(f.init, NULL, &sge, 1, 0), EINVAL);
	EXPECT_M1(rdma_post_sendv(f.init, NULL, NULL, 1, 0), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_readv(void)
{
	struct fx f;
	struct ibv_sge sge;

	REQUIRE(fx_setup(&f) == 0);
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = f.mr->lkey;
	EXPECT_M1(rdma_post_readv(NULL, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_readv(f.stale, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_readv(&foreign_id, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_readv(f.idle, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_readv(f.noqp, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_readv(f.init, NULL, &sge, 1, 0, (uintptr_t)buf, f.mr->rkey), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_writev(void)
{
	struct fx f;
	struct ibv_sge sge;

	REQUIRE(fx_setup(&f) == 0);
	sge.addr = (uintptr_t)buf;
	sge.length = 64;
	sge.lkey = f.mr->lkey;
	EXPECT_M1(rdma_post_writev(NULL, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_writev(f.stale, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_writev(&foreign_id, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_writev(f.idle, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_writev(f.noqp, NULL, &sge, 1, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_writev(f.init, NULL, &sge, 1, 0, (uintptr_t)buf, f.mr->rkey), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_recv(void)
{
	struct fx f;
	struct ibv_mr *stale;

	REQUIRE(fx_setup(&f) == 0);
	REQUIRE((stale = stale_mr(f.init)) != NULL);
	EXPECT_M1(rdma_post_recv(NULL, NULL, buf, 64, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(f.stale, NULL, buf, 64, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(&foreign_id, NULL, buf, 64, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(f.idle, NULL, buf, 64, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(f.noqp, NULL, buf, 64, f.mr), EINVAL);
	/* A receive needs an MR (rdma-core dereferences it), and a buffer inside it. */
	EXPECT_M1(rdma_post_recv(f.init, NULL, buf, 64, NULL), EINVAL);
	EXPECT_M1(rdma_post_recv(f.init, NULL, buf + sizeof(buf) - 8, 64, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(f.init, NULL, buf + 8, SIZE_MAX, f.mr), EINVAL);
	EXPECT_M1(rdma_post_recv(f.init, NULL, (void *)(uintptr_t)16, 64, f.mr), EINVAL);
	/* A QP in INIT takes receives: with a destroyed or foreign MR it must still refuse. */
	EXPECT_M1(rdma_post_recv(f.init, NULL, buf, 64, stale), EINVAL);
	EXPECT_M1(rdma_post_recv(f.init, NULL, buf, 64, &foreign_mr), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_send(void)
{
	struct fx f;
	struct cm_pair p;
	struct ibv_mr *stale;

	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE(fx_setup(&f) == 0);
	REQUIRE((stale = stale_mr(p.client)) != NULL);
	EXPECT_M1(rdma_post_send(NULL, NULL, buf, 64, f.mr, 0), EINVAL);
	EXPECT_M1(rdma_post_send(f.stale, NULL, buf, 64, f.mr, 0), EINVAL);
	EXPECT_M1(rdma_post_send(&foreign_id, NULL, buf, 64, f.mr, 0), EINVAL);
	EXPECT_M1(rdma_post_send(f.idle, NULL, buf, 64, f.mr, 0), EINVAL);
	EXPECT_M1(rdma_post_send(f.noqp, NULL, buf, 64, NULL, IBV_SEND_INLINE), EINVAL);
	/* QP in INIT: no send. */
	EXPECT_M1(rdma_post_send(f.init, NULL, buf, 64, f.mr, 0), EINVAL);
	EXPECT_M1(rdma_post_send(f.init, NULL, buf, RDMA_SEND_INLINE_LENGTH, NULL,
				 IBV_SEND_INLINE),
		  EINVAL);
	/* A connected QP (RTS) takes sends: a destroyed or foreign MR must still be refused. */
	EXPECT_M1(rdma_post_send(p.client, NULL, buf, 64, stale, 0), EINVAL);
	EXPECT_M1(rdma_post_send(p.client, NULL, buf, 64, &foreign_mr, 0), EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_read(void)
{
	struct fx f;
	struct cm_pair p;
	struct ibv_mr *stale;

	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE(fx_setup(&f) == 0);
	REQUIRE((stale = stale_mr(p.client)) != NULL);
	EXPECT_M1(rdma_post_read(NULL, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_read(f.stale, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_read(&foreign_id, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_read(f.idle, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_read(f.noqp, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	/* A READ lands in local memory: it needs an MR (rdma-core dereferences it). */
	EXPECT_M1(rdma_post_read(f.init, NULL, buf, 64, NULL, 0, (uintptr_t)buf, f.mr->rkey),
		  EINVAL);
	EXPECT_M1(rdma_post_read(f.init, NULL, buf, 64, f.mr, 0, (uintptr_t)buf, f.mr->rkey),
		  EINVAL);
	/* On a connected QP, with a destroyed or foreign MR. */
	EXPECT_M1(rdma_post_read(p.client, NULL, buf, 64, stale, 0, (uintptr_t)buf, 0), EINVAL);
	EXPECT_M1(rdma_post_read(p.client, NULL, buf, 64, &foreign_mr, 0, (uintptr_t)buf, 0),
		  EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_write(void)
{
	struct fx f;
	struct cm_pair p;
	struct ibv_mr *stale;

	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE(fx_setup(&f) == 0);
	REQUIRE((stale = stale_mr(p.client)) != NULL);
	EXPECT_M1(rdma_post_write(NULL, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_write(f.stale, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_write(&foreign_id, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_write(f.idle, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_write(f.noqp, NULL, buf, 64, f.mr, 0, 0, 0), EINVAL);
	EXPECT_M1(rdma_post_write(f.init, NULL, buf, 64, f.mr, 0, (uintptr_t)buf, f.mr->rkey),
		  EINVAL);
	/* On a connected QP, with a destroyed or foreign MR. */
	EXPECT_M1(rdma_post_write(p.client, NULL, buf, 64, stale, 0, (uintptr_t)buf, 0), EINVAL);
	EXPECT_M1(rdma_post_write(p.client, NULL, buf, 64, &foreign_mr, 0, (uintptr_t)buf, 0),
		  EINVAL);
	fx_teardown(&f);
}

static void case_rdma_post_ud_send(void)
{
	struct fx f;
	struct cm_pair p;
	struct ibv_mr *stale;

	REQUIRE(cm_pair_connect(&p) == 0);
	REQUIRE(fx_setup(&f) == 0);
	REQUIRE((stale = stale_mr(p.client)) != NULL);
	EXPECT_M1(rdma_post_ud_send(NULL, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_ud_send(f.stale, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_ud_send(&foreign_id, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_ud_send(f.idle, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_ud_send(f.noqp, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	/* An RC QP in INIT, and no address handle. */
	EXPECT_M1(rdma_post_ud_send(f.init, NULL, buf, 64, f.mr, 0, NULL, 1), EINVAL);
	/* On a connected QP, with a destroyed or foreign MR. */
	EXPECT_M1(rdma_post_ud_send(p.client, NULL, buf, 64, stale, 0, NULL, 1), EINVAL);
	EXPECT_M1(rdma_post_ud_send(p.client, NULL, buf, 64, &foreign_mr, 0, NULL, 1), EINVAL);
	fx_teardown(&f);
}

/* --- completions --------------------------------------------------------------------------- */

typedef int (*comp_fn)(struct rdma_cm_id *, struct ibv_wc *);

static void check_comp(comp_fn comp)
{
	struct fx f;
	struct ibv_wc wc;
	struct rdma_cm_id *user;
	struct ibv_cq *cq;

	/* The user's id first: fx_setup's destroyed id must stay the last one created. */
	REQUIRE((user = route_resolved_id()) != NULL);
	REQUIRE((cq = ibv_create_cq(user->verbs, 8, NULL, NULL, 0)) != NULL);
	REQUIRE(create_qp(user, cq) == 0);
	REQUIRE(fx_setup(&f) == 0);
	EXPECT_M1(comp(NULL, &wc), EINVAL);
	EXPECT_M1(comp(f.stale, &wc), EINVAL);
	EXPECT_M1(comp(&foreign_id, &wc), EINVAL);
	/* No QP, so no CQ. */
	EXPECT_M1(comp(f.idle, &wc), EINVAL);
	EXPECT_M1(comp(f.noqp, &wc), EINVAL);
	/* A NULL wc is refused up front (not after a completion is consumed). */
	EXPECT_M1(comp(f.init, NULL), EINVAL);
	/* The user's CQ has no completion channel: with nothing to return, the call would have to
	 * wait and cannot (rdma-core calls ibv_get_cq_event(NULL, ...)). */
	EXPECT_M1(comp(user, &wc), EINVAL);
	rdma_destroy_qp(user);
	ibv_destroy_cq(cq);
	rdma_destroy_id(user);
	fx_teardown(&f);
}

static void case_rdma_get_send_comp(void)
{
	check_comp(rdma_get_send_comp);
}

static void case_rdma_get_recv_comp(void)
{
	check_comp(rdma_get_recv_comp);
}

static const struct bi_case cases[] = {
	BI_CASE(rdma_reg_msgs),
	BI_CASE(rdma_reg_read),
	BI_CASE(rdma_reg_write),
	BI_CASE(rdma_dereg_mr),
	BI_CASE(rdma_post_recvv),
	BI_CASE(rdma_post_sendv),
	BI_CASE(rdma_post_readv),
	BI_CASE(rdma_post_writev),
	BI_CASE(rdma_post_recv),
	BI_CASE(rdma_post_send),
	BI_CASE(rdma_post_read),
	BI_CASE(rdma_post_write),
	BI_CASE(rdma_post_ud_send),
	BI_CASE(rdma_get_send_comp),
	BI_CASE(rdma_get_recv_comp),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
