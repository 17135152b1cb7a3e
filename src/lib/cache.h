/* On-disk snapshot store: <cache_dir>/<cluster>/<service>/<time>/<file>.
 * Files appear only whole (written aside, renamed into place; snapshots
 * only once on disk) and are never changed afterwards. No symlink below cache_dir is followed;
 * cache_dir must be ours and not writable by others, and one mount holds
 * it at a time (flock on cache_dir/.lock). */
#ifndef PFS_CACHE_H
#define PFS_CACHE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

int pfs_cache_init(const char *dir, char *err, size_t errlen);
void pfs_cache_close(void);
/* Write this process's pid into the lock file (again after a fork). */
void pfs_cache_note_pid(void);

/* Store data as cluster/service/round/file with the given mtime: whole or
 * not at all, but not made durable (for what is rebuilt after a restart:
 * merged/ files). */
int pfs_cache_publish(const char *cluster, const char *service, const char *round,
		      const char *file, const uint8_t *data, size_t len, time_t mtime,
		      char *err, size_t errlen);

/* The same, durable, in two steps. Stage: data is written now (NULL and
 * err if that failed; data may be freed on return). Commit: the file is
 * renamed into place once it is on disk (a group commit: one syncfs for
 * every file staged meanwhile); then done(arg, 0, NULL), or done(arg, -1,
 * why), on the committer thread. */
struct pfs_staged;
typedef void (*pfs_cache_done_fn)(void *arg, int rc, const char *why);
struct pfs_staged *pfs_cache_stage(const char *cluster, const char *service, const char *round,
				   const char *file, const uint8_t *data, size_t len, time_t mtime,
				   char *err, size_t errlen);
void pfs_cache_commit(struct pfs_staged *staged, pfs_cache_done_fn done, void *arg);
/* The committer thread; stopping commits what is queued. Without it,
 * pfs_cache_commit commits at once. */
int pfs_cache_committer_start(void);
void pfs_cache_committer_stop(void);

/* Open a stored file read-only; returns an fd or -errno. */
int pfs_cache_open(const char *cluster, const char *service, const char *round, const char *file);

/* Rename a stored file within its round (replacing to); -1 if that failed. */
int pfs_cache_rename(const char *cluster, const char *service, const char *round, const char *from,
		     const char *to);

/* Size of a stored file; -1 if it is not there. */
int pfs_cache_stat(const char *cluster, const char *service, const char *round, const char *file,
		   off_t *size);

typedef void (*pfs_cache_round_fn)(const char *cluster, const char *service, const char *round,
				   void *arg);
/* Round directories of one service (or, with service NULL, of every
 * service of the cluster). */
void pfs_cache_rounds(const char *cluster, const char *service, pfs_cache_round_fn fn, void *arg);
/* Stored files of one round (their names). */
typedef void (*pfs_cache_file_fn)(const char *file, void *arg);
void pfs_cache_files(const char *cluster, const char *service, const char *round,
		     pfs_cache_file_fn fn, void *arg);
/* Every round directory in the cache. */
void pfs_cache_each_round(pfs_cache_round_fn fn, void *arg);

/* Delete one round directory and the files in it. */
int pfs_cache_remove_round(const char *cluster, const char *service, const char *round);

/* Bytes used by stored files (snapshots and merged/ files). */
uint64_t pfs_cache_bytes(void);

#endif
