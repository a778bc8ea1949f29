/* On-demand paging end to end on the soft provider (issue 13): an ODP region written remotely
 * before its pages were ever touched; an implicit ODP region (the whole address space) that a
 * peer writes and reads at ordinary addresses and that a SEND gathers from; remote accesses
 * through it to memory that cannot be read (PROT_NONE), writes to read-only memory, and accesses to a file
 * mapping past the file's end (SIGBUS if touched), fail with IBV_WC_REM_ACCESS_ERR and touch nothing (the process
 * does not fault); and ibv_advise_mr's errors. */
#include "conformance/ibvhelp.h"
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

#define REGION (1u << 20)
#define CHUNK (64u << 10)
#define ODP_RW (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

static struct ih_dev d;
static struct ih_buf src; /* the initiator's buffer (an ordinary MR) */

static unsigned char pattern(size_t i)
{
	return (unsigned char)((i * 2654435761u) >> 13);
}

/* One signaled one-sided operation from QP 1 of a fresh pair; its completion status. */
static int one_sided(enum ibv_wr_opcode op, uint32_t len, uint64_t raddr, uint32_t rkey)
{
	struct ih_pair p;
	struct ibv_wc wc;
	CHECK(ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
							     IBV_ACCESS_REMOTE_READ) == 0,
	      "pair: %s", d.err);
	CHECK(ih_post_send(p.qp[1], op, src.buf, len, src.mr->lkey, raddr, rkey, 7) == 0, "post_send");
	CHECK(ih_poll(p.cq[1], &wc, IH_WAIT_MS) == 1, "no completion");
	ih_pair_destroy(&p);
	return wc.status;
}

