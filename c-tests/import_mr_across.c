/* ibv_import_mr across processes: a child given the parent's cmd_fd imports the device, a PD
 * and two MRs of the parent, builds RC QPs on the imported PD and moves data through the
 * imported keys. The bytes must land in, and come from, the parent's own memory:
 *   - a page-aligned region with remote rights (its pages already on the direct path's file),
 *     and a page-aligned heap region with local rights only (its pages move for the import);
 *     a region that does not start and end on page boundaries is not exported (EOPNOTSUPP);
 *   - a SEND from the first region into a receive in the second: the parent finds its bytes
 *     copied inside its own memory;
 *   - an RDMA WRITE through the first region's rkey: the parent sees it; the parent then writes
 *     its memory with its own CPU and the child's RDMA READ sees that;
 *   - the keys, length and handle of each import are the exporter's;
 *   - the parent's ibv_dereg_mr ends the import before it returns: the child's next WRITE
 *     through the rkey fails with IBV_WC_REM_ACCESS_ERR and the parent's memory stays as it
 *     was; the child's ibv_dereg_mr of that import then fails (EINVAL); unimport releases it;
 *   - the child's ibv_dereg_mr of the second import deregisters the parent's MR: the parent's
 *     own ibv_dereg_mr then only releases the struct (0), and a second import fails (EINVAL);
 *   - the parent's dealloc of another PD the child holds ends that import only, not the MR
 *     imports of the first PD;
 *   - ibv_import_dm of the parent's device memory (with an MR over it that peers may write):
 *     the child reads its bytes, writes some with ibv_memcpy_to_dm and some with an RDMA WRITE
 *     into an MR of its own over the import, and the parent finds them; the parent's later
 *     ibv_memcpy_to_dm is seen by the child.
 * The two processes take turns over a socketpair. */
#define _GNU_SOURCE
#include <errno.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include "rc_pair.h"
#include "cmd_fd_child.h"

#define PAGE 4096
#define ALEN (3 * PAGE)
#define BLEN (3 * PAGE)
#define DMLEN 8192

struct shared {
	uint32_t pd, pd2, ma, mb, mc, ma_lkey, ma_rkey, mb_lkey, mb_rkey, dm;
	uint64_t a, b;
};

static void say(int sock, char c)
{
	CHECK(write(sock, &c, 1) == 1, "write to the other process");
}

static void hear(int sock)
{
	char c;
	CHECK(read(sock, &c, 1) == 1, "the other process went away");
}

static char mine_early[64];

