/* The mount's configuration, read once from a JSON file (jansson), and the
 * clusters and services it defines (API clusters add services later, as
 * they are discovered). */
#ifndef PFS_CONFIG_H
#define PFS_CONFIG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <time.h>

enum pfs_profile {
	PFS_HEAP,
	PFS_ALLOCS,
	PFS_GOROUTINE,
	PFS_BLOCK,
	PFS_MUTEX,
	PFS_THREADCREATE,
	PFS_CPU,
	PFS_NPROFILES
};

extern const char *const pfs_profile_names[PFS_NPROFILES];

struct pfs_svc_state; /* snap.c */
struct pfs_source_ops; /* source.h */
struct pfs_discovery; /* discovery.h */
struct pfs_upload; /* upload.h */

struct pfs_target {
	char *name;      /* safe path component, unique within its service */
	char *url;       /* base URL, no trailing '/', may carry userinfo */
	char *log_url;   /* scheme://host[:port]/path only: safe to log */
	char **headers;  /* "Name: value" lines; may hold secrets: never log */
	size_t n_headers;
	char *username;  /* basic auth, or NULL */
	char *password;
	char *aws_sigv4; /* "aws:amz:<region>:s3": username and password are an
			  * access key and its secret, requests are signed (S3) */
	char *ca_file;   /* https: the CA to trust (else the system's) */
	char *cert_file, *key_file; /* https: a client certificate (mTLS) */
	bool insecure;   /* https: the certificate is not checked */
	double timeout;  /* seconds for one fetch; cpu adds cpu_seconds */
	unsigned profiles; /* discovered: the profiles it serves (0: the service's) */
};

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
	 * files, and snap.c changes them under its lock (pfs_snap_set_targets). */
	bool discovered;
};

/* Settings of a cluster whose kind is not "pprof". */
struct pfs_api {
	struct pfs_target target; /* base URL, auth, headers, timeout */
	char *label;         /* pyroscope/parca: label whose values are services */
	char *project;       /* coroot */
	char *email;         /* coroot login */
	char *password;      /* coroot login, nats user password */
	char *user;          /* nats */
	char *token;         /* nats */
	double window;       /* seconds per <time> directory */
	double range;        /* how far back <time> directories go */
	double discover_every;
	/* s3: the bucket, the prefix of the cluster's tree in it, how long a
	 * listing is used, and how old a <time>/ must be to count as complete */
	char *bucket, *prefix;
	double list_ttl, settle;
};

struct pfs_cluster {
	char *name;
	const struct pfs_source_ops *src;
	struct pfs_api api;
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
/* the longest cpu profile nats-server's PROFILEZ takes, in seconds */
#define PFS_NATS_CPU_MAX 15
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

/* Load and validate. On error returns -1 and writes one line naming the
 * file and the field into err. Warns (log) when the file holds secrets and
 * is readable by others. */
int pfs_config_load(const char *path, struct pfs_config *cfg, char *err, size_t errlen);
/* The same with mount options "key=value" setting top-level fields over
 * the file's (each must pass pfs_config_option). */
int pfs_config_load_with(const char *path, char *const *options, size_t n_options,
			 struct pfs_config *cfg, char *err, size_t errlen);
/* True if "key=value" names a field a mount option may set: cache_dir,
 * the durations, timeout, cpu_seconds, the limits (not the tree, not
 * secrets). */
bool pfs_config_option(const char *kv);
void pfs_config_free(struct pfs_config *cfg);
/* Free a target's strings (secrets wiped first) and zero it. */
void pfs_target_free(struct pfs_target *t);

struct pfs_cluster *pfs_config_cluster(struct pfs_config *cfg, const char *name);
/* A service by name; for discovering kinds an unknown name triggers a
 * (rate-limited) discovery first. */
struct pfs_service *pfs_config_service(struct pfs_cluster *c, const char *name);
/* Snapshot of the service list: n services into *out (malloc'd). */
size_t pfs_cluster_services(struct pfs_cluster *c, struct pfs_service ***out);

/* True if a header of this name carries a secret (Authorization, Cookie,
 * names with token, key, secret or auth). */
bool pfs_header_is_secret(const char *name);

/* Parse a duration: a JSON number of seconds or a string like "500ms",
 * "10s", "5m", "1h", "7d". Returns -1 on a malformed value. */
double pfs_parse_duration(const char *s);

#endif
