/* XRC end to end on the soft provider: one XRC initiator QP reaches two XRC SRQs of one domain
 * through one target QP, each SEND landing on the SRQ (and its CQ) that the request names;
 * RDMA WRITE and READ checked against the PD of the named SRQ; an SRQ number from outside the
 * domain refused (REM_INV_REQ_ERR); ibv_open_qp handles outliving the creating one; the posting
 * API's ibv_wr_set_xrc_srqn; ibv_close_xrcd refused while in use. A target QP created with an SRQ, CQs and
 * capacities in its attributes (as libfabric's rdma_cm path passes them: libibverbs ignores them for XRC_RECV).
 * The domain is opened on a file that another process opens too: that process's SRQ number is never one of ours,
 * so a request naming it is refused here, never delivered to an SRQ of ours (each process has its own domain). */
#include "conformance/ibvhelp.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c, ...)                                                                                                  \
	do {                                                                                                           \
		if (!(c)) {                                                                                            \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                          \
			fprintf(stderr, __VA_ARGS__);                                                                  \
			fprintf(stderr, "\n");                                                                         \
			exit(1);                                                                                       \
		}                                                                                                      \
	} while (0)

static struct ih_dev d;
static struct ibv_xrcd *xrcd;
static struct ibv_cq *scq, *rcq[2];
static struct ibv_srq *srq[2];
static uint32_t srqn[2];

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, const char *what)
{
	int rc = ibv_modify_qp(qp, a, mask);
	CHECK(rc == 0, "%s: %d (%s)", what, rc, conf_errname(rc));
}

/* INIT, then RTR towards dest_qpn, then RTS, with the attributes XRC takes. */
static void connect(struct ibv_qp *qp, uint32_t dest_qpn, int target)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d.gid;
	a.ah_attr.grh.sgid_index = (uint8_t)d.gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = 1;
	int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
	if (target) {
		a.max_dest_rd_atomic = 1;
		a.min_rnr_timer = 1;
		mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
	}
	modify(qp, &a, mask, "RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT;
	if (!target) {
		a.retry_cnt = 7;
		a.rnr_retry = 7;
		a.max_rd_atomic = 1;
		mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
	}
	modify(qp, &a, mask, "RTS");
}

static struct ibv_qp *initiator(void)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_XRC_SEND;
	a.send_cq = scq;
	a.cap.max_send_wr = 8;
	a.cap.max_send_sge = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	a.pd = d.pd;
	a.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
	struct ibv_qp *qp = ibv_create_qp_ex(d.ctx, &a);
	CHECK(qp, "XRC_SEND QP: %s", conf_errname(errno));
	return qp;
}

static struct ibv_qp *target(void)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_XRC_RECV;
	a.comp_mask = IBV_QP_INIT_ATTR_XRCD;
	a.xrcd = xrcd;
	struct ibv_qp *qp = ibv_create_qp_ex(d.ctx, &a);
	CHECK(qp, "XRC_RECV QP: %s", conf_errname(errno));
	return qp;
}

/* A target created the way libfabric's rdma_cm path creates one: PD, SRQ, CQs and capacities set as for an RC
 * QP, all of which an XRC target ignores. */
static struct ibv_qp *target_with_rc_attrs(void)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_XRC_RECV;
	a.send_cq = scq;
	a.recv_cq = rcq[0];
	a.srq = srq[0];
	a.cap.max_send_wr = 8;
	a.cap.max_send_sge = 1;
	a.cap.max_inline_data = 64;
	a.sq_sig_all = 1;
	a.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD;
	a.pd = d.pd;
	a.xrcd = xrcd;
	struct ibv_qp *qp = ibv_create_qp_ex(d.ctx, &a);
	CHECK(qp, "XRC_RECV QP with an RC QP's attributes: %s", conf_errname(errno));
	CHECK(qp->srq == NULL && qp->send_cq == NULL && qp->recv_cq == NULL, "the target took no SRQ or CQ");
	CHECK(a.srq == srq[0], "the caller's attributes keep their SRQ");
	return qp;
}

