/* Config file: parse, validate, resolve inherited settings. */
#include "config.h"

#include "confparse.h"
#include "discovery.h"

#include "log.h"
#include "secrets.h"
#include "names.h"
#include "source.h"
#include "upload.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const pfs_profile_names[PFS_NPROFILES] = {
	"heap", "allocs", "goroutine", "block", "mutex", "threadcreate", "cpu",
};

#define ALL_PROFILES ((1u << PFS_NPROFILES) - 1)

int pfs_conf_fail(struct pfs_parser *p, const char *field, const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	snprintf(p->err, p->errlen, "config %s: %s: %s", p->path, field, msg);
	return -1;
}

double pfs_parse_duration(const char *s)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (end == s || errno || !isfinite(v) || v < 0 || *s == ' ')
		return -1;
	if (*end == '\0' || strcmp(end, "s") == 0)
		return v;
	if (strcmp(end, "ms") == 0)
		return v / 1000.0;
	if (strcmp(end, "m") == 0)
		return v * 60;
	if (strcmp(end, "h") == 0)
		return v * 3600;
	if (strcmp(end, "d") == 0)
		return v * 86400;
	return -1;
}

/* Bounds of every duration in the config, in seconds. */
#define DAY 86400.0
#define YEAR (365 * DAY)

/* "1ms", "10s", "2h", "3650d": a bound written as a duration. */
static void fmt_duration(double d, char *out, size_t outlen)
{
	static const struct { double s; const char *unit; } units[] = {
		{DAY, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}, {0.001, "ms"}};

	for (size_t i = 0; i < sizeof units / sizeof *units; i++)
		if (d >= units[i].s && fmod(d, units[i].s) < 1e-9) {
			snprintf(out, outlen, "%g%s", d / units[i].s, units[i].unit);
			return;
		}
	snprintf(out, outlen, "%gs", d);
}

int pfs_conf_duration(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
			double min, double max, double *out)
{
	json_t *v = json_object_get(obj, key);
	char field[512], lo[32], hi[32];
	double d;

	if (!v)
		return 0;
	snprintf(field, sizeof field, "%s%s", where, key);
	if (json_is_number(v))
		d = json_number_value(v);
	else if (json_is_string(v))
		d = pfs_parse_duration(json_string_value(v));
	else
		d = -1;
	fmt_duration(min, lo, sizeof lo);
	fmt_duration(max, hi, sizeof hi);
	if (!isfinite(d) || d < min || d > max)
		return pfs_conf_fail(p, field, "must be a duration from %s to %s: a number of seconds or a "
			    "string like \"10s\", \"500ms\", \"1m\", \"2h\", \"1d\"", min ? lo : "0", hi);
	*out = d;
	return 0;
}

int pfs_conf_string(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		      const char **out)
{
	json_t *v = json_object_get(obj, key);
	char field[512];

	if (!v)
		return 0;
	snprintf(field, sizeof field, "%s%s", where, key);
	if (!json_is_string(v) || json_string_length(v) == 0)
		return pfs_conf_fail(p, field, "must be a non-empty string");
	if (strlen(json_string_value(v)) != json_string_length(v))
		return pfs_conf_fail(p, field, "must not contain NUL");
	*out = json_string_value(v);
	return 0;
}

/* A secret given inline or through an environment variable named by
 * KEY_env. */
int pfs_conf_secret(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		      const char **out)
{
	char envkey[64], field[512];
	const char *var = NULL;

	if (pfs_conf_string(p, obj, key, where, out))
		return -1;
	if (*out && json_object_get(obj, key))
		p->has_secrets = true;
	pfs_secret_add(*out); /* masked in every log line and .status.json */
	snprintf(envkey, sizeof envkey, "%s_env", key);
	if (pfs_conf_string(p, obj, envkey, where, &var))
		return -1;
	if (!var)
		return 0;
	snprintf(field, sizeof field, "%s%s", where, envkey);
	if (json_object_get(obj, key))
		return pfs_conf_fail(p, field, "give either %s or %s, not both", key, envkey);
	*out = getenv(var);
	if (!*out || !**out)
		return pfs_conf_fail(p, field, "environment variable %s is not set", var);
	pfs_secret_add(*out);
	return 0;
}

