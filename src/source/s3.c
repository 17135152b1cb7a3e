/* Source kind "s3": a bucket that holds a profilefs tree, as a collector
 * put it there (aws s3 sync of its mount, latest/ left out):
 *   <prefix><service>/<time>/<file>
 * Services are the CommonPrefixes under prefix, a service's rounds those
 * under it, a round's files its objects (ListObjectsV2 with delimiter /,
 * in pages); a file is one GET of its object into the cache. libcurl signs
 * every request (SigV4); the query is sorted and fully encoded, and keys
 * are encoded but for '/', as the signature needs. */
#include "source.h"

#include "lib/names.h"
#include "lib/confparse.h"
#include "lib/log.h"
#include "s3/s3.h"
#include "lib/s3xml.h"
#include "lib/work.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kind's own settings (c->kind): the bucket and the prefix of the cluster's tree in it. */
struct s3_conf {
	char *bucket, *prefix; /* where the cluster's tree is */
};

static struct s3_conf *conf(const struct pfs_cluster *c) { return c->kind; }

static void free_kind(void *kind)
{
	struct s3_conf *k = kind;

	free(k->bucket);
	free(k->prefix);
	free(k);
}

#define MAX_PAGES 1000      /* of one listing */
#define MAX_ENTRIES 100000  /* names in one listing */
#define PAGE_MAX_BYTES (16u << 20)
#define MAX_SERVICES 10000  /* of one cluster */

extern const struct pfs_source_ops pfs_source_pprof;

/* ---- names and URLs ---- */

/* ListObjectsV2 of prefix with delimiter '/': the query in sorted order. */
static char *list_url(const struct pfs_cluster *c, const char *prefix, const char *token)
{
	char *p = pfs_s3_encode(prefix, false), *t = token ? pfs_s3_encode(token, false) : NULL, *url;

	if (asprintf(&url, "%s/%s?%s%s%sdelimiter=%%2F&list-type=2&prefix=%s", c->api.target.url,
		     conf(c)->bucket, t ? "continuation-token=" : "", t ? t : "", t ? "&" : "", p) < 0)
		url = NULL;
	free(p);
	free(t);
	return url;
}

static char *service_prefix(const struct pfs_service *s)
{
	char *p;

	if (asprintf(&p, "%s%s/", conf(s->cluster)->prefix, s->upstream) < 0)
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
	size_t pages = 0, plen = strlen(prefix), seen = 0;
	int rc = 0;

	do {
		struct pfs_s3_list l;
		uint8_t *body;
		size_t len;
		char *url = list_url(c, prefix, token);
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
			size_t n;
			if (pfs_s3_child(name, prefix, plen, &n)) {
				if (++seen > MAX_SERVICES) {
					snprintf(why, sizeof why, "more than %d services: the rest left out",
						 MAX_SERVICES);
					rc = -1;
					break;
				}
				char *part = pfs_xstrndup(name + plen, n);
				fn(c, part);
				free(part);
			}
		}
		free(token);
		token = !rc && l.truncated ? pfs_xstrdup(l.next_token) : NULL;
		pfs_s3_list_free(&l);
		if (token && ++pages >= MAX_PAGES) {
			snprintf(why, sizeof why, "more than %d pages", MAX_PAGES);
			rc = -1;
		}
	} while (!rc && token);
	free(token);
	if (rc)
		snprintf(err, errlen, "s3://%s/%s: %s", conf(c)->bucket, prefix, why);
	return rc;
}

static void add_service(struct pfs_cluster *c, const char *name)
{
	pfs_registry_add_service(c, name, name, NULL, 0);
}

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	return list_sync(c, conf(c)->prefix, add_service, err, errlen);
}

/* ---- rounds and files: listings in pages through the fetcher ---- */

