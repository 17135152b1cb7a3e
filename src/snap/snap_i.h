/* The snapshot index's own state and helpers, shared by its files:
 *   snap.c       state, rounds and slots, and the entry points (snap.h),
 *                each of which asks the service's round policy;
 *   slot.c       the fetch of one slot into the cache, and waiting for it;
 *   retention.c  pruning rounds, and the sweeper thread;
 *   targets.c    discovered services' targets and their files;
 *   scrape.c, window.c, listed.c   the round policies (below).
 * Not an interface: nothing outside snap/ includes it.
 *
 * LOCKING: snap.lock guards every round, slot, svc_state and a discovered
 * or listed service's targets and files; snap.cond is signalled when a
 * slot or a listing settles. Every field and helper here is used with
 * snap.lock held unless said. Order: snap.lock may be taken with a
 * cluster's lock (registry.h) held, never the other way round; the cpu
 * gate (cpugate.h) and the cache's locks are taken inside snap.lock; no
 * call into a source (ops->start, ops->list) or a hook takes snap.lock
 * before returning. */
#ifndef PFS_SNAP_I_H
#define PFS_SNAP_I_H

#include "snap.h"

#include "source/source.h"

#include <pthread.h>
#include <stdbool.h>
#include <sys/types.h>
#include <time.h>

/* A slot is one file of one round: file i of the service is slot i. */
enum slot_state { SLOT_EMPTY, SLOT_FETCHING, SLOT_READY, SLOT_FAILED, SLOT_ABSENT, SLOT_LISTED };

/* Listed kinds (s3): a slot the upstream lists is SLOT_LISTED until it is
 * fetched (when opened); `listed` keeps its listed size through fetches
 * and failures. Their SLOT_EMPTY means not listed. */
struct slot {
	enum slot_state st;
	off_t size;
	off_t listed;
	time_t failed_at;
	time_t since; /* SLOT_FETCHING: since when */
};

struct round {
	time_t t;
	char name[PFS_ROUND_NAME_MAX];
	struct slot *slots;
	time_t settled_at; /* when its last fetch finished, 0 if none did */
	int pins;          /* readers waiting on it: prune leaves it */
	bool from_disk;    /* an earlier mount's: files of targets found later may be there */
	/* listed kinds: its files' listing, and what the rounds' listing said */
	time_t listed_at;
	bool listing, listed_ok, in_bucket, marked;
	struct round *next; /* ascending time */
};

struct snap_policy;

struct pfs_svc_state {
	const struct snap_policy *pol; /* how its rounds come to be */
	struct round *rounds;
	struct round *current; /* scrape: the round "latest" shows, if fresh */
	struct pfs_target_stats *stats;
	size_t n_stats;
	/* discovered services (pfs_snap_set_targets) */
	bool *active;          /* per target: discovery lists it now */
	size_t cap_targets;    /* of targets, active, stats (files: times per_target) */
	void **retired;        /* arrays outgrown: a job in flight may point into them */
	size_t n_retired;
	/* listed kinds: the rounds' listing; files grow as listings name them */
	time_t listed_at;
	bool listing, listed_ok;
	size_t cap_files;
	bool warned_files;
	char list_error[256]; /* the last listing error logged */
};

/* A round policy: how a kind's rounds come to be, one file each.
 *   scrape (scrape.c: pprof, nats): a round is taken when latest/ is read
 *     and reused for latest_ttl; a round is shown once it holds a file.
 *   window (window.c: pyroscope, parca, coroot): one round per fixed
 *     window over the range, fetched when read; latest/ is the newest
 *     complete window.
 *   listed (listed.c: s3): rounds and their files are what a bucket lists.
 * Nothing outside these files asks which policy a service has: snap.c's
 * entry points call these with snap.lock held. Optional entries (NULL)
 * say so. */
struct snap_policy {
	bool windows;     /* values are per window of an API, a round ends at t + window */
	bool keeps_range; /* rounds stay while in the range, whatever the retention */
	bool uploads;     /* settled rounds go to the uploader (not a bucket's own) */
	bool sizes_listed;/* a fetch must match the size its listing gave */
	bool names_listed;/* file names come with listings: one not known yet may come */
	bool inputs_base; /* merged/ takes each file's snapshot before the range */
	bool fills;       /* a round found may still change until frozen() (files to
			   * fetch or list): its attributes are cached briefly */

	/* A service being set up (optional): learn, before its rounds on
	 * disk are read; resume, after they were and retention ran. */
	void (*learn)(struct pfs_service *s);
	void (*resume)(struct pfs_service *s, time_t now);
	/* Slots a round has room for (optional: one per file). */
	size_t (*slot_room)(const struct pfs_service *s);
	/* A reader of the service may wait this long for more than a fetch
	 * (optional: a listing). */
	double (*extra_wait)(const struct pfs_service *s);
	/* A round prune must leave while the policy holds it (optional). */
	bool (*holds)(const struct pfs_service *s, const struct round *r, time_t now);

