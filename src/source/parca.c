/* Source kind "parca": Parca's grpc-gateway REST API under /api.
 *   services  GET /api/profiles/labels/<label>/values  -> {"labelValues":[...]}
 *   files     GET /api/profiles/types                  -> {"types":[{name,sampleType,...}]}
 *   bytes     GET /api/profiles/query?mode=MODE_MERGE&reportType=REPORT_TYPE_PPROF
 *                 &merge.query=<type>{<label>="<service>"}&merge.start=&merge.end=
 *             -> {"pprof":"<base64 of gzip'd profile.proto>"}
 * Times are RFC 3339. */
#include "source.h"

#include "lib/names.h"
#include "lib/confparse.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kind's own settings (c->kind): the label. */
struct parca_conf {
	char *label; /* whose values are the services */
};

static struct parca_conf *conf(const struct pfs_cluster *c) { return c->kind; }

static void free_kind(void *kind)
{
	struct parca_conf *k = kind;

	free(k->label);
	free(k);
}

static int get_json(struct pfs_cluster *c, const char *url, const char *what, json_t **out,
		    char *err, size_t errlen)
{
	json_error_t jerr;
	uint8_t *body;
	size_t len;
	char why[512];

	if (pfs_http_sync(&c->api.target, url, NULL, NULL, 0, &body, &len, why, sizeof why)) {
		snprintf(err, errlen, "%s: %s", what, why);
		return -1;
	}
	*out = json_loadb((const char *)body, len, 0, &jerr);
	free(body);
	if (!*out) {
		snprintf(err, errlen, "%s: HTTP 200, bad JSON: %s", what, jerr.text);
		return -1;
	}
	return 0;
}

static const char *str_field(json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);
	return json_is_string(v) ? json_string_value(v) : "";
}

static int load_types(struct pfs_cluster *c, const char *range, char *err, size_t errlen)
{
	char url[2048];
	json_t *root, *types, *t;
	size_t i;

	snprintf(url, sizeof url, "%s/api/profiles/types?%s", c->api.target.url, range);
	if (get_json(c, url, "types", &root, err, errlen))
		return -1;
	types = json_object_get(root, "types");
	if (!json_is_array(types)) {
		json_decref(root);
		snprintf(err, errlen, "types: HTTP 200, no \"types\" array");
		return -1;
	}
	pthread_mutex_lock(&c->lock);
	if (c->n_types == 0)
		json_array_foreach(types, i, t) {
			const char *name = str_field(t, "name"), *st = str_field(t, "sampleType");
			char id[512], pretty[256];
			if (!*name || !*st)
				continue;
			snprintf(id, sizeof id, "%s:%s:%s:%s:%s%s", name, st, str_field(t, "sampleUnit"),
				 str_field(t, "periodType"), str_field(t, "periodUnit"),
				 json_is_true(json_object_get(t, "delta")) ? ":delta" : "");
			if ((strcmp(name, "process_cpu") == 0 && strcmp(st, "cpu") == 0) ||
			    (strcmp(name, "parca_agent") == 0 && strcmp(st, "samples") == 0))
				snprintf(pretty, sizeof pretty, "cpu");
			else
				snprintf(pretty, sizeof pretty, "%s.%s", name, st);
			pfs_registry_add_type(c, id, pretty);
		}
	pthread_mutex_unlock(&c->lock);
	json_decref(root);
	return 0;
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	char url[2048], range[128], from[PFS_TIME_NAME_MAX], to[PFS_TIME_NAME_MAX];
	time_t now = time(NULL);
	char *label = pfs_url_escape(conf(c)->label);
	json_t *root, *values, *v;
	size_t i;

	pfs_name_time(now - (time_t)c->api.range, from);
	pfs_name_time(now, to);
	snprintf(range, sizeof range, "start=%s&end=%s", from, to);
	if (load_types(c, range, err, errlen)) {
		free(label);
		return -1;
	}
	snprintf(url, sizeof url, "%s/api/profiles/labels/%s/values?%s", c->api.target.url, label,
		 range);
	free(label);
	if (get_json(c, url, "label values", &root, err, errlen))
		return -1;
	values = json_object_get(root, "labelValues");
	if (!json_is_array(values)) {
		json_decref(root);
		snprintf(err, errlen, "label values: HTTP 200, no \"labelValues\" array");
		return -1;
	}
	json_array_foreach(values, i, v)
		if (json_is_string(v) && json_string_length(v) > 0 &&
		    strlen(json_string_value(v)) == json_string_length(v))
			pfs_registry_add_service(c, json_string_value(v), json_string_value(v), c->types,
						c->n_types);
	json_decref(root);
	return 0;
}

