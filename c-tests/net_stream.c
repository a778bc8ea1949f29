/* Many RC SENDs, RDMA WRITEs, READs and atomics between two processes whose QPs are connected
 * out of band (a TCP exchange of QPN, PSN, GID, address and rkey, as ibv_rc_pingpong does), run
 * by tests/netns/net_stream.py in two network namespaces under RDMASHIM_FAULTS. Checks:
 *  - SENDs arrive exactly once and in order: each carries its sequence number, its length and a
 *    checksum of its pseudo-random payload, and the receiver expects 0, 1, 2, ...;
 *  - 1 MiB written in chunks of varying size, then read back in other chunks, equals the source;
 *  - fetch-and-adds return 0, 1, 2, ... in order and the target counter ends at their number
 *    (a duplicated or replayed atomic must not execute twice).
 *
 *   net_stream server PORT GID_INDEX [SENDS MAXMSG BYTES]
 *   net_stream client HOST PORT GID_INDEX [SENDS MAXMSG BYTES]
 * Both sides take the same optional sizes (default 400 SENDs of up to 12 KiB, 1 MiB): SENDS
 * messages of 16 to MAXMSG bytes; BYTES of RDMA WRITEs and as many of READs, in rounds of at
 * most 64 MiB (each round new content, written, read back, and checked by both sides).
 * Exit 0 and "net_stream: OK" on success. */
#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>
#include "net_side.h"

enum { SLOTS = 128, MAX_AREA = 64 << 20, ADDS = 200, DEPTH = 16, SEND_DEPTH = 64,
       TIMEOUT_MS = 120000 };

static uint32_t SENDS = 400, MAXMSG = 12 * 1024;
static uint64_t BYTES = 1 << 20;
static size_t AREA;

struct info { uint32_t qpn, psn, rkey, pad; uint64_t addr; uint8_t gid[16]; };
struct hdr { uint32_t seq, len; uint64_t sum; };

static uint64_t fnv(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static void fill(uint8_t *p, size_t n, uint32_t seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13; x ^= x >> 17; x ^= x << 5;
		p[i] = (uint8_t)x;
	}
}

static uint32_t msg_len(uint32_t k)
{
	return sizeof(struct hdr) + (uint32_t)(((uint64_t)k * 7919u) % (MAXMSG - sizeof(struct hdr) + 1));
}

static struct ibv_context *ctx;
static struct ibv_comp_channel *channel;
static struct ibv_cq *cq;
static struct ibv_qp *qp;

static long ms_since(const struct timespec *t0)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* The next completion (it must be a success). Spins briefly, then sleeps on the completion
 * channel: two busy-polling processes on a small machine would starve the kernel's softirq
 * thread that carries their packets between the namespaces. */
static struct ibv_wc poll1(void)
{
	struct ibv_wc wc;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int spin = 0;; spin++) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "poll_cq");
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status));
			return wc;
		}
		CHECK(ms_since(&t0) < TIMEOUT_MS, "no completion in %d ms", TIMEOUT_MS);
		if (spin < 200)
			continue;
		CHECK(ibv_req_notify_cq(cq, 0) == 0, "req_notify_cq");
		n = ibv_poll_cq(cq, 1, &wc); /* one may have come before the request */
		CHECK(n >= 0, "poll_cq");
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS, "wr %llu: %s", (unsigned long long)wc.wr_id,
			      ibv_wc_status_str(wc.status));
			return wc;
		}
		struct pollfd pfd = { .fd = channel->fd, .events = POLLIN };
		if (poll(&pfd, 1, 100) == 1) {
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			CHECK(ibv_get_cq_event(channel, &ev_cq, &ev_ctx) == 0, "get_cq_event");
			ibv_ack_cq_events(ev_cq, 1);
		}
		spin = 0;
	}
}

static void post(enum ibv_wr_opcode op, void *buf, uint32_t len, uint32_t lkey, uint64_t raddr,
		 uint32_t rkey, uint64_t wr_id)
{
	struct ibv_sge sge = { (uintptr_t)buf, len, lkey };
	struct ibv_send_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1, .opcode = op,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
		wr.wr.atomic.compare_add = 1;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	CHECK(ibv_post_send(qp, &wr, &bad) == 0, "post_send");
}

