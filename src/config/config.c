/* Config file: parse, validate, resolve inherited settings. */
#include "config.h"

#include "lib/confparse.h"
#include "discovery/discovery.h"

#include "lib/log.h"
#include "lib/names.h"
#include "source/source.h"
#include "s3/upload.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define ALL_PROFILES ((1u << PFS_NPROFILES) - 1)

static int parse_service(struct pfs_parser *p, const char *name, json_t *obj, const char *where,
			 const struct pfs_settings *inh, struct pfs_service *svc)
{
	static const char *const keys[] = {"targets", PFS_CONF_SETTING_KEYS, NULL};
	struct pfs_settings s = *inh;
	char field[512];
	json_t *targets, *tv;
	size_t i;
	int rc = -1;

	svc->name = pfs_xstrdup(name);
	if (!json_is_object(obj))
		return pfs_conf_fail(p, where, "a service must be an object with \"targets\"");
	snprintf(field, sizeof field, "%s.", where);
	if (pfs_conf_keys(p, obj, field, keys))
		return -1;
	if (pfs_conf_settings(p, obj, field, &s))
		goto out_settings;
	svc->profiles = s.profiles;
	svc->cpu_seconds = s.cpu_seconds;
	targets = json_object_get(obj, "targets");
	snprintf(field, sizeof field, "%s.targets", where);
	if (json_is_string(targets) || json_is_object(targets)) {
		targets = json_pack("[O]", targets);
	} else if (json_is_array(targets) && json_array_size(targets) > 0) {
		json_incref(targets);
	} else {
		pfs_conf_fail(p, field, "must be a non-empty array of targets");
		goto out_settings;
	}
	svc->targets = pfs_xcalloc(json_array_size(targets), sizeof *svc->targets);
	json_array_foreach(targets, i, tv) {
		snprintf(field, sizeof field, "%s.targets[%zu]", where, i);
		svc->n_targets++; /* counted first: a half-parsed target is freed too */
		if (pfs_conf_target(p, tv, field, &s, false, &svc->targets[i]))
			goto out_targets;
		for (size_t j = 0; j < i; j++)
			if (strcmp(svc->targets[j].name, svc->targets[i].name) == 0) {
				strcat(field, ".name");
				pfs_conf_fail(p, field, "target name \"%s\" is used twice; give each target a \"name\"",
				     svc->targets[i].name);
				goto out_targets;
			}
	}
	svc->files = pfs_xcalloc(svc->n_targets * PFS_NPROFILES, sizeof *svc->files);
	for (size_t t = 0; t < svc->n_targets; t++)
		for (int k = 0; k < PFS_NPROFILES; k++) {
			struct pfs_file *f;
			if (!(svc->profiles & (1u << k)))
				continue;
			f = &svc->files[svc->n_files++];
			f->profile = k;
			f->target = t;
			snprintf(f->merge_key, sizeof f->merge_key, "%s", pfs_profile_names[k]);
			if (svc->n_targets == 1)
				snprintf(f->name, sizeof f->name, "%s.pb.gz", pfs_profile_names[k]);
			else
				snprintf(f->name, sizeof f->name, "%s.%s.pb.gz", pfs_profile_names[k],
					 svc->targets[t].name);
			memcpy(f->key, f->name, sizeof f->key);
		}
	rc = 0;
out_targets:
	json_decref(targets);
out_settings:
	json_decref(s.headers);
	return rc;
}

/* Keys a cluster of this kind may have: the kind's own and those every
 * kind has. */
static const char **kind_keys(const struct pfs_source_ops *src)
{
	static const char *const pprof[] = {"services", "discover", NULL};
	const char *const api[] = {src->url_key ? src->url_key : "url", "discover_every", NULL};
	static const char *const windows[] = {"window", "range", NULL};
	static const char *const settings[] = {"kind", PFS_CONF_SETTING_KEYS, NULL};
	const char *const *lists[] = {settings, src->discover ? api : pprof,
				      src->rounds == PFS_ROUNDS_WINDOW ? windows : NULL, src->keys};
	size_t n = 0;
	const char **out = pfs_xcalloc(64, sizeof *out);

	for (size_t l = 0; l < sizeof lists / sizeof *lists; l++)
		for (const char *const *k = lists[l]; k && *k && n < 63; k++)
			out[n++] = *k;
	return out;
}

