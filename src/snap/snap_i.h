/* The snapshot index's own state and helpers, shared by its files:
 * snap.c (rounds, slots, fetches, latest, discovered targets) and
 * snap_listed.c (listed kinds: rounds and files an upstream lists, s3).
 * Not an interface: nothing else includes it. Every field and helper is
 * used with snap_lock held unless said. */
#ifndef PFS_SNAP_INTERNAL_H
#define PFS_SNAP_INTERNAL_H

#include "registry/registry.h"
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

struct pfs_svc_state {
	struct round *rounds;
	struct round *current; /* scrape kinds: the round "latest" shows, if fresh */
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

extern pthread_mutex_t snap_lock;
extern pthread_cond_t snap_cond;  /* a slot or a listing settled */
extern struct pfs_config *snap_cfg;
extern pfs_snap_change_fn snap_on_change;
extern bool snap_draining;        /* unmounting: nothing starts */

static inline bool listed(const struct pfs_service *s) { return s->cluster->src->list != NULL; }

/* snap.c */
int snap_file_index(const struct pfs_service *s, const char *file);
int pfs_name_parse_time(const char *name, time_t *t);
struct round *snap_find_round(struct pfs_service *s, const char *name);
/* The round of time t, made if new (files on disk ready). */
struct round *snap_get_round(struct pfs_service *s, time_t t);
bool snap_round_has(const struct pfs_service *s, const struct round *r, enum slot_state st);
/* The cache file of a ready slot. */
int snap_open_slot(struct pfs_service *s, struct round *r, int slot);
/* Start the slot's fetch unless done, in flight or failed too recently. */
void snap_start_slot_ex(struct pfs_service *s, struct round *r, int slot, time_t now, int flags);
int snap_wait_slot(struct pfs_service *s, struct round *r, int slot, int flags);
/* Wait while busy(s, r, slot), at most `seconds`, r (if any) pinned;
 * -EAGAIN without PFS_SNAP_WAIT, -EINTR if the request was interrupted. */
typedef bool (*snap_busy_fn)(const struct pfs_service *s, const struct round *r, int slot);
int snap_wait_busy(struct pfs_service *s, struct round *r, int slot, snap_busy_fn busy,
		   double seconds, int flags);

/* A failure in a target's (or service's) counters for .status.json. */
void snap_stats_failed(struct pfs_target_stats *ts, time_t now, const char *file,
		       const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* snap_listed.c */
/* Longest a listing is waited for. */
double listed_wait(const struct pfs_service *s);
/* A slot the upstream lists (or that is on disk already). */
bool listed_present(const struct slot *sl);
bool listed_files_busy(const struct pfs_service *s, const struct round *r, int slot);
/* Start listing the rounds (r NULL) or r's files, if that is due. */
void listed_start(struct pfs_service *s, struct round *r, time_t now, int flags);
/* Its files were listed once it was older than settle: never again. */
bool listed_final(const struct pfs_service *s, const struct round *r);
/* A round is shown: on disk, or listed and complete. */
bool listed_shown(const struct pfs_service *s, const struct round *r, time_t now);
/* The rounds listed (the first listing waited for); -EIO if none ever answered. */
int listed_rounds(struct pfs_service *s, int flags);
/* r's files listed (the first listing waited for); -EIO if none ever
 * answered and nothing of it is on disk. */
int listed_files(struct pfs_service *s, struct round *r, int flags);
/* A shown round (*out), its files listed if files. */
int listed_round(struct pfs_service *s, const char *name, bool files, int flags,
		 struct round **out);
struct round *listed_newest(struct pfs_service *s, time_t now);
/* Size and mtime of a listed file; its cache file (fetched first) if fd. */
int listed_slot(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		time_t *mtime, int *fd);
/* The source's answer to a listing (pfs_listed_fn). */
void pfs_snap_listed(struct pfs_service *s, const char *round, const struct pfs_listed *e,
		     size_t n, const char *err);
/* pfs_cache_rounds callback: the file names an earlier mount stored. */
void listed_learn_round(const char *cluster, const char *service, const char *round, void *arg);

#endif