bool pfs_header_is_secret(const char *name)
{
	return strcasecmp(name, "authorization") == 0 || strcasecmp(name, "cookie") == 0 ||
	       strcasestr(name, "token") || strcasestr(name, "key") || strcasestr(name, "secret") ||
	       strcasestr(name, "auth");
}

/* where + key as a field path: .name, or ."name" when the name is not
 * a plain one (so that "..", "a/b" or "" read unambiguously). */
void pfs_conf_key_path(char *out, size_t outlen, const char *where, const char *key)
{
	if (pfs_name_is_safe(key))
		snprintf(out, outlen, "%s%s", where, key);
	else
		snprintf(out, outlen, "%s\"%s\"", where, key);
}

/* A config name used as a path component as it is. */
static int check_name(struct pfs_parser *p, const char *field, const char *what, const char *name)
{
	if (pfs_name_is_safe(name))
		return 0;
	return pfs_conf_fail(p, field, "%s must be 1-200 of [A-Za-z0-9._-], not starting with '.'", what);
}

/* Edit distance of a and b (Levenshtein), or more than max if it is. */
static size_t edits(const char *a, const char *b, size_t max)
{
	size_t la = strlen(a), lb = strlen(b), row[64];

	if (lb >= 64 || (la > lb ? la - lb : lb - la) > max)
		return max + 1;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		size_t diag = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t up = row[j], best = diag + (a[i - 1] != b[j - 1]);
			best = up + 1 < best ? up + 1 : best;
			best = row[j - 1] + 1 < best ? row[j - 1] + 1 : best;
			diag = up;
			row[j] = best;
		}
	}
	return row[lb];
}

int pfs_conf_keys(struct pfs_parser *p, json_t *obj, const char *where, const char *const *allowed)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v) {
		bool ok = false;
		const char *near = NULL;
		size_t best = 3; /* a suggestion is at most 2 edits away */
		for (const char *const *a = allowed; *a; a++) {
			size_t d = edits(key, *a, 2);
			ok = ok || d == 0;
			if (d < best) {
				best = d;
				near = *a;
			}
		}
		if (!ok) {
			char field[512];
			pfs_conf_key_path(field, sizeof field, where, key);
			return near ? pfs_conf_fail(p, field, "unknown field; did you mean \"%s\"?", near)
				    : pfs_conf_fail(p, field, "unknown field");
		}
	}
	return 0;
}

#define SETTING_KEYS "timeout", "cpu_seconds", "headers", "bearer_token", "bearer_token_env", \
		     "basic_auth", "profiles", "ca_file", "cert_file", "key_file", "insecure_skip_verify"

/* A file setting that must be there to read (checked at mount). */
static int readable_file(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
			 const char **out)
{
	char field[512];

	if (pfs_conf_string(p, obj, key, where, out))
		return -1;
	if (json_object_get(obj, key) && access(*out, R_OK)) {
		snprintf(field, sizeof field, "%s%s", where, key);
		return pfs_conf_fail(p, field, "%s: %s", *out, strerror(errno));
	}
	return 0;
}

/* Read this level's settings over the inherited ones in s (a copy whose
 * headers are borrowed). On return, success or not, s->headers is a
 * reference the caller owns and must drop. */