/* A cluster whose services are discovered: one endpoint, and for API
 * kinds the window and range of its <time> directories. */
static int parse_api(struct pfs_parser *p, json_t *obj, const char *where,
		     const struct pfs_settings *s, struct pfs_cluster *c)
{
	static const char *const target_keys[] = {"url", "timeout", "headers", "bearer_token",
						  "bearer_token_env", "basic_auth", NULL};
	struct pfs_api *a = &c->api;
	const char *kind = c->src->kind;
	char field[512];
	json_t *sub = json_object();
	int rc;

	const char *url_key = c->src->url_key ? c->src->url_key : "url";
	char *url = NULL;

	snprintf(field, sizeof field, "%s.", where);
	for (const char *const *k = target_keys; *k; k++)
		if (json_object_get(obj, *k))
			json_object_set(sub, *k, json_object_get(obj, *k));
	if (json_object_get(obj, url_key))
		json_object_set(sub, "url", json_object_get(obj, url_key));
	else if (c->src->default_url && (url = c->src->default_url(obj)))
		json_object_set_new(sub, "url", json_string(url));
	free(url);
	if (!json_object_get(sub, "url")) {
		json_decref(sub);
		snprintf(field, sizeof field, "%s.%s", where, url_key);
		return pfs_conf_fail(p, field, "is required for kind \"%s\"", kind);
	}
	rc = pfs_conf_target(p, sub, where, s, c->src->nats_url, &a->target);
	json_decref(sub);
	if (rc)
		return -1;
	free(a->target.name);
	a->target.name = pfs_xstrdup(kind);
	a->window = 3600;
	a->range = 86400;
	a->discover_every = 60;
	if (pfs_conf_duration(p, obj, "discover_every", field, 0, PFS_DAY, &a->discover_every))
		return -1;
	if (c->src->rounds != PFS_ROUNDS_WINDOW) {
		a->window = 0;
		goto own_keys;
	}
	if (pfs_conf_duration(p, obj, "window", field, 1, PFS_YEAR, &a->window) ||
	    pfs_conf_duration(p, obj, "range", field, 1, 10 * PFS_YEAR, &a->range))
		return -1;
	if (a->range < a->window || a->range / a->window > PFS_MAX_WINDOWS) {
		snprintf(field, sizeof field, "%s.range", where);
		return pfs_conf_fail(p, field, "must be from one to %d windows (window %gs)", PFS_MAX_WINDOWS,
			    a->window);
	}
own_keys:
	c->profiles = s->profiles;
	c->cpu_seconds = s->cpu_seconds;
	/* the kind's own keys */
	return c->src->parse ? c->src->parse(p, obj, field, c) : 0;
}

