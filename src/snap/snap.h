/* Snapshot index: for each service, its rounds ("<time>" directories) and,
 * per round, which of the service's files exist. A file is fetched once
 * (through the cluster's source kind) and then frozen in the cache.
 * How rounds come to be is the kind's round policy (source.h `rounds`;
 * snap_i.h): scrape kinds (pprof, nats) make a round when `latest` is read
 * and reuse it for latest_ttl; window kinds (the APIs) have one round per
 * fixed window over their range, and `latest` is the newest complete
 * window; listed kinds (s3) show the rounds and files a bucket lists. */
#ifndef PFS_SNAP_H
#define PFS_SNAP_H

#include "lib/names.h"
#include "registry/registry.h"

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#define PFS_ROUND_NAME_MAX PFS_TIME_NAME_MAX /* names.h: "2026-12-02T10:00:00Z" */

int pfs_snap_init(struct pfs_config *cfg, char *err, size_t errlen);
/* For a service added after init (discovered): also loads the rounds an
 * earlier mount left on disk for it. */
void pfs_snap_service_init(struct pfs_service *s);
void pfs_snap_service_free(struct pfs_service *s);
/* At exit, after the fetcher stopped and the sources' sessions were
 * closed (pfs_sources_free): every service's state. */
void pfs_snap_free(struct pfs_config *cfg);

/* Retention: prune every known service, and remove old rounds on disk of
 * services this mount does not know. Runs at init, then every so often
 * on the sweeper thread. */
void pfs_snap_sweep(void);
int pfs_snap_sweeper_start(void);
void pfs_snap_sweeper_stop(void);

/* on_change(s) is called (no lock held) whenever a fetch of service s
 * finished; interrupted() tells a blocking wait to give up (-EINTR). */
struct pfs_service;
typedef void (*pfs_snap_change_fn)(struct pfs_service *s);
/* on_removed(s, round): retention deleted the round (called with the
 * snapshot lock held: it must only take note). */
typedef void (*pfs_snap_removed_fn)(struct pfs_service *s, const char *round);
void pfs_snap_set_hooks(pfs_snap_change_fn on_change, bool (*interrupted)(void),
			pfs_snap_removed_fn on_removed);
/* on_settled(s, round): a round scraped here has no fetch in flight and a
 * file (called without the lock; the uploader queues it). */
typedef void (*pfs_snap_settled_fn)(struct pfs_service *s, const char *round);
void pfs_snap_set_settled_hook(pfs_snap_settled_fn on_settled);
/* A round that will not change any more: not the latest while it is
 * fresh, nothing in flight (windows: every file fetched or absent). Its
 * directory, listing and files may be cached by the kernel. */
bool pfs_snap_round_frozen(struct pfs_service *s, const char *round);
/* Longest a fetch of this service can take (a cpu one queued behind others
 * of its process included), plus a margin. */
double pfs_snap_max_wait(const struct pfs_service *s);
/* Unmounting: start no more fetches; cpu fetches still queued behind
 * another of their process fail ("unmounting") as the one ahead ends. */
void pfs_snap_stop_starts(void);

/* Flags of the calls below. Without PFS_SNAP_WAIT they return -EAGAIN
 * instead of waiting (the fetches they need are started); with
 * PFS_SNAP_NO_RETRY a fetch that failed is not started again (a request
 * asking again for the fetch it waited on takes its failure). */
#define PFS_SNAP_WAIT 1
#define PFS_SNAP_NO_RETRY 2

/* Index of the service's file with this name, or -1. */
int pfs_snap_file_index(const struct pfs_service *s, const char *file);
/* True if the service's file names come with listings: a name not known
 * yet may still be there (listed kinds). */
bool pfs_snap_names_listed(const struct pfs_service *s);
/* True if its snapshots are windows of an API: values per window, not
 * counters since the process started (merged/ sums them). */
bool pfs_snap_windows(const struct pfs_service *s);

/* For the kernel cache (fs/): what a listing of a service's directory
 * would do. */
enum pfs_snap_dir {
	PFS_SNAP_DIR_CLUSTER, /* the cluster's directory, for this service */
	PFS_SNAP_DIR_SERVICE,
	PFS_SNAP_DIR_LATEST,
	PFS_SNAP_DIR_ROUND,
	PFS_SNAP_DIR_RANGE,   /* merged/<range>/ */
};
/* Seconds the kernel may keep what follows the clock (windows). */
#define PFS_SNAP_CLOCK 1.0
/* 1 if listing it now has work to start (so it must reach the mount),
 * 0 if not, with *timeout lowered to how long that holds (or set to
 * PFS_SNAP_CLOCK); -1 for a range whose merged files decide (merged.h). */
int pfs_snap_listing_due(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
			 double *timeout);
/* True if a round found may still change (files to fetch or list): its
 * attributes are cached for PFS_SNAP_CLOCK only. */
bool pfs_snap_round_may_change(struct pfs_service *s, const char *round);

typedef void (*pfs_snap_round_fn)(const char *round, time_t t, void *arg);
typedef void (*pfs_snap_file_fn)(const char *file, void *arg);

/* The latest round stays the same while its fetches are in flight and
 * for latest_ttl after the last one finished. */

/* Rounds shown in the service directory, oldest first: scrape rounds that
 * hold a file; every window of the range. With settle, once the latest
 * round's fetches are done (-EAGAIN without PFS_SNAP_WAIT while they run). */
int pfs_snap_list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
			 void *arg);
/* Files of a round that exist, once fetched (windows: all fetched now, at
 * once): a failed one is left out (EIO when named); -ENOENT if there is no
 * such round. */