static int parse_settings(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_settings *s)
{
	char field[512];
	json_t *v;

	json_incref(s->headers);
	if (pfs_conf_duration(p, obj, "timeout", where, 0.001, 3600, &s->timeout) ||
	    pfs_conf_duration(p, obj, "cpu_seconds", where, 1, 3600, &s->cpu_seconds))
		return -1;
	if (s->cpu_seconds != (long)s->cpu_seconds) {
		snprintf(field, sizeof field, "%scpu_seconds", where);
		return pfs_conf_fail(p, field, "must be a whole number of seconds");
	}
	if ((v = json_object_get(obj, "headers"))) {
		const char *k;
		json_t *hv;

		snprintf(field, sizeof field, "%sheaders", where);
		if (!json_is_object(v))
			return pfs_conf_fail(p, field, "must be an object of header names to strings");
		json_t *merged = json_deep_copy(s->headers);
		json_object_foreach(v, k, hv) {
			if (!json_is_string(hv) || !*k || strpbrk(k, ":\r\n ") ||
			    strpbrk(json_string_value(hv), "\r\n")) {
				json_decref(merged);
				char sub[512];
				snprintf(sub, sizeof sub, "%sheaders.", where);
				pfs_conf_key_path(field, sizeof field, sub, k);
				return pfs_conf_fail(p, field, "must be a header name with a one-line string value");
			}
			if (pfs_header_is_secret(k))
				p->has_secrets = true;
			json_object_set(merged, k, hv);
		}
		json_decref(s->headers);
		s->headers = merged;
	}
	if (pfs_conf_secret(p, obj, "bearer_token", where, &s->token))
		return -1;
	if ((v = json_object_get(obj, "basic_auth"))) {
		static const char *const keys[] = {"username", "password", "password_env", NULL};
		char sub[512];

		snprintf(sub, sizeof sub, "%sbasic_auth", where);
		if (!json_is_object(v))
			return pfs_conf_fail(p, sub, "must be an object with username and password");
		strcat(sub, ".");
		s->username = s->password = NULL;
		if (pfs_conf_keys(p, v, sub, keys) || pfs_conf_string(p, v, "username", sub, &s->username) ||
		    pfs_conf_secret(p, v, "password", sub, &s->password))
			return -1;
		if (!s->username || !s->password)
			return pfs_conf_fail(p, sub, "needs username and password (or password_env)");
	}
	if (readable_file(p, obj, "ca_file", where, &s->ca_file) ||
	    readable_file(p, obj, "cert_file", where, &s->cert_file) ||
	    readable_file(p, obj, "key_file", where, &s->key_file))
		return -1;
	if (!s->cert_file != !s->key_file) {
		snprintf(field, sizeof field, "%s%s", where, s->cert_file ? "key_file" : "cert_file");
		return pfs_conf_fail(p, field, "is required with %s (a client certificate and its key)",
				     s->cert_file ? "cert_file" : "key_file");
	}
	if ((v = json_object_get(obj, "insecure_skip_verify"))) {
		snprintf(field, sizeof field, "%sinsecure_skip_verify", where);
		if (!json_is_boolean(v))
			return pfs_conf_fail(p, field, "must be true or false");
		s->insecure = json_is_true(v);
		if (s->insecure)
			pfs_warn("config %s: %s: TLS certificates of these targets are not checked "
				 "(anyone on the path can pose as them)", p->path, field);
	}
	if ((v = json_object_get(obj, "profiles"))) {
		size_t i;
		json_t *pv;

		snprintf(field, sizeof field, "%sprofiles", where);
		if (!json_is_array(v) || json_array_size(v) == 0)
			return pfs_conf_fail(p, field, "must be a non-empty array of profile names");
		s->profiles = 0;
		json_array_foreach(v, i, pv) {
			int found = -1;
			for (int k = 0; k < PFS_NPROFILES; k++)
				if (json_is_string(pv) && strcmp(json_string_value(pv), pfs_profile_names[k]) == 0)
					found = k;
			if (found < 0) {
				snprintf(field, sizeof field, "%sprofiles[%zu]", where, i);
				return pfs_conf_fail(p, field, "must be one of heap, allocs, goroutine, block, mutex, threadcreate, cpu");
			}
			s->profiles |= 1u << found;
		}
	}
	return 0;
}

/* scheme://host[:port]/path of url, without userinfo and query. */
static char *url_for_log(const char *url, char *hostport, size_t hplen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *out = NULL;

	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK) {
		curl_url_get(u, CURLUPART_PORT, &port, 0);
		size_t n = strlen(scheme) + strlen(host) + strlen(path) + 16;
		out = malloc(n);
		snprintf(out, n, "%s://%s%s%s%s", scheme, host, port ? ":" : "", port ? port : "",
			 strcmp(path, "/") ? path : "");
		snprintf(hostport, hplen, "%s%s%s", host, port ? "_" : "", port ? port : "");
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_url_cleanup(u);
	return out;
}