/* Another process with an XRC SRQ in a domain on `path`: it writes its SRQ number to `out`, then holds the SRQ
 * until `in` has something to read (or is closed). */
static void other_process(const char *path, int in, int out)
{
	struct ih_dev od;
	if (ih_dev_open(&od) != 0)
		_exit(2);
	int fd = open(path, O_RDONLY);
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = fd,
					 .oflags = O_CREAT };
	struct ibv_xrcd *x = ibv_open_xrcd(od.ctx, &xa);
	struct ibv_cq *cq = ibv_create_cq(od.ctx, 16, NULL, NULL, 0);
	struct ibv_srq *s = x && cq ? ih_xrc_srq(&od, x, cq, 8) : NULL;
	uint32_t n = 0;
	if (!s || ibv_get_srq_num(s, &n) != 0 || write(out, &n, sizeof n) != sizeof n)
		_exit(3);
	char c;
	(void)!read(in, &c, 1);
	ibv_destroy_srq(s);
	ibv_destroy_cq(cq);
	ibv_close_xrcd(x);
	ih_dev_close(&od);
	_exit(0);
}

static int send_to(struct ibv_qp *qp, uint32_t n, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_send_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.wr_id = wr_id;
	w.sg_list = &sge;
	w.num_sge = 1;
	w.opcode = IBV_WR_SEND;
	w.send_flags = IBV_SEND_SIGNALED;
	w.qp_type.xrc.remote_srqn = n;
	return ibv_post_send(qp, &w, &bad);
}

static int rdma(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t n, void *buf, uint32_t len, uint32_t lkey,
		uint64_t raddr, uint32_t rkey)
{
	struct ibv_qp_ex *x = ibv_qp_to_qp_ex(qp);
	ibv_wr_start(x);
	x->wr_id = 7;
	x->wr_flags = IBV_SEND_SIGNALED;
	if (op == IBV_WR_RDMA_WRITE)
		ibv_wr_rdma_write(x, rkey, raddr);
	else
		ibv_wr_rdma_read(x, rkey, raddr);
	ibv_wr_set_xrc_srqn(x, n);
	ibv_wr_set_sge(x, lkey, (uintptr_t)buf, len);
	return ibv_wr_complete(x);
}

