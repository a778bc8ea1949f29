/* The other process of the import tests (import_across.c, import_mr_across.c): this program
 * again, exec'd as `<argv0> --child <fd> <sock>` with a duplicate of a context's cmd_fd and one
 * end of a socketpair over which the two take turns. */
#ifndef CMD_FD_CHILD_H
#define CMD_FD_CHILD_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

/* Starts the child with a duplicate of `cmd_fd`; the parent's end of the socketpair in *sock.
 * The child's pid, or -1. */
static inline pid_t start_child(char *argv0, int cmd_fd, int *sock)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return -1;
	int fd = dup(cmd_fd); /* no FD_CLOEXEC: the exec'd child inherits it */
	char fds[16], socks[16];
	snprintf(fds, sizeof fds, "%d", fd);
	snprintf(socks, sizeof socks, "%d", sv[1]);
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		char *args[] = { argv0, "--child", fds, socks, NULL };
		execv("/proc/self/exe", args);
		_exit(127);
	}
	close(fd);
	close(sv[1]);
	*sock = sv[0];
	return pid;
}

#endif
