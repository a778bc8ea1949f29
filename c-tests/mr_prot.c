/* ibv_reg_mr refuses memory the access flags cannot be honoured on, as the kernel's pinning
 * does: read-only pages with any writable access (LOCAL_WRITE, REMOTE_WRITE, REMOTE_ATOMIC,
 * MW_BIND), pages that cannot be read (PROT_NONE) or are not mapped, and pages of a file mapping
 * past the file's end (SIGBUS when touched), with EFAULT. Accepting them would let a peer's RDMA
 * WRITE or READ (or a receive) fault the process that registered them. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <infiniband/verbs.h>

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, " (errno %d)\n", errno); exit(1); } } while (0)

static struct ibv_pd *pd;

/* ibv_reg_mr(p, len, access) must fail with EFAULT. */
static void refused(void *p, size_t len, int access, const char *what)
{
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
    CHECK(!mr && errno == EFAULT, "%s: registered (mr %p, errno %d), expected EFAULT", what,
          (void *)mr, errno);
}

/* ibv_reg_mr(p, len, access) must succeed. */
static void accepted(void *p, size_t len, int access, const char *what)
{
    struct ibv_mr *mr = ibv_reg_mr(pd, p, len, access);
    CHECK(mr, "%s: refused", what);
    CHECK(!ibv_dereg_mr(mr), "ibv_dereg_mr");
}

int main(void)
{
    alarm(60);
    int n;
    struct ibv_device **l = ibv_get_device_list(&n);
    CHECK(l && n > 0, "no device");
    struct ibv_context *ctx = ibv_open_device(l[0]);
    ibv_free_device_list(l);
    CHECK(ctx, "ibv_open_device");
    pd = ibv_alloc_pd(ctx);
    CHECK(pd, "ibv_alloc_pd");
    size_t page = (size_t)sysconf(_SC_PAGESIZE);

    /* Three pages: read-write, read-only, inaccessible. */
    char *m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED, "mmap");
    memset(m, 1, 3 * page);
    char *rw = m, *ro = m + page, *none = m + 2 * page;
    CHECK(!mprotect(ro, page, PROT_READ) && !mprotect(none, page, PROT_NONE), "mprotect");

    accepted(rw, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "read-write, writable");
    accepted(ro, page, 0, "read-only, local read");
    accepted(ro, page, IBV_ACCESS_REMOTE_READ, "read-only, remote read");
    refused(ro, page, IBV_ACCESS_LOCAL_WRITE, "read-only, LOCAL_WRITE");
    refused(ro, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "read-only, REMOTE_WRITE");
    refused(ro, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
            "read-only, REMOTE_ATOMIC");
    refused(ro, page, IBV_ACCESS_MW_BIND, "read-only, MW_BIND");
    /* A range that runs from writable memory into read-only memory. */
    refused(rw + page / 2, page, IBV_ACCESS_LOCAL_WRITE, "read-write into read-only");
    accepted(rw + page / 2, page, 0, "read-write into read-only, read");
    refused(none, page, 0, "PROT_NONE");
    refused(ro, 2 * page, 0, "read-only into PROT_NONE");
    /* Memory nobody has mapped. A page this program just unmapped will not do: another thread
     * (the library's threads run from the first PD on, and under AddressSanitizer map their
     * own memory) may map something there meanwhile, and did. On x86-64 the last page
     * below 2^47 is never mapped (the user address space ends one page short of it). */
#if defined(__x86_64__)
    refused((void *)((1UL << 47) - page), page, 0, "unmapped");
#else
    CHECK(!munmap(none, page), "munmap");
    refused(none, page, 0, "unmapped");
#endif

    /* A shared file mapping one page longer than its file: the map shows the second page
     * readable and writable, but touching it raises SIGBUS, and pinning it fails. */
    int fd = memfd_create("mr_prot", MFD_CLOEXEC);
    CHECK(fd >= 0 && !ftruncate(fd, (off_t)page), "a one-page file");
    char *file = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(file != MAP_FAILED, "mmap of the file");
    close(fd);
    accepted(file, page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "the file's page");
    refused(file, 2 * page, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, "past the file's end");
    refused(file + page, page, IBV_ACCESS_REMOTE_READ, "past the file's end, read");
    CHECK(!munmap(file, 2 * page), "munmap");

    CHECK(!ibv_dealloc_pd(pd), "ibv_dealloc_pd");
    CHECK(!ibv_close_device(ctx), "ibv_close_device");
    printf("ok\n");
    return 0;
}
