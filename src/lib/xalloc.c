/* Allocations that never return NULL (xalloc.h). */
#include "xalloc.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>

static void *got(void *p, size_t n)
{
	if (!p) {
		pfs_err("out of memory (%zu bytes): aborting", n);
		abort();
	}
	return p;
}

void *pfs_xmalloc(size_t n)
{
	return got(malloc(n ? n : 1), n);
}

void *pfs_xcalloc(size_t n, size_t size)
{
	return got(calloc(n ? n : 1, size ? size : 1), n * size);
}

void *pfs_xrealloc(void *p, size_t n)
{
	return got(realloc(p, n ? n : 1), n);
}

char *pfs_xstrdup(const char *s)
{
	return got(strdup(s), strlen(s) + 1);
}

char *pfs_xstrndup(const char *s, size_t n)
{
	return got(strndup(s, n), n + 1);
}
