/* c-tests/badinput: a connected pair of CM ids in one process (for wrong-state cases). */
#ifndef CM_PAIR_H
#define CM_PAIR_H

#include <rdma/rdma_cma.h>

struct cm_pair {
	struct rdma_event_channel *ch; /* the events of all three ids */
	struct rdma_cm_id *listener;   /* listening on 127.0.0.1, ephemeral port */
	struct rdma_cm_id *client;     /* active side, connected, QP in RTS */
	struct rdma_cm_id *server;     /* passive side, connected, QP in RTS */
};

/*
 * Connects client to server through listener over the loopback address; each side's QP comes
 * from rdma_create_qp (CQs and completion channels made by the CM). 0, or -1 with a message on
 * stdout. The pair is not torn down: the case's process ends right after it.
 */
int cm_pair_connect(struct cm_pair *p);

#endif /* CM_PAIR_H */
