/* The config file's parsing toolkit (a leaf: it knows JSON and targets,
 * not the model), shared by config.c and the rooms that own their part of
 * the file: each field error is one line naming the file and the field's
 * path. -1 and p->err on an error. */
#ifndef PFS_CONFPARSE_H
#define PFS_CONFPARSE_H

#include "target.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#define PFS_DAY 86400.0
#define PFS_YEAR (365 * PFS_DAY)

/* Settings that every level (top, cluster, service, target) may set and
 * that the level below inherits. */
struct pfs_settings {
	double timeout;
	double cpu_seconds;
	json_t *headers; /* object name -> string, owned */
	const char *token;
	const char *username;
	const char *password;
	unsigned profiles;
	/* TLS: the CA that signs the targets' certificates, a client
	 * certificate and its key (mTLS), or no check at all */
	const char *ca_file, *cert_file, *key_file;
	bool insecure;
};

struct pfs_parser {
	const char *path;
	char *err;
	size_t errlen;
	bool has_secrets; /* a secret is written in the file: warn if others can read it */
};

/* Write "config <path>: <field>: <msg>" into p->err; returns -1. */
__attribute__((format(printf, 3, 4)))
int pfs_conf_fail(struct pfs_parser *p, const char *field, const char *fmt, ...);
/* Every key of obj is one of allowed (NULL-terminated), or an error that
 * suggests the nearest one. `where` is the path prefix ("a.b."). */
int pfs_conf_keys(struct pfs_parser *p, json_t *obj, const char *where, const char *const *allowed);
/* Optional fields: left as they are when absent. */
int pfs_conf_string(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		    const char **out);
int pfs_conf_duration(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		      double min, double max, double *out);
/* key inline, or from the environment variable that key_env names. */
int pfs_conf_secret(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		    const char **out);
/* where + key as a field path (quoted when the key is not a plain name). */
void pfs_conf_key_path(char *out, size_t outlen, const char *where, const char *key);

/* An HTTP endpoint: a URL string, or an object with "url" and the
 * settings (timeout, headers, bearer_token, basic_auth) over inh. */
int pfs_conf_endpoint(struct pfs_parser *p, json_t *v, const char *where,
		      const struct pfs_settings *inh, struct pfs_target *out);
/* A target without URL carrying the settings s (headers, auth, timeout):
 * what discovered targets are made from. */
void pfs_conf_template(const struct pfs_settings *s, struct pfs_target *out);

/* The keys of the settings every level may set (pfs_conf_settings). */
#define PFS_CONF_SETTING_KEYS "timeout", "cpu_seconds", "headers", "bearer_token", \
		"bearer_token_env", "basic_auth", "profiles", "ca_file", "cert_file", "key_file", \
		"insecure_skip_verify"
/* Read this level's settings over the inherited ones in s (a copy whose
 * headers are borrowed). On return, success or not, s->headers is a
 * reference the caller owns and must drop. */
int pfs_conf_settings(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_settings *s);
/* A target: a URL string or an object with "url", "name" and settings over
 * inh; nats: the URL is nats://, else http(s)://. */
int pfs_conf_target(struct pfs_parser *p, json_t *v, const char *where,
		    const struct pfs_settings *inh, bool nats, struct pfs_target *t);
/* A config name used as a path component as it is ("what" says which). */
int pfs_conf_name(struct pfs_parser *p, const char *field, const char *what, const char *name);
/* Parse a duration: a JSON number of seconds or a string like "500ms",
 * "10s", "5m", "1h", "7d". Returns -1 on a malformed value. */
double pfs_conf_parse_duration(const char *s);

#endif
