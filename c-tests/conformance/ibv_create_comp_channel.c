/* ibv_create_comp_channel(3) (and ibv_destroy_comp_channel): a file descriptor delivering the
 * completion events of the CQs attached to it; destroy fails while a CQ uses it. */
#include "ibvhelp.h"

#include <fcntl.h>

/* An RC pair whose first QP sends on `scq`; posts one signaled SEND. */
static int send_one(struct ih_dev *d, struct ibv_cq *scq, struct ih_pair *p, struct ibv_mr **mr, char *m)
{
	if (ih_pair_make_on(d, p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE, scq, NULL))
		return -1;
	*mr = ibv_reg_mr(d->pd, m, 16, IBV_ACCESS_LOCAL_WRITE);
	if (!*mr || ih_post_recv(p->qp[1], m, 16, (*mr)->lkey, 2) ||
	    ih_post_send(p->qp[0], IBV_WR_SEND, m, 4, (*mr)->lkey, 0, 0, 1))
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	conf_begin("ibv_create_comp_channel", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		const char *ids[] = { "RET-CHANNEL", "NOTE-FD", "NOTE-DELIVERY", "NOTE-STEER", "NOTE-DESTROY-BUSY",
				      "DESTROY-RET-0" };
		for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
			CLAUSE_BLOCKED(CLAUSE_ID(ids[i]), d.err);
		return conf_end();
	}
	/* RETURN VALUE: a pointer to the channel. */
	errno = 0;
	struct ibv_comp_channel *a = ibv_create_comp_channel(d.ctx);
	struct ibv_comp_channel *b = ibv_create_comp_channel(d.ctx);
	CLAUSE("RET-CHANNEL", a && b && a->context == d.ctx, "channels %p, %p (%s)", (void *)a, (void *)b,
	       conf_errname(errno));
	/* NOTES: a channel is essentially a file descriptor (each its own), quiet while no event. */
	int fdok = a && b && a->fd >= 0 && b->fd >= 0 && a->fd != b->fd && fcntl(a->fd, F_GETFL) >= 0;
	CLAUSE("NOTE-FD", fdok && !ih_readable(a->fd, 0), "fds %d, %d", a ? a->fd : -1, b ? b->fd : -1);
	struct ibv_cq *ca = a ? ibv_create_cq(d.ctx, 8, NULL, a, 0) : NULL;
	struct ibv_cq *cb = b ? ibv_create_cq(d.ctx, 8, NULL, b, 0) : NULL;
	/* NOTES: a completion event of an armed CQ is delivered through its channel ... */
	struct ih_pair p;
	memset(&p, 0, sizeof p);
	struct ibv_mr *mr = NULL;
	char m[16] = "ping";
	int sent = ca && cb && ibv_req_notify_cq(ca, 0) == 0 && ibv_req_notify_cq(cb, 0) == 0 &&
		   send_one(&d, ca, &p, &mr, m) == 0;
	int ra = sent && ih_readable(a->fd, IH_WAIT_MS);
	struct ibv_cq *evcq = NULL;
	void *evctx;
	int got = ra && ibv_get_cq_event(a, &evcq, &evctx) == 0;
	CLAUSE("NOTE-DELIVERY", got && evcq == ca, "sent %d, channel readable %d, event for %p (want %p): %s", sent, ra,
	       (void *)evcq, (void *)ca, d.err);
	if (got)
		ibv_ack_cq_events(evcq, 1);
	/* ... and only through it: the other channel stays quiet. */
	CLAUSE("NOTE-STEER", sent && !ih_readable(b->fd, IH_QUIET_MS), "the other CQ's channel became readable");
	struct ibv_wc wc;
	if (ca)
		ih_poll(ca, &wc, IH_WAIT_MS);
	ih_pair_destroy(&p);
	if (mr)
		ibv_dereg_mr(mr);
	/* NOTES: destroying a channel fails while a CQ is associated with it. */
	int busy = a && ca ? ibv_destroy_comp_channel(a) : -1;
	CLAUSE("NOTE-DESTROY-BUSY", busy > 0, "ibv_destroy_comp_channel with a CQ on it: %d (%s)", busy,
	       conf_errname(busy));
	if (ca)
		ibv_destroy_cq(ca);
	if (cb)
		ibv_destroy_cq(cb);
	/* RETURN VALUE (destroy): 0 on success. */
	int rc = a && busy != 0 ? ibv_destroy_comp_channel(a) : -1;
	CLAUSE("DESTROY-RET-0", rc == 0, "ibv_destroy_comp_channel returned %d (%s)", rc, conf_errname(rc));
	if (b)
		ibv_destroy_comp_channel(b);
	ih_dev_close(&d);
	return conf_end();
}