int main(int argc, char **argv)
{
	int server = argc >= 2 && !strcmp(argv[1], "server");
	int base = server ? 4 : 5; /* where the optional sizes start */
	CHECK((argc == base || argc == base + 3) && (server || !strcmp(argv[1], "client")),
	      "usage: net_stream server PORT GIDX [SENDS MAXMSG BYTES] | "
	      "net_stream client HOST PORT GIDX [SENDS MAXMSG BYTES]");
	int gidx = atoi(argv[base - 1]);
	if (argc == base + 3) {
		SENDS = (uint32_t)strtoul(argv[base], NULL, 0);
		MAXMSG = (uint32_t)strtoul(argv[base + 1], NULL, 0);
		BYTES = strtoull(argv[base + 2], NULL, 0);
	}
	CHECK(MAXMSG >= sizeof(struct hdr) && MAXMSG <= 1 << 20 && BYTES > 0, "bad sizes");
	AREA = BYTES < MAX_AREA ? BYTES : MAX_AREA;
	uint32_t rounds = (uint32_t)((BYTES + AREA - 1) / AREA);
	struct ibv_device **list = ibv_get_device_list(NULL);
	CHECK(list && list[0], "no device");
	ctx = ibv_open_device(list[0]);
	CHECK(ctx, "open_device");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	channel = ibv_create_comp_channel(ctx);
	CHECK(channel, "comp_channel");
	cq = ibv_create_cq(ctx, 2 * (SLOTS + SEND_DEPTH), NULL, channel, 0);
	CHECK(pd && cq, "pd/cq");
	struct ibv_qp_init_attr ia = { .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				       .cap = { .max_send_wr = SEND_DEPTH, .max_recv_wr = SLOTS, .max_send_sge = 1,
						.max_recv_sge = 1 } };
	qp = ibv_create_qp(pd, &ia);
	CHECK(qp, "create_qp");
	/* [SLOTS × MAXMSG receive/send area][AREA write target/source][AREA read-back][counter] */
	size_t size = (size_t)SLOTS * MAXMSG + 2 * AREA + 64;
	uint8_t *mem = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
	CHECK(mem, "alloc");
	memset(mem, 0, size);
	struct ibv_mr *mr = ibv_reg_mr(pd, mem, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
					   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
	CHECK(mr, "reg_mr");
	uint8_t *area = mem + (size_t)SLOTS * MAXMSG, *back = area + AREA;
	uint64_t *counter = (uint64_t *)(back + AREA);

	struct info me = { .qpn = qp->qp_num, .psn = (uint32_t)getpid() & 0xffffff, .rkey = mr->rkey,
			   .addr = (uintptr_t)mem }, peer;
	union ibv_gid gid;
	CHECK(ibv_query_gid(ctx, 1, gidx, &gid) == 0, "query_gid");
	memcpy(me.gid, gid.raw, 16);
	int s = server ? tcp(NULL, argv[2]) : tcp(argv[2], argv[3]);
	xfer(s, &me, sizeof me, 1);
	xfer(s, &peer, sizeof peer, 0);
	net_connect_qp(qp, me.psn, peer.qpn, peer.psn, peer.gid, gidx);
	if (server) {
		for (int i = 0; i < SLOTS; i++) {
			struct ibv_sge sge = { (uintptr_t)(mem + (size_t)i * MAXMSG), MAXMSG, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;
			CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
		}
	}
	char go = 'g';
	xfer(s, &go, 1, server); /* the server's receives and RTR come first */
	xfer(s, &go, 1, !server);

	if (server) {
		for (uint32_t k = 0; k < SENDS; k++) {
			struct ibv_wc wc = poll1();
			CHECK(wc.opcode == IBV_WC_RECV, "opcode %d", wc.opcode);
			uint8_t *p = mem + wc.wr_id * MAXMSG;
			struct hdr h;
			memcpy(&h, p, sizeof h);
			CHECK(h.seq == k, "SEND %u arrived as number %u (lost, duplicated or reordered)", h.seq, k);
			CHECK(h.len == msg_len(k) && wc.byte_len == h.len, "SEND %u: length %u/%u, want %u", k,
			      h.len, wc.byte_len, msg_len(k));
			CHECK(fnv(p + sizeof h, h.len - sizeof h) == h.sum, "SEND %u: checksum", k);
			struct ibv_sge sge = { (uintptr_t)p, MAXMSG, mr->lkey };
			struct ibv_recv_wr wr = { .wr_id = wc.wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
			CHECK(ibv_post_recv(qp, &wr, &bad) == 0, "post_recv");
		}
		printf("net_stream: %u SENDs exactly once, in order\n", SENDS);
		for (uint32_t r = 0; r < rounds; r++) {
			uint64_t sum;
			xfer(s, &sum, sizeof sum, 0); /* the client wrote and read back round r */
			CHECK(fnv(area, AREA) == sum, "round %u: written area differs from the client's source", r);
			xfer(s, &go, 1, 1);
		}
		uint64_t want;
		xfer(s, &want, sizeof want, 0); /* the client is done: its fetch-and-adds */
		CHECK(*counter == want, "counter %llu after %llu fetch-and-adds",
		      (unsigned long long)*counter, (unsigned long long)want);
		printf("net_stream: %llu bytes written as sent; counter %llu\nnet_stream: OK\n",
		       (unsigned long long)rounds * AREA, (unsigned long long)*counter);
		xfer(s, &go, 1, 1);
		return 0;
	}

	/* Client: SENDs, at most DEPTH outstanding. */
	uint32_t done = 0;
	for (uint32_t k = 0; k < SENDS; k++) {
		if (k - done >= SEND_DEPTH) {
			poll1();
			done++;
		}
		uint8_t *p = mem + (size_t)(k % SLOTS) * MAXMSG;
		struct hdr h = { k, msg_len(k), 0 };
		fill(p + sizeof h, h.len - sizeof h, k);
		h.sum = fnv(p + sizeof h, h.len - sizeof h);
		memcpy(p, &h, sizeof h);
		post(IBV_WR_SEND, p, h.len, mr->lkey, 0, 0, k);
	}
	for (; done < SENDS; done++)
		poll1();
	printf("net_stream: %u SENDs completed\n", SENDS);

	/* Each round: WRITEs of varying size cover the peer's area with new content; READs in other
	 * chunks bring it back; both sides compare. */
	uint64_t raddr = peer.addr + (size_t)SLOTS * MAXMSG;
	uint32_t n = 0, out = 0;
	for (uint32_t r = 0; r < rounds; r++) {
		fill(area, AREA, 12345 + r);
		for (uint32_t off = 0, i = 0; off < AREA; i++) {
			uint32_t len = 1 + (i * 104729u) % 65536;
			if (len > AREA - off)
				len = AREA - off;
			if (out == DEPTH) { poll1(); out--; }
			post(IBV_WR_RDMA_WRITE, area + off, len, mr->lkey, raddr + off, peer.rkey, n++);
			out++;
			off += len;
		}
		for (uint32_t off = 0, i = 0; off < AREA; i++) {
			uint32_t len = 4096 + (i * 7u) % 131072;
			if (len > AREA - off)
				len = AREA - off;
			if (out == DEPTH) { poll1(); out--; }
			post(IBV_WR_RDMA_READ, back + off, len, mr->lkey, raddr + off, peer.rkey, n++);
			out++;
			off += len;
		}
		for (; out; out--)
			poll1();
		CHECK(memcmp(area, back, AREA) == 0, "round %u: read back differs from what was written", r);
		uint64_t sum = fnv(area, AREA);
		xfer(s, &sum, sizeof sum, 1);
		xfer(s, &go, 1, 0); /* the server checked its copy */
	}
	printf("net_stream: %u WRITEs and READs: %llu bytes read back as written\n", n,
	       (unsigned long long)rounds * AREA);

	/* Fetch-and-adds, one at a time: each returns the count before it. */
	for (uint64_t i = 0; i < ADDS; i++) {
		uint64_t *res = (uint64_t *)(back + 8 * (i % 64));
		*res = ~0ull;
		post(IBV_WR_ATOMIC_FETCH_AND_ADD, res, 8, mr->lkey, peer.addr + ((uint8_t *)counter - mem),
		     peer.rkey, i);
		struct ibv_wc wc = poll1();
		CHECK(wc.opcode == IBV_WC_FETCH_ADD, "opcode %d", wc.opcode);
		CHECK(*res == i, "fetch-and-add %llu returned %llu", (unsigned long long)i,
		      (unsigned long long)*res);
	}
	printf("net_stream: %d fetch-and-adds, each once\n", ADDS);
	uint64_t want = ADDS;
	xfer(s, &want, sizeof want, 1);
	xfer(s, &go, 1, 0);
	printf("net_stream: OK\n");
	return 0;
}