/* user:password@ or a query (?token=...) in a URL are secrets too. */
static bool url_has_credentials(const char *url)
{
	CURLU *u = curl_url();
	char *part = NULL;
	bool yes = false;

	if (curl_url_set(u, CURLUPART_URL, url, CURLU_NON_SUPPORT_SCHEME) == CURLUE_OK) {
		if (curl_url_get(u, CURLUPART_USER, &part, 0) == CURLUE_OK)
			yes = true;
		curl_free(part);
		part = NULL;
		if (curl_url_get(u, CURLUPART_QUERY, &part, 0) == CURLUE_OK)
			yes = true;
		curl_free(part);
	}
	curl_url_cleanup(u);
	return yes;
}

void pfs_conf_template(const struct pfs_settings *s, struct pfs_target *t)
{
	const char *k;
	json_t *hv;

	t->timeout = s->timeout;
	t->headers = calloc(json_object_size(s->headers) + 2, sizeof(char *));
	if (s->token) {
		size_t n = strlen(s->token) + 32;
		t->headers[t->n_headers] = malloc(n);
		snprintf(t->headers[t->n_headers++], n, "Authorization: Bearer %s", s->token);
	}
	json_object_foreach(s->headers, k, hv) {
		size_t n = strlen(k) + json_string_length(hv) + 4;
		t->headers[t->n_headers] = malloc(n);
		snprintf(t->headers[t->n_headers++], n, "%s: %s", k, json_string_value(hv));
	}
	if (s->username) {
		t->username = strdup(s->username);
		t->password = strdup(s->password);
	}
	t->ca_file = s->ca_file ? strdup(s->ca_file) : NULL;
	t->cert_file = s->cert_file ? strdup(s->cert_file) : NULL;
	t->key_file = s->key_file ? strdup(s->key_file) : NULL;
	t->insecure = s->insecure;
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

void pfs_target_copy(const struct pfs_target *from, struct pfs_target *to)
{
	to->name = dup_or_null(from->name);
	to->url = dup_or_null(from->url);
	to->log_url = dup_or_null(from->log_url);
	to->headers = calloc(from->n_headers + 1, sizeof(char *));
	for (size_t i = 0; i < from->n_headers; i++)
		to->headers[i] = strdup(from->headers[i]);
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

static int parse_target(struct pfs_parser *p, json_t *v, const char *where, const struct pfs_settings *inh,
			bool nats, struct pfs_target *t)
{
	static const char *const keys[] = {"url", "name", SETTING_KEYS, NULL};
	struct pfs_settings s = *inh;
	const char *url = NULL, *name = NULL;
	char field[512], hostport[256] = "";
	json_t *obj;
	int rc = -1;

	obj = json_is_string(v) ? json_pack("{sO}", "url", v) : json_incref(v);
	if (!json_is_object(obj)) {
		json_decref(obj);
		return pfs_conf_fail(p, where, "a target must be a URL string or an object with \"url\"");
	}
	snprintf(field, sizeof field, "%s.", where);
	if (pfs_conf_keys(p, obj, field, keys)) {
		json_decref(obj);
		return -1;
	}
	if (parse_settings(p, obj, field, &s))
		goto out;
	if (s.profiles != inh->profiles) {
		snprintf(field, sizeof field, "%s.profiles", where);
		pfs_conf_fail(p, field, "set profiles on the service, not on one target");
		goto out;
	}
	snprintf(field, sizeof field, "%s.", where);
	if (pfs_conf_string(p, obj, "url", field, &url) || pfs_conf_string(p, obj, "name", field, &name))
		goto out;
	snprintf(field, sizeof field, "%s.url", where);
	if (!url) {
		pfs_conf_fail(p, field, "is required");
		goto out;
	}
	if (nats ? strncmp(url, "nats://", 7) != 0
		 : strncmp(url, "http://", 7) && strncmp(url, "https://", 8)) {
		pfs_conf_fail(p, field, nats ? "must be a nats:// URL" : "must be an http:// or https:// URL");
		goto out;
	}
	t->log_url = url_for_log(url, hostport, sizeof hostport);
	if (url_has_credentials(url))
		p->has_secrets = true;
	pfs_secret_add_url(url); /* masked wherever it comes back (secrets.h) */
	if (!t->log_url) {
		pfs_conf_fail(p, field, "is not a valid URL");
		goto out;
	}
	t->url = strdup(url);
	for (size_t n = strlen(t->url); n > 0 && t->url[n - 1] == '/'; n--)
		t->url[n - 1] = '\0';
	snprintf(field, sizeof field, "%s.name", where);
	if (name && check_name(p, field, "a target name", name))
		goto out;
	if (name) {
		t->name = strdup(name);
	} else {
		char safe[256];
		pfs_name_sanitize(hostport, safe, sizeof safe);
		t->name = strdup(safe);
	}
	pfs_conf_template(&s, t);
	rc = 0;
out:
	json_decref(s.headers);
	json_decref(obj);
	return rc;
}

int pfs_conf_endpoint(struct pfs_parser *p, json_t *v, const char *where,
		      const struct pfs_settings *inh, struct pfs_target *out)
{
	return parse_target(p, v, where, inh, false, out);
}

static int parse_service(struct pfs_parser *p, const char *name, json_t *obj, const char *where,
			 const struct pfs_settings *inh, struct pfs_service *svc)
{
	static const char *const keys[] = {"targets", SETTING_KEYS, NULL};
	struct pfs_settings s = *inh;
	char field[512];
	json_t *targets, *tv;
	size_t i;
	int rc = -1;

	svc->name = strdup(name);
	if (!json_is_object(obj))
		return pfs_conf_fail(p, where, "a service must be an object with \"targets\"");
	snprintf(field, sizeof field, "%s.", where);
	if (pfs_conf_keys(p, obj, field, keys))
		return -1;
	if (parse_settings(p, obj, field, &s))
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
	svc->targets = calloc(json_array_size(targets), sizeof *svc->targets);
	json_array_foreach(targets, i, tv) {
		snprintf(field, sizeof field, "%s.targets[%zu]", where, i);
		svc->n_targets++; /* counted first: a half-parsed target is freed too */
		if (parse_target(p, tv, field, &s, false, &svc->targets[i]))
			goto out_targets;
		for (size_t j = 0; j < i; j++)
			if (strcmp(svc->targets[j].name, svc->targets[i].name) == 0) {
				strcat(field, ".name");
				pfs_conf_fail(p, field, "target name \"%s\" is used twice; give each target a \"name\"",
				     svc->targets[i].name);
				goto out_targets;
			}
	}
	svc->files = calloc(svc->n_targets * PFS_NPROFILES, sizeof *svc->files);
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
	static const char *const settings[] = {"kind", SETTING_KEYS, NULL};
	const char *const *lists[] = {settings, src->discover ? api : pprof,
				      src->windows ? windows : NULL, src->keys};
	size_t n = 0;
	const char **out = calloc(64, sizeof *out);

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
	rc = parse_target(p, sub, where, s, c->src->nats_url, &a->target);
	json_decref(sub);
	if (rc)
		return -1;
	free(a->target.name);
	a->target.name = strdup(kind);
	a->window = 3600;
	a->range = 86400;
	a->discover_every = 60;
	if (pfs_conf_duration(p, obj, "discover_every", field, 0, DAY, &a->discover_every))
		return -1;
	if (!c->src->windows) {
		a->window = 0;
		goto own_keys;
	}
	if (pfs_conf_duration(p, obj, "window", field, 1, YEAR, &a->window) ||
	    pfs_conf_duration(p, obj, "range", field, 1, 10 * YEAR, &a->range))
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

void pfs_target_add_header(struct pfs_target *t, const char *name, const char *value)
{
	size_t n = strlen(name), len = n + strlen(value) + 3;
	char *line = malloc(len);

	snprintf(line, len, "%s: %s", name, value);
	for (size_t i = 0; i < t->n_headers; i++)
		if (strncasecmp(t->headers[i], name, n) == 0 && t->headers[i][n] == ':') {
			explicit_bzero(t->headers[i], strlen(t->headers[i]));
			free(t->headers[i]);
			t->headers[i] = line; /* it replaces one set in "headers" */
			return;
		}
	t->headers = realloc(t->headers, (t->n_headers + 2) * sizeof *t->headers);
	t->headers[t->n_headers++] = line;
}

static int parse_cluster(struct pfs_parser *p, const char *name, json_t *obj, const char *where,
			 const struct pfs_settings *inh, struct pfs_cluster *c)
{
	struct pfs_settings s = *inh;
	char field[512];
	const char *kind = "pprof", *sname;
	json_t *services, *sv;
	int rc = -1;

	c->name = strdup(name);
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
	if (parse_settings(p, obj, field, &s))
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
	c->services = calloc(c->cap_services, sizeof *c->services);
	json_object_foreach(services, sname, sv) {
		struct pfs_service *svc = calloc(1, sizeof *svc);
		char sub[512];
		c->services[c->n_services++] = svc;
		snprintf(sub, sizeof sub, "%s.services.", where);
		pfs_conf_key_path(field, sizeof field, sub, sname);
		svc->cluster = c;
		if (check_name(p, field, "service name", sname) ||
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
		r->seconds = pfs_parse_duration(s);
		if (r->seconds < 1 || r->seconds > 10 * YEAR || !pfs_name_is_safe(s) || strlen(s) >= sizeof r->name)
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
					   "merged", "clusters", "upload", SETTING_KEYS, NULL};
	struct pfs_settings s = {.timeout = 10, .cpu_seconds = 10, .profiles = ALL_PROFILES};
	const char *cache_dir = NULL, *cname;
	json_t *clusters, *cv, *mb;
	char field[512];
	int rc = -1;

	if (!json_is_object(root))
		return pfs_conf_fail(p, "(top level)", "must be a JSON object");
	if (pfs_conf_keys(p, root, "", keys) || pfs_conf_string(p, root, "cache_dir", "", &cache_dir) ||
	    pfs_conf_duration(p, root, "retention", "", 1, 10 * YEAR, &cfg->retention) ||
	    pfs_conf_duration(p, root, "latest_ttl", "", 1, YEAR, &cfg->latest_ttl) ||
	    pfs_conf_duration(p, root, "retry_after", "", 0, DAY, &cfg->retry_after))
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
		cfg->cache_dir = strdup(cache_dir);
	} else if (geteuid() == 0) {
		cfg->cache_dir = strdup("/var/cache/profilefs");
	} else {
		const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
		char buf[4096];
		if (xdg && *xdg)
			snprintf(buf, sizeof buf, "%s/profilefs", xdg);
		else
			snprintf(buf, sizeof buf, "%s/.cache/profilefs", home ? home : "/tmp");
		cfg->cache_dir = strdup(buf);
	}
	{
		json_t *none = json_object();
		s.headers = none;
		rc = parse_settings(p, root, "", &s);
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
	cfg->clusters = calloc(json_object_size(clusters), sizeof *cfg->clusters);
	json_object_foreach(clusters, cname, cv) {
		struct pfs_cluster *c = &cfg->clusters[cfg->n_clusters++];
		pfs_conf_key_path(field, sizeof field, "clusters.", cname);
		if (check_name(p, field, "cluster name", cname) ||
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
	cfg->path = strdup(path);
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

void pfs_target_free(struct pfs_target *t)
{
	free(t->name);
	free(t->url);
	free(t->log_url);
	for (size_t i = 0; i < t->n_headers; i++) {
		explicit_bzero(t->headers[i], strlen(t->headers[i]));
		free(t->headers[i]);
	}
	free(t->headers);
	free(t->username);
	if (t->password)
		explicit_bzero(t->password, strlen(t->password));
	free(t->password);
	free(t->aws_sigv4);
	free(t->ca_file);
	free(t->cert_file);
	free(t->key_file);
	memset(t, 0, sizeof *t);
}

static void free_service(struct pfs_service *s)
{
	for (size_t k = 0; k < s->n_targets; k++)
		pfs_target_free(&s->targets[k]);
	free(s->targets);
	for (size_t k = 0; k < s->n_files; k++)
		free(s->files[k].type_id);
	free(s->files);
	free(s->name);
	free(s->upstream);
	free(s);
}

void pfs_config_free(struct pfs_config *cfg)
{
	pfs_upload_free(cfg);
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_cluster *c = &cfg->clusters[i];
		for (size_t j = 0; j < c->n_services; j++)
			free_service(c->services[j]);
		free(c->services);
		free(c->by_name);
		pfs_discovery_free(c);
		for (size_t k = 0; k < c->n_types; k++)
			free(c->types[k].type_id);
		free(c->types);
		if (c->api.target.url)
			pfs_target_free(&c->api.target);
		free(c->api.label);
		free(c->api.project);
		free(c->api.bucket);
		free(c->api.prefix);
		free(c->api.email);
		free(c->api.user);
		if (c->api.password)
			explicit_bzero(c->api.password, strlen(c->api.password));
		free(c->api.password);
		if (c->api.token)
			explicit_bzero(c->api.token, strlen(c->api.token));
		free(c->api.token);
		free(c->name);
	}
	free(cfg->clusters);
	free(cfg->cache_dir);
	free(cfg->path);
	memset(cfg, 0, sizeof *cfg);
}

struct pfs_cluster *pfs_config_cluster(struct pfs_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_clusters; i++)
		if (strcmp(cfg->clusters[i].name, name) == 0)
			return &cfg->clusters[i];
	return NULL;
}

static size_t name_hash(const char *s)
{
	return (size_t)pfs_fnv1a(PFS_FNV_INIT, s);
}

/* c->lock held. Services are only ever appended: the index covers the
 * first n_indexed and is rebuilt when more came. */
static void index_services(struct pfs_cluster *c)
{
	if (c->by_name && c->n_indexed == c->n_services)
		return;
	free(c->by_name);
	c->name_buckets = 16;
	while (c->name_buckets < 2 * c->n_services)
		c->name_buckets *= 2;
	c->by_name = calloc(c->name_buckets, sizeof *c->by_name);
	for (size_t i = 0; i < c->n_services; i++) {
		size_t b = name_hash(c->services[i]->name) & (c->name_buckets - 1);
		while (c->by_name[b])
			b = (b + 1) & (c->name_buckets - 1);
		c->by_name[b] = c->services[i];
	}
	c->n_indexed = c->n_services;
}

static struct pfs_service *find_service(struct pfs_cluster *c, const char *name)
{
	struct pfs_service *found = NULL;

	pthread_mutex_lock(&c->lock);
	index_services(c);
	for (size_t b = name_hash(name) & (c->name_buckets - 1); !found && c->by_name[b];
	     b = (b + 1) & (c->name_buckets - 1))
		if (strcmp(c->by_name[b]->name, name) == 0)
			found = c->by_name[b];
	pthread_mutex_unlock(&c->lock);
	return found;
}

struct pfs_service *pfs_config_service(struct pfs_cluster *c, const char *name)
{
	struct pfs_service *s = find_service(c, name);

	if (!s && c->src->discover) {
		pfs_cluster_refresh(c, 5);
		s = find_service(c, name);
	}
	return s;
}

size_t pfs_cluster_services(struct pfs_cluster *c, struct pfs_service ***out)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->n_services;
	*out = malloc((n ? n : 1) * sizeof **out);
	if (n) /* services is NULL before the first discovery */
		memcpy(*out, c->services, n * sizeof **out);
	pthread_mutex_unlock(&c->lock);
	return n;
}
