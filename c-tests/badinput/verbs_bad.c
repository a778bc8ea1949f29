/*
 * c-tests/badinput/verbs_bad.c: every libibverbs function librdmashim exports, called with NULL
 * pointers, destroyed and foreign objects, and in the wrong state.
 *
 * Conventions (man pages of rdma-core 44): constructors return NULL with errno; most ibv_* calls
 * return the positive errno; ibv_close_device, ibv_query_gid, ibv_query_pkey,
 * ibv_get_pkey_index, ibv_get_cq_event, ibv_get_async_event and ibv_init_ah_from_wc return -1
 * (with errno); ibv_poll_cq returns a negative value; _ibv_query_gid_table returns a negative
 * errno; functions without an error value return their neutral value (0, "unknown") with errno.
 *
 * ibv_post_send, ibv_post_recv, ibv_post_srq_recv, ibv_poll_cq and ibv_req_notify_cq are static
 * inline in <infiniband/verbs.h> (they jump through the context's ops table): their exported
 * symbols are looked up with dlsym and called through function pointers. Functions the header
 * wraps in a macro (ibv_reg_mr, ibv_query_port, ...) are called as (name)(...), which is the
 * exported symbol.
 */
#include "badinput.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <infiniband/verbs.h>

/* Exported by libibverbs but not declared by the installed headers (private or kernel ABI). */
int ibv_query_gid_type(struct ibv_context *context, uint8_t port_num, unsigned int index,
		       int *type);
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, void *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, void *src);
void ibv_copy_path_rec_from_kern(void *dst, void *src);
void ibv_copy_path_rec_to_kern(void *dst, void *src);
int ibv_dontfork_range(void *base, size_t size);
int ibv_dofork_range(void *base, size_t size);
const char *ibv_get_sysfs_path(void);
int ibv_read_sysfs_file(const char *dir, const char *file, char *buf, size_t size);

/* The exported data-path symbols (static inline in the system header). */
typedef int (*post_send_fn)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);
typedef int (*post_recv_fn)(struct ibv_qp *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*post_srq_recv_fn)(struct ibv_srq *, struct ibv_recv_wr *, struct ibv_recv_wr **);
typedef int (*poll_cq_fn)(struct ibv_cq *, int, struct ibv_wc *);
typedef int (*req_notify_cq_fn)(struct ibv_cq *, int);

#include "verbs_fixtures.h"

/* --- device list and device ------------------------------------------------------------- */

static void case_ibv_get_device_list(void)
{
	struct ibv_device **list;

	/* num_devices is optional: NULL must work and give the NULL-terminated list. */
	list = (ibv_get_device_list)(NULL);
	REQUIRE(list != NULL);
	CHECK(list[0] != NULL && list[1] == NULL);
	ibv_free_device_list(list);
}

static void case_ibv_free_device_list(void)
{
	struct ibv_device *foreign[2] = { &foreign_dev, NULL };
	struct ibv_device **list = ibv_get_device_list(NULL);

	EXPECT_RETURNS(ibv_free_device_list(NULL));
	/* A list we never handed out, and one freed twice: ignored, never a heap corruption. */
	EXPECT_RETURNS(ibv_free_device_list(foreign));
	REQUIRE(list != NULL);
	EXPECT_RETURNS(ibv_free_device_list(list));
	EXPECT_RETURNS(ibv_free_device_list(list));
}

static void case_ibv_get_device_name(void)
{
	EXPECT_NULL(ibv_get_device_name(NULL), EINVAL);
	EXPECT_NULL(ibv_get_device_name(&foreign_dev), EINVAL);
}

static void case_ibv_get_device_guid(void)
{
	/* No error value: 0 with errno. */
	EXPECT_VAL(ibv_get_device_guid(NULL), 0, EINVAL);
	EXPECT_VAL(ibv_get_device_guid(&foreign_dev), 0, EINVAL);
}

static void case_ibv_get_device_index(void)
{
	EXPECT_M1(ibv_get_device_index(NULL), EINVAL);
	EXPECT_M1(ibv_get_device_index(&foreign_dev), EINVAL);
}

static void case_ibv_open_device(void)
{
	EXPECT_NULL(ibv_open_device(NULL), EINVAL);
	EXPECT_NULL(ibv_open_device(&foreign_dev), EINVAL);
}

static void case_ibv_close_device(void)
{
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL);
	EXPECT_M1(ibv_close_device(NULL), EINVAL);
	EXPECT_M1(ibv_close_device(stale), EINVAL);
	EXPECT_M1(ibv_close_device(&foreign_ctx), EINVAL);
}

/* --- context queries -------------------------------------------------------------------- */

