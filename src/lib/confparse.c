/* The config file's parsing toolkit: typed fields, unknown keys, the
 * settings every level inherits, endpoints. Shared by config.c and the
 * rooms that own their part of the file (sources, discovery, upload);
 * each field error is one line naming the file and the field's path. */
#include "confparse.h"

#include "log.h"
#include "names.h"
#include "pprof.h"
#include "secrets.h"
#include "xalloc.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

double pfs_conf_parse_duration(const char *s)
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


/* "1ms", "10s", "2h", "3650d": a bound written as a duration. */
static void fmt_duration(double d, char *out, size_t outlen)
{
	static const struct { double s; const char *unit; } units[] = {
		{PFS_DAY, "d"}, {3600, "h"}, {60, "m"}, {1, "s"}, {0.001, "ms"}};

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
		d = pfs_conf_parse_duration(json_string_value(v));
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
int pfs_conf_name(struct pfs_parser *p, const char *field, const char *what, const char *name)
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
int pfs_conf_settings(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_settings *s)
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
			if (pfs_secret_header(k))
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
		out = pfs_xmalloc(n);
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
	t->headers = pfs_xcalloc(json_object_size(s->headers) + 2, sizeof(char *));
	if (s->token) {
		size_t n = strlen(s->token) + 32;
		t->headers[t->n_headers] = pfs_xmalloc(n);
		snprintf(t->headers[t->n_headers++], n, "Authorization: Bearer %s", s->token);
	}
	json_object_foreach(s->headers, k, hv) {
		size_t n = strlen(k) + json_string_length(hv) + 4;
		t->headers[t->n_headers] = pfs_xmalloc(n);
		snprintf(t->headers[t->n_headers++], n, "%s: %s", k, json_string_value(hv));
	}
	if (s->username) {
		t->username = pfs_xstrdup(s->username);
		t->password = pfs_xstrdup(s->password);
	}
	t->ca_file = s->ca_file ? pfs_xstrdup(s->ca_file) : NULL;
	t->cert_file = s->cert_file ? pfs_xstrdup(s->cert_file) : NULL;
	t->key_file = s->key_file ? pfs_xstrdup(s->key_file) : NULL;
	t->insecure = s->insecure;
}

int pfs_conf_target(struct pfs_parser *p, json_t *v, const char *where, const struct pfs_settings *inh,
			bool nats, struct pfs_target *t)
{
	static const char *const keys[] = {"url", "name", PFS_CONF_SETTING_KEYS, NULL};
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
	if (pfs_conf_settings(p, obj, field, &s))
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
	t->url = pfs_xstrdup(url);
	for (size_t n = strlen(t->url); n > 0 && t->url[n - 1] == '/'; n--)
		t->url[n - 1] = '\0';
	snprintf(field, sizeof field, "%s.name", where);
	if (name && pfs_conf_name(p, field, "a target name", name))
		goto out;
	if (name) {
		t->name = pfs_xstrdup(name);
	} else {
		char safe[256];
		pfs_name_sanitize(hostport, safe, sizeof safe);
		t->name = pfs_xstrdup(safe);
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
	return pfs_conf_target(p, v, where, inh, false, out);
}
