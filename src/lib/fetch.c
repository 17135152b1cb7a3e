/* Fetcher thread: libcurl multi interface, one easy handle per fetch. */
#include "fetch.h"

#include "lib/target.h"
#include "log.h"
#include "mem.h"
#include "s3xml.h"
#include "secrets.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>

static CURLM *g_multi;
static pthread_t g_thread;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct pfs_fetch *g_queue, *g_queue_tail; /* submitted, not yet started: FIFO */
static struct pfs_fetch *g_active; /* started; fetcher thread only */
static size_t g_n_active, g_max_active = 1024; /* fetcher thread only */
static bool g_stop;

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
	struct pfs_fetch *f = arg;
	size_t n = size * nmemb;

	if (f->len + n > f->max_bytes) {
		f->too_big = true;
		return 0;
	}
	if (f->len + n > f->cap) {
		size_t cap = f->cap ? f->cap : 64 * 1024;
		while (cap < f->len + n)
			cap *= 2;
		if (cap > f->max_bytes)
			cap = f->max_bytes;
		/* while realloc copies, old and new buffer both exist: the new
		 * one is charged whole, the old one given back after */
		if (!pfs_mem_take(cap)) {
			f->over_budget = true;
			return 0;
		}
		uint8_t *b = realloc(f->body, cap); /* budgeted: checked (xalloc.h) */
		if (!b) {
			pfs_mem_give(cap);
			return 0;
		}
		pfs_mem_give(f->cap);
		f->body = b;
		f->cap = cap;
	}
	memcpy(f->body + f->len, data, n);
	f->len += n;
	return n;
}

struct curl_slist *pfs_fetch_headers(const struct pfs_target *t, const char *content_type)
{
	struct curl_slist *h = curl_slist_append(NULL, "User-Agent: profilefs/" PROFILEFS_VERSION);
	char ct[256];

	if (content_type) {
		snprintf(ct, sizeof ct, "Content-Type: %s", content_type);
		h = curl_slist_append(h, ct);
	}
	for (size_t i = 0; i < t->n_headers; i++)
		h = curl_slist_append(h, t->headers[i]);
	return h;
}

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct pfs_fetch *f = arg;

	(void)a, (void)b, (void)c, (void)d;
	return f->cancel(f->cancel_arg) ? 1 : 0;
}

static size_t on_header(char *line, size_t size, size_t nmemb, void *arg)
{
	struct pfs_fetch *f = arg;
	f->on_header(line, size * nmemb, f->header_arg);
	return size * nmemb;
}

/* What of t and url is secret: masked in every log line and in
 * .status.json from before the request goes out (an answer may echo it). */
static void register_secrets(const struct pfs_target *t, const char *url)
{
	pfs_secret_add_url(url);
	pfs_secret_add(t->password);
	if (!t->aws_sigv4)
		pfs_secret_add_basic(t->username, t->password);
	for (size_t i = 0; i < t->n_headers; i++) {
		const char *h = t->headers[i], *colon = strchr(h, ':');
		if (!colon)
			continue;
		char name[128];
		snprintf(name, sizeof name, "%.*s", (int)(colon - h), h);
		if (!pfs_secret_header(name))
			continue;
		const char *v = colon + 1 + strspn(colon + 1, " \t");
		pfs_secret_add(v);
		if (strncasecmp(v, "Bearer ", 7) == 0 || strncasecmp(v, "Basic ", 6) == 0)
			pfs_secret_add(strchr(v, ' ') + 1);
	}
}

/* An easy handle for f: the same options whether the multi thread runs it
 * or pfs_fetch_run() does. */
static CURL *make_easy(struct pfs_fetch *f)
{
	const struct pfs_target *t = f->target;
	CURL *e = curl_easy_init();

	register_secrets(t, f->url);

	f->slist = pfs_fetch_headers(t, f->post ? f->content_type : NULL);
	curl_easy_setopt(e, CURLOPT_URL, f->url);
	if (f->post) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, f->post);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)f->post_len);
	}
	if (f->method && strcmp(f->method, "HEAD") == 0)
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	else if (f->method) /* libcurl signs (SigV4) with this method too */
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, f->method);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, f->timeout_ms);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, f->timeout_ms < 5000 ? f->timeout_ms : 5000L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, f->slist);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, f);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, f->curl_err);
	curl_easy_setopt(e, CURLOPT_PRIVATE, f);
	/* a small receive buffer: a thousand transfers at once, each body is
	 * gathered in its own buffer anyway */
	curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 4096L);
	if (f->cancel) {
		curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(e, CURLOPT_XFERINFODATA, f);
	}
	if (f->on_header) {
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, f);
	}
	if (t->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, t->ca_file);
	if (t->cert_file) { /* mTLS */
		curl_easy_setopt(e, CURLOPT_SSLCERT, t->cert_file);
		curl_easy_setopt(e, CURLOPT_SSLKEY, t->key_file);
	}
	if (t->insecure) {
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
		curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
	}
	if (t->aws_sigv4) { /* the key and secret sign the request */
		curl_easy_setopt(e, CURLOPT_AWS_SIGV4, t->aws_sigv4);
		curl_easy_setopt(e, CURLOPT_USERNAME, t->username);
		curl_easy_setopt(e, CURLOPT_PASSWORD, t->password);
	} else if (t->username) {
		curl_easy_setopt(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		curl_easy_setopt(e, CURLOPT_USERNAME, t->username);
		curl_easy_setopt(e, CURLOPT_PASSWORD, t->password);
	}
	f->easy = e;
	return e;
}

