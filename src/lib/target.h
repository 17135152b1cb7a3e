/* Where and how one endpoint is fetched: its URL, auth, headers, TLS and
 * timeout. Made by the config (confparse.h) and discovery, used by the
 * fetcher (fetch.h) and the sources. */
#ifndef PFS_TARGET_H
#define PFS_TARGET_H

#include <stdbool.h>
#include <stddef.h>

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

/* Free a target's strings (secrets wiped first) and zero it. */
void pfs_target_free(struct pfs_target *t);

/* Set header "name: value" on t, replacing one of that name. */
void pfs_target_add_header(struct pfs_target *t, const char *name, const char *value);
/* Copy of a target (every string duplicated); free with pfs_target_free. */
void pfs_target_copy(const struct pfs_target *from, struct pfs_target *to);

#endif
