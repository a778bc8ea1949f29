/*
 * librdmashim-view.so: the device view of `rdmashim run` where no mount namespace can be made
 * (user namespaces disabled, a container runtime's seccomp or AppArmor policy).
 *
 * The launcher writes the view (/sys/class/infiniband/<dev>/..., /sys/class/infiniband_verbs/...,
 * /dev/infiniband/uverbs0) under a private directory and names it in RDMASHIM_VIEW_ROOT; this
 * library, preloaded, sends the libc file calls whose absolute path lies under one of those three
 * directories to the same path under that root. Everything else goes to libc untouched, and with
 * no root set every call goes straight through.
 *
 * It is C, not part of the Rust library: open/openat are C-variadic, which stable Rust cannot
 * define, and it must be loadable beside either loading mode (preload or drop-in) without being
 * a second copy of the RDMA library. It holds no RDMA logic.
 *
 * What it cannot reach (docs/DESIGN-NOTES.md, "The device view"): glibc's internal calls from
 * functions not wrapped here, raw system calls, static binaries, relative paths resolved from a
 * working directory inside the covered trees, and paths spelled with "//" or ".." before the
 * covered directory.
 */
#define _GNU_SOURCE
/* The fortified inline wrappers of open/openat would clash with the definitions here. */
#undef _FORTIFY_SOURCE
/* Each of open and open64 (stat and stat64, ...) is defined here under its own name, so the
 * header must not rename one to the other. */
#undef _FILE_OFFSET_BITS
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* The covered directories: a path equal to one, or below it, is redirected. */
static const char *const covered[] = {
	"/sys/class/infiniband",
	"/sys/class/infiniband_verbs",
	"/dev/infiniband",
};

static char view_root[PATH_MAX];
static size_t view_root_len; /* 0: no view, every call goes through */
static int view_ready;

/* Reads RDMASHIM_VIEW_ROOT once; a constructor does it before the program runs, and a call made
 * by an earlier constructor does it itself (the value is the same either way). */
