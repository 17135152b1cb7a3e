/* Snapshot index: for each service, the rounds of scrapes ("<time>"
 * directories) and, per round, which files exist. A file is one profile
 * of one target, fetched once and then frozen in the cache. The newest
 * round serves as "latest" for latest_ttl seconds. */
#ifndef PFS_SNAP_H
#define PFS_SNAP_H

#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define PFS_ROUND_NAME_MAX 32 /* "2026-12-02T10:00:00Z" and NUL */

int pfs_snap_init(struct pfs_config *cfg, char *err, size_t errlen);

/* File names: "<profile>.pb.gz", or "<profile>.<target>.pb.gz" for a
 * service with several targets. A slot is target * PFS_NPROFILES + profile. */
int pfs_snap_slot_count(const struct pfs_service *s);
bool pfs_snap_slot_served(const struct pfs_service *s, int slot);
void pfs_snap_slot_name(const struct pfs_service *s, int slot, char *out, size_t outlen);
int pfs_snap_slot_by_name(const struct pfs_service *s, const char *file);

typedef void (*pfs_snap_round_fn)(const char *round, time_t t, void *arg);
typedef void (*pfs_snap_file_fn)(const char *file, off_t size, time_t mtime, void *arg);

/* Rounds that hold at least one file or have fetches in flight, oldest
 * first. */
void pfs_snap_list_rounds(struct pfs_service *s, pfs_snap_round_fn fn, void *arg);
/* Files of one round, once its fetches in flight are done; -ENOENT if the
 * round holds none. */
int pfs_snap_list_files(struct pfs_service *s, const char *round, pfs_snap_file_fn fn, void *arg);
/* Size and mtime of a frozen file; -ENOENT if it does not exist. */
int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, off_t *size,
		  time_t *mtime);
/* The time of a round that holds files, once its fetches in flight are
 * done; -ENOENT otherwise. */
int pfs_snap_round_time(struct pfs_service *s, const char *round, time_t *t);

/* Make sure the latest round has this slot, fetching it if needed (and
 * waiting, bounded by the fetch timeout). On success fills the round
 * name, size and mtime; on failure returns -EIO (the reason was logged
 * once when the fetch failed). */
int pfs_snap_latest(struct pfs_service *s, int slot, char round[PFS_ROUND_NAME_MAX],
		    off_t *size, time_t *mtime);
/* Start fetching every served slot of the latest round at once; return
 * without waiting (the round shows up as a <time> directory at once). */
void pfs_snap_latest_start(struct pfs_service *s);
/* The same, then wait for all of them. */
void pfs_snap_latest_all(struct pfs_service *s);
/* Time of the latest round, or 0 if there is none yet. */
time_t pfs_snap_latest_time(struct pfs_service *s);

/* A frozen file that a merge reads. */
struct pfs_snap_input {
	char round[PFS_ROUND_NAME_MAX];
	char file[256];
	time_t t;
};
/* Frozen files of one profile, every target, in rounds from `since` on,
 * oldest first; *out is malloc'd. Returns how many. */
size_t pfs_snap_inputs(struct pfs_service *s, int profile, time_t since,
		       struct pfs_snap_input **out);

/* Per-target counters, for status reporting. */
struct pfs_target_stats {
	time_t last_fetch;  /* finish time of the last fetch, 0 if none */
	time_t last_ok;
	uint64_t fetches, failures, bytes;
	char last_error[256];
};
void pfs_snap_target_stats(struct pfs_service *s, size_t target, struct pfs_target_stats *out);

#endif
