/* rdma_ack_cm_event(3): frees an event; one ack per successful get (then the id can be
 * destroyed without waiting); NULL is an error. */
#include "cmhelp.h"

int main(int argc, char **argv)
{
	conf_begin("rdma_ack_cm_event", argc, argv);
	char err[256] = "";
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in dst;
	h_sin(&dst, "127.0.0.1", conf_port(0));
	int ok = rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0 &&
		 rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0;
	struct rdma_cm_event *a = ok ? h_get(ch, H_WAIT_MS) : NULL;
	ok = a && rdma_resolve_route(id, 2000) == 0;
	struct rdma_cm_event *b = ok ? h_get(ch, H_WAIT_MS) : NULL;

	/* RETURN VALUE: 0. */
	errno = 0;
	int r1 = a ? rdma_ack_cm_event(a) : -2;
	int r2 = b ? rdma_ack_cm_event(b) : -2;
	CLAUSE("RET-0", r1 == 0 && r2 == 0, "acks returned %d and %d (%s) %s", r1, r2, conf_errname(errno), err);
	/* DESCRIPTION: one ack per get releases everything: the id is then destroyed at once. */
	long long t0 = h_now_ms();
	int d = id ? rdma_destroy_id(id) : -2;
	long long took = h_now_ms() - t0;
	CLAUSE("DESC-ONE-TO-ONE", r1 == 0 && r2 == 0 && d == 0 && took < H_NOBLOCK_MS,
	       "after acking both events, destroy returned %d in %lld ms", d, took);
	/* RETURN VALUE: -1/errno for no event. */
	errno = 0;
	int rn = rdma_ack_cm_event(NULL);
	CLAUSE("ERR-NULL", rn == -1 && errno == EINVAL, "ack(NULL): %d (%s)", rn, conf_errname(errno));
	rdma_destroy_event_channel(ch);
	return conf_end();
}
