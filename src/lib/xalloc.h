/* The allocation policy, one rule for the whole daemon:
 *  - what is sized by upstream input (response bodies, inflated profiles,
 *    decoded messages) is charged to the memory budget (mem.h) and its
 *    allocation is checked: a failure fails that fetch or decode, with a
 *    reason, and the mount goes on;
 *  - everything else (names, paths, index entries, small buffers) comes
 *    from these, which never return NULL: out of memory there is logged
 *    and the process aborts, as a state half made would be worse.
 * Nothing else calls malloc, calloc, realloc or strdup (scripts/check-layout). */
#ifndef PFS_XALLOC_H
#define PFS_XALLOC_H

#include <stddef.h>

void *pfs_xmalloc(size_t n);
void *pfs_xcalloc(size_t n, size_t size);
void *pfs_xrealloc(void *p, size_t n);
char *pfs_xstrdup(const char *s);
char *pfs_xstrndup(const char *s, size_t n);

#endif
