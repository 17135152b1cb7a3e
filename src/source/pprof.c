/* Source kind "pprof": Go net/http/pprof endpoints listed in the config.
 * GET <base>/<profile>, or <base>/profile?seconds=N for cpu; the body is
 * already the gzip'd profile.proto that is served. */
#include "source.h"
#include "lib/xalloc.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_as_is(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz,
			size_t *gzlen, char *err, size_t errlen)
{
	(void)j, (void)err, (void)errlen;
	*gz = pfs_xmalloc(len ? len : 1);
	if (len) /* an empty body has no buffer */
		memcpy(*gz, body, len);
	*gzlen = len;
	return 0;
}

/* <base>/<name>[?seconds=N]: the name joins the base URL's path, and a
 * query the base has (a token, say) is kept, the seconds added to it. */
static void profile_url(const struct pfs_target *t, const char *name, long seconds, char *out,
			size_t outlen)
{
	CURLU *u = curl_url();
	char *path = NULL, *url = NULL, q[32];

	out[0] = '\0';
	if (curl_url_set(u, CURLUPART_URL, t->url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK) {
		size_t n = strlen(path) + strlen(name) + 2;
		char *p = pfs_xmalloc(n);
		snprintf(p, n, "%s%s%s", path, path[strlen(path) - 1] == '/' ? "" : "/", name);
		curl_url_set(u, CURLUPART_PATH, p, 0);
		free(p);
		if (seconds) {
			snprintf(q, sizeof q, "seconds=%ld", seconds);
			curl_url_set(u, CURLUPART_QUERY, q, CURLU_APPENDQUERY);
		}
		if (curl_url_get(u, CURLUPART_URL, &url, 0) == CURLUE_OK)
			snprintf(out, outlen, "%s", url);
	}
	curl_free(path);
	curl_free(url);
	curl_url_cleanup(u);
}

static void start(struct pfs_job *j)
{
	const struct pfs_service *s = j->svc;
	const struct pfs_target *t = &s->targets[j->file->target];
	bool cpu = j->file->profile == PFS_CPU;
	const char *name = cpu ? "profile" : pfs_profile_names[j->file->profile];

	char url[4096];

	profile_url(t, name, cpu ? (long)s->cpu_seconds : 0, url, sizeof url);
	pfs_job_set(&j->url, "%s", url);
	pfs_job_set(&j->what, "%s/%s", t->log_url, name);
	pfs_http_start(j, t, NULL, decode_as_is);
}

/* One cpu profile per process: a process is its host and port (two
 * services, or two base paths, on one port are one Go program). */
static bool cpu_key(const struct pfs_service *s, const struct pfs_file *f, char *out,
		    size_t outlen)
{
	CURLU *u = curl_url();
	char *host = NULL, *port = NULL;
	bool ok = false;

	if (curl_url_set(u, CURLUPART_URL, s->targets[f->target].url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK) {
		/* hosts are case-insensitive; localhost and 127.0.0.1 stay two */
		for (char *c = host; *c; c++)
			if (*c >= 'A' && *c <= 'Z')
				*c = (char)(*c - 'A' + 'a');
		snprintf(out, outlen, "pprof %s:%s", host, port);
		ok = true;
	}
	curl_free(host);
	curl_free(port);
	curl_url_cleanup(u);
	return ok;
}

const struct pfs_source_ops pfs_source_pprof = {
	.kind = "pprof",
	.rounds = PFS_ROUNDS_SCRAPE,
	.pgo = true,
	.discover = NULL,
	.start = start,
	.decode = decode_as_is,
	.cpu_key = cpu_key,
};
