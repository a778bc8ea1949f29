/* ibv_fork_init(3): prepares the library so that fork() does not corrupt registered memory;
 * 0, or EINVAL once memory was registered (where fork support is needed at all);
 * RDMAV_FORK_SAFE / IBV_FORK_SAFE have the same effect. */
#include "ibvhelp.h"

#include <sys/wait.h>
#include <unistd.h>

/* The children: --env-child prints ibv_is_fork_initialized(); --reg-child registers memory
 * first, then prints ibv_fork_init()'s result and the status. */
static int child(const char *what)
{
	if (strcmp(what, "--reg-child") == 0) {
		struct ih_dev d;
		struct ih_buf b;
		if (ih_dev_open(&d) || ih_buf_make(&d, &b, 4096, IBV_ACCESS_LOCAL_WRITE))
			return 1;
		int rc = ibv_fork_init();
		printf("%d %d\n", rc, (int)ibv_is_fork_initialized());
		ih_buf_free(&b);
		ih_dev_close(&d);
		return 0;
	}
	printf("%d %d\n", 0, (int)ibv_is_fork_initialized());
	return 0;
}

/* Runs this program again as `what` with `var`=1 set (var may be NULL); stores the two
 * numbers it printed in r[0], r[1]; -1 on failure. */
static int rerun(const char *what, const char *var, int r[2])
{
	int fds[2];
	if (pipe(fds))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fds[1], 1);
		close(fds[0]);
		if (var)
			setenv(var, "1", 1);
		else
			unsetenv("RDMAV_FORK_SAFE"), unsetenv("IBV_FORK_SAFE");
		execl("/proc/self/exe", "ibv_fork_init", what, (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	char buf[32] = "";
	ssize_t n = read(fds[0], buf, sizeof buf - 1);
	close(fds[0]);
	int st;
	waitpid(pid, &st, 0);
	return n > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0 && sscanf(buf, "%d %d", &r[0], &r[1]) == 2 ? 0 : -1;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strncmp(argv[1], "--", 2) == 0)
		return child(argv[1]);
	conf_begin("ibv_fork_init", argc, argv);
	/* RETURN VALUE: 0 on success (before any registration). */
	int rc = ibv_fork_init();
	CLAUSE("RET-0", rc == 0, "ibv_fork_init returned %d (%s)", rc, conf_errname(rc));
	enum ibv_fork_status st = ibv_is_fork_initialized();
	CLAUSE("DESC-ENABLED", st == IBV_FORK_ENABLED || st == IBV_FORK_UNNEEDED, "after ibv_fork_init: status %d",
	       (int)st);
	/* DESCRIPTION: with fork support, a child's writes never reach the parent's registered
	 * memory, and the parent's RDMA keeps landing in it after the fork. */
	struct ih_dev d;
	struct ih_pair p;
	struct ih_buf b;
	memset(&p, 0, sizeof p);
	memset(&b, 0, sizeof b);
	int ok = 0;
	char why[300] = "";
	if (ih_dev_open(&d) == 0 && ih_buf_make(&d, &b, 16384, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0 &&
	    ih_pair_make(&d, &p, IBV_QPT_RC, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE) == 0) {
		struct ibv_wc wc;
		/* A first RDMA WRITE before the fork (the region is granted to the peer). */
		memcpy(b.buf, "before", 7);
		ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 7, b.mr->lkey, (uintptr_t)b.buf + 8192, b.mr->rkey, 1);
		ih_poll(p.cq[0], &wc, IH_WAIT_MS);
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0) {
			memcpy(b.buf + 8192, "child!", 7);
			memcpy(b.buf + 12288, "child!", 7);
			_exit(0);
		}
		int cst;
		waitpid(pid, &cst, 0);
		memcpy(b.buf, "after!", 7);
		ih_post_send(p.qp[0], IBV_WR_RDMA_WRITE, b.buf, 7, b.mr->lkey, (uintptr_t)b.buf + 12288, b.mr->rkey, 2);
		int w = ih_poll(p.cq[0], &wc, IH_WAIT_MS);
		ok = pid > 0 && w == 1 && wc.status == IBV_WC_SUCCESS && memcmp(b.buf + 8192, "before", 7) == 0 &&
		     memcmp(b.buf + 12288, "after!", 7) == 0;
		snprintf(why, sizeof why, "write after the fork: %d; parent sees \"%.6s\" and \"%.6s\"", w, b.buf + 8192,
			 b.buf + 12288);
		ih_pair_destroy(&p);
	} else {
		snprintf(why, sizeof why, "%s", d.err);
	}
	CLAUSE("DESC-FORK-SAFE", ok, "%s", why);
	ih_buf_free(&b);
	ih_dev_close(&d);
	/* RETURN VALUE: EINVAL when memory was registered before the call (a fresh process),
	 * unless fork support is unneeded: then it always succeeds. */
	int r[2] = { -1, -1 };
	int ran = rerun("--reg-child", NULL, r);
	CLAUSE("ERR-AFTER-REG", ran == 0 && (r[1] == IBV_FORK_UNNEEDED ? r[0] == 0 : r[0] == EINVAL),
	       "registration first, then ibv_fork_init: %d (status %d)", r[0], r[1]);
	/* NOTES: RDMAV_FORK_SAFE, or IBV_FORK_SAFE, set: as if ibv_fork_init had been called. */
	int e1[2] = { -1, -1 }, e2[2] = { -1, -1 };
	rerun("--env-child", "RDMAV_FORK_SAFE", e1);
	rerun("--env-child", "IBV_FORK_SAFE", e2);
	CLAUSE("NOTE-ENV", (e1[1] == IBV_FORK_ENABLED || e1[1] == IBV_FORK_UNNEEDED) &&
				   (e2[1] == IBV_FORK_ENABLED || e2[1] == IBV_FORK_UNNEEDED),
	       "status with RDMAV_FORK_SAFE %d, with IBV_FORK_SAFE %d", e1[1], e2[1]);
	return conf_end();
}