static int parse_cluster(struct pfs_parser *p, const char *name, json_t *obj, const char *where,
			 const struct pfs_settings *inh, struct pfs_cluster *c)
{
	struct pfs_settings s = *inh;
	char field[512];
	const char *kind = "pprof", *sname;
	json_t *services, *sv;
	int rc = -1;

	c->name = pfs_xstrdup(name);
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->discovering, NULL);
	if (!json_is_object(obj))
		return pfs_conf_fail(p, where, "a cluster must be an object with \"services\" or a \"kind\"");
	snprintf(field, sizeof field, "%s.", where);
	if (pfs_conf_string(p, obj, "kind", field, &kind))
		return -1;
	if (!(c->src = pfs_source_find(kind))) {
		snprintf(field, sizeof field, "%s.kind", where);
		return pfs_conf_fail(p, field, "unknown source kind \"%s\" (supported: pprof, nats, pyroscope, "
			    "parca, coroot, s3)", kind);
	}
	snprintf(field, sizeof field, "%s.", where);
	const char **keys = kind_keys(c->src);
	int bad = pfs_conf_keys(p, obj, field, keys);
	free(keys);
	if (bad)
		return -1;
	if (pfs_conf_settings(p, obj, field, &s))
		goto out;
	if (c->src->discover) {
		rc = parse_api(p, obj, where, &s, c);
		goto out;
	}
	services = json_object_get(obj, "services");
	if (json_object_get(obj, "discover")) {
		snprintf(field, sizeof field, "%s.services", where);
		if (services) {
			pfs_conf_fail(p, field, "give either \"services\" or \"discover\", not both");
			goto out;
		}
		snprintf(field, sizeof field, "%s.discover", where);
		rc = pfs_discovery_parse(p, json_object_get(obj, "discover"), field, &s, c);
		goto out;
	}
	snprintf(field, sizeof field, "%s.services", where);
	if (!json_is_object(services) || json_object_size(services) == 0) {
		pfs_conf_fail(p, field, "must be a non-empty object of service names (or give \"discover\")");
		goto out;
	}
	c->cap_services = json_object_size(services);
	c->services = pfs_xcalloc(c->cap_services, sizeof *c->services);
	json_object_foreach(services, sname, sv) {
		struct pfs_service *svc = pfs_xcalloc(1, sizeof *svc);
		char sub[512];
		c->services[c->n_services++] = svc;
		snprintf(sub, sizeof sub, "%s.services.", where);
		pfs_conf_key_path(field, sizeof field, sub, sname);
		svc->cluster = c;
		if (pfs_conf_name(p, field, "service name", sname) ||
		    parse_service(p, sname, sv, field, &s, svc))
			goto out;
	}
	rc = 0;
out:
	json_decref(s.headers);
	return rc;
}

/* "merged": ["24h", "7d"]: names of merged/<range>/ directories. */
static int parse_ranges(struct pfs_parser *p, json_t *v, struct pfs_config *cfg)
{
	char field[64];
	json_t *rv;
	size_t i;

	if (!v) {
		snprintf(cfg->merged[0].name, sizeof cfg->merged[0].name, "24h");
		cfg->merged[0].seconds = 86400;
		cfg->n_merged = 1;
		return 0;
	}
	if (!json_is_array(v) || json_array_size(v) > PFS_MAX_RANGES)
		return pfs_conf_fail(p, "merged", "must be an array of at most %d durations like \"24h\"",
			    PFS_MAX_RANGES);
	json_array_foreach(v, i, rv) {
		struct pfs_range *r = &cfg->merged[cfg->n_merged++];
		const char *s = json_is_string(rv) ? json_string_value(rv) : "";
		snprintf(field, sizeof field, "merged[%zu]", i);
		r->seconds = pfs_conf_parse_duration(s);
		if (r->seconds < 1 || r->seconds > 10 * PFS_YEAR || !pfs_name_is_safe(s) || strlen(s) >= sizeof r->name)
			return pfs_conf_fail(p, field, "must be a duration string like \"24h\" or \"7d\"");
		snprintf(r->name, sizeof r->name, "%s", s);
		for (size_t j = 0; j + 1 < cfg->n_merged; j++)
			if (strcmp(cfg->merged[j].name, s) == 0)
				return pfs_conf_fail(p, field, "\"%s\" is listed twice", s);
	}
	return 0;
}

/* An integer in [min, max]: sizes in bytes, counts. */
static int get_size(struct pfs_parser *p, json_t *obj, const char *key, json_int_t min, json_int_t max,
		    size_t *out)
{
	json_t *v = json_object_get(obj, key);

	if (!v)
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
		return pfs_conf_fail(p, key, "must be an integer from %lld to %lld", (long long)min,
			    (long long)max);
	*out = (size_t)json_integer_value(v);
	return 0;
}