	/* The entries of snap.h, as that says. */
	int (*list_rounds)(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
			   void *arg);
	int (*list_files)(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
			  void *arg);
	int (*stat)(struct pfs_service *s, const char *round, const char *file, int flags,
		    off_t *size, time_t *mtime, int *fd);
	int (*slot)(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		    time_t *mtime, int *fd);
	bool (*frozen)(struct pfs_service *s, const char *round);
	int (*round_time)(struct pfs_service *s, const char *round, int flags, time_t *t);
	time_t (*latest_time)(struct pfs_service *s);
	int (*latest)(struct pfs_service *s, const char *file, int flags,
		      char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime);
	int (*latest_all)(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg);
	/* scrape only (optional): latest/ as a round taken now */
	int (*latest_key)(struct pfs_service *s, const char *merge_key, int flags);
	size_t (*latest_start)(struct pfs_service *s, int flags);
	double (*latest_valid)(struct pfs_service *s);
	bool (*latest_settled)(struct pfs_service *s);
	/* merged/ inputs with this key from since on: all there to take
	 * (nothing to start or wait for), and (PFS_SNAP_WAIT) fetched first;
	 * optional: scrapes take what rounds there are */
	bool (*inputs_settled)(struct pfs_service *s, const char *merge_key, time_t since,
			       time_t now);
	void (*inputs_fetch)(struct pfs_service *s, const char *merge_key, time_t since,
			     time_t now);
	/* the kernel cache: pfs_snap_listing_due */
	int (*listing_due)(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
			   double *timeout);
};

extern const struct snap_policy snap_scrape, snap_window, snap_listed;

/* The index's state: one object, its lock first. */
struct snap_index {
	pthread_mutex_t lock;   /* see LOCKING above */
	pthread_cond_t cond;    /* a slot or a listing settled */
	struct pfs_config *cfg;
	bool draining;          /* unmounting: nothing starts */
	/* hooks (snap.h) */
	pfs_snap_change_fn on_change;
	pfs_snap_settled_fn on_settled;
	pfs_snap_removed_fn on_removed;
	bool (*interrupted)(void);
};
extern struct snap_index snap;

static inline const struct snap_policy *snap_pol(const struct pfs_service *s)
{
	return s->state->pol;
}

/* snap.c: rounds and slots */
int snap_file_index(const struct pfs_service *s, const char *file);
struct round *snap_find_round(struct pfs_service *s, const char *name);
/* The round of time t, made if new (files on disk ready). */
struct round *snap_get_round(struct pfs_service *s, time_t t);
bool snap_round_has(const struct pfs_service *s, const struct round *r, enum slot_state st);
/* Slots a round of the service has room for. */
size_t snap_slot_room(const struct pfs_service *s);
/* Size and mtime of a ready slot, and its cache file if fd. */
int snap_ready(struct pfs_service *s, struct round *r, int slot, off_t *size, time_t *mtime,
	       int *fd);
/* Call fn for each ready file of r (a failed one is EIO by name only). */
void snap_each_ready(struct pfs_service *s, const struct round *r, pfs_snap_file_fn fn, void *arg);
/* The shared forms of latest, latest_all and slot, for policies whose
 * latest/ is one round (scrape, window): latest_round(s, now) gives it. */
typedef struct round *(*snap_latest_fn)(struct pfs_service *s, time_t now);
int snap_latest_in(struct pfs_service *s, snap_latest_fn latest_round, const char *file,
		   int flags, char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime);
int snap_latest_all_in(struct pfs_service *s, snap_latest_fn latest_round, int flags,
		       pfs_snap_file_fn fn, void *arg);
int snap_slot_settled(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		      time_t *mtime, int *fd);

/* slot.c: fetches */
/* The cache file of a ready slot. */
int snap_open_slot(struct pfs_service *s, struct round *r, int slot);
/* Start the slot's fetch unless done, in flight or failed too recently. */
void snap_start_slot(struct pfs_service *s, struct round *r, int slot, time_t now, int flags);
/* Start every file of the round; returns how many cpu profiles that began. */
size_t snap_start_round(struct pfs_service *s, struct round *r, time_t now, int flags);
bool snap_is_cpu(const struct pfs_file *f);
int snap_wait_slot(struct pfs_service *s, struct round *r, int slot, int flags);
/* Every slot of r, waited for in turn. */
int snap_wait_round(struct pfs_service *s, struct round *r, int flags);
/* Longest a reader of the slot may wait for its fetch. */
double snap_slot_wait(const struct pfs_service *s, int slot);
/* Wait while busy(s, r, slot), at most `seconds`, r (if any) pinned;
 * -EAGAIN without PFS_SNAP_WAIT, -EINTR if the request was interrupted. */
typedef bool (*snap_busy_fn)(const struct pfs_service *s, const struct round *r, int slot);
int snap_wait_busy(struct pfs_service *s, struct round *r, int slot, snap_busy_fn busy,
		   double seconds, int flags);
/* A failure in a target's (or service's) counters for .status.json. */
void snap_stats_failed(struct pfs_target_stats *ts, time_t now, const char *file,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));
size_t snap_stats_index(const struct pfs_service *s, int slot);

/* retention.c */
void snap_prune(struct pfs_service *s, time_t now);
void snap_free_round(struct round *r);

/* targets.c: discovered services */
/* A discovered service's files per target: one per served profile. */
size_t snap_per_target(const struct pfs_service *s);
/* A discovered service's file that new rounds fetch. */
bool snap_serves(const struct pfs_service *s, const struct pfs_file *f);
/* pfs_cache_rounds callback: the instances an earlier mount stored. */
void snap_learn_targets(const char *cluster, const char *service, const char *round, void *arg);

/* listed.c */
/* A slot the upstream lists (or that is on disk already). */
bool snap_listed_present(const struct slot *sl);

#endif