static void case_ibv_query_device(void)
{
	struct ibv_device_attr attr;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_RET(ibv_query_device(NULL, &attr), EINVAL);
	EXPECT_RET(ibv_query_device(ctx, NULL), EINVAL);
	EXPECT_RET(ibv_query_device(stale, &attr), EINVAL);
	EXPECT_RET(ibv_query_device(&foreign_ctx, &attr), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_query_port(void)
{
	struct ibv_port_attr attr;
	struct _compat_ibv_port_attr *pa = (struct _compat_ibv_port_attr *)&attr;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_RET((ibv_query_port)(NULL, 1, pa), EINVAL);
	EXPECT_RET((ibv_query_port)(ctx, 1, NULL), EINVAL);
	EXPECT_RET((ibv_query_port)(stale, 1, pa), EINVAL);
	EXPECT_RET((ibv_query_port)(&foreign_ctx, 1, pa), EINVAL);
	/* Ports are numbered from 1; the soft device has one. */
	EXPECT_RET((ibv_query_port)(ctx, 0, pa), EINVAL);
	EXPECT_RET((ibv_query_port)(ctx, 2, pa), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_query_gid(void)
{
	union ibv_gid gid;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_M1(ibv_query_gid(NULL, 1, 0, &gid), EINVAL);
	EXPECT_M1(ibv_query_gid(ctx, 1, 0, NULL), EINVAL);
	EXPECT_M1(ibv_query_gid(stale, 1, 0, &gid), EINVAL);
	EXPECT_M1(ibv_query_gid(&foreign_ctx, 1, 0, &gid), EINVAL);
	EXPECT_M1(ibv_query_gid(ctx, 2, 0, &gid), EINVAL);
	EXPECT_M1(ibv_query_gid(ctx, 1, -1, &gid), EINVAL);
	EXPECT_M1(ibv_query_gid(ctx, 1, 1 << 20, &gid), EINVAL);
	ibv_close_device(ctx);
}

static void case__ibv_query_gid_ex(void)
{
	struct ibv_gid_entry e;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_RET(_ibv_query_gid_ex(NULL, 1, 0, &e, 0, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(ctx, 1, 0, NULL, 0, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(stale, 1, 0, &e, 0, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(&foreign_ctx, 1, 0, &e, 0, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(ctx, 2, 0, &e, 0, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(ctx, 1, 0, &e, 1, sizeof(e)), EINVAL);
	EXPECT_RET(_ibv_query_gid_ex(ctx, 1, 0, &e, 0, 1), EINVAL);
	/* Past the table: EINVAL, or ENODATA for an index inside the table size. */
	EXPECT_RET(_ibv_query_gid_ex(ctx, 1, 1u << 20, &e, 0, sizeof(e)), EINVAL, ENODATA);
	ibv_close_device(ctx);
}

static void case__ibv_query_gid_table(void)
{
	struct ibv_gid_entry e[64];
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	/* ibv_query_gid_table(3): "negative errno value on error". */
	EXPECT_EQ(_ibv_query_gid_table(NULL, e, 64, 0, sizeof(e[0])), -EINVAL);
	EXPECT_EQ(_ibv_query_gid_table(ctx, NULL, 64, 0, sizeof(e[0])), -EINVAL);
	EXPECT_EQ(_ibv_query_gid_table(stale, e, 64, 0, sizeof(e[0])), -EINVAL);
	EXPECT_EQ(_ibv_query_gid_table(&foreign_ctx, e, 64, 0, sizeof(e[0])), -EINVAL);
	EXPECT_EQ(_ibv_query_gid_table(ctx, e, 64, 1, sizeof(e[0])), -EINVAL);
	EXPECT_EQ(_ibv_query_gid_table(ctx, e, 64, 0, 1), -EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_query_gid_type(void)
{
	int type;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_M1(ibv_query_gid_type(NULL, 1, 0, &type), EINVAL);
	EXPECT_M1(ibv_query_gid_type(ctx, 1, 0, NULL), EINVAL);
	EXPECT_M1(ibv_query_gid_type(stale, 1, 0, &type), EINVAL);
	EXPECT_M1(ibv_query_gid_type(&foreign_ctx, 1, 0, &type), EINVAL);
	EXPECT_M1(ibv_query_gid_type(ctx, 2, 0, &type), EINVAL);
	EXPECT_M1(ibv_query_gid_type(ctx, 1, 1u << 20, &type), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_query_pkey(void)
{
	__be16 pkey;
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_M1(ibv_query_pkey(NULL, 1, 0, &pkey), EINVAL);
	EXPECT_M1(ibv_query_pkey(ctx, 1, 0, NULL), EINVAL);
	EXPECT_M1(ibv_query_pkey(stale, 1, 0, &pkey), EINVAL);
	EXPECT_M1(ibv_query_pkey(&foreign_ctx, 1, 0, &pkey), EINVAL);
	EXPECT_M1(ibv_query_pkey(ctx, 2, 0, &pkey), EINVAL);
	EXPECT_M1(ibv_query_pkey(ctx, 1, -1, &pkey), EINVAL);
	EXPECT_M1(ibv_query_pkey(ctx, 1, 1 << 20, &pkey), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_get_pkey_index(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL && ctx != NULL);
	EXPECT_M1(ibv_get_pkey_index(NULL, 1, htobe16(0xffff)), EINVAL);
	EXPECT_M1(ibv_get_pkey_index(stale, 1, htobe16(0xffff)), EINVAL);
	EXPECT_M1(ibv_get_pkey_index(&foreign_ctx, 1, htobe16(0xffff)), EINVAL);
	EXPECT_M1(ibv_get_pkey_index(ctx, 2, htobe16(0xffff)), EINVAL);
	/* A P_Key that is not in the table: -1 (any errno). */
	errno = 0;
	CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1 && errno != 0);
	ibv_close_device(ctx);
}

/* --- protection domains and memory regions ----------------------------------------------- */

static void case_ibv_alloc_pd(void)
{
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL);
	EXPECT_NULL(ibv_alloc_pd(NULL), EINVAL);
	EXPECT_NULL(ibv_alloc_pd(stale), EINVAL);
	EXPECT_NULL(ibv_alloc_pd(&foreign_ctx), EINVAL);
}

static void case_ibv_dealloc_pd(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_mr *mr;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_RET(ibv_dealloc_pd(NULL), EINVAL);
	EXPECT_RET(ibv_dealloc_pd(stale), EINVAL);
	EXPECT_RET(ibv_dealloc_pd(&foreign_pd), EINVAL);
	/* Still used by an MR: EBUSY, and the PD stays usable. */
	EXPECT_RET(ibv_dealloc_pd(pd), EBUSY);
	EXPECT_EQ(ibv_dereg_mr(mr), 0);
	EXPECT_EQ(ibv_dealloc_pd(pd), 0);
	ibv_close_device(ctx);
}

static void case_ibv_reg_mr(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_NULL((ibv_reg_mr)(NULL, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL((ibv_reg_mr)(stale, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL((ibv_reg_mr)(&foreign_pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL((ibv_reg_mr)(pd, NULL, sizeof(buf), IBV_ACCESS_LOCAL_WRITE), EINVAL);
	/* Remote write needs local write (ibv_reg_mr(3)). */
	EXPECT_NULL((ibv_reg_mr)(pd, buf, sizeof(buf), IBV_ACCESS_REMOTE_WRITE), EINVAL);
	EXPECT_NULL((ibv_reg_mr)(pd, buf, sizeof(buf), 1 << 30), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_reg_mr_iova(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	uint64_t iova = (uintptr_t)buf;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_NULL((ibv_reg_mr_iova)(NULL, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL((ibv_reg_mr_iova)(stale, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL((ibv_reg_mr_iova)(&foreign_pd, buf, sizeof(buf), iova,
				      IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL((ibv_reg_mr_iova)(pd, NULL, sizeof(buf), 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL((ibv_reg_mr_iova)(pd, buf, sizeof(buf), iova, IBV_ACCESS_REMOTE_WRITE),
		    EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_reg_mr_iova2(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	uint64_t iova = (uintptr_t)buf;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_NULL(ibv_reg_mr_iova2(NULL, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL(ibv_reg_mr_iova2(stale, buf, sizeof(buf), iova, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL(ibv_reg_mr_iova2(&foreign_pd, buf, sizeof(buf), iova,
				     IBV_ACCESS_LOCAL_WRITE),
		    EINVAL);
	EXPECT_NULL(ibv_reg_mr_iova2(pd, NULL, sizeof(buf), 0, IBV_ACCESS_LOCAL_WRITE), EINVAL);
	EXPECT_NULL(ibv_reg_mr_iova2(pd, buf, sizeof(buf), iova, IBV_ACCESS_REMOTE_WRITE),
		    EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_reg_dmabuf_mr(void)
{
	/* Not implemented yet (EOPNOTSUPP): clean failure. */
	EXPECT_NULL(ibv_reg_dmabuf_mr(NULL, 0, sizeof(buf), 0, -1, IBV_ACCESS_LOCAL_WRITE),
		    EINVAL, EOPNOTSUPP);
}

static void case_ibv_dereg_mr(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_mr *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_mr(pd)) != NULL);
	EXPECT_RET(ibv_dereg_mr(NULL), EINVAL);
	EXPECT_RET(ibv_dereg_mr(stale), EINVAL);
	EXPECT_RET(ibv_dereg_mr(&foreign_mr), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_rereg_mr(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_mr *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_mr(pd)) != NULL);
	/* A NULL or stale MR is an input error: IBV_REREG_MR_ERR_INPUT (-1) with errno. */
	EXPECT_VAL(ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				IBV_ACCESS_LOCAL_WRITE),
		   IBV_REREG_MR_ERR_INPUT, EINVAL, EOPNOTSUPP);
	EXPECT_VAL(ibv_rereg_mr(stale, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
				IBV_ACCESS_LOCAL_WRITE),
		   IBV_REREG_MR_ERR_INPUT, EINVAL, EOPNOTSUPP);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* --- completion channels and CQs --------------------------------------------------------- */

static void case_ibv_create_comp_channel(void)
{
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL);
	EXPECT_NULL(ibv_create_comp_channel(NULL), EINVAL);
	EXPECT_NULL(ibv_create_comp_channel(stale), EINVAL);
	EXPECT_NULL(ibv_create_comp_channel(&foreign_ctx), EINVAL);
}

static void case_ibv_destroy_comp_channel(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_comp_channel *ch, *stale;
	struct ibv_cq *cq;

	REQUIRE(ctx != NULL);
	REQUIRE((ch = ibv_create_comp_channel(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, ch, 0)) != NULL);
	REQUIRE((stale = stale_channel(ctx)) != NULL);
	EXPECT_RET(ibv_destroy_comp_channel(NULL), EINVAL);
	EXPECT_RET(ibv_destroy_comp_channel(stale), EINVAL);
	EXPECT_RET(ibv_destroy_comp_channel(&foreign_channel), EINVAL);
	/* A CQ still uses it. */
	EXPECT_RET(ibv_destroy_comp_channel(ch), EBUSY);
	EXPECT_EQ(ibv_destroy_cq(cq), 0);
	EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
	ibv_close_device(ctx);
}

static void case_ibv_create_cq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_comp_channel *stale_ch;

	REQUIRE(ctx != NULL && stale != NULL);
	REQUIRE((stale_ch = stale_channel(ctx)) != NULL);
	EXPECT_NULL(ibv_create_cq(NULL, 4, NULL, NULL, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(stale, 4, NULL, NULL, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(&foreign_ctx, 4, NULL, NULL, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(ctx, 4, NULL, stale_ch, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(ctx, 4, NULL, &foreign_channel, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(ctx, 0, NULL, NULL, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(ctx, -1, NULL, NULL, 0), EINVAL);
	EXPECT_NULL(ibv_create_cq(ctx, 4, NULL, NULL, 1000), EINVAL);
	ibv_close_device(ctx);
}

static void case_ibv_resize_cq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_cq *cq, *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	EXPECT_RET(ibv_resize_cq(NULL, 8), EINVAL);
	EXPECT_RET(ibv_resize_cq(stale, 8), EINVAL);
	EXPECT_RET(ibv_resize_cq(&foreign_cq, 8), EINVAL);
	EXPECT_RET(ibv_resize_cq(cq, 0), EINVAL);
	EXPECT_RET(ibv_resize_cq(cq, -5), EINVAL);
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
}

static void case_ibv_destroy_cq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq, *stale;
	struct ibv_qp *qp;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	EXPECT_RET(ibv_destroy_cq(NULL), EINVAL);
	EXPECT_RET(ibv_destroy_cq(stale), EINVAL);
	EXPECT_RET(ibv_destroy_cq(&foreign_cq), EINVAL);
	/* A QP still uses it. */
	EXPECT_RET(ibv_destroy_cq(cq), EBUSY);
	EXPECT_EQ(ibv_destroy_qp(qp), 0);
	EXPECT_EQ(ibv_destroy_cq(cq), 0);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_get_cq_event(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_comp_channel *ch, *stale;
	struct ibv_cq *cq, *ev_cq = NULL;
	void *ev_ctx = NULL;
	int fl;

	REQUIRE(ctx != NULL);
	REQUIRE((ch = ibv_create_comp_channel(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, ch, 0)) != NULL);
	REQUIRE((stale = stale_channel(ctx)) != NULL);
	EXPECT_M1(ibv_get_cq_event(NULL, &ev_cq, &ev_ctx), EINVAL);
	EXPECT_M1(ibv_get_cq_event(stale, &ev_cq, &ev_ctx), EINVAL);
	EXPECT_M1(ibv_get_cq_event(&foreign_channel, &ev_cq, &ev_ctx), EINVAL);
	EXPECT_M1(ibv_get_cq_event(ch, NULL, &ev_ctx), EINVAL);
	EXPECT_M1(ibv_get_cq_event(ch, &ev_cq, NULL), EINVAL);
	/* No event pending on a non-blocking channel: EAGAIN, not a block. */
	fl = fcntl(ch->fd, F_GETFL);
	REQUIRE(fl >= 0 && fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) == 0);
	EXPECT_M1(ibv_get_cq_event(ch, &ev_cq, &ev_ctx), EAGAIN);
	ibv_destroy_cq(cq);
	ibv_destroy_comp_channel(ch);
	ibv_close_device(ctx);
}

static void case_ibv_ack_cq_events(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq, *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((ch = ibv_create_comp_channel(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, ch, 0)) != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	EXPECT_RETURNS(ibv_ack_cq_events(NULL, 1));
	EXPECT_RETURNS(ibv_ack_cq_events(stale, 1));
	EXPECT_RETURNS(ibv_ack_cq_events(&foreign_cq, 1));
	/* Acknowledging events that were never read must not make the destroy wait. */
	EXPECT_RETURNS(ibv_ack_cq_events(cq, 5));
	EXPECT_EQ(ibv_destroy_cq(cq), 0);
	ibv_destroy_comp_channel(ch);
	ibv_close_device(ctx);
}

static void case_ibv_poll_cq(void)
{
	poll_cq_fn poll_cq = (poll_cq_fn)bi_sym("ibv_poll_cq");
	struct ibv_context *ctx = open_ctx();
	struct ibv_cq *cq, *stale;
	struct ibv_wc wc[2];
	int r;

	REQUIRE(poll_cq != NULL && ctx != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	/* ibv_poll_cq(3): "On failure, a negative value is returned". */
#define EXPECT_POLL_FAILS(call)                                                                \
	do {                                                                                   \
		errno = 0;                                                                     \
		r = (call);                                                                    \
		if (r >= 0 || (errno != EINVAL && r != -EINVAL))                               \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %d with errno %s; expected a negative value (EINVAL)", \
				#call, r, bi_errname(errno));                                  \
	} while (0)
	EXPECT_POLL_FAILS(poll_cq(NULL, 1, wc));
	EXPECT_POLL_FAILS(poll_cq(stale, 1, wc));
	EXPECT_POLL_FAILS(poll_cq(&foreign_cq, 1, wc));
	EXPECT_POLL_FAILS(poll_cq(cq, 1, NULL));
	EXPECT_POLL_FAILS(poll_cq(cq, -1, wc));
	/* An empty CQ: 0 completions. */
	EXPECT_EQ(poll_cq(cq, 2, wc), 0);
	ibv_destroy_cq(cq);
	ibv_close_device(ctx);
}

static void case_ibv_req_notify_cq(void)
{
	req_notify_cq_fn req_notify = (req_notify_cq_fn)bi_sym("ibv_req_notify_cq");
	struct ibv_context *ctx = open_ctx();
	struct ibv_cq *stale;

	REQUIRE(req_notify != NULL && ctx != NULL);
	REQUIRE((stale = stale_cq(ctx)) != NULL);
	EXPECT_RET(req_notify(NULL, 0), EINVAL);
	EXPECT_RET(req_notify(stale, 0), EINVAL);
	EXPECT_RET(req_notify(&foreign_cq, 1), EINVAL);
	ibv_close_device(ctx);
}

/* --- queue pairs ----------------------------------------------------------------------- */

static void case_ibv_create_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_cq *cq, *scq;
	struct ibv_srq *ssrq;
	struct ibv_qp_init_attr a;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	REQUIRE((scq = stale_cq(ctx)) != NULL);
	REQUIRE((ssrq = stale_srq(pd)) != NULL);
	EXPECT_NULL(create_qp(NULL, cq, NULL), EINVAL);
	EXPECT_NULL(create_qp(stale, cq, NULL), EINVAL);
	EXPECT_NULL(create_qp(&foreign_pd, cq, NULL), EINVAL);
	EXPECT_NULL(ibv_create_qp(pd, NULL), EINVAL);
	EXPECT_NULL(create_qp(pd, NULL, NULL), EINVAL);
	EXPECT_NULL(create_qp(pd, scq, NULL), EINVAL);
	EXPECT_NULL(create_qp(pd, &foreign_cq, NULL), EINVAL);
	EXPECT_NULL(create_qp(pd, cq, ssrq), EINVAL);
	EXPECT_NULL(create_qp(pd, cq, &foreign_srq), EINVAL);
	/* Only one of the two CQs missing. */
	memset(&a, 0, sizeof(a));
	a.send_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 1;
	EXPECT_NULL(ibv_create_qp(pd, &a), EINVAL);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_destroy_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	EXPECT_RET(ibv_destroy_qp(NULL), EINVAL);
	EXPECT_RET(ibv_destroy_qp(stale), EINVAL);
	EXPECT_RET(ibv_destroy_qp(&foreign_qp), EINVAL);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_modify_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *stale;
	struct ibv_qp_attr a;
	int init_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	EXPECT_RET(ibv_modify_qp(NULL, &a, init_mask), EINVAL);
	EXPECT_RET(ibv_modify_qp(qp, NULL, init_mask), EINVAL);
	EXPECT_RET(ibv_modify_qp(stale, &a, init_mask), EINVAL);
	EXPECT_RET(ibv_modify_qp(&foreign_qp, &a, init_mask), EINVAL);
	/* RESET -> RTR skips INIT. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = 1;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	EXPECT_RET(ibv_modify_qp(qp, &a,
				 IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					 IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
					 IBV_QP_MIN_RNR_TIMER),
		   EINVAL);
	/* RESET -> RTS. */
	a.qp_state = IBV_QPS_RTS;
	EXPECT_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	/* RESET -> INIT without the required attributes, with a bad port, with a wrong
	 * current state. */
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	EXPECT_RET(ibv_modify_qp(qp, &a, IBV_QP_STATE), EINVAL);
	a.port_num = 7;
	EXPECT_RET(ibv_modify_qp(qp, &a, init_mask), EINVAL);
	a.port_num = 1;
	a.cur_qp_state = IBV_QPS_RTS;
	EXPECT_RET(ibv_modify_qp(qp, &a, init_mask | IBV_QP_CUR_STATE), EINVAL);
	/* Still in RESET after all the refusals. */
	CHECK(qp->state == IBV_QPS_RESET);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_query_qp(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *stale;
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr ia;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	EXPECT_RET(ibv_query_qp(NULL, &a, IBV_QP_STATE, &ia), EINVAL);
	EXPECT_RET(ibv_query_qp(qp, NULL, IBV_QP_STATE, &ia), EINVAL);
	EXPECT_RET(ibv_query_qp(qp, &a, IBV_QP_STATE, NULL), EINVAL);
	EXPECT_RET(ibv_query_qp(stale, &a, IBV_QP_STATE, &ia), EINVAL);
	EXPECT_RET(ibv_query_qp(&foreign_qp, &a, IBV_QP_STATE, &ia), EINVAL);
	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_query_qp_data_in_order(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	/* The man page: 1 if in order, 0 otherwise; no error value. An invalid QP must not read
	 * as "in order" (a non-zero result): 0, with errno. */
	EXPECT_VAL(ibv_query_qp_data_in_order(NULL, IBV_WR_SEND, 0), 0, EINVAL);
	EXPECT_VAL(ibv_query_qp_data_in_order(stale, IBV_WR_SEND, 0), 0, EINVAL);
	EXPECT_VAL(ibv_query_qp_data_in_order(&foreign_qp, IBV_WR_SEND, 0), 0, EINVAL);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_post_send(void)
{
	post_send_fn post_send = (post_send_fn)bi_sym("ibv_post_send");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *stale;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, wr2, *bad;

	REQUIRE(post_send != NULL && ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	sge.addr = (uintptr_t)buf;
	sge.length = 16;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_SEND;
	wr.send_flags = IBV_SEND_SIGNALED;
	EXPECT_RET(post_send(NULL, &wr, &bad), EINVAL);
	EXPECT_RET(post_send(stale, &wr, &bad), EINVAL);
	EXPECT_RET(post_send(&foreign_qp, &wr, &bad), EINVAL);
	/* A QP in RESET takes no send: EINVAL, and bad_wr names the request. */
	bad = NULL;
	EXPECT_RET(post_send(qp, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	/* A NULL bad_wr is not written to. */
	EXPECT_RET(post_send(qp, &wr, NULL), EINVAL);
	/* INIT takes no send either; a list fails at its first request. */
	REQUIRE(qp_to_init(qp) == 0);
	wr2 = wr;
	wr.next = &wr2;
	bad = NULL;
	EXPECT_RET(post_send(qp, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	wr.next = NULL;
	ibv_destroy_qp(qp);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_post_recv(void)
{
	post_recv_fn post_recv = (post_recv_fn)bi_sym("ibv_post_recv");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp, *sqp, *stale;
	struct ibv_srq *srq;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr wr, *bad;

	REQUIRE(post_recv != NULL && ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, NULL)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL);
	REQUIRE((sqp = create_qp(pd, cq, srq)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	sge.addr = (uintptr_t)buf;
	sge.length = 16;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	EXPECT_RET(post_recv(NULL, &wr, &bad), EINVAL);
	EXPECT_RET(post_recv(stale, &wr, &bad), EINVAL);
	EXPECT_RET(post_recv(&foreign_qp, &wr, &bad), EINVAL);
	/* RESET takes no receive. */
	bad = NULL;
	EXPECT_RET(post_recv(qp, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	EXPECT_RET(post_recv(qp, &wr, NULL), EINVAL);
	/* In INIT: a NULL SGE array with num_sge 1, a negative num_sge. */
	REQUIRE(qp_to_init(qp) == 0);
	wr.sg_list = NULL;
	bad = NULL;
	EXPECT_RET(post_recv(qp, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	wr.sg_list = &sge;
	wr.num_sge = -1;
	EXPECT_RET(post_recv(qp, &wr, &bad), EINVAL);
	wr.num_sge = 1;
	/* A QP attached to an SRQ takes its receives on the SRQ. */
	REQUIRE(qp_to_init(sqp) == 0);
	EXPECT_RET(post_recv(sqp, &wr, &bad), EINVAL);
	ibv_destroy_qp(sqp);
	ibv_destroy_qp(qp);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* --- shared receive queues --------------------------------------------------------------- */

static void case_ibv_create_srq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;
	struct ibv_srq_init_attr a;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_NULL(create_srq(NULL, 4), EINVAL);
	EXPECT_NULL(create_srq(stale, 4), EINVAL);
	EXPECT_NULL(create_srq(&foreign_pd, 4), EINVAL);
	EXPECT_NULL(ibv_create_srq(pd, NULL), EINVAL);
	EXPECT_NULL(create_srq(pd, 0), EINVAL);
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = 4;
	a.attr.max_sge = 1u << 20;
	EXPECT_NULL(ibv_create_srq(pd, &a), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_modify_srq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_srq *srq, *stale;
	struct ibv_srq_attr a;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL);
	REQUIRE((stale = stale_srq(pd)) != NULL);
	memset(&a, 0, sizeof(a));
	a.srq_limit = 1;
	EXPECT_RET(ibv_modify_srq(NULL, &a, IBV_SRQ_LIMIT), EINVAL);
	EXPECT_RET(ibv_modify_srq(srq, NULL, IBV_SRQ_LIMIT), EINVAL);
	EXPECT_RET(ibv_modify_srq(stale, &a, IBV_SRQ_LIMIT), EINVAL);
	EXPECT_RET(ibv_modify_srq(&foreign_srq, &a, IBV_SRQ_LIMIT), EINVAL);
	/* A limit above the SRQ's size. */
	a.srq_limit = 1000;
	EXPECT_RET(ibv_modify_srq(srq, &a, IBV_SRQ_LIMIT), EINVAL);
	ibv_destroy_srq(srq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_query_srq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_srq *srq, *stale;
	struct ibv_srq_attr a;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL);
	REQUIRE((stale = stale_srq(pd)) != NULL);
	EXPECT_RET(ibv_query_srq(NULL, &a), EINVAL);
	EXPECT_RET(ibv_query_srq(srq, NULL), EINVAL);
	EXPECT_RET(ibv_query_srq(stale, &a), EINVAL);
	EXPECT_RET(ibv_query_srq(&foreign_srq, &a), EINVAL);
	ibv_destroy_srq(srq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_destroy_srq(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_srq *srq, *stale;
	struct ibv_qp *qp;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((srq = create_srq(pd, 4)) != NULL);
	REQUIRE((qp = create_qp(pd, cq, srq)) != NULL);
	REQUIRE((stale = stale_srq(pd)) != NULL);
	EXPECT_RET(ibv_destroy_srq(NULL), EINVAL);
	EXPECT_RET(ibv_destroy_srq(stale), EINVAL);
	EXPECT_RET(ibv_destroy_srq(&foreign_srq), EINVAL);
	/* A QP still uses it. */
	EXPECT_RET(ibv_destroy_srq(srq), EBUSY);
	EXPECT_EQ(ibv_destroy_qp(qp), 0);
	EXPECT_EQ(ibv_destroy_srq(srq), 0);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_post_srq_recv(void)
{
	post_srq_recv_fn post_srq_recv = (post_srq_recv_fn)bi_sym("ibv_post_srq_recv");
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_srq *srq, *stale;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_recv_wr wr, wr2, *bad;

	REQUIRE(post_srq_recv != NULL && ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((srq = create_srq(pd, 1)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	REQUIRE((stale = stale_srq(pd)) != NULL);
	sge.addr = (uintptr_t)buf;
	sge.length = 16;
	sge.lkey = mr->lkey;
	memset(&wr, 0, sizeof(wr));
	wr.wr_id = 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	EXPECT_RET(post_srq_recv(NULL, &wr, &bad), EINVAL);
	EXPECT_RET(post_srq_recv(stale, &wr, &bad), EINVAL);
	EXPECT_RET(post_srq_recv(&foreign_srq, &wr, &bad), EINVAL);
	/* A NULL SGE array with num_sge 1; a negative num_sge. */
	wr.sg_list = NULL;
	bad = NULL;
	EXPECT_RET(post_srq_recv(srq, &wr, &bad), EINVAL);
	CHECK(bad == &wr);
	EXPECT_RET(post_srq_recv(srq, &wr, NULL), EINVAL);
	wr.sg_list = &sge;
	wr.num_sge = -1;
	EXPECT_RET(post_srq_recv(srq, &wr, &bad), EINVAL);
	wr.num_sge = 1;
	/* Two requests on an SRQ of one: the second is refused (ENOMEM) and named. */
	wr2 = wr;
	wr.next = &wr2;
	bad = NULL;
	EXPECT_RET(post_srq_recv(srq, &wr, &bad), ENOMEM);
	CHECK(bad == &wr2);
	ibv_destroy_srq(srq);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

/* --- address handles ------------------------------------------------------------------- */

static void case_ibv_create_ah(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd, *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_pd(ctx)) != NULL);
	EXPECT_NULL(create_ah(NULL), EINVAL);
	EXPECT_NULL(create_ah(stale), EINVAL);
	EXPECT_NULL(create_ah(&foreign_pd), EINVAL);
	EXPECT_NULL(ibv_create_ah(pd, NULL), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_destroy_ah(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_ah *stale;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((stale = stale_ah(pd)) != NULL);
	EXPECT_RET(ibv_destroy_ah(NULL), EINVAL);
	EXPECT_RET(ibv_destroy_ah(stale), EINVAL);
	EXPECT_RET(ibv_destroy_ah(&foreign_ah), EINVAL);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_init_ah_from_wc(void)
{
	struct ibv_wc wc;
	struct ibv_grh grh;
	struct ibv_ah_attr ah;

	memset(&wc, 0, sizeof(wc));
	memset(&grh, 0, sizeof(grh));
	EXPECT_M1(ibv_init_ah_from_wc(NULL, 1, &wc, &grh, &ah), EINVAL);
	EXPECT_M1(ibv_init_ah_from_wc(&foreign_ctx, 1, NULL, NULL, NULL), EINVAL);
}

static void case_ibv_create_ah_from_wc(void)
{
	struct ibv_wc wc;
	struct ibv_grh grh;

	memset(&wc, 0, sizeof(wc));
	memset(&grh, 0, sizeof(grh));
	EXPECT_NULL(ibv_create_ah_from_wc(NULL, &wc, &grh, 1), EINVAL);
	EXPECT_NULL(ibv_create_ah_from_wc(&foreign_pd, NULL, NULL, 1), EINVAL);
}

/* --- async events ---------------------------------------------------------------------- */

static void case_ibv_get_async_event(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_context *stale = stale_ctx();
	struct ibv_async_event ev;
	int fl;

	REQUIRE(ctx != NULL && stale != NULL);
	EXPECT_M1(ibv_get_async_event(NULL, &ev), EINVAL);
	EXPECT_M1(ibv_get_async_event(ctx, NULL), EINVAL);
	EXPECT_M1(ibv_get_async_event(stale, &ev), EINVAL);
	EXPECT_M1(ibv_get_async_event(&foreign_ctx, &ev), EINVAL);
	/* Nothing pending on a non-blocking async fd: EAGAIN, not a block. */
	fl = fcntl(ctx->async_fd, F_GETFL);
	REQUIRE(fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0);
	EXPECT_M1(ibv_get_async_event(ctx, &ev), EAGAIN);
	ibv_close_device(ctx);
}

static void case_ibv_ack_async_event(void)
{
	struct ibv_async_event ev;

	memset(&ev, 0, sizeof(ev));
	EXPECT_RETURNS(ibv_ack_async_event(NULL));
	/* An event that was never handed out. */
	ev.event_type = IBV_EVENT_QP_FATAL;
	ev.element.qp = &foreign_qp;
	EXPECT_RETURNS(ibv_ack_async_event(&ev));
}

/* --- fork support ---------------------------------------------------------------------- */

static void case_ibv_fork_init(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	int r;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((mr = reg(pd)) != NULL);
	/* After a registration: 0 (fork support unneeded or already on) or EINVAL ("too late"),
	 * the positive errno convention. */
	r = ibv_fork_init();
	if (r != 0 && r != EINVAL)
		bi_fail(__FILE__, __LINE__, "ibv_fork_init() returned %d; expected 0 or EINVAL", r);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_is_fork_initialized(void)
{
	enum ibv_fork_status s = ibv_is_fork_initialized();

	CHECK(s == IBV_FORK_DISABLED || s == IBV_FORK_ENABLED || s == IBV_FORK_UNNEEDED);
}

static void case_ibv_dontfork_range(void)
{
	int r;

	/* NULL / empty range: 0, or -1 with EINVAL; never a crash. */
	errno = 0;
	r = ibv_dontfork_range(NULL, 0);
	CHECK(r == 0 || (r == -1 && errno == EINVAL));
	errno = 0;
	r = ibv_dontfork_range(NULL, 4096);
	CHECK(r == 0 || (r == -1 && errno == EINVAL));
}

static void case_ibv_dofork_range(void)
{
	int r;

	errno = 0;
	r = ibv_dofork_range(NULL, 0);
	CHECK(r == 0 || (r == -1 && errno == EINVAL));
	errno = 0;
	r = ibv_dofork_range(NULL, 4096);
	CHECK(r == 0 || (r == -1 && errno == EINVAL));
}

/* --- sysfs helpers --------------------------------------------------------------------- */

static void case_ibv_get_sysfs_path(void)
{
	EXPECT_NONNULL(ibv_get_sysfs_path());
}

static void case_ibv_read_sysfs_file(void)
{
	char out[64];

	EXPECT_M1(ibv_read_sysfs_file(NULL, "x", out, sizeof(out)), EINVAL);
	EXPECT_M1(ibv_read_sysfs_file("/sys", NULL, out, sizeof(out)), EINVAL);
	EXPECT_M1(ibv_read_sysfs_file("/sys", "kernel", NULL, sizeof(out)), EINVAL);
	EXPECT_M1(ibv_read_sysfs_file("/sys", "kernel", out, 0), EINVAL);
	EXPECT_M1(ibv_read_sysfs_file("/nonexistent-rdmashim", "file", out, sizeof(out)),
		  ENOENT);
}

/* --- strings and rates (no error value: the neutral answer) ------------------------------ */

static void case_ibv_wc_status_str(void)
{
	EXPECT_NONNULL(ibv_wc_status_str((enum ibv_wc_status)9999));
	EXPECT_NONNULL(ibv_wc_status_str((enum ibv_wc_status)-1));
}

static void case_ibv_node_type_str(void)
{
	EXPECT_NONNULL(ibv_node_type_str((enum ibv_node_type)9999));
	EXPECT_NONNULL(ibv_node_type_str(IBV_NODE_UNKNOWN));
}

static void case_ibv_port_state_str(void)
{
	EXPECT_NONNULL(ibv_port_state_str((enum ibv_port_state)9999));
	EXPECT_NONNULL(ibv_port_state_str((enum ibv_port_state)-1));
}

static void case_ibv_event_type_str(void)
{
	EXPECT_NONNULL(ibv_event_type_str((enum ibv_event_type)9999));
	EXPECT_NONNULL(ibv_event_type_str((enum ibv_event_type)-1));
}

static void case_ibv_rate_to_mult(void)
{
	EXPECT_EQ(ibv_rate_to_mult((enum ibv_rate)9999), -1);
	EXPECT_EQ(ibv_rate_to_mult((enum ibv_rate)-5), -1);
}

static void case_mult_to_ibv_rate(void)
{
	EXPECT_EQ(mult_to_ibv_rate(3), IBV_RATE_MAX);
	EXPECT_EQ(mult_to_ibv_rate(-1), IBV_RATE_MAX);
}

static void case_ibv_rate_to_mbps(void)
{
	EXPECT_EQ(ibv_rate_to_mbps((enum ibv_rate)9999), -1);
	EXPECT_EQ(ibv_rate_to_mbps((enum ibv_rate)-5), -1);
}

static void case_mbps_to_ibv_rate(void)
{
	EXPECT_EQ(mbps_to_ibv_rate(1), IBV_RATE_MAX);
	EXPECT_EQ(mbps_to_ibv_rate(-1), IBV_RATE_MAX);
}

/* --- multicast, extended QPs, and what is not implemented yet (issue 13) ------------------ */

static void case_ibv_attach_mcast(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *rc;
	union ibv_gid gid;

	memset(&gid, 0, sizeof(gid));
	EXPECT_RET(ibv_attach_mcast(NULL, &gid, 0), EINVAL);
	EXPECT_RET(ibv_attach_mcast(&foreign_qp, NULL, 0), EINVAL);
	/* Wrong QP type: only UD QPs join multicast groups. */
	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((rc = create_qp(pd, cq, NULL)) != NULL);
	gid.raw[0] = 0xff;
	EXPECT_RET(ibv_attach_mcast(rc, &gid, 0), EINVAL);
	ibv_destroy_qp(rc);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_detach_mcast(void)
{
	union ibv_gid gid;

	memset(&gid, 0, sizeof(gid));
	EXPECT_RET(ibv_detach_mcast(NULL, &gid, 0), EINVAL);
	EXPECT_RET(ibv_detach_mcast(&foreign_qp, NULL, 0), EINVAL);
}

static void case_ibv_qp_to_qp_ex(void)
{
	EXPECT_NULL(ibv_qp_to_qp_ex(NULL), EINVAL);
	EXPECT_NULL(ibv_qp_to_qp_ex(&foreign_qp), EINVAL);
}

static void case_ibv_resolve_eth_l2_from_gid(void)
{
	struct ibv_ah_attr a;
	uint8_t mac[6];
	uint16_t vid;

	memset(&a, 0, sizeof(a));
	EXPECT_RET(ibv_resolve_eth_l2_from_gid(NULL, &a, mac, &vid), EINVAL, EOPNOTSUPP);
	EXPECT_RET(ibv_resolve_eth_l2_from_gid(&foreign_ctx, NULL, NULL, NULL), EINVAL,
		   EOPNOTSUPP);
}

static void case_ibv_set_ece(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *stale;
	struct ibv_ece ece;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	memset(&ece, 0, sizeof(ece));
	/* ibv_set_ece(3): EINVAL for an invalid QP, EOPNOTSUPP when unsupported. */
	EXPECT_RET(ibv_set_ece(NULL, &ece), EINVAL, EOPNOTSUPP);
	EXPECT_RET(ibv_set_ece(stale, &ece), EINVAL, EOPNOTSUPP);
	EXPECT_RET(ibv_set_ece(&foreign_qp, NULL), EINVAL, EOPNOTSUPP);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_query_ece(void)
{
	struct ibv_context *ctx = open_ctx();
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *stale;
	struct ibv_ece ece;

	REQUIRE(ctx != NULL);
	REQUIRE((pd = ibv_alloc_pd(ctx)) != NULL);
	REQUIRE((cq = ibv_create_cq(ctx, 4, NULL, NULL, 0)) != NULL);
	REQUIRE((stale = stale_qp(pd, cq)) != NULL);
	EXPECT_RET(ibv_query_ece(NULL, &ece), EINVAL, EOPNOTSUPP);
	EXPECT_RET(ibv_query_ece(stale, &ece), EINVAL, EOPNOTSUPP);
	EXPECT_RET(ibv_query_ece(&foreign_qp, NULL), EINVAL, EOPNOTSUPP);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
}

static void case_ibv_import_device(void)
{
	EXPECT_NULL(ibv_import_device(-1), EINVAL, EBADF, EOPNOTSUPP);
}

static void case_ibv_import_pd(void)
{
	struct ibv_context *stale = stale_ctx();

	REQUIRE(stale != NULL);
	EXPECT_NULL(ibv_import_pd(NULL, 0), EINVAL, EOPNOTSUPP);
	EXPECT_NULL(ibv_import_pd(stale, 0), EINVAL, EOPNOTSUPP);
}

static void case_ibv_import_mr(void)
{
	EXPECT_NULL(ibv_import_mr(NULL, 0), EINVAL, EOPNOTSUPP);
	EXPECT_NULL(ibv_import_mr(&foreign_pd, 0), EINVAL, EOPNOTSUPP);
}

static void case_ibv_import_dm(void)
{
	EXPECT_NULL(ibv_import_dm(NULL, 0), EINVAL, EOPNOTSUPP);
	EXPECT_NULL(ibv_import_dm(&foreign_ctx, 0), EINVAL, EOPNOTSUPP);
}

static void case_ibv_unimport_pd(void)
{
	EXPECT_RETURNS(ibv_unimport_pd(NULL));
	EXPECT_RETURNS(ibv_unimport_pd(&foreign_pd));
}

static void case_ibv_unimport_mr(void)
{
	EXPECT_RETURNS(ibv_unimport_mr(NULL));
	EXPECT_RETURNS(ibv_unimport_mr(&foreign_mr));
}

static void case_ibv_unimport_dm(void)
{
	static struct ibv_dm foreign_dm;

	EXPECT_RETURNS(ibv_unimport_dm(NULL));
	EXPECT_RETURNS(ibv_unimport_dm(&foreign_dm));
}

/* Kernel-ABI conversion helpers (void; not used by the soft provider): must not crash. */
static void case_ibv_copy_qp_attr_from_kern(void)
{
	EXPECT_RETURNS(ibv_copy_qp_attr_from_kern(NULL, NULL));
}

static void case_ibv_copy_ah_attr_from_kern(void)
{
	EXPECT_RETURNS(ibv_copy_ah_attr_from_kern(NULL, NULL));
}

static void case_ibv_copy_path_rec_from_kern(void)
{
	EXPECT_RETURNS(ibv_copy_path_rec_from_kern(NULL, NULL));
}

static void case_ibv_copy_path_rec_to_kern(void)
{
	EXPECT_RETURNS(ibv_copy_path_rec_to_kern(NULL, NULL));
}

static const struct bi_case cases[] = {
	BI_CASE(ibv_get_device_list),
	BI_CASE(ibv_free_device_list),
	BI_CASE(ibv_get_device_name),
	BI_CASE(ibv_get_device_guid),
	BI_CASE(ibv_get_device_index),
	BI_CASE(ibv_open_device),
	BI_CASE(ibv_close_device),
	BI_CASE(ibv_query_device),
	BI_CASE(ibv_query_port),
	BI_CASE(ibv_query_gid),
	BI_CASE(_ibv_query_gid_ex),
	BI_CASE(_ibv_query_gid_table),
	BI_CASE(ibv_query_gid_type),
	BI_CASE(ibv_query_pkey),
	BI_CASE(ibv_get_pkey_index),
	BI_CASE(ibv_alloc_pd),
	BI_CASE(ibv_dealloc_pd),
	BI_CASE(ibv_reg_mr),
	BI_CASE(ibv_reg_mr_iova),
	BI_CASE(ibv_reg_mr_iova2),
	BI_CASE(ibv_reg_dmabuf_mr),
	BI_CASE(ibv_dereg_mr),
	BI_CASE(ibv_rereg_mr),
	BI_CASE(ibv_create_comp_channel),
	BI_CASE(ibv_destroy_comp_channel),
	BI_CASE(ibv_create_cq),
	BI_CASE(ibv_resize_cq),
	BI_CASE(ibv_destroy_cq),
	BI_CASE(ibv_get_cq_event),
	BI_CASE(ibv_ack_cq_events),
	BI_CASE(ibv_poll_cq),
	BI_CASE(ibv_req_notify_cq),
	BI_CASE(ibv_create_qp),
	BI_CASE(ibv_destroy_qp),
	BI_CASE(ibv_modify_qp),
	BI_CASE(ibv_query_qp),
	BI_CASE(ibv_query_qp_data_in_order),
	BI_CASE(ibv_post_send),
	BI_CASE(ibv_post_recv),
	BI_CASE(ibv_create_srq),
	BI_CASE(ibv_modify_srq),
	BI_CASE(ibv_query_srq),
	BI_CASE(ibv_destroy_srq),
	BI_CASE(ibv_post_srq_recv),
	BI_CASE(ibv_create_ah),
	BI_CASE(ibv_destroy_ah),
	BI_CASE(ibv_init_ah_from_wc),
	BI_CASE(ibv_create_ah_from_wc),
	BI_CASE(ibv_get_async_event),
	BI_CASE(ibv_ack_async_event),
	BI_CASE(ibv_fork_init),
	BI_CASE(ibv_is_fork_initialized),
	BI_CASE(ibv_dontfork_range),
	BI_CASE(ibv_dofork_range),
	BI_CASE(ibv_get_sysfs_path),
	BI_CASE(ibv_read_sysfs_file),
	BI_CASE(ibv_wc_status_str),
	BI_CASE(ibv_node_type_str),
	BI_CASE(ibv_port_state_str),
	BI_CASE(ibv_event_type_str),
	BI_CASE(ibv_rate_to_mult),
	BI_CASE(mult_to_ibv_rate),
	BI_CASE(ibv_rate_to_mbps),
	BI_CASE(mbps_to_ibv_rate),
	BI_CASE(ibv_attach_mcast),
	BI_CASE(ibv_detach_mcast),
	BI_CASE(ibv_qp_to_qp_ex),
	BI_CASE(ibv_resolve_eth_l2_from_gid),
	BI_CASE(ibv_set_ece),
	BI_CASE(ibv_query_ece),
	BI_CASE(ibv_import_device),
	BI_CASE(ibv_import_pd),
	BI_CASE(ibv_import_mr),
	BI_CASE(ibv_import_dm),
	BI_CASE(ibv_unimport_pd),
	BI_CASE(ibv_unimport_mr),
	BI_CASE(ibv_unimport_dm),
	BI_CASE(ibv_copy_qp_attr_from_kern),
	BI_CASE(ibv_copy_ah_attr_from_kern),
	BI_CASE(ibv_copy_path_rec_from_kern),
	BI_CASE(ibv_copy_path_rec_to_kern),
};

int main(int argc, char **argv)
{
	return bi_main(argc, argv, cases, BI_NCASES(cases));
}