static int decode(struct pfs_job *j, const uint8_t *body, size_t len, uint8_t **gz, size_t *gzlen,
		  char *err, size_t errlen)
{
	json_error_t jerr;
	json_t *root = json_loadb((const char *)body, len, 0, &jerr), *pprof;
	int rc;

	(void)j;
	if (!root) {
		snprintf(err, errlen, "bad JSON: %s", jerr.text);
		return -1;
	}
	pprof = json_object_get(root, "pprof");
	if (!json_is_string(pprof)) {
		json_decref(root);
		snprintf(err, errlen, "JSON has no \"pprof\" string");
		return -1;
	}
	rc = pfs_base64_decode(json_string_value(pprof), json_string_length(pprof), gz, gzlen);
	json_decref(root);
	if (rc) {
		snprintf(err, errlen, "\"pprof\" is not base64");
		return -1;
	}
	return pfs_gz_profile_is_empty(*gz, *gzlen);
}

static void start(struct pfs_job *j)
{
	struct pfs_cluster *c = j->svc->cluster;
	char sel[1024], query[1600], from[PFS_TIME_NAME_MAX], to[PFS_TIME_NAME_MAX];
	char *q;

	pfs_label_selector(conf(c)->label, j->svc->upstream, sel, sizeof sel);
	snprintf(query, sizeof query, "%s%s", j->file->type_id, sel);
	q = pfs_url_escape(query);
	pfs_name_time(j->from, from);
	pfs_name_time(j->to, to);
	pfs_job_set(&j->url,
		 "%s/api/profiles/query?mode=MODE_MERGE&reportType=REPORT_TYPE_PPROF"
		 "&merge.query=%s&merge.start=%s&merge.end=%s", c->api.target.url, q, from, to);
	free(q);
	pfs_job_set(&j->what, "%s/api/profiles/query (%s, %s..%s)",
		 c->api.target.log_url, query, from, to);
	pfs_http_start(j, &c->api.target, NULL, decode);
}

/* label: whose values are the services. */
static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct parca_conf *k = c->kind = pfs_xcalloc(1, sizeof *k);
	const char *label = "job";

	if (pfs_conf_string(p, obj, "label", where, &label))
		return -1;
	k->label = pfs_xstrdup(label);
	return 0;
}

static const char *const keys[] = {"label", NULL};

/* Parca says which of its types are deltas (the type id ends ":delta",
 * load_types): those sum over windows, the others (inuse, goroutines) are
 * gauges, whatever their names. */
static enum pfs_merge_rule merge_rule(const struct pfs_file *f, const char *type,
				      const char *unit)
{
	size_t n = f->type_id ? strlen(f->type_id) : 0;

	(void)type, (void)unit;
	return n >= 6 && strcmp(f->type_id + n - 6, ":delta") == 0 ? PFS_RULE_SUM : PFS_RULE_GAUGE;
}

const struct pfs_source_ops pfs_source_parca = {
	.keys = keys,
	.parse = parse,
	.free_kind = free_kind,
	.kind = "parca",
	.rounds = PFS_ROUNDS_WINDOW,
	.pgo = true,
	.discover = discover,
	.start = start,
	.decode = decode,
	.merge_rule = merge_rule,
};