int main(void)
{
	struct ibv_wc wc;
	char path[] = "/tmp/xrc_verbs.XXXXXX";
	int file = mkstemp(path);
	CHECK(file >= 0, "mkstemp");
	/* Forked before this process made anything, so both start from the same state, as two programs do. */
	int p2c[2], c2p[2];
	CHECK(pipe(p2c) == 0 && pipe(c2p) == 0, "pipe");
	pid_t child = fork();
	CHECK(child >= 0, "fork");
	if (child == 0) {
		close(p2c[1]);
		close(c2p[0]);
		other_process(path, p2c[0], c2p[1]);
	}
	close(p2c[0]);
	close(c2p[1]);
	CHECK(ih_dev_open(&d) == 0, "device: %s", d.err);
	struct ibv_xrcd_init_attr xa = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = file,
					 .oflags = O_CREAT };
	xrcd = ibv_open_xrcd(d.ctx, &xa);
	CHECK(xrcd, "ibv_open_xrcd: %s", conf_errname(errno));
	scq = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
	struct ih_buf b, other;
	CHECK(ih_buf_make(&d, &b, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) == 0,
	      "buffer");
	for (int i = 0; i < 2; i++) {
		rcq[i] = ibv_create_cq(d.ctx, 16, NULL, NULL, 0);
		srq[i] = ih_xrc_srq(&d, xrcd, rcq[i], 8);
		CHECK(srq[i] && ibv_get_srq_num(srq[i], &srqn[i]) == 0, "XRC SRQ %d: %s", i, conf_errname(errno));
		struct ibv_sge sge = { (uintptr_t)b.buf + 1024 * (i + 1), 64, b.mr->lkey };
		struct ibv_recv_wr r = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		CHECK(ibv_post_srq_recv(srq[i], &r, &bad) == 0, "post_srq_recv %d", i);
	}
	CHECK(ibv_close_xrcd(xrcd) == EBUSY, "ibv_close_xrcd with SRQs in it");

	struct ibv_qp *ini = initiator(), *tgt = target();
	CHECK(tgt->pd == NULL && tgt->send_cq == NULL && tgt->recv_cq == NULL, "an XRC target has no PD or CQs");
	struct ibv_recv_wr r = { 0 }, *rbad;
	CHECK(ibv_post_recv(tgt, &r, &rbad) != 0, "ibv_post_recv on an XRC target");
	connect(ini, tgt->qp_num, 0);
	connect(tgt, ini->qp_num, 1);

	/* Each SEND lands on the SRQ it names, completing on that SRQ's CQ. */
	for (int i = 1; i >= 0; i--) {
		sprintf(b.buf, "to srq %d", i);
		CHECK(send_to(ini, srqn[i], b.buf, 16, b.mr->lkey, 10 + i) == 0, "post SEND %d", i);
		CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 10 + (unsigned)i,
		      "send completion %d: status %d", i, wc.status);
		CHECK(ih_poll(rcq[i], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS &&
			      wc.wr_id == 100 + (unsigned)i && wc.byte_len == 16 && wc.qp_num == tgt->qp_num,
		      "receive %d: status %d wr_id %llu qp_num %u", i, wc.status, (unsigned long long)wc.wr_id,
		      wc.qp_num);
		CHECK(strcmp(b.buf + 1024 * (i + 1), b.buf) == 0, "received bytes %d: '%s'", i, b.buf + 1024 * (i + 1));
		CHECK(ih_poll(rcq[1 - i], &wc, 50) == 0, "nothing on the other SRQ's CQ");
	}

	/* RDMA WRITE and READ through the posting API, checked against the named SRQ's PD. */
	strcpy(b.buf, "written via xrc");
	CHECK(rdma(ini, IBV_WR_RDMA_WRITE, srqn[0], b.buf, 16, b.mr->lkey, (uintptr_t)b.buf + 4096, b.mr->rkey) == 0,
	      "post WRITE");
	CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "WRITE completion %d", wc.status);
	CHECK(strcmp(b.buf + 4096, "written via xrc") == 0, "written bytes");
	CHECK(rdma(ini, IBV_WR_RDMA_READ, srqn[1], b.buf + 6000, 16, b.mr->lkey, (uintptr_t)b.buf + 4096, b.mr->rkey) ==
		      0,
	      "post READ");
	CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "READ completion %d", wc.status);
	CHECK(strcmp(b.buf + 6000, "written via xrc") == 0, "read bytes");

	/* An opened handle outlives the creating one. */
	struct ibv_qp_open_attr oa = { .comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE,
				       .qp_num = tgt->qp_num,
				       .xrcd = xrcd,
				       .qp_type = IBV_QPT_XRC_RECV };
	struct ibv_qp *op = ibv_open_qp(d.ctx, &oa);
	CHECK(op && op->qp_num == tgt->qp_num, "ibv_open_qp: %s", conf_errname(errno));
	CHECK(ibv_destroy_qp(tgt) == 0, "destroy the creating handle");
	struct ibv_sge sge0 = { (uintptr_t)b.buf + 1024, 64, b.mr->lkey };
	struct ibv_recv_wr r0 = { .wr_id = 200, .sg_list = &sge0, .num_sge = 1 }, *bad0;
	CHECK(ibv_post_srq_recv(srq[0], &r0, &bad0) == 0, "post_srq_recv");
	strcpy(b.buf, "still there");
	CHECK(send_to(ini, srqn[0], b.buf, 12, b.mr->lkey, 20) == 0, "post SEND after destroy");
	CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "send completion %d", wc.status);
	CHECK(ih_poll(rcq[0], &wc, IH_WAIT_MS) == 1 && wc.wr_id == 200 && strcmp(b.buf + 1024, "still there") == 0,
	      "receive through the opened handle's QP");

	/* A WRITE with a key of another PD than the named SRQ's is refused. */
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	struct ih_dev d2 = d;
	d2.pd = pd2;
	CHECK(ih_buf_make(&d2, &other, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0, "other buffer");
	CHECK(rdma(ini, IBV_WR_RDMA_WRITE, srqn[0], b.buf, 8, b.mr->lkey, (uintptr_t)other.buf, other.mr->rkey) == 0,
	      "post WRITE to another PD's region");
	CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR, "WRITE status %d", wc.status);
	CHECK(other.buf[0] == 0, "the other PD's memory is untouched");
	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(op) == 0, "destroy");

	/* A target created with an RC QP's attributes takes receives from the SRQ each request names, not from the
	 * SRQ its attributes named. */
	ini = initiator();
	tgt = target_with_rc_attrs();
	connect(ini, tgt->qp_num, 0);
	connect(tgt, ini->qp_num, 1);
	struct ibv_sge sge1 = { (uintptr_t)b.buf + 2048, 64, b.mr->lkey };
	struct ibv_recv_wr r1 = { .wr_id = 300, .sg_list = &sge1, .num_sge = 1 }, *bad1;
	CHECK(ibv_post_srq_recv(srq[1], &r1, &bad1) == 0, "post_srq_recv");
	strcpy(b.buf, "to the named srq");
	CHECK(send_to(ini, srqn[1], b.buf, 17, b.mr->lkey, 25) == 0, "post SEND");
	CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "send completion %d", wc.status);
	CHECK(ih_poll(rcq[1], &wc, IH_WAIT_MS) == 1 && wc.wr_id == 300 && strcmp(b.buf + 2048, b.buf) == 0,
	      "receive on the named SRQ");
	CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "destroy");

	/* An SRQ number that is not the domain's: REM_INV_REQ_ERR. Among them, the number of another process's SRQ
	 * in a domain on the same file: never one of ours (a receive waits on each of our SRQs, to take it if so). */
	uint32_t theirs = 0;
	CHECK(read(c2p[0], &theirs, sizeof theirs) == sizeof theirs, "the other process's SRQ number");
	CHECK(theirs != srqn[0] && theirs != srqn[1], "SRQ numbers %u, %u here and %u there", srqn[0], srqn[1],
	      theirs);
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sg = { (uintptr_t)b.buf + 1024 * (i + 1), 64, b.mr->lkey };
		struct ibv_recv_wr rr = { .wr_id = 400 + i, .sg_list = &sg, .num_sge = 1 }, *rb;
		CHECK(ibv_post_srq_recv(srq[i], &rr, &rb) == 0, "post_srq_recv %d", i);
	}
	uint32_t foreign[2] = { theirs, srqn[1] + 1000 };
	for (int i = 0; i < 2; i++) {
		ini = initiator();
		tgt = target();
		connect(ini, tgt->qp_num, 0);
		connect(tgt, ini->qp_num, 1);
		CHECK(send_to(ini, foreign[i], b.buf, 8, b.mr->lkey, 30) == 0, "post SEND to SRQ number %u", foreign[i]);
		CHECK(ih_poll(scq, &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_REM_INV_REQ_ERR,
		      "SEND to SRQ number %u: status %d", foreign[i], wc.status);
		CHECK(ibv_destroy_qp(ini) == 0 && ibv_destroy_qp(tgt) == 0, "destroy");
	}
	for (int i = 0; i < 2; i++)
		CHECK(ih_poll(rcq[i], &wc, 50) == 0, "nothing arrived on our SRQ %d", i);
	int status;
	CHECK(write(p2c[1], "x", 1) == 1 && waitpid(child, &status, 0) == child && WIFEXITED(status) &&
		      WEXITSTATUS(status) == 0,
	      "the other process: status 0x%x", status);

	ih_buf_free(&other);
	ibv_dealloc_pd(pd2);
	for (int i = 0; i < 2; i++)
		CHECK(ibv_destroy_srq(srq[i]) == 0 && ibv_destroy_cq(rcq[i]) == 0, "destroy SRQ %d", i);
	CHECK(ibv_close_xrcd(xrcd) == 0, "ibv_close_xrcd");
	close(file);
	unlink(path);
	ih_buf_free(&b);
	ibv_destroy_cq(scq);
	ih_dev_close(&d);
	printf("xrc_verbs: ok\n");
	return 0;
}
