/* Source kinds: where a cluster's profiles come from. Each kind is one
 * module (source/<kind>.c) behind this small interface:
 *   discover  list the cluster's services (kinds whose services are not
 *             written in the config),
 *   start     fetch one file of a service for one time, asynchronously,
 * and how its <time> directories come to be (`rounds`): scrape rounds
 * taken when `latest` is read (pprof, nats), fixed windows over a range
 * (the APIs), or what the upstream lists (s3). */
#ifndef PFS_SOURCE_H
#define PFS_SOURCE_H

#include "lib/fetch.h"
#include "lib/merge.h"
#include "registry/registry.h"

#include <jansson.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct pfs_job;
struct pfs_parser; /* confparse.h */

/* Turn an HTTP body into gzip'd profile.proto bytes (*gz malloc'd).
 * Returns 0, PFS_ABSENT when the upstream has no data for this file and
 * time (the file is then not shown), or -1 with a reason in err. */
typedef int (*pfs_decode_fn)(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz,
			     size_t *gzlen, char *err, size_t errlen);
#define PFS_ABSENT 1

/* The answer to a listing (ops->list) of a service's rounds (round NULL:
 * e[] are <time> names) or of one round's files (e[] are file names and
 * their sizes; ".complete" marks the round complete), or the error that
 * ended it (one line, no secrets). */
struct pfs_listed {
	const char *name;
	off_t size;
};
typedef void (*pfs_listed_fn)(struct pfs_service *s, const char *round,
			      const struct pfs_listed *e, size_t n, const char *err);

/* One fetch of one file, made by the snapshot index (snap/) and handed to the source. */
struct pfs_job {
	struct pfs_service *svc;
	const struct pfs_file *file;
	time_t from, to;        /* the window; for scrapes from == to == round time */
	long timeout_ms;
	char *what;             /* where it is fetched from, for the log: no secrets */

	/* HTTP sources: pfs_http_start() fills and submits these. */
	struct pfs_fetch f;
	char *url;              /* malloc'd, as what: set with pfs_job_set */
	pfs_decode_fn decode;
	uint8_t *post;          /* request body, or NULL for GET */
	size_t post_len;

	/* Its end: pfs_job_finish() hands the result to whoever made the job. */
	void (*finish)(struct pfs_job *j, int rc, uint8_t *gz, size_t gzlen, const char *why);
	void *priv;             /* the maker's */
};

