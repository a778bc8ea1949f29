/* bench helper: what the kernel alone takes for a round trip in which both sides sleep. Two
 * processes pass one byte back and forth over two pipes, each blocking in read() until the
 * other writes: every round trip is two sleeps and two wake-ups, as an event-driven RDMA round
 * trip (ibv_rc_pingpong -e) is when both its waiters really sleep. bench/run prints it beside
 * that figure, measured in the same run, so a machine whose wake-ups are slow shows it.
 *
 * Usage: wake_pingpong [N]   (default 2000 round trips). Prints "<µs> usec/round trip" on
 * stdout; exit status 0, or 1 on any failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pass(int in, int out)
{
	char c = 0;
	ssize_t n;
	do
		n = read(in, &c, 1);
	while (n < 0 && errno == EINTR);
	if (n != 1)
		return -1;
	do
		n = write(out, &c, 1);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 2000;
	int ping[2], pong[2];
	if (n <= 0 || pipe(ping) || pipe(pong)) {
		fprintf(stderr, "wake_pingpong: bad count or no pipes\n");
		return 1;
	}
	pid_t child = fork();
	if (child < 0) {
		perror("wake_pingpong: fork");
		return 1;
	}
	if (child == 0) {
		for (long i = 0; i < n; i++)
			if (pass(ping[0], pong[1]))
				_exit(1);
		_exit(0);
	}
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	char c = 1;
	for (long i = 0; i < n; i++) {
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) {
			fprintf(stderr, "wake_pingpong: the child stopped answering\n");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	int st;
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		fprintf(stderr, "wake_pingpong: the child failed\n");
		return 1;
	}
	double us = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 1e3 / n;
	printf("%.2f usec/round trip\n", us);
	return 0;
}
