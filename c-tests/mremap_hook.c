/*
 * The direct path under a memory hook that loses mremap's fifth argument.
 *
 * At ibv_reg_mr with remote rights the direct path moves a region's pages onto a memfd with
 * mremap(MREMAP_FIXED), and back at ibv_dereg_mr. Debian's UCX 1.13 (libucm, loaded by every
 * UCX program: Open MPI's ranks over pml ucx) interposes mremap with a function of four
 * parameters, so the new address never reaches the kernel, which takes whatever the register
 * holds (NULL in Open MPI's ranks: as root the pages went to page 0). The library then unmapped
 * the range it had moved away from, as if the move had failed: a mapping another thread had
 * made there meanwhile was gone (the SIGSEGV of the mpi-view test: a link's ring unmapped
 * under a live QP).
 *
 * This program defines mremap as UCX's hook behaves (the fifth argument replaced by NULL) and,
 * when that moved something away, maps a page where it was (what another thread could have
 * mapped there). Then, around ibv_reg_mr and ibv_dereg_mr of 4 anonymous pages:
 * 1. the pages keep their contents and are on the library's memfd while registered (the
 *    direct path took them), private anonymous memory again after deregistration;
 * 2. nothing is mapped at address 0;
 * 3. the page standing for another thread's mapping, if one was made, is still mapped.
 * Skips (77) under RDMASHIM_DIRECT=off.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "rc_pair.h"

#define PAGES 4
#define LEN (PAGES * 4096)

static int hook_calls;
static void *neighbour = MAP_FAILED;

/* What UCX 1.13's ucm_override_mremap amounts to: four parameters, the new address lost. */
void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
	hook_calls++;
	void *r = (void *)syscall(SYS_mremap, old, old_len, new_len, flags, NULL);
	if (r != MAP_FAILED && r != old && neighbour == MAP_FAILED) {
		void *p = mmap(old, 4096, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == old) {
			memset(p, 0x5a, 4096);
			neighbour = p;
		} else if (p != MAP_FAILED) {
			munmap(p, 4096); /* an old kernel that ignores the flag put it elsewhere */
		}
	}
	return r;
}

static int mapped(const void *p)
{
	unsigned char v;
	return mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 4096, &v) == 0 || errno != ENOMEM;
}

/* The /proc/self/maps line of the area holding [p, p + len) whole, or "" if none does. */
static const char *area_of(const void *p, size_t len, char *line, size_t n)
{
	FILE *f = fopen("/proc/self/maps", "r");
	CHECK(f, "open /proc/self/maps");
	uintptr_t s, e, a = (uintptr_t)p;
	line[0] = 0;
	while (fgets(line, (int)n, f)) {
		if (sscanf(line, "%lx-%lx", &s, &e) == 2 && s <= a && a + len <= e)
			break;
		line[0] = 0;
	}
	fclose(f);
	return line;
}

static void check_contents(const unsigned char *buf, unsigned char salt, const char *when)
{
	for (size_t i = 0; i < LEN; i++)
		CHECK(buf[i] == (unsigned char)(i * 7 + salt), "%s: byte %zu changed", when, i);
}

int main(void)
{
	const char *direct = getenv("RDMASHIM_DIRECT");
	if (direct && !strcmp(direct, "off")) {
		printf("SKIP: RDMASHIM_DIRECT=off\n");
		return 77;
	}
	open_first_device();
	CHECK(!mapped(NULL), "something is mapped at address 0 before the test");

	unsigned char *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(buf != MAP_FAILED, "mmap");
	for (size_t i = 0; i < LEN; i++)
		buf[i] = (unsigned char)(i * 7 + 3);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(mr, "reg_mr: %s", strerror(errno));
	char line[512];
	check_contents(buf, 3, "after ibv_reg_mr");
	CHECK(neighbour == MAP_FAILED || mapped(neighbour),
	      "ibv_reg_mr unmapped a page it had moved away from (%p)", neighbour);
	CHECK(!mapped(NULL), "ibv_reg_mr mapped something at address 0 (hook called %d times)", hook_calls);
	CHECK(strstr(area_of(buf, LEN, line, sizeof line), "rdmashim-mr"),
	      "registered pages are not on the direct path's memfd (hook called %d times): %s", hook_calls, line);

	for (size_t i = 0; i < LEN; i++)
		buf[i] = (unsigned char)(i * 7 + 5);
	CHECK(ibv_dereg_mr(mr) == 0, "dereg_mr");
	check_contents(buf, 5, "after ibv_dereg_mr");
	const char *a = area_of(buf, LEN, line, sizeof line);
	CHECK(strstr(a, " rw-p ") && !strstr(a, "rdmashim-mr"), "deregistered pages are not private: %s", a);
	CHECK(!mapped(NULL), "ibv_dereg_mr mapped something at address 0 (hook called %d times)", hook_calls);
	CHECK(neighbour == MAP_FAILED || mapped(neighbour),
	      "ibv_dereg_mr unmapped a page it had moved away from (%p)", neighbour);
	CHECK(neighbour == MAP_FAILED || ((unsigned char *)neighbour)[4095] == 0x5a, "the page changed");

	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf("ok: reg_mr/dereg_mr under a 4-argument mremap hook (called %d times)\n", hook_calls);
	return 0;
}
