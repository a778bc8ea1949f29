/*
 * c-tests/badinput: shared harness of the bad-input test programs.
 *
 * Every exported function of librdmashim gets one case (named after the function) that calls it
 * with NULL pointers, with destroyed objects (created with the library, destroyed, then passed
 * again: the library's registries must refuse them with EINVAL, never dereference them) and in
 * the wrong state, and asserts the function's documented return convention exactly.
 *
 *   prog CASE      run one case: prints "ok CASE" (exit 0) or "FAIL CASE: ..." lines (exit 1)
 *   prog --list    print every case name, one a line
 *   prog --all     run every case, each in its own child process
 *
 * A crash (SIGSEGV, SIGABRT, ...) inside a case prints "FAIL CASE: crashed with signal N" and the
 * process dies of that signal; a case that blocks is stopped by an alarm after BI_TIMEOUT_S.
 */
#ifndef BADINPUT_H
#define BADINPUT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define BI_TIMEOUT_S 20

struct bi_case {
	const char *name;
	void (*run)(void);
};

/* Runs the program: see the comment at the top. */
int bi_main(int argc, char **argv, const struct bi_case *cases, size_t ncases);

/* Records a failure of the running case and prints "FAIL <case>: <file>:<line>: <message>". */
void bi_fail(const char *file, int line, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A note added to the failures that follow ("fd 3"), until bi_clear_context(); returns 1. */
int bi_set_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int bi_clear_context(void);

/* 1 if e is one of the zero-terminated list. */
int bi_errno_in(int e, const int *list);

/* "EINVAL or ENOSYS" for a zero-terminated list (static buffer). */
const char *bi_errs_str(const int *list);

/* The name of an errno value ("EINVAL", or the number). */
const char *bi_errname(int e);

/*
 * The address of an exported symbol of librdmashim, looked up with dlsym(RTLD_DEFAULT); the
 * running case fails (and NULL is returned) if it is missing or defined by another object.
 * Used for the functions that the system <infiniband/verbs.h> defines static inline
 * (ibv_post_send, ibv_poll_cq, ...), whose exported symbols cannot be called by name.
 */
void *bi_sym(const char *name);

#define BI_ERRS(...) ((const int[]){ __VA_ARGS__, 0 })

/* int / ssize_t / off_t call: must return -1 with errno in the list. */
#define EXPECT_M1(call, ...)                                                                   \
	do {                                                                                   \
		errno = 0;                                                                     \
		long bi_r_ = (long)(call);                                                     \
		int bi_e_ = errno;                                                             \
		if (bi_r_ != -1 || !bi_errno_in(bi_e_, BI_ERRS(__VA_ARGS__)))                  \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %ld with errno %s; expected -1 with errno %s", #call,     \
				bi_r_, bi_errname(bi_e_), bi_errs_str(BI_ERRS(__VA_ARGS__)));  \
	} while (0)

/* Constructor: must return NULL with errno in the list. */
#define EXPECT_NULL(call, ...)                                                                 \
	do {                                                                                   \
		errno = 0;                                                                     \
		const void *bi_p_ = (const void *)(call);                                      \
		int bi_e_ = errno;                                                             \
		if (bi_p_ != NULL || !bi_errno_in(bi_e_, BI_ERRS(__VA_ARGS__)))                \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %p with errno %s; expected NULL with errno %s", #call,    \
				bi_p_, bi_errname(bi_e_), bi_errs_str(BI_ERRS(__VA_ARGS__)));  \
	} while (0)

/* ibv_* call returning the (positive) errno: must return one of the list. */
#define EXPECT_RET(call, ...)                                                                  \
	do {                                                                                   \
		errno = 0;                                                                     \
		long bi_r_ = (long)(call);                                                     \
		int bi_e_ = errno;                                                             \
		if (!bi_errno_in((int)bi_r_, BI_ERRS(__VA_ARGS__)) || bi_r_ != (int)bi_r_)     \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %ld (errno %s); expected the error value %s", #call,      \
				bi_r_, bi_errname(bi_e_), bi_errs_str(BI_ERRS(__VA_ARGS__)));  \
	} while (0)

/* A call without an error return value: must return `value` with errno in the list. */
#define EXPECT_VAL(call, value, ...)                                                           \
	do {                                                                                   \
		errno = 0;                                                                     \
		long long bi_r_ = (long long)(call);                                           \
		int bi_e_ = errno;                                                             \
		if (bi_r_ != (long long)(value) || !bi_errno_in(bi_e_, BI_ERRS(__VA_ARGS__)))  \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %lld with errno %s; expected %s (%lld) with errno %s",    \
				#call, bi_r_, bi_errname(bi_e_), #value, (long long)(value),    \
				bi_errs_str(BI_ERRS(__VA_ARGS__)));                            \
	} while (0)

/* Must return exactly `value` (errno not checked). */
#define EXPECT_EQ(call, value)                                                                 \
	do {                                                                                   \
		errno = 0;                                                                     \
		long long bi_r_ = (long long)(call);                                           \
		int bi_e_ = errno;                                                             \
		if (bi_r_ != (long long)(value))                                               \
			bi_fail(__FILE__, __LINE__,                                            \
				"%s returned %lld (errno %s); expected %s (%lld)", #call, bi_r_,       \
				bi_errname(bi_e_), #value, (long long)(value));                \
	} while (0)

/* Must return a non-NULL pointer (string functions, lists). */
#define EXPECT_NONNULL(call)                                                                   \
	do {                                                                                   \
		errno = 0;                                                                     \
		const void *bi_p_ = (const void *)(call);                                      \
		int bi_e_ = errno;                                                             \
		if (bi_p_ == NULL)                                                             \
			bi_fail(__FILE__, __LINE__, "%s returned NULL (errno %s)", #call,      \
				bi_errname(bi_e_));                                            \
	} while (0)

/* A void call: only has to return (not crash, not block). */
#define EXPECT_RETURNS(call)                                                                   \
	do {                                                                                   \
		errno = 0;                                                                     \
		call;                                                                          \
	} while (0)

/* Setup of a case: on failure the case fails and returns. */
#define REQUIRE(cond)                                                                          \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			int bi_e_ = errno;                                                     \
			bi_fail(__FILE__, __LINE__, "setup failed: %s (errno %s)", #cond,      \
				bi_errname(bi_e_));                                            \
			return;                                                                \
		}                                                                              \
	} while (0)

/* Any other condition. */
#define CHECK(cond)                                                                            \
	do {                                                                                   \
		if (!(cond))                                                                   \
			bi_fail(__FILE__, __LINE__, "check failed: %s", #cond);                \
	} while (0)

#define BI_CASE(fn) { #fn, case_##fn }
#define BI_NCASES(a) (sizeof(a) / sizeof((a)[0]))

#endif /* BADINPUT_H */