static void start_one(struct pfs_fetch *f)
{
	CURL *e = make_easy(f);

	g_n_active++;
	f->active_prev = NULL;
	f->active_next = g_active;
	if (g_active)
		g_active->active_prev = f;
	g_active = f;
	curl_multi_add_handle(g_multi, e);
}

void pfs_http_error(char *out, size_t outlen, long status, const uint8_t *body, size_t len)
{
	char text[300], head[4096];
	size_t n = 0;

	if (pfs_s3_error_text(body, len, text, sizeof text)) { /* S3's <Error> */
		pfs_secret_mask(text);
		snprintf(out, outlen, "HTTP %ld, %s", status, text);
		return;
	}
	/* masked before it is cut: no part of a secret is left */
	len = len < sizeof head - 1 ? len : sizeof head - 1;
	if (len)
		memcpy(head, body, len);
	head[len] = '\0';
	bool binary = memchr(head, '\0', len) != NULL; /* shown as none, as below */
	pfs_secret_mask(head);
	len = binary ? 0 : strlen(head);
	for (size_t i = 0; i < len && n < 120; i++) {
		uint8_t c = (uint8_t)head[i];
		if (c == '\n' || c == '\r')
			break;
		if (c < 0x20 || c >= 0x7f) {
			n = 0; /* binary: show none of it */
			break;
		}
		text[n++] = (char)c;
	}
	text[n] = '\0';
	while (n > 0 && text[n - 1] == ' ')
		text[--n] = '\0';
	snprintf(out, outlen, "HTTP %ld%s%s", status, n ? ": " : "", text);
}

static long nofile(void)
{
	struct rlimit rl;
	return getrlimit(RLIMIT_NOFILE, &rl) ? -1 : (long)rl.rlim_cur;
}

/* A failed transfer whose cause was the process's file descriptors, not
 * the target: the socket's errno, or none to be had right now. */
static bool out_of_fds(CURL *e)
{
	long os = 0;
	int fd;

	curl_easy_getinfo(e, CURLINFO_OS_ERRNO, &os);
	if (os == EMFILE || os == ENFILE)
		return true;
	if ((fd = fcntl(0, F_DUPFD_CLOEXEC, 3)) >= 0) {
		close(fd);
		return false;
	}
	return errno == EMFILE || errno == ENFILE;
}

/* Fill in the result and free the easy handle. */
static void record_result(struct pfs_fetch *f, CURLcode cc)
{
	CURL *e = f->easy;

	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &f->http_status);
	if (f->too_big)
		snprintf(f->error, sizeof f->error, "HTTP %ld, body larger than %zu bytes "
			 "(max_profile_bytes)", f->http_status, f->max_bytes);
	else if (f->over_budget)
		snprintf(f->error, sizeof f->error, "HTTP %ld, memory budget spent (max_memory %zu "
			 "bytes, all in use by fetches in flight)", f->http_status, pfs_mem_max());
	else if (cc != CURLE_OK && out_of_fds(e))
		snprintf(f->error, sizeof f->error, "HTTP %ld, out of file descriptors (RLIMIT_NOFILE "
			 "%ld; max_connections %zu): %s", f->http_status, nofile(), g_max_active,
			 f->curl_err[0] ? f->curl_err : curl_easy_strerror(cc));
	else if (cc != CURLE_OK)
		snprintf(f->error, sizeof f->error, "HTTP %ld, %s", f->http_status,
			 f->curl_err[0] ? f->curl_err : curl_easy_strerror(cc));
	else if (f->http_status != 200)
		pfs_http_error(f->error, sizeof f->error, f->http_status, f->body, f->len);
	else
		f->ok = true;
	curl_easy_cleanup(e);
	f->easy = NULL;
	curl_slist_free_all(f->slist);
	f->slist = NULL;
}