int main(void)
{
	alarm(120);
	CHECK(ih_dev_open(&d) == 0, "device: %s", d.err);
	struct ibv_device_attr_ex x;
	CHECK(ibv_query_device_ex(d.ctx, NULL, &x) == 0, "ibv_query_device_ex");
	CHECK((x.odp_caps.general_caps & IBV_ODP_SUPPORT) && (x.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT) &&
		      (x.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE),
	      "odp caps 0x%llx rc 0x%x", (unsigned long long)x.odp_caps.general_caps,
	      x.odp_caps.per_transport_caps.rc_odp_caps);
	/* XRC has RC's operations, and ibv_xsrq_pingpong -o asks for send, receive and SRQ receive. */
	CHECK(x.xrc_odp_caps == x.odp_caps.per_transport_caps.rc_odp_caps, "xrc_odp_caps 0x%x", x.xrc_odp_caps);
	CHECK(ih_buf_make(&d, &src, CHUNK, IBV_ACCESS_LOCAL_WRITE) == 0, "source buffer");
	for (size_t i = 0; i < CHUNK; i++)
		src.buf[i] = (char)pattern(i);

	/* An explicit ODP region whose pages nobody touched yet, written remotely. */
	unsigned char *fresh = mmap(NULL, REGION, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(fresh != MAP_FAILED, "mmap");
	struct ibv_mr *odp = ibv_reg_mr(d.pd, fresh, REGION, ODP_RW);
	CHECK(odp, "ODP registration: errno %d", errno);
	uint64_t at = (uintptr_t)fresh + REGION / 2 + 100;
	CHECK(one_sided(IBV_WR_RDMA_WRITE, CHUNK, at, odp->rkey) == IBV_WC_SUCCESS, "write into the ODP region");
	for (size_t i = 0; i < CHUNK; i++)
		CHECK(fresh[REGION / 2 + 100 + i] == pattern(i), "ODP region byte %zu", i);
	CHECK(fresh[REGION / 2 + 99] == 0 && fresh[REGION / 2 + 100 + CHUNK] == 0, "written outside the range");
	CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, IBV_ADVISE_MR_FLAG_FLUSH,
			    &(struct ibv_sge){ (uintptr_t)fresh, REGION, odp->lkey }, 1) == 0,
	      "prefetch of the ODP region");

	/* Implicit ODP: the whole address space under one key. */
	struct ibv_mr *all = ibv_reg_mr(d.pd, NULL, SIZE_MAX, ODP_RW);
	CHECK(all, "implicit ODP registration: errno %d", errno);
	unsigned char *heap = calloc(1, CHUNK + 64);
	CHECK(heap, "calloc");
	CHECK(one_sided(IBV_WR_RDMA_WRITE, CHUNK, (uintptr_t)heap + 32, all->rkey) == IBV_WC_SUCCESS,
	      "write through the implicit region");
	CHECK(memcmp(heap + 32, src.buf, CHUNK) == 0 && heap[31] == 0 && heap[32 + CHUNK] == 0,
	      "implicit write data");
	memset(src.buf, 0, CHUNK);
	CHECK(one_sided(IBV_WR_RDMA_READ, CHUNK, (uintptr_t)heap + 32, all->rkey) == IBV_WC_SUCCESS,
	      "read through the implicit region");
	for (size_t i = 0; i < CHUNK; i++)
		CHECK((unsigned char)src.buf[i] == pattern(i), "implicit read byte %zu", i);

	/* A SEND gathered through the implicit region's lkey, into an ODP receive. */
	{
		struct ih_pair p;
		struct ibv_wc wc;
		CHECK(ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE) == 0, "pair: %s", d.err);
		memset(fresh, 0, 4096);
		CHECK(ih_post_recv(p.qp[0], fresh, 4096, odp->lkey, 1) == 0, "post_recv");
		strcpy((char *)heap, "gathered from the implicit region");
		CHECK(ih_post_send(p.qp[1], IBV_WR_SEND, heap, 64, all->lkey, 0, 0, 2) == 0, "send");
		CHECK(ih_poll(p.cq[1], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS, "send completion");
		CHECK(ih_poll(p.cq[0], &wc, IH_WAIT_MS) == 1 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 64,
		      "receive completion %d", wc.status);
		CHECK(!strcmp((char *)fresh, "gathered from the implicit region"), "received data");
		ih_pair_destroy(&p);
	}

	/* Through the implicit region to memory that is not there, or read-only: an access error,
	 * nothing written, and this process still runs. */
	long page = sysconf(_SC_PAGESIZE);
	/* PROT_NONE, not unmapped: an unmapped hole could be reused by the next mapping (a new
	 * QP's ring), which the implicit region would then reach, as it reaches everything. */
	unsigned char *gone = mmap(NULL, (size_t)page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(gone != MAP_FAILED, "an inaccessible page");
	int st = one_sided(IBV_WR_RDMA_WRITE, 64, (uintptr_t)gone, all->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a write to an inaccessible page: %s", ibv_wc_status_str(st));
	st = one_sided(IBV_WR_RDMA_READ, 64, (uintptr_t)gone, all->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a read of an inaccessible page: %s", ibv_wc_status_str(st));
	unsigned char *ro = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(ro != MAP_FAILED, "mmap");
	memset(ro, 0x5a, (size_t)page);
	CHECK(mprotect(ro, (size_t)page, PROT_READ) == 0, "mprotect");
	st = one_sided(IBV_WR_RDMA_WRITE, 64, (uintptr_t)ro, all->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a write to a read-only page: %s", ibv_wc_status_str(st));
	for (long i = 0; i < page; i++)
		CHECK(ro[i] == 0x5a, "read-only page byte %ld changed", i);
	CHECK(one_sided(IBV_WR_RDMA_READ, 64, (uintptr_t)ro, all->rkey) == IBV_WC_SUCCESS, "read of a read-only page");
	/* A shared file mapping one page longer than its file: touching the second page raises
	 * SIGBUS, though the map shows it readable and writable. */
	int fd = memfd_create("odp_verbs", MFD_CLOEXEC);
	CHECK(fd >= 0 && ftruncate(fd, page) == 0, "a one-page file");
	unsigned char *file = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(file != MAP_FAILED, "mmap of the file");
	close(fd);
	st = one_sided(IBV_WR_RDMA_READ, 64, (uintptr_t)file + (size_t)page, all->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a read past the file's end: %s", ibv_wc_status_str(st));
	st = one_sided(IBV_WR_RDMA_WRITE, 64, (uintptr_t)file + (size_t)page, all->rkey);
	CHECK(st == IBV_WC_REM_ACCESS_ERR, "a write past the file's end: %s", ibv_wc_status_str(st));
	st = one_sided(IBV_WR_RDMA_WRITE, 64, (uintptr_t)file + (size_t)page - 64, all->rkey);
	CHECK(st == IBV_WC_SUCCESS && !memcmp(file + page - 64, src.buf, 64), "a write to the file's last bytes: %s",
	      ibv_wc_status_str(st));

	/* ibv_advise_mr's errors. */
	struct ibv_sge bad = { (uintptr_t)gone, 64, all->lkey };
	CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &bad, 1) == EFAULT,
	      "prefetch of an inaccessible page");
	struct ibv_sge reg = { (uintptr_t)src.buf, 64, src.mr->lkey };
	CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &reg, 1) == EFAULT, "prefetch of a non-ODP MR");
	struct ibv_sge good = { (uintptr_t)heap, 64, all->lkey };
	CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &good, 1) == 0, "NO_FAULT prefetch");
	CHECK(ibv_advise_mr(d.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 1u << 7, &good, 1) == EINVAL, "unknown flags");
	CHECK(ibv_advise_mr(d.pd, (enum ibv_advise_mr_advice)9, 0, &good, 1) == EOPNOTSUPP, "unknown advice");

	CHECK(ibv_dereg_mr(all) == 0 && ibv_dereg_mr(odp) == 0, "ibv_dereg_mr");
	munmap(fresh, REGION);
	munmap(ro, (size_t)page);
	munmap(gone, (size_t)page);
	munmap(file, 2 * (size_t)page);
	free(heap);
	ih_buf_free(&src);
	ih_dev_close(&d);
	printf("odp_verbs: ok\n");
	return 0;
}