struct lister {
	struct pfs_fetch f;
	struct pfs_service *s;
	pfs_listed_fn done;
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
		snprintf(err, sizeof err, "s3://%s/%s: %s", conf(l->s->cluster)->bucket, l->prefix, why);
	l->done(l->s, l->round, l->e, why ? 0 : l->n, why ? err : NULL);
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
		l->e = pfs_xrealloc(l->e, l->cap * sizeof *l->e);
	}
	l->e[l->n].name = pfs_xstrndup(name, len);
	l->e[l->n++].size = size;
}

static void lister_done(struct pfs_fetch *f);

static void lister_submit(struct lister *l)
{
	const struct pfs_api *a = &l->s->cluster->api;
	size_t max = PAGE_MAX_BYTES;

	free(l->f.url);
	memset(&l->f, 0, sizeof l->f);
	l->f.url = list_url(l->s->cluster, l->prefix, l->token);
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
			size_t n;
			if (pfs_s3_child(page.prefixes[i], l->prefix, plen, &n))
				lister_add(l, page.prefixes[i] + plen, n, 0);
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
	l->token = page.truncated ? pfs_xstrdup(page.next_token) : NULL;
	pfs_s3_list_free(&page);
	if (!l->token) {
		lister_finish(l, NULL);
	} else if (++l->pages >= MAX_PAGES || l->n > MAX_ENTRIES) {
		snprintf(why, sizeof why, "%zu pages, %zu entries, and more: over the bounds "
			 "(%d pages, %d entries)", l->pages, l->n, MAX_PAGES, MAX_ENTRIES);
		lister_finish(l, why);
	} else {
		lister_submit(l);
	}
}

static void lister_done(struct pfs_fetch *f)
{
	pfs_work_submit(lister_page, f->arg);
}

static void list(struct pfs_service *s, const char *round, pfs_listed_fn done)
{
	struct lister *l = pfs_xcalloc(1, sizeof *l);
	char *sp = service_prefix(s);

	l->s = s;
	l->done = done;
	if (round) {
		l->round = pfs_xstrdup(round);
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
	const struct s3_conf *k = conf(j->svc->cluster);
	char round[PFS_TIME_NAME_MAX], *key;

	pfs_name_time(j->from, round); /* the <time> name */
	if (asprintf(&key, "%s%s/%s/%s", k->prefix, j->svc->upstream, round, j->file->name) < 0)
		key = NULL;
	free(j->url);
	j->url = pfs_s3_object_url(&a->target, k->bucket, key ? key : "");
	pfs_job_set(&j->what, "s3://%s/%s", k->bucket, key ? key : "");
	free(key);
	pfs_http_start(j, &a->target, NULL, pfs_source_pprof.decode);
}

/* ---- config ---- */

static const char *const keys[] = {PFS_S3_KEYS, "list_ttl", "settle", "range", NULL};

static int parse(struct pfs_parser *p, json_t *obj, const char *where, struct pfs_cluster *c)
{
	struct s3_conf *k = c->kind = pfs_xcalloc(1, sizeof *k);
	struct pfs_api *a = &c->api;
	char def[512];

	a->list_ttl = 60;
	a->settle = 600;
	a->range = 7 * PFS_DAY;
	/* the prefix defaults to the collector's cluster of the same name */
	snprintf(def, sizeof def, "%s/", c->name);
	if (pfs_conf_duration(p, obj, "list_ttl", where, 0, PFS_DAY, &a->list_ttl) ||
	    pfs_conf_duration(p, obj, "settle", where, 0, PFS_DAY, &a->settle) ||
	    pfs_conf_duration(p, obj, "range", where, 1, 10 * PFS_YEAR, &a->range))
		return -1;
	return pfs_s3_parse(p, obj, where, def, &k->bucket, &k->prefix, &a->target);
}

const struct pfs_source_ops pfs_source_s3 = {
	.kind = "s3",
	.rounds = PFS_ROUNDS_LISTED,
	.tree_listed = true,
	.pgo = true,
	.keys = keys,
	.url_key = "endpoint",
	.default_url = pfs_s3_default_url,
	.parse = parse,
	.free_kind = free_kind,
	.discover = discover,
	.list = list,
	.start = start,
};