static void init_root(void)
{
	if (__atomic_load_n(&view_ready, __ATOMIC_ACQUIRE))
		return;
	const char *r = getenv("RDMASHIM_VIEW_ROOT");
	size_t n = r ? strlen(r) : 0;
	while (n > 1 && r[n - 1] == '/')
		n--;
	/* Only an absolute root with room left for the longest covered path below it. */
	if (n > 1 && r[0] == '/' && n < sizeof view_root / 2) {
		memcpy(view_root, r, n);
		view_root[n] = '\0';
		view_root_len = n;
	}
	__atomic_store_n(&view_ready, 1, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void view_init(void)
{
	init_root();
}

/* Sets `*out` to `path` as the program should reach it: under the view root if it is a covered
 * path (written into `buf`, PATH_MAX bytes), else `path` itself (a NULL path included: libc
 * refuses it as it would). -1 (errno ENAMETOOLONG) if the redirected path does not fit. */
static int redirect(const char *path, char *buf, const char **out)
{
	*out = path;
	init_root();
	if (!view_root_len || !path || path[0] != '/')
		return 0;
	for (size_t i = 0; i < sizeof covered / sizeof covered[0]; i++) {
		size_t n = strlen(covered[i]);
		if (strncmp(path, covered[i], n) != 0 || (path[n] != '\0' && path[n] != '/'))
			continue;
		size_t len = strlen(path);
		if (view_root_len + len >= PATH_MAX) {
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(buf, view_root, view_root_len);
		memcpy(buf + view_root_len, path, len + 1);
		*out = buf;
		return 0;
	}
	return 0;
}

/* A resolved path (realpath's answer) as the program should see it: the view root taken off, so
 * what it resolves under a covered directory stays there. */
static void unredirect(char *resolved)
{
	if (!resolved || !view_root_len || strncmp(resolved, view_root, view_root_len) != 0)
		return;
	if (resolved[view_root_len] == '/')
		memmove(resolved, resolved + view_root_len, strlen(resolved + view_root_len) + 1);
}

/* The next definition of `name` (libc's), looked up once. */
static void *next_fn(void **slot, const char *name)
{
	void *f = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	if (!f) {
		f = dlsym(RTLD_NEXT, name);
		__atomic_store_n(slot, f, __ATOMIC_RELEASE);
	}
	return f;
}

/* Declares `real` as the next `name` with `name`'s type; returns `fail` (errno ENOSYS) if there
 * is none. */
#define NEXT(name, fail)                                                                       \
	static void *slot_;                                                                    \
	__typeof__(&name) real = (__typeof__(&name))next_fn(&slot_, #name);                   \
	if (!real) {                                                                           \
		errno = ENOSYS;                                                                \
		return fail;                                                                   \
	}

/* Redirects `path` into `p`, or returns `fail` if it does not fit. */
#define REDIRECT(path, fail)                                                                   \
	char buf_[PATH_MAX];                                                                   \
	const char *p;                                                                         \
	if (redirect(path, buf_, &p) != 0)                                                     \
		return fail;

/* A wrapper that redirects its `path` argument and calls libc's `name` with `args` (`p` in
 * place of the path). */
#define WRAP(ret, fail, name, params, ...)                                                     \
	EXPORT ret name params                                                                 \
	{                                                                                      \
		NEXT(name, fail);                                                              \
		REDIRECT(path, fail);                                                          \
		return real(__VA_ARGS__);                                                      \
	}

/* An open(2)-like wrapper: `mode`, open's optional argument, is read when the flags create a
 * file, and passed on with the redirected path. */
#define WRAP_OPEN(name, params, ...)                                                           \
	EXPORT int name params                                                                 \
	{                                                                                      \
		mode_t mode = 0;                                                               \
		if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE) {                   \
			va_list ap;                                                            \
			va_start(ap, flags);                                                   \
			mode = va_arg(ap, mode_t);                                             \
			va_end(ap);                                                            \
		}                                                                              \
		NEXT(name, -1);                                                                \
		REDIRECT(path, -1);                                                            \
		return real(__VA_ARGS__, mode);                                                \
	}

/* A realpath-like wrapper: the answer has the view root taken off again. */
#define WRAP_RESOLVE(name, params, ...)                                                        \
	EXPORT char *name params                                                               \
	{                                                                                      \
		NEXT(name, NULL);                                                              \
		REDIRECT(path, NULL);                                                          \
		char *r = real(__VA_ARGS__);                                                   \
		unredirect(r);                                                                 \
		return r;                                                                      \
	}

/* ---- open ---------------------------------------------------------------------------------- */

WRAP_OPEN(open, (const char *path, int flags, ...), p, flags)
WRAP_OPEN(open64, (const char *path, int flags, ...), p, flags)
WRAP_OPEN(openat, (int dirfd, const char *path, int flags, ...), dirfd, p, flags)
WRAP_OPEN(openat64, (int dirfd, const char *path, int flags, ...), dirfd, p, flags)

/* _FORTIFY_SOURCE's checked forms, which fortified programs call instead of open/openat. */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);

WRAP(int, -1, __open_2, (const char *path, int flags), p, flags)
WRAP(int, -1, __open64_2, (const char *path, int flags), p, flags)
WRAP(int, -1, __openat_2, (int dirfd, const char *path, int flags), dirfd, p, flags)
WRAP(int, -1, __openat64_2, (int dirfd, const char *path, int flags), dirfd, p, flags)
WRAP(FILE *, NULL, fopen, (const char *path, const char *how), p, how)
WRAP(FILE *, NULL, fopen64, (const char *path, const char *how), p, how)

/* ---- stat ---------------------------------------------------------------------------------- */

WRAP(int, -1, stat, (const char *path, struct stat *st), p, st)
WRAP(int, -1, stat64, (const char *path, struct stat64 *st), p, st)
WRAP(int, -1, lstat, (const char *path, struct stat *st), p, st)
WRAP(int, -1, lstat64, (const char *path, struct stat64 *st), p, st)
WRAP(int, -1, fstatat, (int dirfd, const char *path, struct stat *st, int flags), dirfd, p, st, flags)
WRAP(int, -1, fstatat64, (int dirfd, const char *path, struct stat64 *st, int flags), dirfd, p, st, flags)
WRAP(int, -1, statx, (int dirfd, const char *path, int flags, unsigned int mask, struct statx *st), dirfd, p, flags, mask, st)

/* What programs built against glibc before 2.33 call for the stat family. */
int __xstat(int ver, const char *path, struct stat *st);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);

WRAP(int, -1, __xstat, (int ver, const char *path, struct stat *st), ver, p, st)
WRAP(int, -1, __xstat64, (int ver, const char *path, struct stat64 *st), ver, p, st)
WRAP(int, -1, __lxstat, (int ver, const char *path, struct stat *st), ver, p, st)
WRAP(int, -1, __lxstat64, (int ver, const char *path, struct stat64 *st), ver, p, st)
WRAP(int, -1, __fxstatat, (int ver, int dirfd, const char *path, struct stat *st, int flags), ver, dirfd, p, st, flags)
WRAP(int, -1, __fxstatat64, (int ver, int dirfd, const char *path, struct stat64 *st, int flags), ver, dirfd, p, st, flags)

/* ---- access -------------------------------------------------------------------------------- */

WRAP(int, -1, access, (const char *path, int how), p, how)
WRAP(int, -1, faccessat, (int dirfd, const char *path, int how, int flags), dirfd, p, how, flags)
WRAP(int, -1, euidaccess, (const char *path, int how), p, how)
WRAP(int, -1, eaccess, (const char *path, int how), p, how)

/* ---- directories --------------------------------------------------------------------------- */

WRAP(DIR *, NULL, opendir, (const char *path), p)

typedef int (*filter_fn)(const struct dirent *);
typedef int (*compar_fn)(const struct dirent **, const struct dirent **);
typedef int (*filter64_fn)(const struct dirent64 *);
typedef int (*compar64_fn)(const struct dirent64 **, const struct dirent64 **);

WRAP(int, -1, scandir, (const char *path, struct dirent ***list, filter_fn filter, compar_fn compar), p, list, filter, compar)
WRAP(int, -1, scandir64, (const char *path, struct dirent64 ***list, filter64_fn filter, compar64_fn compar), p, list, filter, compar)

/* ---- links and names ----------------------------------------------------------------------- */

WRAP(ssize_t, -1, readlink, (const char *path, char *out, size_t size), p, out, size)
WRAP(ssize_t, -1, readlinkat, (int dirfd, const char *path, char *out, size_t size), dirfd, p, out, size)

char *__realpath_chk(const char *path, char *resolved, size_t size);

WRAP_RESOLVE(realpath, (const char *path, char *resolved), p, resolved)
WRAP_RESOLVE(__realpath_chk, (const char *path, char *resolved, size_t size), p, resolved, size)
WRAP_RESOLVE(canonicalize_file_name, (const char *path), p)

/* ---- extended attributes (ls -l asks for them) --------------------------------------------- */

WRAP(ssize_t, -1, getxattr, (const char *path, const char *name, void *value, size_t size), p, name, value, size)
WRAP(ssize_t, -1, lgetxattr, (const char *path, const char *name, void *value, size_t size), p, name, value, size)
WRAP(ssize_t, -1, listxattr, (const char *path, char *list, size_t size), p, list, size)
WRAP(ssize_t, -1, llistxattr, (const char *path, char *list, size_t size), p, list, size)