/* *field = the formatted text (malloc'd; an earlier one is freed). */
void pfs_job_set(char **field, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The source calls this exactly once per job, never from inside start():
 * rc 0 with gz (taken over), PFS_ABSENT, or -1 with why. */
void pfs_job_finish(struct pfs_job *j, int rc, uint8_t *gz, size_t gzlen, const char *why);

/* How a kind's <time> directories come to be (its round policy, snap_i.h). */
enum pfs_rounds {
	PFS_ROUNDS_SCRAPE, /* taken when latest/ is read */
	PFS_ROUNDS_WINDOW, /* fixed windows over a range (the kind has window, range) */
	PFS_ROUNDS_LISTED, /* what the upstream lists (the kind has list) */
};

struct pfs_source_ops {
	const char *kind;
	enum pfs_rounds rounds;
	/* its services are what a listing of the upstream gives (a bucket's
	 * tree): a discovery that never answered is EIO, not an empty tree
	 * that an rsync --delete would act on */
	bool tree_listed;
	bool pgo; /* its cpu profiles can carry Function.start_line (go build -pgo) */
	bool nats_url; /* its url is nats://, not http(s):// */
	/* The kind's own cluster keys (NULL-terminated; NULL: none) and their
	 * parsing (where ends in '.'), after config.c has read the url, auth,
	 * window and range every kind has. */
	const char *const *keys;
	const char *url_key; /* the key of its URL, if not "url" */
	/* Its URL when the config gives none (malloc'd; NULL: required). */
	char *(*default_url)(json_t *obj);
	int (*parse)(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c);
	void (*free_kind)(void *kind); /* what parse hung on c->kind (may be NULL) */
	int (*discover)(struct pfs_cluster *c, char *err, size_t errlen);
	void (*start)(struct pfs_job *j);
	/* Kinds whose <time> directories and files are listed upstream (s3):
	 * list the service's rounds (round NULL) or one round's files; the
	 * source answers with done(), once, never from inside. */
	void (*list)(struct pfs_service *s, const char *round, pfs_listed_fn done);
	void (*cleanup)(void); /* at exit: sessions, connections (may be NULL) */
	/* The kind's decoder of an upstream answer (also what tests/fuzz
	 * feeds hostile bytes to). */
	pfs_decode_fn decode;
	/* The process a cpu profile of file f would profile (a pprof target's
	 * host:port, a NATS server's id), into out: cpu fetches of one key run
	 * one at a time (cpugate.h). False: no such key. May be NULL. */
	bool (*cpu_key)(const struct pfs_service *s, const struct pfs_file *f, char *out,
			size_t outlen);
	/* How a sample type of file f's snapshots combines over time in
	 * merged/ (merge.h). NULL: by the type's name (pfs_merge_rule_window
	 * for windows, pfs_merge_rule_go for scrapes). */
	enum pfs_merge_rule (*merge_rule)(const struct pfs_file *f, const char *type,
					  const char *unit);
};

const struct pfs_source_ops *pfs_source_find(const char *kind);
/* Every kind's cleanup, at exit. */
void pfs_sources_free(void);

/* HTTP helpers for sources. */
/* Submit j->url (GET, or POST of j->post with content_type) with the
 * target's auth and headers; the body goes through decode on completion. */
void pfs_http_start(struct pfs_job *j, const struct pfs_target *t, const char *content_type,
		    pfs_decode_fn decode);
/* A blocking request for discovery: 0 and the body (malloc'd) on HTTP 200;
 * -1 with "HTTP <status>, <error>" in err otherwise. */
int pfs_http_sync(const struct pfs_target *t, const char *url, const char *content_type,
		  const uint8_t *post, size_t post_len, uint8_t **body, size_t *len, char *err,
		  size_t errlen);
/* The same, with each response header line handed to on_header. */
typedef void (*pfs_header_fn)(const char *line, size_t len, void *arg);
int pfs_http_sync_ex(const struct pfs_target *t, const char *url, const char *content_type,
		     const uint8_t *post, size_t post_len, pfs_header_fn on_header, void *arg,
		     uint8_t **body, size_t *len, char *err, size_t errlen);

/* pfs_http_sync of a GET that cancel(arg), asked every second or so, may
 * cut short (unmounting). */
int pfs_http_sync_cancel(const struct pfs_target *t, const char *url, bool (*cancel)(void *),
			 void *arg, uint8_t **body, size_t *len, char *err, size_t errlen);

/* GET every URL with t's auth at once (at most PFS_SYNC_MANY_MAX in
 * flight), blocking until all are done: out[i] holds each result (ok,
 * http_status, error, body, len); pfs_fetch_release() each afterwards. */
#define PFS_SYNC_MANY_MAX 32
void pfs_http_sync_many(const struct pfs_target *t, char *const *urls, size_t n,
			struct pfs_fetch *out);

/* Helpers for API sources (times: pfs_name_time, names.h). */
/* URL-escaped copy (malloc'd). */
char *pfs_url_escape(const char *s);
/* Standard base64 (padding optional, whitespace not allowed) into *out
 * (malloc'd); -1 on a bad character. */
int pfs_base64_decode(const char *in, size_t len, uint8_t **out, size_t *outlen);
/* {label="value"} with \ and " escaped. */
void pfs_label_selector(const char *label, const char *value, char *out, size_t outlen);
/* PFS_ABSENT for a gzip'd profile with no samples, 0 otherwise (also for
 * bytes that do not decode: validation reports those). */
int pfs_gz_profile_is_empty(const uint8_t *gz, size_t len);
/* Run discovery if the cluster's kind has it and the last run is older
 * than `max_age` seconds (errors logged once per run). -1 if the last run
 * failed (this one, or the last one when none was due). */
int pfs_source_refresh(struct pfs_cluster *c, double max_age);

#endif
