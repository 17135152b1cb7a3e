/* A few lines of test harness for the C unit tests (meson test): each
 * CHECK that fails prints where and what, and the test exits 1 at the end. */
#ifndef PFS_UNIT_H
#define PFS_UNIT_H

#include <stdio.h>
#include <string.h>

static int unit_failed;

#define CHECK(cond)                                                                          \
	do {                                                                                   \
		if (!(cond)) {                                                                 \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
			unit_failed = 1;                                                       \
		}                                                                              \
	} while (0)

#define CHECK_STR(got, want)                                                                 \
	do {                                                                                   \
		const char *g_ = (got), *w_ = (want);                                          \
		if (!g_ || strcmp(g_, w_)) {                                                   \
			fprintf(stderr, "%s:%d: %s is \"%s\", want \"%s\"\n", __FILE__, __LINE__,    \
				#got, g_ ? g_ : "(null)", w_);                                 \
			unit_failed = 1;                                                       \
		}                                                                              \
	} while (0)

#define CHECK_NUM(got, want)                                                                 \
	do {                                                                                   \
		double g_ = (double)(got), w_ = (double)(want);                                \
		if (g_ != w_) {                                                                \
			fprintf(stderr, "%s:%d: %s is %g, want %g\n", __FILE__, __LINE__, #got, g_, \
				w_);                                                           \
			unit_failed = 1;                                                       \
		}                                                                              \
	} while (0)

#define UNIT_END() (unit_failed ? (fprintf(stderr, "FAILED\n"), 1) : 0)

#endif
