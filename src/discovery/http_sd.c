/* http_sd: Prometheus HTTP service discovery. GET the URL every
 * refresh_interval (with the auth and headers of any target); HTTP 200
 * with a JSON array of target groups replaces the set, anything else
 * keeps the last good one. Each target gets __meta_url. */
#include "sd.h"

#include "source/source.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct http_sd {
	struct pfs_target t;
	double every;
};

static int parse(struct pfs_parser *p, json_t *obj, const char *where,
		 const struct pfs_settings *s, void **priv)
{
	static const char *const keys[] = {"url", "refresh_interval", "timeout", "headers",
					   "bearer_token", "bearer_token_env", "basic_auth", NULL};
	struct http_sd *h = pfs_xcalloc(1, sizeof *h);
	json_t *endpoint = json_object();
	const char *k;
	json_t *v;
	int rc;

	*priv = h;
	h->every = 60; /* Prometheus' default */
	if (pfs_conf_keys(p, obj, where, keys) ||
	    pfs_conf_duration(p, obj, "refresh_interval", where, 1, PFS_DAY, &h->every)) {
		json_decref(endpoint);
		return -1;
	}
	json_object_foreach(obj, k, v)
		if (strcmp(k, "refresh_interval"))
			json_object_set(endpoint, k, v);
	/* its own field path: where ends in '.' */
	char field[512];
	snprintf(field, sizeof field, "%.*s", (int)strlen(where) - 1, where);
	rc = pfs_conf_endpoint(p, endpoint, field, s, &h->t);
	json_decref(endpoint);
	return rc;
}

static bool stopping(void *sd)
{
	return pfs_sd_stopping(sd);
}

static int refresh(struct pfs_sd *sd, void *priv, struct pfs_sd_set *out, char *err,
		   size_t errlen)
{
	struct http_sd *h = priv;
	uint8_t *body = NULL;
	size_t len = 0;
	char why[400];
	int rc;

	if (pfs_http_sync_cancel(&h->t, h->t.url, stopping, sd, &body, &len, why, sizeof why)) {
		snprintf(err, errlen, "%s", why);
		return -1;
	}
	rc = pfs_sd_parse_groups((const char *)body, len, "__meta_url", h->t.log_url,
				 pfs_sd_max_targets(sd), out, why, sizeof why);
	if (rc)
		snprintf(err, errlen, "HTTP 200, %s", why);
	free(body);
	return rc;
}

static void run(struct pfs_sd *sd, void *priv)
{
	pfs_sd_poll(sd, priv, ((struct http_sd *)priv)->every, refresh, NULL);
}

static void describe(void *priv, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s", ((struct http_sd *)priv)->t.log_url);
}

static void free_priv(void *priv)
{
	struct http_sd *h = priv;

	if (!h)
		return;
	if (h->t.url || h->t.headers)
		pfs_target_free(&h->t);
	free(h);
}

const struct pfs_sd_ops pfs_sd_http = {
	.name = "http_sd",
	.parse = parse,
	.run = run,
	.free = free_priv,
	.describe = describe,
};
