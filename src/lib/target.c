/* Targets: copy, headers, free (secrets wiped). */
#include "target.h"
#include "xalloc.h"
#include "secrets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static char *dup_or_null(const char *s) { return s ? pfs_xstrdup(s) : NULL; }

void pfs_target_copy(const struct pfs_target *from, struct pfs_target *to)
{
	to->name = dup_or_null(from->name);
	to->url = dup_or_null(from->url);
	to->log_url = dup_or_null(from->log_url);
	to->headers = pfs_xcalloc(from->n_headers + 1, sizeof(char *));
	for (size_t i = 0; i < from->n_headers; i++)
		to->headers[i] = pfs_xstrdup(from->headers[i]);
	to->n_headers = from->n_headers;
	to->username = dup_or_null(from->username);
	to->password = dup_or_null(from->password);
	to->aws_sigv4 = dup_or_null(from->aws_sigv4);
	to->ca_file = dup_or_null(from->ca_file);
	to->cert_file = dup_or_null(from->cert_file);
	to->key_file = dup_or_null(from->key_file);
	to->insecure = from->insecure;
	to->timeout = from->timeout;
	to->profiles = from->profiles;
}

void pfs_target_add_header(struct pfs_target *t, const char *name, const char *value)
{
	size_t n = strlen(name), len = n + strlen(value) + 3;
	char *line = pfs_xmalloc(len);

	snprintf(line, len, "%s: %s", name, value);
	for (size_t i = 0; i < t->n_headers; i++)
		if (strncasecmp(t->headers[i], name, n) == 0 && t->headers[i][n] == ':') {
			pfs_secret_free(t->headers[i]);
			t->headers[i] = line; /* it replaces one set in "headers" */
			return;
		}
	t->headers = pfs_xrealloc(t->headers, (t->n_headers + 2) * sizeof *t->headers);
	t->headers[t->n_headers++] = line;
}

void pfs_target_free(struct pfs_target *t)
{
	free(t->name);
	free(t->url);
	free(t->log_url);
	for (size_t i = 0; i < t->n_headers; i++) {
		pfs_secret_free(t->headers[i]);
	}
	free(t->headers);
	free(t->username);
	pfs_secret_free(t->password);
	free(t->aws_sigv4);
	free(t->ca_file);
	free(t->cert_file);
	free(t->key_file);
	memset(t, 0, sizeof *t);
}