static int parse_top(struct pfs_parser *p, json_t *root, struct pfs_config *cfg)
{
	static const char *const keys[] = {"cache_dir", "retention", "latest_ttl", "retry_after",
					   "max_profile_bytes", "max_profile_raw_bytes", "max_memory",
					   "decode_threads", "max_connections", "max_host_connections",
					   "merged", "clusters", "upload", PFS_CONF_SETTING_KEYS, NULL};
	struct pfs_settings s = {.timeout = 10, .cpu_seconds = 10, .profiles = ALL_PROFILES};
	const char *cache_dir = NULL, *cname;
	json_t *clusters, *cv, *mb;
	char field[512];
	int rc = -1;

	if (!json_is_object(root))
		return pfs_conf_fail(p, "(top level)", "must be a JSON object");
	if (pfs_conf_keys(p, root, "", keys) || pfs_conf_string(p, root, "cache_dir", "", &cache_dir) ||
	    pfs_conf_duration(p, root, "retention", "", 1, 10 * PFS_YEAR, &cfg->retention) ||
	    pfs_conf_duration(p, root, "latest_ttl", "", 1, PFS_YEAR, &cfg->latest_ttl) ||
	    pfs_conf_duration(p, root, "retry_after", "", 0, PFS_DAY, &cfg->retry_after))
		return -1;
	if ((mb = json_object_get(root, "max_profile_bytes"))) {
		if (!json_is_integer(mb) || json_integer_value(mb) < 1024 ||
		    json_integer_value(mb) > (json_int_t)1 << 31)
			return pfs_conf_fail(p, "max_profile_bytes", "must be an integer from 1024 to %lld",
				    (long long)1 << 31);
		cfg->max_bytes = (size_t)json_integer_value(mb);
	}
	if (get_size(p, root, "max_profile_raw_bytes", 4096, (json_int_t)1 << 32, &cfg->max_raw_bytes) ||
	    get_size(p, root, "max_memory", 16 << 20, (json_int_t)1 << 40, &cfg->max_memory) ||
	    get_size(p, root, "decode_threads", 1, 64, &cfg->decode_threads) ||
	    get_size(p, root, "max_connections", 1, 65536, &cfg->max_connections) ||
	    get_size(p, root, "max_host_connections", 0, 1024, &cfg->max_host_connections))
		return -1;
	if (parse_ranges(p, json_object_get(root, "merged"), cfg))
		return -1;
	if (cache_dir) {
		cfg->cache_dir = pfs_xstrdup(cache_dir);
	} else if (geteuid() == 0) {
		cfg->cache_dir = pfs_xstrdup("/var/cache/profilefs");
	} else {
		const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
		char buf[4096];
		if (xdg && *xdg)
			snprintf(buf, sizeof buf, "%s/profilefs", xdg);
		else
			snprintf(buf, sizeof buf, "%s/.cache/profilefs", home ? home : "/tmp");
		cfg->cache_dir = pfs_xstrdup(buf);
	}
	{
		json_t *none = json_object();
		s.headers = none;
		rc = pfs_conf_settings(p, root, "", &s);
		json_decref(none);
		if (rc)
			goto out;
		rc = -1;
	}
	clusters = json_object_get(root, "clusters");
	if (!json_is_object(clusters) || json_object_size(clusters) == 0) {
		pfs_conf_fail(p, "clusters", "must be a non-empty object of cluster names");
		goto out;
	}
	cfg->clusters = pfs_xcalloc(json_object_size(clusters), sizeof *cfg->clusters);
	json_object_foreach(clusters, cname, cv) {
		struct pfs_cluster *c = &cfg->clusters[cfg->n_clusters++];
		pfs_conf_key_path(field, sizeof field, "clusters.", cname);
		if (pfs_conf_name(p, field, "cluster name", cname) ||
		    parse_cluster(p, cname, cv, field, &s, c))
			goto out;
	}
	if (json_object_get(root, "upload") &&
	    pfs_upload_parse(p, json_object_get(root, "upload"), &s, cfg))
		goto out;
	rc = 0;
out:
	json_decref(s.headers);
	return rc;
}

