/* ibv_import_pd(3) (and ibv_unimport_pd): the PD of a handle in an imported context, usable in
 * every verb that takes a PD, also in another process that was given the command fd;
 * unimport releases it without destroying the object; a dealloc of any handle destroys it
 * for all. */
#include "ibvhelp.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* The other process (this program again, exec'd with "--import-child FD HANDLE"): imports the
 * device from the inherited descriptor and the PD by its handle, and registers memory on it.
 * Exit status: 0, or the step that failed (1 import_device, 2 import_pd, 3 reg_mr). */
static int import_child(int fd, uint32_t handle)
{
	static char buf[64];
	alarm(20); /* never outlive the parent's own alarm by much */
	struct ibv_context *ic = ibv_import_device(fd);
	if (!ic) {
		printf("# child: ibv_import_device(%d): %s\n", fd, conf_errname(errno));
		return 1;
	}
	struct ibv_pd *ip = ibv_import_pd(ic, handle);
	if (!ip) {
		printf("# child: ibv_import_pd(%u): %s\n", handle, conf_errname(errno));
		return 2;
	}
	struct ibv_mr *mr = ibv_reg_mr(ip, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr) {
		printf("# child: ibv_reg_mr on the imported PD: %s\n", conf_errname(errno));
		return 3;
	}
	ibv_dereg_mr(mr);
	ibv_unimport_pd(ip);
	ibv_close_device(ic);
	return 0;
}

/* Runs import_child in a new process given a duplicate of `cmd_fd`; its exit status, or -1. */
static int import_elsewhere(int cmd_fd, uint32_t handle)
{
	int fd = dup(cmd_fd); /* without FD_CLOEXEC: the exec'd program inherits it */
	if (fd < 0)
		return -1;
	char fds[16], hs[16];
	snprintf(fds, sizeof fds, "%d", fd);
	snprintf(hs, sizeof hs, "%u", handle);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		char *args[] = { "ibv_import_pd", "--import-child", fds, hs, NULL };
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(fd);
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int main(int argc, char **argv)
{
	if (argc == 4 && strcmp(argv[1], "--import-child") == 0)
		return import_child(atoi(argv[2]), (uint32_t)strtoul(argv[3], NULL, 10));
	conf_begin("ibv_import_pd", argc, argv);
	struct ih_dev d;
	if (ih_dev_open(&d)) {
		CLAUSE_BLOCKED("RET-PD", d.err);
		return conf_end();
	}
	int fd = dup(d.ctx->cmd_fd);
	struct ibv_context *ic = fd >= 0 ? ibv_import_device(fd) : NULL;
	/* RETURN VALUE: a PD with the original's handle. */
	errno = 0;
	struct ibv_pd *ip = ic ? ibv_import_pd(ic, d.pd->handle) : NULL;
	CLAUSE("RET-PD", ip && ip->handle == d.pd->handle && ip->context == ic, "imported context %p, PD %p (%s)",
	       (void *)ic, (void *)ip, conf_errname(errno));
	/* DESCRIPTION: the imported PD works in verbs that take a PD (an MR on it). */
	char buf[64];
	struct ibv_mr *mr = ip ? ibv_reg_mr(ip, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	CLAUSE("DESC-USABLE", mr != NULL, "ibv_reg_mr on the imported PD: %p", (void *)mr);
	if (mr)
		ibv_dereg_mr(mr);
	/* DESCRIPTION: the command fd may go to another process (dup, SCM_RIGHTS), which imports
	 * the device and then the PD by its handle, and uses it there as here. */
	int child = import_elsewhere(d.ctx->cmd_fd, d.pd->handle);
	CLAUSE("DESC-OTHER-PROCESS", child == 0,
	       "another process given a duplicate of cmd_fd: exit %d (0 ok; failed at 1 import_device, "
	       "2 import_pd, 3 reg_mr)", child);
	/* ibv_unimport_pd releases it; the original PD lives on. */
	if (ip)
		ibv_unimport_pd(ip);
	struct ibv_mr *m2 = ibv_reg_mr(d.pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	CLAUSE("DESC-UNIMPORT", ip && m2, "the original PD after the unimport: reg_mr %p", (void *)m2);
	if (m2)
		ibv_dereg_mr(m2);
	/* DESCRIPTION: ibv_dealloc_pd on any handle goes to the kernel to destroy the object;
	 * "once destroy is done no other process can touch the object except for unimport". The
	 * original is deallocated while an import lives: that succeeds, and the import is then
	 * refused by every verb but ibv_unimport_pd. */
	struct ibv_pd *pd2 = ibv_alloc_pd(d.ctx);
	struct ibv_pd *ip2 = ic && pd2 ? ibv_import_pd(ic, pd2->handle) : NULL;
	int rc = ip2 ? ibv_dealloc_pd(pd2) : -1;
	errno = 0;
	struct ibv_mr *m3 = ip2 && rc == 0 ? ibv_reg_mr(ip2, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	int e3 = errno;
	CLAUSE("DESC-DESTROY", ip2 && rc == 0 && !m3 && e3 == EINVAL,
	       "dealloc of the original with an import alive: %d; reg_mr on the import after it: %p (%s)", rc,
	       (void *)m3, conf_errname(e3));
	if (m3)
		ibv_dereg_mr(m3);
	if (ip2)
		ibv_unimport_pd(ip2);
	else if (pd2)
		ibv_dealloc_pd(pd2);
	/* The same through the import: its dealloc destroys the original's object too. */
	struct ibv_pd *pd3 = ibv_alloc_pd(d.ctx);
	struct ibv_pd *ip3 = ic && pd3 ? ibv_import_pd(ic, pd3->handle) : NULL;
	rc = ip3 ? ibv_dealloc_pd(ip3) : -1;
	errno = 0;
	struct ibv_mr *m4 = ip3 && rc == 0 ? ibv_reg_mr(pd3, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	int e4 = errno;
	CLAUSE("DESC-DESTROY-IMPORT", ip3 && rc == 0 && !m4 && e4 == EINVAL,
	       "dealloc of the import: %d; reg_mr on the original after it: %p (%s)", rc, (void *)m4,
	       conf_errname(e4));
	if (m4)
		ibv_dereg_mr(m4);
	if (!ip3 && pd3)
		ibv_dealloc_pd(pd3);
	if (ic)
		ibv_close_device(ic);
	else if (fd >= 0)
		close(fd);
	ih_dev_close(&d);
	return conf_end();
}
