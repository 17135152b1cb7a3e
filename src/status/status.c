/* The .status.json document. */
#include "status.h"

#include "lib/cache.h"
#include "discovery/discovery.h"
#include "s3/upload.h"
#include "snap/snap.h"
#include "source/source.h"
#include "lib/secrets.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Whether the target's last cpu profile can drive go build -pgo. */
static const char *pgo_text(const struct pfs_cluster *c, int pgo)
{
	if (!pgo)
		return NULL; /* no cpu profile yet */
	if (pgo > 0)
		return "ok";
	return c->src->pgo ? "no: its cpu profile has no Function.start_line (built by Go < 1.20?)"
			   : "no: this source kind's cpu profiles have no line numbers";
}

/* Every secret masked in the document's strings (secrets.h): values only,
 * so a query value such as "true" masks no JSON literal. */
static void mask(json_t *v)
{
	const char *k;
	json_t *x;
	size_t i;

	if (json_is_string(v)) {
		char *copy = pfs_xstrdup(json_string_value(v));
		pfs_secret_mask(copy);
		if (strcmp(copy, json_string_value(v)))
			json_string_set(v, copy);
		free(copy);
	} else if (json_is_object(v)) {
		json_object_foreach(v, k, x)
			mask(x);
	} else if (json_is_array(v)) {
		json_array_foreach(v, i, x)
			mask(x);
	}
}

char *pfs_status_json(struct pfs_config *cfg, time_t mounted_at, size_t *len)
{
	json_t *root = json_object(), *targets = json_array();
	size_t in_flight = 0;
	char *out;

	json_object_set_new(root, "mounted_at", pfs_name_time_json(mounted_at));
	json_object_set_new(root, "cache_dir", json_string(cfg->cache_dir));
	json_object_set_new(root, "cache_bytes", json_integer((json_int_t)pfs_cache_bytes()));
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_cluster *c = &cfg->clusters[i];
		struct pfs_service **svcs;
		size_t n = pfs_registry_services(c, &svcs);
		for (size_t j = 0; j < n; j++) {
			struct pfs_service *s = svcs[j];
			for (size_t k = 0; k < pfs_snap_stats_count(s); k++) {
				struct pfs_target_stats st;
				pfs_snap_target_stats(s, k, &st);
				in_flight += st.in_flight;
				json_t *one = json_pack(
					"{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:o, s:o, s:s?, s:o, s:s?, s:I, s:o, s:s?}",
					"cluster", c->name, "service", s->name,
					"target", st.target, "url", st.url,
					"fetches", (json_int_t)st.fetches, "failures", (json_int_t)st.failures,
					"bytes", (json_int_t)st.bytes,
					"last_fetch", pfs_name_time_json(st.last_fetch),
					"last_ok", pfs_name_time_json(st.last_ok),
					"last_error", st.last_error[0] ? st.last_error : NULL,
					"last_error_at", pfs_name_time_json(st.last_error_at),
					"last_error_file", st.last_error[0] ? st.last_error_file : NULL,
					"in_flight", (json_int_t)st.in_flight,
					"in_flight_since", pfs_name_time_json(st.in_flight_since),
					"pgo", pgo_text(c, st.pgo));
				if (st.n_flight) { /* which files, since when (a cpu take: cpu_seconds) */
					json_t *fl = json_array();
					for (size_t f = 0; f < st.n_flight; f++)
						json_array_append_new(fl, json_pack("{s:s, s:s, s:o}",
							"file", st.flight[f].file, "round", st.flight[f].round,
							"since", pfs_name_time_json(st.flight[f].since)));
					json_object_set_new(one, "in_flight_files", fl);
				}
				if (s->discovered) /* gone from discovery: its snapshots stay */
					json_object_set_new(one, "discovered_now", json_boolean(st.active));
				json_array_append_new(targets, one);
			}
		}
		free(svcs);
	}
	json_t *disc = json_array();
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		json_t *d = pfs_discovery_status(&cfg->clusters[i]);
		if (d)
			json_array_append_new(disc, d);
	}
	if (json_array_size(disc)) /* why is my pod not scraped */
		json_object_set_new(root, "discovery", disc);
	else
		json_decref(disc);
	/* a cold cpu profile keeps listings waiting: this shows what runs */
	json_t *up = pfs_upload_status();
	if (up)
		json_object_set_new(root, "upload", up);
	json_object_set_new(root, "in_flight", json_integer((json_int_t)in_flight));
	json_object_set_new(root, "targets", targets);
	mask(root); /* an error text may quote one (an echoed URL) */
	out = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(root);
	*len = strlen(out);
	out = pfs_xrealloc(out, *len + 2);
	out[(*len)++] = '\n';
	out[*len] = '\0';
	return out;
}
