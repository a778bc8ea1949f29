/*
 * c-tests/badinput/verbs_fixtures.h: the libibverbs objects the verbs bad-input programs
 * (verbs_bad.c, verbs_ext_bad.c, queues_ext_bad.c, wr_poll_bad.c) start from: live ones,
 * "stale" ones (created with the library, then destroyed: the registries must refuse them with
 * EINVAL) and "foreign" ones (never handed out: must be refused without being read). Each
 * constructor returns NULL on failure (the case REQUIREs it).
 */
#ifndef VERBS_FIXTURES_H
#define VERBS_FIXTURES_H

#include <stdint.h>

#include <infiniband/verbs.h>

extern struct ibv_device foreign_dev;
extern struct ibv_context foreign_ctx;
extern struct ibv_pd foreign_pd;
extern struct ibv_mr foreign_mr;
extern struct ibv_cq foreign_cq;
extern struct ibv_comp_channel foreign_channel;
extern struct ibv_qp foreign_qp;
extern struct ibv_srq foreign_srq;
extern struct ibv_ah foreign_ah;

/* 4 KiB that the cases register and post from. */
extern char buf[4096];

/* The first device, opened. */
struct ibv_context *open_ctx(void);
struct ibv_context *stale_ctx(void);
struct ibv_pd *stale_pd(struct ibv_context *ctx);
/* buf, registered with local write access. */
struct ibv_mr *reg(struct ibv_pd *pd);
struct ibv_mr *stale_mr(struct ibv_pd *pd);
struct ibv_comp_channel *stale_channel(struct ibv_context *ctx);
/* A 4-entry CQ without a channel. */
struct ibv_cq *stale_cq(struct ibv_context *ctx);
/* An RC QP with 4 send and (without srq) 4 receive entries of one SGE each on cq. */
struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq);
struct ibv_qp *stale_qp(struct ibv_pd *pd, struct ibv_cq *cq);
/* RESET -> INIT on port 1; ibv_modify_qp's result. */
int qp_to_init(struct ibv_qp *qp);
struct ibv_srq *create_srq(struct ibv_pd *pd, uint32_t max_wr);
struct ibv_srq *stale_srq(struct ibv_pd *pd);
/* A global AH on port 1 to GID 0 (::). */
struct ibv_ah *create_ah(struct ibv_pd *pd);
struct ibv_ah *stale_ah(struct ibv_pd *pd);

/* The exported symbol `name`, typed as the header declares it (bi_sym, badinput.h, fails
 * the case if it is missing); SYM also returns from the case then. */
#define SYM_OF(name) ((__typeof__(&name))bi_sym(#name))
#define SYM(var, name)                                                                         \
	__typeof__(&name) var = SYM_OF(name);                                                  \
	REQUIRE(var != NULL)

/*
 * `call_with_h`, a call naming the handle `h`, with h NULL, then `stale`, then `foreign`: each
 * must fail as EXPECT_<kind> (badinput.h) with the rest of the arguments.
 */
#define EXPECT_BAD_HANDLES(kind, stale, foreign, call_with_h, ...)                             \
	do {                                                                                   \
		__typeof__(foreign) h = NULL;                                                  \
		EXPECT_##kind(call_with_h, __VA_ARGS__);                                       \
		h = (stale);                                                                   \
		EXPECT_##kind(call_with_h, __VA_ARGS__);                                       \
		h = (foreign);                                                                 \
		EXPECT_##kind(call_with_h, __VA_ARGS__);                                       \
	} while (0)

#endif /* VERBS_FIXTURES_H */
