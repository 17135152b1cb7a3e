/* The uploader: settled rounds are queued (the index's settled hook, which
 * main.c wires), and a few threads put their files into the bucket with
 * blocking requests, each bounded by the timeout: HEAD (there already:
 * left as it is), else PUT from the cache file; once every file of the
 * round is there, <time>/.complete. A round that failed is tried again
 * twice, a minute apart. */
#include "upload.h"

#include "lib/cache.h"
#include "lib/confparse.h"
#include "lib/fetch.h"
#include "lib/log.h"
#include "s3.h"
#include "registry/registry.h"
#include "lib/names.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_QUEUED 10000  /* rounds waiting */
#define ATTEMPTS 3
#define RETRY_SECONDS 60
#define DRAIN_SECONDS 30  /* unmounting: what is queued still goes, this long */
#define MARKER ".complete"

struct pfs_upload {
	struct pfs_target target; /* HEAD: signed with an empty body's hash */
	struct pfs_target put;    /* PUT: UNSIGNED-PAYLOAD */
	char *bucket, *prefix;
	size_t threads, max_bytes;
};

struct item {
	char *cluster, *service, *round;
	int attempts;
	time_t not_before;
	struct item *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct pfs_upload *u;
	struct item *head;
	size_t n;
	bool stopping, abort;
	pthread_t *threads;
	size_t n_threads;
	uint64_t rounds, uploaded, present, failed, dropped;
	char last_error[512];
	time_t last_error_at;
} g = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

/* ---- config ---- */

int pfs_upload_parse(struct pfs_parser *p, json_t *v, const struct pfs_settings *s,
		     struct pfs_config *cfg)
{
	static const char *const keys[] = {PFS_S3_KEYS, "endpoint", "timeout", "threads", NULL};
	struct pfs_upload *u;
	const char *endpoint = NULL;
	char *url = NULL;
	json_t *ep, *th;
	int rc;

	if (!json_is_object(v))
		return pfs_conf_fail(p, "upload", "must be an object with \"bucket\" (and \"endpoint\", "
				     "credentials)");
	if (pfs_conf_keys(p, v, "upload.", keys) ||
	    pfs_conf_string(p, v, "endpoint", "upload.", &endpoint))
		return -1;
	u = pfs_xcalloc(1, sizeof *u);
	cfg->upload = u;
	u->threads = 2;
	u->max_bytes = cfg->max_bytes;
	if ((th = json_object_get(v, "threads"))) {
		if (!json_is_integer(th) || json_integer_value(th) < 1 || json_integer_value(th) > 16)
			return pfs_conf_fail(p, "upload.threads", "must be an integer from 1 to 16");
		u->threads = (size_t)json_integer_value(th);
	}
	if (!endpoint)
		url = pfs_s3_default_url(v);
	ep = json_pack("{ss}", "url", endpoint ? endpoint : url);
	free(url);
	if (json_object_get(v, "timeout"))
		json_object_set(ep, "timeout", json_object_get(v, "timeout"));
	rc = pfs_conf_endpoint(p, ep, "upload", s, &u->target);
	json_decref(ep);
	/* the bucket holds the mount's tree: no prefix by default */
	if (rc || pfs_s3_parse(p, v, "upload.", "", &u->bucket, &u->prefix, &u->target))
		return -1;
	pfs_target_copy(&u->target, &u->put);
	pfs_target_add_header(&u->put, "x-amz-content-sha256", "UNSIGNED-PAYLOAD");
	return 0;
}

void pfs_upload_free(struct pfs_config *cfg)
{
	struct pfs_upload *u = cfg->upload;

	if (!u)
		return;
	pfs_target_free(&u->target);
	pfs_target_free(&u->put);
	free(u->bucket);
	free(u->prefix);
	free(u);
	cfg->upload = NULL;
}

/* ---- requests ---- */

static void note_error(const char *key, const char *why)
{
	bool say;

	pthread_mutex_lock(&g.lock);
	g.failed++;
	say = strcmp(g.last_error, why) != 0; /* one line per reason, not per file */
	snprintf(g.last_error, sizeof g.last_error, "%s", why);
	g.last_error_at = time(NULL);
	pthread_mutex_unlock(&g.lock);
	if (say)
		pfs_err("upload s3://%s/%s failed: %s", g.u->bucket, key, why);
	else
		pfs_debug("upload s3://%s/%s failed: %s", g.u->bucket, key, why);
}

