/* The mount's configuration, read once from a JSON file (jansson). */
#ifndef PFS_CONFIG_H
#define PFS_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

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

struct pfs_target {
	char *name;      /* safe path component, unique within its service */
	char *url;       /* base URL, no trailing '/', may carry userinfo */
	char *log_url;   /* scheme://host[:port]/path only: safe to log */
	char **headers;  /* "Name: value" lines; may hold secrets: never log */
	size_t n_headers;
	char *username;  /* basic auth, or NULL */
	char *password;
	double timeout;  /* seconds for one fetch; cpu adds cpu_seconds */
};

struct pfs_cluster;

struct pfs_service {
	char *name;
	struct pfs_cluster *cluster;
	struct pfs_target *targets;
	size_t n_targets;
	unsigned profiles; /* bit (1u << enum pfs_profile) per served profile */
	double cpu_seconds;
	struct pfs_svc_state *state;
};

struct pfs_cluster {
	char *name;
	struct pfs_service *services;
	size_t n_services;
};

/* A merged/<name>/ directory: every snapshot of the last `seconds`. */
struct pfs_range {
	char name[32];
	double seconds;
};

#define PFS_MAX_RANGES 8

struct pfs_config {
	char *path;
	char *cache_dir;
	double retention;     /* seconds a snapshot is kept on disk */
	double latest_ttl;    /* seconds one "latest" snapshot is reused */
	double retry_after;   /* seconds a failed fetch is remembered */
	size_t max_bytes;     /* largest profile accepted */
	struct pfs_range merged[PFS_MAX_RANGES];
	size_t n_merged;
	struct pfs_cluster *clusters;
	size_t n_clusters;
};

/* Load and validate. On error returns -1 and writes one line naming the
 * file and the field into err. Warns (log) when the file holds secrets and
 * is readable by others. */
int pfs_config_load(const char *path, struct pfs_config *cfg, char *err, size_t errlen);
void pfs_config_free(struct pfs_config *cfg);

struct pfs_cluster *pfs_config_cluster(struct pfs_config *cfg, const char *name);
struct pfs_service *pfs_config_service(struct pfs_cluster *c, const char *name);

/* Parse a duration: a JSON number of seconds or a string like "500ms",
 * "10s", "5m", "1h", "7d". Returns -1 on a malformed value. */
double pfs_parse_duration(const char *s);

#endif
