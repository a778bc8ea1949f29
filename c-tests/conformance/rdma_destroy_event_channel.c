/* rdma_destroy_event_channel(3): releases the channel and closes its file descriptor. */
#include "cmhelp.h"

#include <dirent.h>
#include <fcntl.h>

static int open_fds(void)
{
	int n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int main(int argc, char **argv)
{
	conf_begin("rdma_destroy_event_channel", argc, argv);

	/* DESCRIPTION: the channel's file descriptor is closed. */
	struct rdma_event_channel *ch = rdma_create_event_channel();
	if (!ch) {
		CLAUSE_BLOCKED("DESC-CLOSE-FD", "rdma_create_event_channel failed");
	} else {
		int fd = ch->fd;
		int before = fcntl(fd, F_GETFD);
		rdma_destroy_event_channel(ch);
		errno = 0;
		int after = fcntl(fd, F_GETFD);
		int e = errno;
		CLAUSE("DESC-CLOSE-FD", before != -1 && after == -1 && e == EBADF,
		       "fd %d: F_GETFD before %d, after destroy %d (%s)", fd, before, after,
		       conf_errname(e));
	}

	/* DESCRIPTION: all resources are released: creating and destroying channels (with an id
	 * that was used and destroyed) does not leak descriptors. */
	struct rdma_event_channel *warm = rdma_create_event_channel();
	struct rdma_cm_id *wid = NULL;
	if (warm && rdma_create_id(warm, &wid, NULL, RDMA_PS_TCP) == 0)
		rdma_destroy_id(wid); /* first use may open the library's own descriptors */
	if (warm)
		rdma_destroy_event_channel(warm);
	int fds0 = open_fds();
	int ok = 1;
	for (int i = 0; i < 50 && ok; i++) {
		struct rdma_event_channel *c = rdma_create_event_channel();
		struct rdma_cm_id *id = NULL;
		ok = c && rdma_create_id(c, &id, NULL, RDMA_PS_TCP) == 0 && rdma_destroy_id(id) == 0;
		if (c)
			rdma_destroy_event_channel(c);
	}
	int fds1 = open_fds();
	CLAUSE("DESC-RELEASE", ok && fds0 > 0 && fds1 == fds0,
	       "50 create/destroy cycles ok %d: %d open fds before, %d after", ok, fds0, fds1);
	return conf_end();
}
