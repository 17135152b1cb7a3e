/* Source kind "s3": a bucket that holds a profilefs tree, as a collector
 * put it there (aws s3 sync of its mount, latest/ left out):
 *   <prefix><service>/<time>/<file>
 * Services are the CommonPrefixes under prefix, a service's rounds those
 * under it, a round's files its objects (ListObjectsV2 with delimiter /,
 * in pages); a file is one GET of its object into the cache. libcurl signs
 * every request (SigV4); the query is sorted and fully encoded, and keys
 * are encoded but for '/', as the signature needs. */
#include "source.h"

#include "confparse.h"
#include "log.h"
#include "s3xml.h"
#include "snap.h"
#include "work.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* SHA-256 of an empty body: what GET and list requests carry */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define MAX_PAGES 1000      /* of one listing */
#define MAX_ENTRIES 100000  /* names in one listing */
#define PAGE_MAX_BYTES (16u << 20)

extern const struct pfs_source_ops pfs_source_pprof;

/* ---- names and URLs ---- */

/* s URI-encoded (every byte but A-Za-z0-9-_.~, and '/' if keep_slash). */
static char *uri_encode(const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(strlen(s) * 3 + 1), *o = out;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}

/* ListObjectsV2 of prefix with delimiter '/': the query in sorted order. */
static char *list_url(const struct pfs_api *a, const char *prefix, const char *token)
{
	char *p = uri_encode(prefix, false), *t = token ? uri_encode(token, false) : NULL, *url;

	if (asprintf(&url, "%s/%s?%s%s%sdelimiter=%%2F&list-type=2&prefix=%s", a->target.url,
		     a->bucket, t ? "continuation-token=" : "", t ? t : "", t ? "&" : "", p) < 0)
		url = NULL;
	free(p);
	free(t);
	return url;
}

static char *service_prefix(const struct pfs_service *s)
{
	char *p;

	if (asprintf(&p, "%s%s/", s->cluster->api.prefix, s->upstream) < 0)
		p = NULL;
	return p;
}

/* ---- services: a blocking listing (the cluster's discovery) ---- */

/* Every page of the listing of prefix: fn for each CommonPrefix (the part
 * after prefix, without its '/'). */
static int list_sync(struct pfs_cluster *c, const char *prefix,
		     void (*fn)(struct pfs_cluster *c, const char *name), char *err, size_t errlen)
{
	const struct pfs_api *a = &c->api;
	char *token = NULL, why[512];
	size_t pages = 0, plen = strlen(prefix);
	int rc = 0;

	do {
		struct pfs_s3_list l;
		uint8_t *body;
		size_t len;
		char *url = list_url(a, prefix, token);
		rc = pfs_http_sync(&a->target, url, NULL, NULL, 0, &body, &len, why, sizeof why);
		free(url);
		if (!rc) {
			rc = pfs_s3_parse_list((const char *)body, len, &l, why, sizeof why);
			free(body);
		} else {
			memset(&l, 0, sizeof l);
		}
		for (size_t i = 0; !rc && i < l.n_prefixes; i++) {
			const char *name = l.prefixes[i];
			size_t n = strlen(name);
			if (n > plen + 1 && strncmp(name, prefix, plen) == 0 && name[n - 1] == '/') {
				char *part = strndup(name + plen, n - plen - 1);
				fn(c, part);
				free(part);
			}
		}
		free(token);
		token = !rc && l.truncated ? strdup(l.next_token) : NULL;
		pfs_s3_list_free(&l);
		if (token && ++pages >= MAX_PAGES) {
			snprintf(why, sizeof why, "more than %d pages", MAX_PAGES);
			rc = -1;
		}
	} while (!rc && token);
	free(token);
	if (rc)
		snprintf(err, errlen, "s3://%s/%s: %s", a->bucket, prefix, why);
	return rc;
}

static void add_service(struct pfs_cluster *c, const char *name)
{
	pfs_cluster_add_service(c, name, name, NULL, 0);
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	return list_sync(c, c->api.prefix, add_service, err, errlen);
}

/* ---- rounds and files: listings in pages through the fetcher ---- */