/* Top-level fields a mount option may set (-o key=value): not the tree,
 * not secrets (a command line is visible to every user). */
static const char *const g_option_keys[] = {
	"cache_dir", "retention", "latest_ttl", "retry_after", "timeout", "cpu_seconds",
	"max_profile_bytes", "max_profile_raw_bytes", "max_memory", "decode_threads",
	"max_connections", "max_host_connections", NULL};

bool pfs_config_option(const char *kv)
{
	size_t n = strcspn(kv, "=");

	if (!kv[n])
		return false;
	for (const char *const *k = g_option_keys; *k; k++)
		if (strlen(*k) == n && strncmp(*k, kv, n) == 0)
			return true;
	return false;
}

/* "key=value" into root: a whole integer or number as one, else a string. */
static void set_option(json_t *root, const char *kv)
{
	size_t n = strcspn(kv, "=");
	char key[64], *end;
	const char *v = kv + n + 1;
	json_t *val;

	snprintf(key, sizeof key, "%.*s", (int)n, kv);
	errno = 0;
	long long i = strtoll(v, &end, 10);
	if (*v && !*end && !errno) {
		val = json_integer(i);
	} else {
		double d = strtod(v, &end);
		val = *v && !*end && isfinite(d) ? json_real(d) : json_string(v);
	}
	json_object_set_new(root, key, val);
}

int pfs_config_load(const char *path, struct pfs_config *cfg, char *err, size_t errlen)
{
	return pfs_config_load_with(path, NULL, 0, cfg, err, errlen);
}

int pfs_config_load_with(const char *path, char *const *options, size_t n_options,
			 struct pfs_config *cfg, char *err, size_t errlen)
{
	struct pfs_parser p = {.path = path, .err = err, .errlen = errlen};
	json_error_t jerr;
	struct stat st;
	json_t *root;
	int rc;

	memset(cfg, 0, sizeof *cfg);
	cfg->path = pfs_xstrdup(path);
	cfg->retention = 7 * 86400;
	cfg->latest_ttl = 60;
	cfg->retry_after = 5;
	/* one hostile target keeps the daemon under about 128 MB (body, then
	 * its inflated bytes), and a heap profile of tens of MB raw passes */
	cfg->max_bytes = 32u << 20;
	cfg->max_raw_bytes = 64u << 20;
	cfg->max_memory = (size_t)1 << 30;
	cfg->decode_threads = 2;
	cfg->max_connections = 0; /* main: half the file descriptors, at most 1024 */
	cfg->max_host_connections = 0; /* no limit: in a fleet each target is its own host */
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "config %s: is a directory, not a JSON file", path);
		return -1;
	}
	root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		if (jerr.line < 1)
			snprintf(err, errlen, "config %s: %s", path, jerr.text);
		else
			snprintf(err, errlen, "config %s: line %d column %d: %s", path, jerr.line,
				 jerr.column, jerr.text);
		return -1;
	}
	for (size_t i = 0; i < n_options && json_is_object(root); i++)
		set_option(root, options[i]);
	rc = parse_top(&p, root, cfg);
	json_decref(root);
	if (rc == 0 && p.has_secrets && stat(path, &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
		pfs_warn("config %s holds secrets and is readable by %s (mode %04o); chmod go-r it",
			 path, st.st_mode & S_IROTH ? "others" : "its group",
			 (unsigned)(st.st_mode & 07777));
	return rc;
}

void pfs_config_free(struct pfs_config *cfg)
{
	pfs_upload_free(cfg);
	pfs_registry_free(cfg);
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_cluster *c = &cfg->clusters[i];
		pfs_discovery_free(c);
		if (c->kind && c->src->free_kind)
			c->src->free_kind(c->kind);
		if (c->api.target.url)
			pfs_target_free(&c->api.target);
		free(c->name);
	}
	free(cfg->clusters);
	free(cfg->cache_dir);
	free(cfg->path);
	memset(cfg, 0, sizeof *cfg);
}
