/* Source registry, discovery bookkeeping, and HTTP helpers for sources. */
#include "source.h"

#include "lib/log.h"
#include "lib/mem.h"
#include "lib/names.h"
#include "lib/pprof.h"
#include "profile.pb-c.h"
#include "lib/work.h"
#include "lib/xalloc.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const struct pfs_source_ops pfs_source_pprof, pfs_source_nats, pfs_source_pyroscope,
	pfs_source_parca, pfs_source_coroot, pfs_source_s3;

static const struct pfs_source_ops *const g_kinds[] = {
	&pfs_source_pprof, &pfs_source_nats, &pfs_source_pyroscope, &pfs_source_parca,
	&pfs_source_coroot, &pfs_source_s3,
};

const struct pfs_source_ops *pfs_source_find(const char *kind)
{
	for (size_t i = 0; i < sizeof g_kinds / sizeof *g_kinds; i++)
		if (strcmp(g_kinds[i]->kind, kind) == 0)
			return g_kinds[i];
	return NULL;
}

void pfs_sources_free(void)
{
	for (size_t i = 0; i < sizeof g_kinds / sizeof *g_kinds; i++)
		if (g_kinds[i]->cleanup)
			g_kinds[i]->cleanup();
}

char *pfs_url_escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0), *out = pfs_xstrdup(e ? e : "");
	curl_free(e);
	return out;
}

int pfs_base64_decode(const char *in, size_t len, uint8_t **out, size_t *outlen)
{
	static const char *abc = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t acc = 0;
	int bits = 0;
	size_t n = 0;

	*out = pfs_xmalloc(len / 4 * 3 + 4);
	for (size_t i = 0; i < len; i++) {
		const char *p;
		if (in[i] == '=')
			break;
		if (!in[i] || !(p = strchr(abc, in[i]))) {
			free(*out);
			*out = NULL;
			return -1;
		}
		acc = (acc << 6) | (uint32_t)(p - abc);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			(*out)[n++] = (uint8_t)(acc >> bits);
		}
	}
	*outlen = n;
	return 0;
}

void pfs_label_selector(const char *label, const char *value, char *out, size_t outlen)
{
	size_t o = (size_t)snprintf(out, outlen, "{%s=\"", label);

	for (const char *v = value; *v && o + 4 < outlen; v++) {
		if (*v == '"' || *v == '\\')
			out[o++] = '\\';
		out[o++] = *v;
	}
	snprintf(out + o, outlen - o, "\"}");
}

int pfs_gz_profile_is_empty(const uint8_t *gz, size_t len)
{
	char err[256];
	struct Perftools__Profiles__Profile *p = pfs_pprof_decode_gz(gz, len, 1u << 30, err, sizeof err);
	int rc = p && p->n_sample == 0 ? PFS_ABSENT : 0;

	pfs_pprof_free(p);
	return rc;
}

int pfs_source_refresh(struct pfs_cluster *c, double max_age)
{
	char err[512] = "";
	time_t now = time(NULL);
	bool failed;

	if (!c->src->discover)
		return 0;
	pthread_mutex_lock(&c->discovering); /* a slow one holds up only its cluster */
	pthread_mutex_lock(&c->lock);
	bool due = !c->discovered_at || now - c->discovered_at >= (time_t)max_age;
	if (due)
		c->discovered_at = now;
	pthread_mutex_unlock(&c->lock);
	if (due) {
		failed = c->src->discover(c, err, sizeof err) != 0;
		if (failed)
			pfs_err("discover %s (%s at %s) failed: %s", c->name, c->src->kind,
				c->api.target.log_url, err);
		pthread_mutex_lock(&c->lock);
		c->discover_failed = failed;
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_lock(&c->lock);
	failed = c->discover_failed;
	pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&c->discovering);
	return failed ? -1 : 0;
}

void pfs_job_finish(struct pfs_job *j, int rc, uint8_t *gz, size_t gzlen, const char *why)
{
	j->finish(j, rc, gz, gzlen, why);
}

/* ---- HTTP ---- */

static void http_decode(void *arg)
{
	struct pfs_job *j = arg;
	struct pfs_fetch *f = &j->f;
	uint8_t *gz = NULL;
	size_t gzlen = 0;
	char why[512], derr[256] = "";
	int rc;

	if (!f->ok) {
		pfs_job_finish(j, -1, NULL, 0, f->error);
		return;
	}
	rc = j->decode(j, f->body, f->len, &gz, &gzlen, derr, sizeof derr);
	if (rc < 0)
		snprintf(why, sizeof why, "HTTP 200, %s", derr);
	pfs_job_finish(j, rc, gz, gzlen, rc < 0 ? why : NULL);
}