struct lister {
	struct pfs_fetch f;
	struct pfs_service *s;
	char *round;  /* NULL: the service's rounds */
	char *prefix; /* the key prefix listed */
	char *token;
	size_t pages;
	struct pfs_listed *e;
	size_t n, cap;
};

static void lister_finish(struct lister *l, const char *why)
{
	char err[768];

	if (why)
		snprintf(err, sizeof err, "s3://%s/%s: %s", l->s->cluster->api.bucket, l->prefix, why);
	pfs_snap_listed(l->s, l->round, l->e, why ? 0 : l->n, why ? err : NULL);
	for (size_t i = 0; i < l->n; i++)
		free((char *)l->e[i].name);
	free(l->e);
	free(l->f.url);
	free(l->token);
	free(l->prefix);
	free(l->round);
	free(l);
}

static void lister_add(struct lister *l, const char *name, size_t len, off_t size)
{
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->e = realloc(l->e, l->cap * sizeof *l->e);
	}
	l->e[l->n].name = strndup(name, len);
	l->e[l->n++].size = size;
}

static void lister_done(struct pfs_fetch *f);

static void lister_submit(struct lister *l)
{
	const struct pfs_api *a = &l->s->cluster->api;
	size_t max = PAGE_MAX_BYTES;

	free(l->f.url);
	memset(&l->f, 0, sizeof l->f);
	l->f.url = list_url(a, l->prefix, l->token);
	l->f.target = &a->target;
	l->f.timeout_ms = (long)(a->target.timeout * 1000);
	l->f.max_bytes = max;
	l->f.done = lister_done;
	l->f.arg = l;
	pfs_fetch_submit(&l->f);
}

/* On the pool: one page read, the next one asked for, or the end. */
static void lister_page(void *arg)
{
	struct lister *l = arg;
	struct pfs_s3_list page;
	size_t plen = strlen(l->prefix);
	char why[512];

	if (!l->f.ok) {
		snprintf(why, sizeof why, "%s", l->f.error);
		pfs_fetch_release(&l->f);
		lister_finish(l, why);
		return;
	}
	int rc = pfs_s3_parse_list((const char *)l->f.body, l->f.len, &page, why, sizeof why);
	pfs_fetch_release(&l->f);
	if (rc) {
		pfs_s3_list_free(&page);
		lister_finish(l, why);
		return;
	}
	if (!l->round) { /* rounds: "<prefix><time>/" */
		for (size_t i = 0; i < page.n_prefixes; i++) {
			const char *p = page.prefixes[i];
			size_t n = strlen(p);
			if (n > plen + 1 && strncmp(p, l->prefix, plen) == 0 && p[n - 1] == '/')
				lister_add(l, p + plen, n - plen - 1, 0);
		}
	} else { /* files: "<prefix><name>" */
		for (size_t i = 0; i < page.n_objects; i++) {
			const char *k = page.objects[i].key;
			if (strncmp(k, l->prefix, plen) == 0 && k[plen] && !strchr(k + plen, '/') &&
			    page.objects[i].size <= (uint64_t)INT64_MAX)
				lister_add(l, k + plen, strlen(k + plen), (off_t)page.objects[i].size);
		}
	}
	free(l->token);
	l->token = page.truncated ? strdup(page.next_token) : NULL;
	pfs_s3_list_free(&page);
	if (!l->token) {
		lister_finish(l, NULL);
	} else if (++l->pages >= MAX_PAGES || l->n > MAX_ENTRIES) {
		snprintf(why, sizeof why, "more than %zu entries in %zu pages: left unlisted", l->n,
			 l->pages);
		lister_finish(l, why);
	} else {
		lister_submit(l);
	}
}

static void lister_done(struct pfs_fetch *f)
{
	pfs_work_submit(lister_page, f->arg);
}

static void list(struct pfs_service *s, const char *round)
{
	struct lister *l = calloc(1, sizeof *l);
	char *sp = service_prefix(s);

	l->s = s;
	if (round) {
		l->round = strdup(round);
		if (asprintf(&l->prefix, "%s%s/", sp, round) < 0)
			l->prefix = NULL;
		free(sp);
	} else {
		l->prefix = sp;
	}
	lister_submit(l);
}

/* ---- files ---- */

