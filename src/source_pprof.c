/* Source kind "pprof": Go net/http/pprof endpoints listed in the config.
 * GET <base>/<profile>, or <base>/profile?seconds=N for cpu; the body is
 * already the gzip'd profile.proto that is served. */
#include "source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_as_is(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz,
			size_t *gzlen, char *err, size_t errlen)
{
	(void)j, (void)err, (void)errlen;
	*gz = malloc(len ? len : 1);
	if (len) /* an empty body has no buffer */
		memcpy(*gz, body, len);
	*gzlen = len;
	return 0;
}

static void start(struct pfs_job *j)
{
	const struct pfs_service *s = j->svc;
	const struct pfs_target *t = &s->targets[j->file->target];

	if (j->file->profile == PFS_CPU)
		snprintf(j->url, sizeof j->url, "%s/profile?seconds=%ld", t->url, (long)s->cpu_seconds);
	else
		snprintf(j->url, sizeof j->url, "%s/%s", t->url, pfs_profile_names[j->file->profile]);
	snprintf(j->what, sizeof j->what, "%s/%s", t->log_url,
		 j->file->profile == PFS_CPU ? "profile" : pfs_profile_names[j->file->profile]);
	pfs_http_start(j, t, NULL, decode_as_is);
}

const struct pfs_source_ops pfs_source_pprof = {
	.kind = "pprof",
	.windows = false,
	.discover = NULL,
	.start = start,
};
