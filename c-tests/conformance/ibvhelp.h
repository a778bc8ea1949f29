/*
 * c-tests/conformance: verbs helpers shared by the libibverbs page tests (setup only; the
 * clauses live in the page programs). No connection manager: two QPs of one process are
 * connected to each other (or a QP to itself) by modifying them to INIT/RTR/RTS with the other
 * QP's number, LID 0 and a GID of the device, as ibv_rc_pingpong does.
 *
 * Helpers return 0 (or a pointer) on success and -1 (NULL) on failure with a reason in the
 * caller's `err` buffer, so that a page can report the clauses that depend on a failed setup
 * as blocked.
 */
#ifndef CONF_IBVHELP_H
#define CONF_IBVHELP_H

#include "clause.h"

#include <stdlib.h>

#include <infiniband/verbs.h>

#define IH_WAIT_MS 5000 /* how long an expected completion or event may take */
#define IH_QUIET_MS 100 /* how long "no completion / no event" is watched */

/* Opens the first device of the list (soft0 under rdmashim). NULL with err on failure. */
struct ibv_context *ih_open(char *err, size_t errlen);

/* The GID index QPs and AHs use: 0, or CONF_GID_INDEX from the environment. */
int ih_gid_index(void);

/* A context, a PD and the GID the helpers use. */
struct ih_dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	int gid_index;
	char err[256];
};
int ih_dev_open(struct ih_dev *d);
void ih_dev_close(struct ih_dev *d);

/* Capabilities of the QPs the helpers create. */
struct ibv_qp_init_attr ih_qp_attr(enum ibv_qp_type type, struct ibv_cq *cq, int depth);

/* Moves an RC/UC QP to INIT (port 1, `access`), then RTR towards dest_qpn (GID of the device,
 * PSN 0), then RTS. 0 or -1 with err. */
int ih_to_init(struct ibv_qp *qp, int access, char *err, size_t errlen);
int ih_to_rtr(struct ih_dev *d, struct ibv_qp *qp, uint32_t dest_qpn, char *err, size_t errlen);
int ih_to_rts(struct ibv_qp *qp, char *err, size_t errlen);
int ih_connect(struct ih_dev *d, struct ibv_qp *qp, uint32_t dest_qpn, int access, char *err,
	       size_t errlen);
/* A UD QP to RTS (qkey IH_QKEY). */
#define IH_QKEY 0x11111111u
int ih_ud_ready(struct ibv_qp *qp, char *err, size_t errlen);

/* Two QPs of `type` (RC, UC or UD), each with its own CQ of 64 entries, connected to each
 * other (RC/UC) or ready to send (UD). */
struct ih_pair {
	struct ibv_cq *cq[2];
	struct ibv_qp *qp[2];
	int own_cq[2];
};
int ih_pair_make(struct ih_dev *d, struct ih_pair *p, enum ibv_qp_type type, int access);
/* The same, QP i on the caller's CQ cq_i (which ih_pair_destroy leaves alone) when not NULL. */
int ih_pair_make_on(struct ih_dev *d, struct ih_pair *p, enum ibv_qp_type type, int access, struct ibv_cq *cq0,
		    struct ibv_cq *cq1);
void ih_pair_destroy(struct ih_pair *p);

/* A registered buffer (malloc'ed, zeroed). */
struct ih_buf {
	char *buf;
	size_t len;
	struct ibv_mr *mr;
};
int ih_buf_make(struct ih_dev *d, struct ih_buf *b, size_t len, int access);
void ih_buf_free(struct ih_buf *b);

/* Posts one work request with one SGE (none when len is 0), signaled. Atomics: fetch-and-add
 * adds 1, compare-and-swap swaps in 2 where the word is 1. Returns ibv_post_send's result. */
int ih_post_send(struct ibv_qp *qp, enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey,
		 uint64_t raddr, uint32_t rkey, uint64_t wr_id);
int ih_post_recv(struct ibv_qp *qp, void *buf, uint32_t len, uint32_t lkey, uint64_t wr_id);

/* An address handle to GID `gid` (the helpers' port and GID index), NULL on failure. */
struct ibv_ah *ih_ah(struct ih_dev *d, const union ibv_gid *gid);

/* Posts one UD SEND of len bytes from buf/lkey to qpn through ah (qkey IH_QKEY), signaled. */
int ih_post_ud(struct ibv_qp *qp, struct ibv_ah *ah, uint32_t qpn, void *buf, uint32_t len, uint32_t lkey,
	       uint64_t wr_id);

/* An XRC SRQ of max_wr receives (one SGE each) in domain x, completing on cq; NULL on failure. */
struct ibv_srq *ih_xrc_srq(struct ih_dev *d, struct ibv_xrcd *x, struct ibv_cq *cq, uint32_t max_wr);

/* One completion within ms: 1 got it, 0 timeout, -1 poll error. */
int ih_poll(struct ibv_cq *cq, struct ibv_wc *wc, int ms);

/* The QP's current state (or -1). */
int ih_qp_state(struct ibv_qp *qp);

/* 1 if fd becomes readable within ms. */
int ih_readable(int fd, int ms);

long long ih_now_ms(void);

#endif