static void start(struct pfs_job *j)
{
	const struct pfs_api *a = &j->svc->cluster->api;
	char round[PFS_ROUND_NAME_MAX], *key, *enc;
	struct tm tm;

	gmtime_r(&j->from, &tm);
	strftime(round, sizeof round, "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (asprintf(&key, "%s%s/%s/%s", a->prefix, j->svc->upstream, round, j->file->name) < 0)
		key = NULL;
	enc = uri_encode(key ? key : "", true);
	pfs_job_set(&j->url, "%s/%s/%s", a->target.url, a->bucket, enc);
	pfs_job_set(&j->what, "s3://%s/%s", a->bucket, key ? key : "");
	free(enc);
	free(key);
	pfs_http_start(j, &a->target, NULL, pfs_source_pprof.decode);
}

/* ---- config ---- */

static const char *const keys[] = {"bucket", "prefix", "region", "access_key_id",
				   "secret_access_key", "secret_access_key_env", "session_token",
				   "session_token_env", "credentials_file", "profile", "list_ttl",
				   "settle", "range", NULL};

static const char *region_of(json_t *obj)
{
	const char *r = json_string_value(json_object_get(obj, "region"));

	if (!r || !*r)
		r = getenv("AWS_REGION");
	if (!r || !*r)
		r = getenv("AWS_DEFAULT_REGION");
	return r && *r ? r : "us-east-1";
}

static char *default_url(json_t *obj)
{
	char *url;

	if (asprintf(&url, "https://s3.%s.amazonaws.com", region_of(obj)) < 0)
		url = NULL;
	return url;
}

static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 63 || b[0] == '.' || b[0] == '-' || b[n - 1] == '.' || b[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
		      b[i] == '-'))
			return false;
	return true;
}

static void trim(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = '\0';
}

/* The profile's keys in an AWS shared credentials file (INI). 0 if found,
 * 1 if not, -1 if it cannot be read (why in err). Warns when others can
 * read it. */