static int child(int fd, int sock)
{
	alarm(60);
	struct shared s;
	CHECK(read(sock, &s, sizeof s) == sizeof s, "read handles");
	ctx = ibv_import_device(fd);
	CHECK(ctx, "ibv_import_device: %s", strerror(errno));
	pd = ibv_import_pd(ctx, s.pd);
	CHECK(pd, "ibv_import_pd: %s", strerror(errno));
	struct ibv_mr *ma = ibv_import_mr(pd, s.ma);
	CHECK(ma, "ibv_import_mr of the aligned region: %s", strerror(errno));
	struct ibv_mr *mb = ibv_import_mr(pd, s.mb);
	CHECK(mb, "ibv_import_mr of the second region: %s", strerror(errno));
	struct ibv_pd *pd2 = ibv_import_pd(ctx, s.pd2);
	CHECK(pd2, "ibv_import_pd of a second PD: %s", strerror(errno));
	CHECK(ma->lkey == s.ma_lkey && ma->rkey == s.ma_rkey && ma->length == ALEN && ma->handle == s.ma &&
		      ma->pd == pd && ma->context == ctx,
	      "the aligned import's keys, length, handle, PD and context");
	CHECK(mb->lkey == s.mb_lkey && mb->rkey == s.mb_rkey && mb->length == BLEN, "the second import's");
	printf("ok   imports carry the exporter's keys, length and handle\n");
	errno = 0;
	struct ibv_mr *mc = ibv_import_mr(pd, s.mc);
	CHECK(!mc && errno == EOPNOTSUPP, "ibv_import_mr of a region off page boundaries: %p (%s)", (void *)mc,
	      strerror(errno));

	struct end x, y;
	pair(&x, &y, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE, 7);
	/* SEND from the parent's first region into a receive in its second. */
	post_recv(y.qp, (void *)(uintptr_t)(s.b + 10), 2000, mb->lkey, 1);
	CHECK(post(x.qp, IBV_WR_SEND, (void *)(uintptr_t)(s.a + 100), 2000, ma->lkey, 0, 0, 2) == 0, "post SEND");
	struct ibv_wc w = wait_wc(x.cq, 5000);
	CHECK(w.status == IBV_WC_SUCCESS, "SEND: %s", ibv_wc_status_str(w.status));
	w = wait_wc(y.cq, 5000);
	CHECK(w.status == IBV_WC_SUCCESS && w.byte_len == 2000, "receive: %s", ibv_wc_status_str(w.status));
	say(sock, 'S');
	/* The parent deallocates the second PD: our imports of the first PD's MRs stay. */
	hear(sock);
	usleep(100000); /* the parent's side of the hold on the second PD is closed by now */
	errno = 0;
	struct ibv_mr *gone = ibv_reg_mr(pd2, mine_early, sizeof mine_early, IBV_ACCESS_LOCAL_WRITE);
	CHECK(!gone && errno == EINVAL, "ibv_reg_mr on the second PD after the owner's dealloc: %s",
	      strerror(errno));
	ibv_unimport_pd(pd2);

	/* WRITE from a buffer of ours through the first region's rkey. */
	static char mine[PAGE] __attribute__((aligned(PAGE)));
	memset(mine, 0x5a, sizeof mine);
	struct ibv_mr *own = ibv_reg_mr(pd, mine, sizeof mine, IBV_ACCESS_LOCAL_WRITE);
	CHECK(own, "ibv_reg_mr of our own buffer on the imported PD");
	CHECK(post(x.qp, IBV_WR_RDMA_WRITE, mine, 1000, own->lkey, s.a + 2 * PAGE + 7, ma->rkey, 3) == 0,
	      "post WRITE");
	w = wait_wc(x.cq, 5000);
	CHECK(w.status == IBV_WC_SUCCESS, "WRITE: %s", ibv_wc_status_str(w.status));
	say(sock, 'W');

	/* The parent wrote its memory with its own CPU: a READ sees it. */
	hear(sock);
	memset(mine, 0, sizeof mine);
	CHECK(post(x.qp, IBV_WR_RDMA_READ, mine, 3000, own->lkey, s.a + 500, ma->rkey, 4) == 0, "post READ");
	w = wait_wc(x.cq, 5000);
	CHECK(w.status == IBV_WC_SUCCESS, "READ: %s", ibv_wc_status_str(w.status));
	for (int i = 0; i < 3000; i++)
		CHECK((unsigned char)mine[i] == (unsigned char)(0x30 + i % 7), "READ byte %d: %#x", i,
		      (unsigned char)mine[i]);
	printf("ok   a READ through the import sees what the exporter's CPU wrote\n");

	/* The parent's device memory: its bytes read here, written here by memcpy and by an RDMA
	 * WRITE into an MR of ours over the import. */
	struct ibv_dm *idm = ibv_import_dm(ctx, s.dm);
	CHECK(idm && idm->handle == s.dm, "ibv_import_dm: %s", strerror(errno));
	static unsigned char got[DMLEN];
	CHECK(ibv_memcpy_from_dm(got, idm, 0, DMLEN) == 0, "ibv_memcpy_from_dm");
	for (int i = 0; i < DMLEN; i++)
		CHECK(got[i] == (unsigned char)(i * 7 + 3), "DM byte %d: %#x", i, got[i]);
	struct ibv_mr *dmr = ibv_reg_dm_mr(pd, idm, 0, DMLEN,
					   IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(dmr, "ibv_reg_dm_mr over the imported DM: %s", strerror(errno));
	memset(mine, 0x5a, sizeof mine);
	CHECK(post(x.qp, IBV_WR_RDMA_WRITE, mine, 1000, own->lkey, 100, dmr->rkey, 6) == 0, "post WRITE to DM");
	w = wait_wc(x.cq, 5000);
	CHECK(w.status == IBV_WC_SUCCESS, "WRITE into the DM: %s", ibv_wc_status_str(w.status));
	CHECK(ibv_memcpy_to_dm(idm, 5000, "hello", 5) == 0, "ibv_memcpy_to_dm");
	printf("ok   the exporter's device memory read and written through the import\n");
	say(sock, 'R');

	/* The parent deregistered the first region: the rkey is gone here too. */
	hear(sock);
	CHECK(ibv_memcpy_from_dm(got, idm, 7000, 4) == 0 && memcmp(got, "back", 4) == 0,
	      "the parent's later memcpy_to_dm seen here");
	ibv_dereg_mr(dmr);
	CHECK(ibv_free_dm(idm) == 0, "ibv_free_dm of the import");
	memset(mine, 0x77, sizeof mine);
	CHECK(post(x.qp, IBV_WR_RDMA_WRITE, mine, 64, own->lkey, s.a, ma->rkey, 5) == 0, "post WRITE");
	w = wait_wc(x.cq, 5000);
	CHECK(w.status == IBV_WC_REM_ACCESS_ERR, "WRITE after the exporter's ibv_dereg_mr: %s",
	      ibv_wc_status_str(w.status));
	int rc = ibv_dereg_mr(ma);
	CHECK(rc == EINVAL, "ibv_dereg_mr of the import whose registration ended: %d", rc);
	ibv_unimport_mr(ma);
	printf("ok   the exporter's ibv_dereg_mr ended the import (IBV_WC_REM_ACCESS_ERR, then EINVAL)\n");

	/* Our dereg of the second import deregisters the parent's MR. */
	rc = ibv_dereg_mr(mb);
	CHECK(rc == 0, "ibv_dereg_mr of the second import: %d", rc);
	errno = 0;
	struct ibv_mr *again = ibv_import_mr(pd, s.mb);
	CHECK(!again && errno == EINVAL, "importing the deregistered MR again: %p (%s)", (void *)again,
	      strerror(errno));
	printf("ok   the importer's ibv_dereg_mr deregistered the exporter's MR\n");
	say(sock, 'D');
	hear(sock);
	ibv_dereg_mr(own);
	ibv_destroy_qp(x.qp);
	ibv_destroy_qp(y.qp);
	ibv_destroy_cq(x.cq);
	ibv_destroy_cq(y.cq);
	ibv_unimport_pd(pd);
	ibv_close_device(ctx);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--child") == 0)
		return child(atoi(argv[2]), atoi(argv[3]));
	alarm(90);
	open_first_device();
	int flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	unsigned char *a = mmap(NULL, ALEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(a != MAP_FAILED, "mmap");
	for (int i = 0; i < ALEN; i++)
		a[i] = (unsigned char)(i * 13 + 1);
	unsigned char *b = aligned_alloc(PAGE, BLEN); /* heap, page-aligned */
	CHECK(b, "aligned_alloc");
	memset(b, 0xee, BLEN);
	unsigned char *cmem = malloc(5000 + 64);
	CHECK(cmem, "malloc");
	struct ibv_mr *ma = ibv_reg_mr(pd, a, ALEN, flags);
	struct ibv_mr *mb = ibv_reg_mr(pd, b, BLEN, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *mc = ibv_reg_mr(pd, cmem + 24, 5000, flags); /* off page boundaries */
	CHECK(ma && mb && mc, "ibv_reg_mr");
	struct ibv_pd *pd2 = ibv_alloc_pd(ctx);
	CHECK(pd2, "ibv_alloc_pd");
	/* Device memory with an MR over it that peers may write (its pages on the direct path's
	 * file until the import moves them). */
	struct ibv_alloc_dm_attr da = { .length = DMLEN };
	struct ibv_dm *dm = ibv_alloc_dm(ctx, &da);
	CHECK(dm, "ibv_alloc_dm: %s", strerror(errno));
	static unsigned char pattern[DMLEN];
	for (int i = 0; i < DMLEN; i++)
		pattern[i] = (unsigned char)(i * 7 + 3);
	CHECK(ibv_memcpy_to_dm(dm, 0, pattern, DMLEN) == 0, "ibv_memcpy_to_dm");
	struct ibv_mr *pdmr = ibv_reg_dm_mr(pd, dm, 0, DMLEN, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE |
							       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(pdmr, "ibv_reg_dm_mr: %s", strerror(errno));
	struct shared s = { pd->handle, pd2->handle, ma->handle, mb->handle, mc->handle, ma->lkey, ma->rkey, mb->lkey, mb->rkey,
			    dm->handle, (uintptr_t)a, (uintptr_t)b };
	int sock;
	pid_t pid = start_child(argv[0], ctx->cmd_fd, &sock);
	CHECK(pid > 0, "start the child");
	CHECK(write(sock, &s, sizeof s) == sizeof s, "send handles");

	hear(sock);
	CHECK(memcmp(b + 10, a + 100, 2000) == 0, "the SEND's bytes in our second region");
	CHECK(b[9] == 0xee && b[2010] == 0xee, "nothing around them");
	printf("ok   a SEND between two imports moved our bytes within our memory\n");
	CHECK(ibv_dealloc_pd(pd2) == 0, "ibv_dealloc_pd of the second PD, which the child holds");
	say(sock, '2');

	hear(sock);
	for (int i = 0; i < 1000; i++)
		CHECK(a[2 * PAGE + 7 + i] == 0x5a, "WRITE byte %d: %#x", i, a[2 * PAGE + 7 + i]);
	CHECK(a[2 * PAGE + 6] == (unsigned char)((2 * PAGE + 6) * 13 + 1) &&
		      a[2 * PAGE + 1007] == (unsigned char)((2 * PAGE + 1007) * 13 + 1),
	      "nothing around it");
	printf("ok   a WRITE through the imported rkey landed in our memory\n");
	for (int i = 0; i < 3000; i++)
		a[500 + i] = (unsigned char)(0x30 + i % 7);
	say(sock, 'C');

	hear(sock);
	static unsigned char dmnow[DMLEN];
	CHECK(ibv_memcpy_from_dm(dmnow, dm, 0, DMLEN) == 0, "ibv_memcpy_from_dm");
	for (int i = 0; i < DMLEN; i++) {
		unsigned char want = i >= 100 && i < 1100 ? 0x5a : i >= 5000 && i < 5005 ? "hello"[i - 5000] : pattern[i];
		CHECK(dmnow[i] == want, "our DM byte %d after the child's WRITE and memcpy: %#x, not %#x", i, dmnow[i],
		      want);
	}
	CHECK(ibv_memcpy_to_dm(dm, 7000, "back", 4) == 0, "ibv_memcpy_to_dm");
	printf("ok   the importer's WRITE and memcpy landed in our device memory\n");
	CHECK(ibv_dereg_mr(ma) == 0, "ibv_dereg_mr of the exported region");
	unsigned char before[64];
	memcpy(before, a, 64);
	say(sock, 'X');

	hear(sock);
	CHECK(memcmp(before, a, 64) == 0, "our memory after the dereg is untouched");
	int rc = ibv_dereg_mr(mb);
	CHECK(rc == 0, "our ibv_dereg_mr after the importer deregistered: %d", rc);
	say(sock, 'E');
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's checks (status %#x)",
	      st);
	/* Both regions went back to private memory: still ours, still readable and writable. */
	a[0] = 1;
	b[0] = 2;
	CHECK(ibv_dereg_mr(pdmr) == 0 && ibv_free_dm(dm) == 0, "our DM's MR and the DM go");
	munmap(a, ALEN);
	free(b);
	CHECK(ibv_dereg_mr(mc) == 0, "ibv_dereg_mr of the region that was not exported");
	free(cmem);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("PASSED\n");
	return 0;
}
