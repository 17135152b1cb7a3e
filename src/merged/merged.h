/* merged/<range>/<profile>.pb.gz: all frozen snapshots of a service within
 * a time range, merged into one profile (the default.pgo of a PGO build).
 * Rebuilt only when its set of inputs changes; stored in the cache. */
#ifndef PFS_MERGED_H
#define PFS_MERGED_H

#include "registry/registry.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define PFS_MERGED_DIR "merged"
/* merged/<range>/default.pgo: the cpu snapshots of the range as a Go PGO
 * profile (pfs_pprof_pgo), for kinds whose profiles have line numbers. A
 * key of its own here, listed by fs/ after the service's keys. */
#define PFS_PGO_FILE "default.pgo"

const struct pfs_range *pfs_merged_range(const struct pfs_config *cfg, const char *name);
/* Merge keys of the service's files (distinct, in file order): each is a
 * merged/<range>/<key>.pb.gz. Returns how many; *keys malloc'd, pointing
 * into the service's files. */
size_t pfs_merged_keys(const struct pfs_service *s, const char ***keys);
/* The merge key of the snapshots a key merges: "cpu" for default.pgo. */
const char *pfs_merged_input_key(const char *key);
/* True if the range holds a snapshot with this merge key. */
bool pfs_merged_has(struct pfs_service *s, const struct pfs_range *r, const char *key);
/* Build if needed; size and mtime (the newest input's time), and for how
 * many seconds that holds unless new inputs arrive (valid, may be NULL).
 * Each result is a version (nonzero, never reused for other content):
 * *version, may be NULL. -ENOENT if there is no input, -EIO if the merge
 * failed (logged once). */
int pfs_merged_stat(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid, uint64_t *version);
/* The same without building or waiting: -EAGAIN unless built from the
 * current inputs, all of them there already (windows fetched, listed
 * rounds listed). */
int pfs_merged_peek(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid, uint64_t *version);
/* Build it on a worker, if its inputs are all there and it is not built
 * from them yet (a listing of merged/<range>/: its files are stat'ed
 * next, one after the other). Never waits. */
void pfs_merged_prebuild(struct pfs_service *s, const struct pfs_range *r, const char *key);
/* Size and mtime of a version; -ESTALE once it is neither the current
 * result nor the one before it. */
int pfs_merged_version(struct pfs_service *s, const struct pfs_range *r, const char *key,
		       uint64_t version, off_t *size, time_t *mtime);
/* Open a version (0: the current one, built if needed): its bytes are
 * *fd's (-1: none), then *tail's (malloc'd, may be NULL: none); 0, -ESTALE
 * as above, or pfs_merged_stat's errors. A merge of one snapshot keeps no
 * file: it is that snapshot's file and a few bytes, or the bytes alone. */
int pfs_merged_open(struct pfs_service *s, const struct pfs_range *r, const char *key,
		    uint64_t version, int *fd, uint8_t **tail, size_t *tail_len);

/* For how many seconds the set of merged/<range>/ files (those with an
 * input in range) holds, unless new inputs arrive: until the newest input
 * of one of them leaves the range. */
double pfs_merged_listing_valid(struct pfs_service *s, const struct pfs_range *r);

/* At exit. */
void pfs_merged_free(void);

#endif