int pfs_snap_list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
			void *arg);
/* Size and mtime of a file of a round (windows: fetched if needed);
 * -ENOENT if it does not exist, -EIO if its fetch failed. */
int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, int flags,
		  off_t *size, time_t *mtime);
/* pfs_snap_stat that also opens the file's cache file (*fd) in the same
 * look, so retention cannot remove it in between (pfs_snap_slot too). */
int pfs_snap_stat_fd(struct pfs_service *s, const char *round, const char *file, int flags,
		     off_t *size, time_t *mtime, int *fd);
/* One file of a round as latest/ shows it (what latest/ pointed at when
 * it was looked up): waits while it is fetched; -EIO if that failed,
 * -ENOENT if the target has no such profile or the round is gone. */
int pfs_snap_slot(struct pfs_service *s, const char *round, int slot, int flags, off_t *size,
		  time_t *mtime, int *fd);
/* The time of a round that exists (scrapes: once its fetches are done). */
int pfs_snap_round_time(struct pfs_service *s, const char *round, int flags, time_t *t);

/* Make sure the latest round has this file (by name), fetching it if needed (and
 * waiting, bounded by the fetch timeout). Fills the round name (also
 * with -EAGAIN: the round it waits for), size and mtime; -EIO if the fetch failed (logged once), -ENOENT if upstream has
 * no such data. */
int pfs_snap_latest(struct pfs_service *s, const char *file, int flags, char round[PFS_ROUND_NAME_MAX],
		    off_t *size, time_t *mtime);
/* A merged/ file with no snapshot yet (scrape kinds): fetch the latest
 * round's files with this merge key and wait for them. 0 once one is
 * there, -ENOENT if upstream has none (and for windows, which
 * pfs_snap_inputs fetches), -EIO if their fetches failed (logged). */
int pfs_snap_latest_key(struct pfs_service *s, const char *merge_key, int flags);
/* Start fetching every file of the latest round at once; do not wait
 * (flags: PFS_SNAP_NO_RETRY). Returns how many cpu profiles that began. */
size_t pfs_snap_latest_start(struct pfs_service *s, int flags);
/* Log that a listing of `what` waits for n cpu profiles (if n). */
void pfs_snap_say_cpu(const char *what, size_t n, double seconds);
/* The same, then wait, and call fn for each file that exists (a failed one
 * is left out: EIO when named). */
int pfs_snap_latest_all(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg);
/* Time of the latest round, or 0 if there is none yet. */
time_t pfs_snap_latest_time(struct pfs_service *s);
/* How long (seconds) latest is sure to stay the round it is now: what the
 * kernel may cache of latest/. 0 while it fetches, or for windows. */
double pfs_snap_latest_valid(struct pfs_service *s);
/* True if latest is fresh and each of its files fetched (or not there):
 * listing the service or latest/ would start nothing. False for windows. */
bool pfs_snap_latest_settled(struct pfs_service *s);

/* A frozen file that a merge reads. */
struct pfs_snap_input {
	char round[PFS_ROUND_NAME_MAX];
	char file[256]; /* its cache key: one per target (or API type) */
	time_t t;
	bool base; /* before `since`: the base of the file's first difference */
};
/* Frozen files with this merge key from `since` on, oldest first, then
 * (scrapes and listed kinds) the newest one before `since` of each file
 * that has one from `since` on (base): *count of them in *out (malloc'd).
 * With PFS_SNAP_WAIT windows from `since` on (listed kinds: rounds and
 * their files) are fetched first; without, -EAGAIN unless all of them
 * are there already. */
int pfs_snap_inputs(struct pfs_service *s, const char *merge_key, time_t since, int flags,
		    struct pfs_snap_input **out, size_t *count);

/* Counters per target (pprof) or per service (other kinds). */
#define PFS_FLIGHT_MAX 4
struct pfs_target_stats {
	time_t last_fetch;  /* finish time of the last fetch, 0 if none */
	time_t last_ok;
	uint64_t fetches, failures, bytes;
	char last_error[256]; /* kept after later successes, with its time and file */
	time_t last_error_at;
	char last_error_file[256];
	unsigned in_flight;     /* fetches running now */
	time_t in_flight_since; /* since when (0: none) */
	struct {                /* which (the newest PFS_FLIGHT_MAX; pfs_snap_target_stats) */
		char file[256], round[PFS_ROUND_NAME_MAX];
		time_t since;
	} flight[PFS_FLIGHT_MAX];
	size_t n_flight;
	int pgo; /* the last cpu profile: 1 has Function.start_line, -1 has not (go
		  * build -pgo rejects it), 0 none fetched */
	/* filled by pfs_snap_target_stats: the target as it is now */
	char target[256], url[512];
	bool active; /* discovered services: discovery lists it now */
};
size_t pfs_snap_stats_count(const struct pfs_service *s);
void pfs_snap_target_stats(struct pfs_service *s, size_t i, struct pfs_target_stats *out);

/* Discovered services: the targets discovery lists now (ts[i] taken over;
 * names unique, safe). A known name stays the same target (its address
 * is updated once no fetch of it runs); a new one is added, reusing a
 * target that left if nothing refers to it any more; one not listed
 * becomes inactive: it is left out of new rounds (latest/), and its files
 * in earlier rounds stay until retention. Counts into *added and *gone. */
void pfs_snap_set_targets(struct pfs_service *s, struct pfs_target *ts, size_t n, size_t *added,
			  size_t *gone);

/* A discovered service with no target discovered now and no snapshot
 * left: left out of its cluster's listing. */
bool pfs_snap_service_gone(struct pfs_service *s);

#endif
