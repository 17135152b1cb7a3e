/* The registry: the mount's clusters and their services, as the config
 * made them (config.h) and as discovery adds them later. Clusters are
 * fixed at mount; a cluster's service list only grows (under its lock),
 * and a service lives until unmount.
 *
 * LOCKING: a cluster's `discovering` is held through one discovery run
 * (pfs_source_refresh); its `lock` guards services, types and
 * discovered_at, and is taken inside `discovering`, before snap.lock
 * (snap_i.h) when both are held (a service added is set up by the index
 * under it). */
#ifndef PFS_REGISTRY_H
#define PFS_REGISTRY_H

#include "lib/pprof.h"
#include "lib/target.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>
struct pfs_svc_state; /* snap/snap_i.h */
struct pfs_source_ops; /* source.h */
struct pfs_discovery; /* discovery.h */
struct pfs_upload; /* upload.h */

/* One file of a service's snapshot (a <time> or latest/ directory). */
struct pfs_file {
	char name[256];      /* "heap.pb.gz", "heap.<target>.pb.gz", ... */
	char key[256];       /* its name in the cache: one per upstream identity */
	char merge_key[224]; /* merged/<range>/<merge_key>.pb.gz */
	char pretty[128];    /* API types: the short name asked for */
	int profile;         /* enum pfs_profile, or -1 for an API profile type */
	size_t target;       /* index into the service's targets (pprof) */
	char *type_id;       /* API sources: the upstream profile type */
};

struct pfs_cluster;

struct pfs_service {
	char *name;          /* safe path component */
	char *upstream;      /* the name upstream uses (API, NATS), unsanitized */
	struct pfs_cluster *cluster;
	struct pfs_target *targets;
	size_t n_targets;
	unsigned profiles;   /* bit (1u << enum pfs_profile) per served profile */
	double cpu_seconds;
	struct pfs_file *files;
	size_t n_files;
	struct pfs_svc_state *state;
	/* Its targets come from discovery (discovery.h): they are appended as
	 * they are discovered, stay (inactive) while a snapshot holds their
	 * files, and snap/targets.c changes them under its lock (pfs_snap_set_targets). */
	bool discovered;
};

/* Settings of a cluster whose kind is not "pprof": what every such kind
 * and its round policy use; a kind's own keys are in c->kind (its file). */
struct pfs_api {
	struct pfs_target target; /* base URL, auth, headers, timeout */
	double window;       /* seconds per <time> directory */
	double range;        /* how far back <time> directories go */
	double discover_every;
	/* listed kinds (s3): how long a listing is used, and how old a
	 * <time>/ must be to count as complete */
	double list_ttl, settle;
};

struct pfs_cluster {
	char *name;
	const struct pfs_source_ops *src;
	struct pfs_api api;
	void *kind;          /* the kind's own settings (its parse made them) */
	unsigned profiles;   /* nats: profiles served */
	double cpu_seconds;  /* nats */
	pthread_mutex_t lock; /* services, types, discovered_at */
	pthread_mutex_t discovering; /* one discovery at a time, per cluster */
	struct pfs_service **services;
	size_t n_services, cap_services;
	struct pfs_service **by_name; /* open hash of services by name, for */
	size_t name_buckets, n_indexed; /* the first n_indexed (rebuilt lazily) */
	struct pfs_file *types; /* API sources: the files every service has */
	size_t n_types;
	time_t discovered_at;
	bool discover_failed; /* the last discovery failed (lock) */
	struct pfs_discovery *discovery; /* pprof: targets discovered, not listed */
};

/* A merged/<name>/ directory: every snapshot of the last `seconds`. */
struct pfs_range {
	char name[32];
	double seconds;
};

#define PFS_MAX_RANGES 8
/* Most <time> windows one API cluster shows (range / window). */
#define PFS_MAX_WINDOWS 10000

struct pfs_config {
	char *path;
	char *cache_dir;
	double retention;     /* seconds a snapshot is kept on disk */
	double latest_ttl;    /* seconds one "latest" snapshot is reused */
	double retry_after;   /* seconds a failed fetch is remembered */
	size_t max_bytes;     /* largest response body accepted */
	size_t max_raw_bytes; /* largest profile uncompressed */
	size_t max_memory;    /* budget of bodies and decoding in flight (mem.h) */
	size_t decode_threads;/* worker pool (work.h) */
	size_t max_connections, max_host_connections; /* fetcher (fetch.h) */
	struct pfs_range merged[PFS_MAX_RANGES];
	size_t n_merged;
	struct pfs_cluster *clusters;
	size_t n_clusters;
	struct pfs_upload *upload; /* snapshots put into a bucket (or NULL) */
};

struct pfs_cluster *pfs_registry_cluster(struct pfs_config *cfg, const char *name);
/* A service by name; for discovering kinds an unknown name triggers a
 * (rate-limited) discovery first. */
struct pfs_service *pfs_registry_service(struct pfs_cluster *c, const char *name);
/* Snapshot of the service list: n services into *out (malloc'd). */
size_t pfs_registry_services(struct pfs_cluster *c, struct pfs_service ***out);

/* Hooks main.c wires: a service was added (the snapshot index sets up its
 * state), and a name no service has was asked for (a discovering kind
 * lists its services again; rate-limited there). */
void pfs_registry_set_hooks(void (*on_added)(struct pfs_service *s),
			    void (*on_unknown)(struct pfs_cluster *c));

/* Add a discovered service: `upstream` is what the source queries it by,
 * its path name `display` sanitized (and made unique), its files a copy of
 * files[]. Returns the existing service if `upstream` is known already. */
struct pfs_service *pfs_registry_add_service(struct pfs_cluster *c, const char *upstream,
					     const char *display, const struct pfs_file *files,
					     size_t n_files);
/* The same for a pprof cluster's discovered service (discovery.h): no
 * files yet; its targets come with pfs_snap_set_targets. */
struct pfs_service *pfs_registry_add_discovered(struct pfs_cluster *c, const char *upstream);
/* Add a profile type to the cluster's list of files (once: services keep
 * the files they were made with): file <pretty>.pb.gz, sanitized, made
 * unique. Call with c->lock held. */
void pfs_registry_add_type(struct pfs_cluster *c, const char *type_id, const char *pretty);
/* Free every cluster's services and types (not the kinds' own settings). */
void pfs_registry_free(struct pfs_config *cfg);

#endif
