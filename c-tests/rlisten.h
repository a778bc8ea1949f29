/* A listening stream rsocket, as the rsocket C tests need one (rsocket_keepalive.c,
 * rsocket_linger.c, rsocket_fork.c): bound to addr's address with a port the system picks,
 * which is written back into addr. Exits with a message on failure. */
#ifndef RLISTEN_H
#define RLISTEN_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <rdma/rsocket.h>

static inline int rlisten_on(struct sockaddr_in *addr, int backlog)
{
	socklen_t len = sizeof *addr;
	int l = rsocket(AF_INET, SOCK_STREAM, 0);

	if (l < 0 || rbind(l, (struct sockaddr *)addr, sizeof *addr) != 0 || rlisten(l, backlog) != 0 ||
	    rgetsockname(l, (struct sockaddr *)addr, &len) != 0) {
		fprintf(stderr, "FAIL: a listening rsocket: %s\n", strerror(errno));
		exit(1);
	}
	return l;
}

#endif
