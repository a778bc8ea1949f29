/* ibv_open_xrcd(3) (and ibv_close_xrcd): an XRC domain, created with O_CREAT, tied to the inode
 * of fd (shared by those that open the same file; O_EXCL refuses an existing one); closing the
 * last reference destroys it; 0 or an errno value. */
#include "ibvhelp.h"

#include <fcntl.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	conf_begin("ibv_open_xrcd", argc, argv);
	char err[256];
	struct ibv_context *ctx = ih_open(err, sizeof err);
	if (!ctx) {
		CLAUSE_BLOCKED("RET-XRCD", err);
		return conf_end();
	}
	/* fd -1 with O_CREAT: a domain of its own. RETURN VALUE: a pointer to it. */
	struct ibv_xrcd_init_attr a = { .comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS, .fd = -1,
					.oflags = O_CREAT };
	errno = 0;
	struct ibv_xrcd *x = ibv_open_xrcd(ctx, &a);
	CLAUSE("RET-XRCD", x && x->context == ctx, "ibv_open_xrcd(fd -1, O_CREAT): %p (%s)", (void *)x, conf_errname(errno));
	/* An fd: O_CREAT creates the domain of that inode; O_CREAT|O_EXCL then fails; without
	 * O_CREAT the existing one opens. */
	char path[] = "/tmp/ibv_open_xrcd.XXXXXX";
	int fd = mkstemp(path);
	struct ibv_xrcd_init_attr f = a;
	f.fd = fd;
	struct ibv_xrcd *x1 = fd >= 0 ? ibv_open_xrcd(ctx, &f) : NULL;
	f.oflags = O_CREAT | O_EXCL;
	struct ibv_xrcd *x2 = x1 ? ibv_open_xrcd(ctx, &f) : NULL;
	f.oflags = 0;
	struct ibv_xrcd *x3 = x1 ? ibv_open_xrcd(ctx, &f) : NULL;
	CLAUSE("DESC-INODE", x1 && !x2 && x3, "O_CREAT %p, O_CREAT|O_EXCL %p, again without O_CREAT %p", (void *)x1,
	       (void *)x2, (void *)x3);
	/* RETURN VALUE (ibv_close_xrcd): 0. */
	int r1 = x ? ibv_close_xrcd(x) : -1;
	int r3 = x3 ? ibv_close_xrcd(x3) : -1;
	int r2 = x1 ? ibv_close_xrcd(x1) : -1;
	CLAUSE("CLOSE-RET-0", r1 == 0 && r2 == 0 && r3 == 0, "ibv_close_xrcd: %d, %d, %d", r1, r2, r3);
	if (x2)
		ibv_close_xrcd(x2);
	if (fd >= 0) {
		close(fd);
		unlink(path);
	}
	ibv_close_device(ctx);
	return conf_end();
}