static int read_credentials(const char *path, const char *profile, char **id, char **secret,
			    char **token, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	char line[2048], want[256];
	bool in = false;
	struct stat st;

	if (!fp) {
		if (errno == ENOENT)
			return 1;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(fp), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
		pfs_warn("%s holds secrets and %s can read it: chmod 600 %s", path,
			 st.st_mode & S_IROTH ? "others" : "its group", path);
	snprintf(want, sizeof want, "[%s]", profile);
	while (fgets(line, sizeof line, fp)) {
		char *l = line, *eq, *v;
		while (*l == ' ' || *l == '\t')
			l++;
		trim(l);
		if (*l == '[') {
			in = strcmp(l, want) == 0;
			continue;
		}
		if (!in || *l == '#' || *l == ';' || !(eq = strchr(l, '=')))
			continue;
		*eq = '\0';
		trim(l);
		for (v = eq + 1; *v == ' ' || *v == '\t'; v++)
			;
		char **to = strcmp(l, "aws_access_key_id") == 0       ? id
			    : strcmp(l, "aws_secret_access_key") == 0 ? secret
			    : strcmp(l, "aws_session_token") == 0     ? token
								      : NULL;
		if (to) {
			free(*to);
			*to = strdup(v);
		}
	}
	explicit_bzero(line, sizeof line);
	fclose(fp);
	return *id && *secret ? 0 : 1;
}

static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct pfs_api *a = &c->api;
	const char *bucket = NULL, *prefix = NULL, *id = NULL, *secret = NULL, *token = NULL;
	const char *file = NULL, *profile = NULL;
	char field[512], *fid = NULL, *fsecret = NULL, *ftoken = NULL, path[1024], cerr[512];

	a->list_ttl = 60;
	a->settle = 600;
	a->range = 7 * PFS_DAY;
	if (pfs_conf_string(p, obj, "bucket", where, &bucket) ||
	    pfs_conf_string(p, obj, "prefix", where, &prefix) ||
	    pfs_conf_string(p, obj, "access_key_id", where, &id) ||
	    pfs_conf_secret(p, obj, "secret_access_key", where, &secret) ||
	    pfs_conf_secret(p, obj, "session_token", where, &token) ||
	    pfs_conf_string(p, obj, "credentials_file", where, &file) ||
	    pfs_conf_string(p, obj, "profile", where, &profile) ||
	    pfs_conf_string(p, obj, "region", where, &(const char *){NULL}) ||
	    pfs_conf_duration(p, obj, "list_ttl", where, 0, PFS_DAY, &a->list_ttl) ||
	    pfs_conf_duration(p, obj, "settle", where, 0, PFS_DAY, &a->settle) ||
	    pfs_conf_duration(p, obj, "range", where, 1, 10 * PFS_YEAR, &a->range))
		return -1;
	snprintf(field, sizeof field, "%sbucket", where);
	if (!bucket)
		return pfs_conf_fail(p, field, "is required for kind \"s3\"");
	if (!bucket_ok(bucket))
		return pfs_conf_fail(p, field, "\"%.80s\" is not a bucket name (3-63 of a-z 0-9 . -)",
				     bucket);
	a->bucket = strdup(bucket);
	/* default: the collector's cluster of the same name */
	if (!prefix) {
		if (asprintf(&a->prefix, "%s/", c->name) < 0)
			a->prefix = NULL;
	} else {
		snprintf(field, sizeof field, "%sprefix", where);
		if (prefix[0] == '/' || strlen(prefix) > 512 || strstr(prefix, "//"))
			return pfs_conf_fail(p, field, "must not start with / nor hold // (at most 512 bytes)");
		size_t n = strlen(prefix);
		if (asprintf(&a->prefix, "%s%s", prefix, n && prefix[n - 1] != '/' ? "/" : "") < 0)
			a->prefix = NULL;
	}
	/* credentials: the config, else the environment, else the shared file */
	if (!id != !secret) {
		snprintf(field, sizeof field, "%s%s", where, id ? "secret_access_key" : "access_key_id");
		return pfs_conf_fail(p, field, "is required with %s", id ? "access_key_id"
									 : "secret_access_key");
	}
	if (!id && getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
		id = getenv("AWS_ACCESS_KEY_ID");
		secret = getenv("AWS_SECRET_ACCESS_KEY");
		token = token ? token : getenv("AWS_SESSION_TOKEN");
	}
	if (!id) {
		if (!file)
			file = getenv("AWS_SHARED_CREDENTIALS_FILE");
		if (!file)
			snprintf(path, sizeof path, "%s/.aws/credentials",
				 getenv("HOME") ? getenv("HOME") : "/root");
		else
			snprintf(path, sizeof path, "%s", file);
		if (!profile)
			profile = getenv("AWS_PROFILE") ? getenv("AWS_PROFILE") : "default";
		int rc = read_credentials(path, profile, &fid, &fsecret, &ftoken, cerr, sizeof cerr);
		snprintf(field, sizeof field, "%scredentials_file", where);
		if (rc < 0)
			return pfs_conf_fail(p, field, "%s", cerr);
		if (rc > 0) {
			free(fid);
			free(fsecret);
			free(ftoken);
			return pfs_conf_fail(p, field, "no credentials: give access_key_id and "
				"secret_access_key[_env], set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
				"or profile [%s] in %s", profile, path);
		}
		id = fid;
		secret = fsecret;
		token = token ? token : ftoken;
	}
	a->target.username = strdup(id);
	a->target.password = strdup(secret);
	if (asprintf(&a->target.aws_sigv4, "aws:amz:%s:s3", region_of(obj)) < 0)
		a->target.aws_sigv4 = NULL;
	pfs_target_add_header(&a->target, "x-amz-content-sha256", EMPTY_SHA256);
	if (token)
		pfs_target_add_header(&a->target, "x-amz-security-token", token);
	free(fid);
	if (fsecret)
		explicit_bzero(fsecret, strlen(fsecret));
	free(fsecret);
	if (ftoken)
		explicit_bzero(ftoken, strlen(ftoken));
	free(ftoken);
	return 0;
}

const struct pfs_source_ops pfs_source_s3 = {
	.kind = "s3",
	.windows = false,
	.pgo = true,
	.keys = keys,
	.url_key = "endpoint",
	.default_url = default_url,
	.parse = parse,
	.discover = discover,
	.list = list,
	.start = start,
};