/* HEAD or PUT of key: the HTTP status (0: no answer), why in err. */
static long request(const char *method, const char *key, const uint8_t *body, size_t len,
		    char *err, size_t errlen)
{
	const struct pfs_upload *u = g.u;
	char *url = pfs_s3_object_url(&u->target, u->bucket, key);
	bool put = strcmp(method, "PUT") == 0;
	long status;

	struct pfs_fetch f = {
		.url = url, .target = put ? &u->put : &u->target,
		.method = strcmp(method, "GET") ? method : NULL,
		.timeout_ms = (long)(u->target.timeout * 1000), .max_bytes = 1u << 16,
		.post = put ? (body ? body : (const uint8_t *)"") : NULL, .post_len = len,
		.content_type = put ? "application/octet-stream" : NULL,
	};
	pfs_fetch_run(&f);
	status = f.http_status;
	snprintf(err, errlen, "%s", f.ok ? "" : f.error);
	pfs_fetch_release(&f);
	free(url);
	return status;
}

/* The cache file, whole (at most max_bytes). */
static int read_cached(const struct item *it, const char *file, uint8_t **out, size_t *len,
		       char *err, size_t errlen)
{
	int fd = pfs_cache_open(it->cluster, it->service, it->round, file);
	struct stat st;
	ssize_t n = 0;

	if (fd < 0) {
		snprintf(err, errlen, "cache file: %s", strerror(-fd));
		return -1;
	}
	if (fstat(fd, &st) || st.st_size <= 0 || (size_t)st.st_size > g.u->max_bytes) {
		snprintf(err, errlen, "cache file: size %lld", (long long)st.st_size);
		close(fd);
		return -1;
	}
	*out = pfs_xmalloc((size_t)st.st_size);
	for (size_t got = 0; got < (size_t)st.st_size; got += (size_t)n)
		if ((n = pread(fd, *out + got, (size_t)st.st_size - got, (off_t)got)) <= 0) {
			snprintf(err, errlen, "cache file: %s", n ? strerror(errno) : "short");
			free(*out);
			close(fd);
			return -1;
		}
	*len = (size_t)st.st_size;
	close(fd);
	return 0;
}

/* One object, unless it is there: 0 when it is (now or before). */
static int put_once(const struct item *it, const char *file, bool marker)
{
	char key[2048], err[512];
	uint8_t *body = NULL;
	size_t len = 0;
	long st;

	snprintf(key, sizeof key, "%s%s/%s/%s/%s", g.u->prefix, it->cluster, it->service, it->round,
		 file);
	st = request("HEAD", key, NULL, 0, err, sizeof err);
	if (st == 200) {
		pthread_mutex_lock(&g.lock);
		g.present += !marker;
		pthread_mutex_unlock(&g.lock);
		return 0; /* never overwritten */
	}
	if (st != 404) {
		/* a HEAD answer has no body: a GET says which S3 error it is */
		if (st)
			request("GET", key, NULL, 0, err, sizeof err);
		note_error(key, err);
		return -1;
	}
	if (!marker && read_cached(it, file, &body, &len, err, sizeof err)) {
		note_error(key, err);
		return -1;
	}
	st = request("PUT", key, body, len, err, sizeof err);
	free(body);
	if (st != 200) {
		note_error(key, err);
		return -1;
	}
	pthread_mutex_lock(&g.lock);
	g.uploaded += !marker;
	pthread_mutex_unlock(&g.lock);
	pfs_debug("uploaded s3://%s/%s (%zu bytes)", g.u->bucket, key, len);
	return 0;
}

struct names {
	char **v;
	size_t n;
};

static void add_name(const char *file, void *arg)
{
	struct names *ns = arg;

	ns->v = pfs_xrealloc(ns->v, (ns->n + 1) * sizeof *ns->v);
	ns->v[ns->n++] = pfs_xstrdup(file);
}

/* Every file of the round, then its marker: 0 if all are there. */
static int upload_round(const struct item *it)
{
	struct names ns = {0};
	int rc = 0;

	pfs_cache_files(it->cluster, it->service, it->round, add_name, &ns);
	for (size_t i = 0; i < ns.n; i++) {
		if (!rc && put_once(it, ns.v[i], false))
			rc = -1;
		free(ns.v[i]);
	}
	free(ns.v);
	if (!rc && ns.n)
		rc = put_once(it, MARKER, true);
	return rc;
}

/* ---- queue and threads ---- */

static void item_free(struct item *it)
{
	free(it->cluster);
	free(it->service);
	free(it->round);
	free(it);
}

void pfs_upload_round(struct pfs_service *s, const char *round)
{
	struct item *it, **pp;

	if (!g.u)
		return;
	pthread_mutex_lock(&g.lock);
	for (pp = &g.head; *pp; pp = &(*pp)->next)
		if (strcmp((*pp)->round, round) == 0 && strcmp((*pp)->service, s->name) == 0 &&
		    strcmp((*pp)->cluster, s->cluster->name) == 0)
			goto out; /* queued already: it reads the cache when it runs */
	if (g.stopping || g.n >= MAX_QUEUED) {
		if (g.dropped++ == 0)
			pfs_warn("upload: more than %d rounds queued%s; rounds are left out (see "
				 ".status.json)", MAX_QUEUED, g.stopping ? " or unmounting" : "");
		goto out;
	}
	it = pfs_xcalloc(1, sizeof *it);
	it->cluster = pfs_xstrdup(s->cluster->name);
	it->service = pfs_xstrdup(s->name);
	it->round = pfs_xstrdup(round);
	*pp = it;
	g.n++;
	pthread_cond_signal(&g.cond);
out:
	pthread_mutex_unlock(&g.lock);
}