static void finish_one(struct pfs_fetch *f, CURLcode cc)
{
	g_n_active--;
	/* O(1): thousands are in flight at once in a large fleet */
	if (f->active_prev)
		f->active_prev->active_next = f->active_next;
	else
		g_active = f->active_next;
	if (f->active_next)
		f->active_next->active_prev = f->active_prev;
	curl_multi_remove_handle(g_multi, f->easy);
	record_result(f, cc);
	f->done(f);
}

int pfs_fetch_run(struct pfs_fetch *f)
{
	record_result(f, curl_easy_perform(make_easy(f)));
	return f->ok ? 0 : -1;
}

static void *fetcher_main(void *unused)
{
	(void)unused;
	for (;;) {
		struct pfs_fetch *q;
		CURLMsg *m;
		int running, left;

		/* at most max_connections transfers exist at once: the rest wait
		 * here, costing a queue entry, not a curl handle and a socket */
		size_t room = g_max_active > g_n_active ? g_max_active - g_n_active : 0;
		struct pfs_fetch **tail = &q;
		q = NULL;
		pthread_mutex_lock(&g_lock);
		for (; g_queue && room > 0; room--) {
			struct pfs_fetch *f = g_queue;
			if (!(g_queue = f->next))
				g_queue_tail = NULL;
			f->next = NULL;
			*tail = f;
			tail = &f->next;
		}
		bool stop = g_stop;
		pthread_mutex_unlock(&g_lock);
		while (q) {
			struct pfs_fetch *next = q->next;
			start_one(q);
			q = next;
		}
		if (stop)
			break;
		curl_multi_perform(g_multi, &running);
		while ((m = curl_multi_info_read(g_multi, &left))) {
			struct pfs_fetch *f;
			if (m->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&f);
			finish_one(f, m->data.result);
		}
		curl_multi_poll(g_multi, NULL, 0, 1000, NULL);
	}
	/* Fail everything still in flight, then what still waits. */
	while (g_active) {
		snprintf(g_active->curl_err, sizeof g_active->curl_err, "unmounting");
		finish_one(g_active, CURLE_ABORTED_BY_CALLBACK);
	}
	pthread_mutex_lock(&g_lock);
	struct pfs_fetch *q = g_queue;
	g_queue = g_queue_tail = NULL;
	pthread_mutex_unlock(&g_lock);
	while (q) {
		struct pfs_fetch *next = q->next;
		snprintf(q->error, sizeof q->error, "HTTP 0, unmounting");
		q->done(q);
		q = next;
	}
	return NULL;
}

int pfs_fetcher_start(size_t max_connections, size_t max_host_connections)
{
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return -1;
	g_multi = curl_multi_init();
	if (!g_multi)
		return -1;
	/* The total is bounded by the fetcher's own queue, not by curl's: a
	 * transfer curl holds back spends its timeout waiting. */
	g_max_active = max_connections;
	if (max_host_connections)
		curl_multi_setopt(g_multi, CURLMOPT_MAX_HOST_CONNECTIONS, (long)max_host_connections);
	/* Idle connections kept for reuse hold descriptors the cache and FUSE
	 * need: at most a quarter of the limit, whatever max_connections says
	 * (set above the limit, a storm's leftovers would starve every later
	 * cache write). */
	long fds = nofile(), idle = (long)max_connections;
	if (fds > 0 && idle > fds / 4)
		idle = fds / 4 > 4 ? fds / 4 : 4;
	curl_multi_setopt(g_multi, CURLMOPT_MAXCONNECTS, idle);
	return pthread_create(&g_thread, NULL, fetcher_main, NULL) == 0 ? 0 : -1;
}

void pfs_fetcher_stop(void)
{
	pthread_mutex_lock(&g_lock);
	g_stop = true;
	pthread_mutex_unlock(&g_lock);
	curl_multi_wakeup(g_multi);
	pthread_join(g_thread, NULL);
	curl_multi_cleanup(g_multi);
	/* curl_global_cleanup() is main's, last: the uploader's blocking
	 * requests still run after this */
}

void pfs_fetch_submit(struct pfs_fetch *f)
{
	f->next = NULL;
	pthread_mutex_lock(&g_lock);
	if (g_stop) { /* a fetch asked for by the end of another (a next page) */
		pthread_mutex_unlock(&g_lock);
		snprintf(f->error, sizeof f->error, "HTTP 0, unmounting");
		f->done(f);
		return;
	}
	if (g_queue_tail)
		g_queue_tail->next = f;
	else
		g_queue = f;
	g_queue_tail = f;
	pthread_mutex_unlock(&g_lock);
	curl_multi_wakeup(g_multi);
}

void pfs_fetch_release(struct pfs_fetch *f)
{
	pfs_mem_give(f->cap);
	free(f->body);
	f->body = NULL;
	f->len = f->cap = 0;
}