/* On the fetcher thread: the rest is work for the pool. */
static void http_done(struct pfs_fetch *f)
{
	pfs_work_submit(http_decode, f->arg);
}

void pfs_job_set(char **field, const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = pfs_xstrdup("");
	va_end(ap);
	free(*field);
	*field = s;
}

void pfs_http_start(struct pfs_job *j, const struct pfs_target *t, const char *content_type,
		    pfs_decode_fn decode)
{
	struct pfs_fetch *f = &j->f;
	size_t max = f->max_bytes;

	memset(f, 0, sizeof *f);
	f->max_bytes = max;
	f->url = j->url;
	f->target = t;
	f->timeout_ms = j->timeout_ms;
	f->post = j->post;
	f->post_len = j->post_len;
	f->content_type = content_type;
	f->done = http_done;
	f->arg = j;
	j->decode = decode;
	pfs_fetch_submit(f);
}

int pfs_http_sync(const struct pfs_target *t, const char *url, const char *content_type,
		  const uint8_t *post, size_t post_len, uint8_t **body, size_t *len, char *err,
		  size_t errlen)
{
	return pfs_http_sync_ex(t, url, content_type, post, post_len, NULL, NULL, body, len, err,
				errlen);
}

/* Run f here: 0 and the body, or -1 with f's error. */
static int sync_run(struct pfs_fetch *f, uint8_t **body, size_t *len, char *err, size_t errlen)
{
	if (pfs_fetch_run(f)) {
		snprintf(err, errlen, "%s", f->error);
		pfs_fetch_release(f);
		return -1;
	}
	/* callers parse it as text: keep a NUL after the body; it is theirs
	 * now, outside the budget */
	pfs_mem_give(f->cap);
	*body = pfs_xrealloc(f->body, f->len + 1);
	(*body)[f->len] = '\0';
	*len = f->len;
	return 0;
}

int pfs_http_sync_ex(const struct pfs_target *t, const char *url, const char *content_type,
		     const uint8_t *post, size_t post_len, pfs_header_fn on_header, void *arg,
		     uint8_t **body, size_t *len, char *err, size_t errlen)
{
	struct pfs_fetch f = {
		.url = (char *)url, .target = t, .timeout_ms = (long)(t->timeout * 1000),
		.max_bytes = 64u << 20, .post = post, .post_len = post_len,
		.content_type = content_type, .on_header = on_header, .header_arg = arg,
	};

	return sync_run(&f, body, len, err, errlen);
}

int pfs_http_sync_cancel(const struct pfs_target *t, const char *url, bool (*cancel)(void *),
			 void *arg, uint8_t **body, size_t *len, char *err, size_t errlen)
{
	struct pfs_fetch f = {
		.url = (char *)url, .target = t, .timeout_ms = (long)(t->timeout * 1000),
		.max_bytes = 64u << 20, .cancel = cancel, .cancel_arg = arg,
	};

	return sync_run(&f, body, len, err, errlen);
}

/* ---- many blocking requests at once, through the fetcher ---- */

struct many {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	size_t left;
};

static void many_done(struct pfs_fetch *f)
{
	struct many *m = f->arg;

	pthread_mutex_lock(&m->lock);
	m->left--;
	pthread_cond_signal(&m->cond);
	pthread_mutex_unlock(&m->lock);
}

void pfs_http_sync_many(const struct pfs_target *t, char *const *urls, size_t n,
			struct pfs_fetch *out)
{
	struct many m = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

	for (size_t done = 0; done < n;) {
		size_t batch = n - done < PFS_SYNC_MANY_MAX ? n - done : PFS_SYNC_MANY_MAX;
		m.left = batch;
		for (size_t i = done; i < done + batch; i++) {
			memset(&out[i], 0, sizeof out[i]);
			out[i].url = urls[i];
			out[i].target = t;
			out[i].timeout_ms = (long)(t->timeout * 1000);
			out[i].max_bytes = 64u << 20;
			out[i].done = many_done;
			out[i].arg = &m;
			pfs_fetch_submit(&out[i]);
		}
		/* every fetch ends by its timeout: done() is called for each */
		pthread_mutex_lock(&m.lock);
		while (m.left)
			pthread_cond_wait(&m.cond, &m.lock);
		pthread_mutex_unlock(&m.lock);
		done += batch;
	}
}