/* The first item due now (g.lock held), taken off the queue. */
static struct item *take(time_t now, time_t *next)
{
	*next = 0;
	for (struct item **pp = &g.head; *pp; pp = &(*pp)->next) {
		struct item *it = *pp;
		if (it->not_before <= now) {
			*pp = it->next;
			g.n--;
			return it;
		}
		if (!*next || it->not_before < *next)
			*next = it->not_before;
	}
	return NULL;
}

/* Drop the queued rounds due after `after` (-1: all), g.lock held or the
 * threads gone: how many. */
static size_t drop_queued(time_t after)
{
	size_t n = 0;

	for (struct item **pp = &g.head; *pp;) {
		struct item *it = *pp;
		if (it->not_before <= after) {
			pp = &it->next;
			continue;
		}
		*pp = it->next;
		item_free(it);
		g.n--;
		n++;
	}
	return n;
}

static void *uploader_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g.lock);
	for (;;) {
		time_t next = 0;
		struct item *it = g.abort ? NULL : take(time(NULL), &next);
		if (!it) {
			if (g.abort || g.stopping)
				break;
			struct timespec dl;
			clock_gettime(CLOCK_REALTIME, &dl);
			dl.tv_sec = next ? next : dl.tv_sec + 3600;
			pthread_cond_timedwait(&g.cond, &g.lock, &dl);
			continue;
		}
		pthread_mutex_unlock(&g.lock);
		int rc = upload_round(it);
		pthread_mutex_lock(&g.lock);
		if (rc == 0) {
			g.rounds++;
			item_free(it);
		} else if (++it->attempts < ATTEMPTS && !g.stopping) {
			it->not_before = time(NULL) + RETRY_SECONDS;
			it->next = g.head;
			g.head = it;
			g.n++;
		} else {
			item_free(it);
		}
		pthread_cond_broadcast(&g.cond); /* pfs_upload_stop waits for the queue */
	}
	pthread_mutex_unlock(&g.lock);
	return NULL;
}

int pfs_upload_start(struct pfs_config *cfg)
{
	if (!(g.u = cfg->upload))
		return 0;
	g.threads = pfs_xcalloc(g.u->threads, sizeof *g.threads);
	for (; g.n_threads < g.u->threads; g.n_threads++)
		if (pthread_create(&g.threads[g.n_threads], NULL, uploader_main, NULL))
			return -1;
	pfs_info("uploading snapshots to s3://%s/%s (%s)", g.u->bucket, g.u->prefix,
		 g.u->target.log_url);
	return 0;
}

void pfs_upload_stop(void)
{
	struct timespec dl;
	size_t left;

	if (!g.u)
		return;
	pthread_mutex_lock(&g.lock);
	g.stopping = true;
	/* retries due later are left out: the rest goes while the threads last */
	left = drop_queued(time(NULL));
	pthread_cond_broadcast(&g.cond);
	clock_gettime(CLOCK_REALTIME, &dl);
	dl.tv_sec += DRAIN_SECONDS;
	/* the threads take what is due and leave when nothing is */
	while (g.n && pthread_cond_timedwait(&g.cond, &g.lock, &dl) != ETIMEDOUT)
		;
	g.abort = true;
	pthread_cond_broadcast(&g.cond);
	pthread_mutex_unlock(&g.lock);
	for (size_t i = 0; i < g.n_threads; i++)
		pthread_join(g.threads[i], NULL);
	left += drop_queued(-1); /* aborted: requeues none */
	if (left)
		pfs_warn("upload: unmounting with %zu rounds not uploaded", left);
	free(g.threads);
	g.threads = NULL;
	g.n_threads = 0;
	g.u = NULL;
}

json_t *pfs_upload_status(void)
{
	json_t *o;

	if (!g.u)
		return NULL;
	pthread_mutex_lock(&g.lock);
	o = json_pack("{ss ss ss sI sI sI sI sI sI}", "bucket", g.u->bucket, "prefix", g.u->prefix,
		      "endpoint", g.u->target.log_url, "queued", (json_int_t)g.n,
		      "rounds_uploaded", (json_int_t)g.rounds, "files_uploaded",
		      (json_int_t)g.uploaded, "files_there_already", (json_int_t)g.present,
		      "failures", (json_int_t)g.failed, "rounds_dropped", (json_int_t)g.dropped);
	if (g.last_error[0]) {
		json_object_set_new(o, "last_error", json_string(g.last_error));
		json_object_set_new(o, "last_error_at", pfs_name_time_json(g.last_error_at));
	}
	pthread_mutex_unlock(&g.lock);
	return o;
}
