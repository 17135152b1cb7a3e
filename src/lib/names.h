/* Safe path components: names that come from config or upstream, and the
 * names of times (<time> directories, times in .status.json). */
#ifndef PFS_NAMES_H
#define PFS_NAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include <jansson.h>

/* FNV-1a: h (start with PFS_FNV_INIT) folded with the bytes of s. */
#define PFS_FNV_INIT 1469598103934665603ULL
uint64_t pfs_fnv1a(uint64_t h, const char *s);

/* True if s is usable as one path component as it is: non-empty, at most
 * 200 bytes, only [A-Za-z0-9._-], not "." or "..", not starting with '.'. */
bool pfs_name_is_safe(const char *s);

/* Copy s into out (size outlen) with every byte outside [A-Za-z0-9._-]
 * replaced by '_', a leading '.' replaced by '_', truncated to fit.
 * An empty result becomes "_". Always NUL-terminates. */
void pfs_name_sanitize(const char *s, char *out, size_t outlen);

/* A path component that stands for s and for nothing else: s itself if
 * it is safe, else its sanitized form (at most 180 bytes) and "~" and a
 * hash of all of s. The same s gives the same name on every mount, and
 * two names never meet ('~' is not in a safe name). */
void pfs_name_stable(const char *s, char *out, size_t outlen);

/* t as "2026-12-02T10:00:00Z" (UTC, RFC 3339): a <time> directory's
 * name, and every time profilefs writes (logs, API queries, comments). */
#define PFS_TIME_NAME_MAX 32
void pfs_name_time(time_t t, char out[PFS_TIME_NAME_MAX]);
/* Its inverse: 0 and *t, or -1 unless name is exactly what pfs_name_time
 * writes for some time. */
int pfs_name_parse_time(const char *name, time_t *t);
/* The same name as JSON (.status.json), null for 0: never. */
json_t *pfs_name_time_json(time_t t);

#endif
