/* kubernetes: pods from the API server, listed (in pages) and then
 * watched (ADDED, MODIFIED, DELETED, BOOKMARK; "410 Gone" lists again).
 * A pod is scraped when its annotations say so, as users annotate pods
 * for Grafana Alloy and Parca:
 *   profiles.grafana.com/<type>.scrape: "true"   (type: memory, cpu,
 *     goroutine, block, mutex), with <type>.port or <type>.port_name and
 *     <type>.path;
 *   parca.dev/scrape: "true", with parca.dev/port and parca.dev/path.
 * One instance per pod and port: the pod's name, or <pod>:<port> when it
 * has several. Its service: annotation pyroscope.io/service_name (or
 * profiles.grafana.com/service_name), else label app.kubernetes.io/name,
 * else app, else the container's name, prefixed with the namespace
 * (<ns>.<name>) unless one namespace is configured. Labels as Prometheus'
 * pod role: __meta_kubernetes_namespace, _pod_name, _pod_ip, _pod_uid,
 * _pod_node_name, _pod_phase, _pod_label_<name>, _pod_annotation_<name>,
 * _pod_container_name, _pod_container_port_name, _port_number.
 * The API server: api_server with bearer_token (or bearer_token_file,
 * read at each connection) and ca_file, or kubectl proxy's plain http;
 * inside a pod, its service account. */
#include "sd.h"

#include "lib/fetch.h"
#include "lib/log.h"
#include "lib/names.h"
#include "lib/xalloc.h"
#include "lib/secrets.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
#define MAX_EVENT_BYTES (16u << 20)
#define WATCH_SECONDS 300
#define PAGE 500

struct kube {
	char *api;          /* https://host:port, no trailing '/' */
	char *token;        /* inline or from env */
	char *token_file;
	char *ca_file;
	char **namespaces;
	size_t n_ns;
	char *selector;     /* labelSelector, or NULL */
	double timeout;
	/* the pods it knows: key "ns/name" -> their label sets (hashed) */
	struct pod **buckets;
	size_t n_buckets, n_pods;
	char rv[128];       /* resourceVersion to watch from */
	bool dirty;         /* pods changed since the last publish */
	struct timespec changed_at;
	size_t relists;
};

struct pod {
	char *key;
	struct pfs_sd_set set;
	struct pod *next; /* in its bucket */
};

/* ---- config ---- */

static int parse(struct pfs_parser *p, json_t *obj, const char *where,
		 const struct pfs_settings *s, void **priv)
{
	static const char *const keys[] = {"api_server", "bearer_token", "bearer_token_env",
					   "bearer_token_file", "ca_file", "namespaces",
					   "label_selector", "timeout", NULL};
	struct kube *k = pfs_xcalloc(1, sizeof *k);
	const char *api = NULL, *token = NULL, *token_file = NULL, *ca = NULL, *sel = NULL;
	json_t *ns = json_object_get(obj, "namespaces"), *e;
	char field[512];
	size_t i;

	*priv = k;
	k->timeout = s->timeout;
	if (pfs_conf_keys(p, obj, where, keys) || pfs_conf_string(p, obj, "api_server", where, &api) ||
	    pfs_conf_secret(p, obj, "bearer_token", where, &token) ||
	    pfs_conf_string(p, obj, "bearer_token_file", where, &token_file) ||
	    pfs_conf_string(p, obj, "ca_file", where, &ca) ||
	    pfs_conf_string(p, obj, "label_selector", where, &sel) ||
	    pfs_conf_duration(p, obj, "timeout", where, 1, 600, &k->timeout))
		return -1;
	snprintf(field, sizeof field, "%sapi_server", where);
	if (!api) { /* in a pod: its service account */
		const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
		if (!host || !port)
			return pfs_conf_fail(p, field, "is required outside a pod (KUBERNETES_SERVICE_HOST "
					     "is not set); for kubectl proxy: \"http://127.0.0.1:8001\"");
		if (asprintf(&k->api, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host,
			     port) < 0)
			return -1;
		if (!token && !token_file)
			token_file = SA_DIR "/token";
		if (!ca)
			ca = SA_DIR "/ca.crt";
	} else {
		if (strncmp(api, "http://", 7) && strncmp(api, "https://", 8))
			return pfs_conf_fail(p, field, "must be an http:// or https:// URL");
		k->api = pfs_xstrdup(api);
		for (size_t n = strlen(k->api); n > 0 && k->api[n - 1] == '/'; n--)
			k->api[n - 1] = '\0';
	}
	if (token && token_file) {
		snprintf(field, sizeof field, "%sbearer_token_file", where);
		return pfs_conf_fail(p, field, "give either bearer_token or bearer_token_file");
	}
	k->token = token ? pfs_xstrdup(token) : NULL;
	k->token_file = token_file ? pfs_xstrdup(token_file) : NULL;
	k->ca_file = ca ? pfs_xstrdup(ca) : NULL;
	k->selector = sel ? pfs_xstrdup(sel) : NULL;
	if (ns) {
		snprintf(field, sizeof field, "%snamespaces", where);
		if (!json_is_array(ns) || !json_array_size(ns))
			return pfs_conf_fail(p, field, "must be a non-empty array of namespace names");
		k->namespaces = pfs_xcalloc(json_array_size(ns), sizeof *k->namespaces);
		json_array_foreach(ns, i, e) {
			const char *v = json_is_string(e) ? json_string_value(e) : "";
			if (!*v || strlen(v) > 63 || strspn(v, "abcdefghijklmnopqrstuvwxyz0123456789-") != strlen(v))
				return pfs_conf_fail(p, field, "[%zu] must be a namespace name", i);
			k->namespaces[k->n_ns++] = pfs_xstrdup(v);
		}
	}
	return 0;
}

/* ---- pods to label sets ---- */

static const char *str(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* A label name from a Kubernetes key: every other byte becomes '_'. */
static void meta_name(const char *prefix, const char *key, char *out, size_t outlen)
{
	size_t n = (size_t)snprintf(out, outlen, "%s", prefix);
	for (const char *c = key; *c && n + 1 < outlen; c++, n++)
		out[n] = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
				 (*c >= '0' && *c <= '9') ? *c : '_';
	out[n < outlen ? n : outlen - 1] = '\0';
}

static const char *const g_types[] = {"memory", "cpu", "goroutine", "block", "mutex", NULL};
static const char *const g_type_profiles[] = {"heap,allocs", "cpu", "goroutine", "block", "mutex"};

/* The container port `want` (a number or a name) of the pod, with its
 * container; false if the pod declares no such port. A number needs no
 * declaration. */
static bool find_port(json_t *containers, const char *want, int *port, const char **cname,
		      const char **pname)
{
	size_t i, j;
	json_t *c, *pt;
	bool number = want && *want && strspn(want, "0123456789") == strlen(want);

	*cname = *pname = NULL;
	*port = number ? atoi(want) : 0;
	json_array_foreach(containers, i, c) {
		json_array_foreach(json_object_get(c, "ports"), j, pt) {
			int n = (int)json_integer_value(json_object_get(pt, "containerPort"));
			const char *name = str(pt, "name");
			if (number ? n == *port : name && strcmp(name, want) == 0) {
				*port = n;
				*cname = str(c, "name");
				*pname = name;
				return true;
			}
		}
	}
	if (number && !*cname && json_array_size(containers))
		*cname = str(json_array_get(containers, 0), "name");
	return number && *port > 0 && *port < 65536;
}

struct port_want {
	int port;
	const char *container, *port_name;
	char path[512];
	char profiles[64];
};

static void add_want(struct port_want *w, size_t *n, size_t max, int port, const char *cname,
		     const char *pname, const char *path, const char *profiles)
{
	for (size_t i = 0; i < *n; i++)
		if (w[i].port == port) {
			if (profiles && !strstr(w[i].profiles, profiles) && w[i].profiles[0] != '*')
				snprintf(w[i].profiles + strlen(w[i].profiles),
					 sizeof w[i].profiles - strlen(w[i].profiles), ",%s", profiles);
			return;
		}
	if (*n == max)
		return;
	w[*n] = (struct port_want){.port = port, .container = cname, .port_name = pname};
	snprintf(w[*n].path, sizeof w[*n].path, "%s", path ? path : "");
	snprintf(w[*n].profiles, sizeof w[*n].profiles, "%s", profiles ? profiles : "*");
	(*n)++;
}

/* A path annotation names one profile's endpoint (/debug/pprof/heap):
 * the base is what comes before it. */
static void base_path(const char *path, char *out, size_t outlen)
{
	static const char *const tails[] = {"/heap", "/allocs", "/profile", "/goroutine", "/block",
					    "/mutex", "/threadcreate", "/", NULL};
	size_t n = strlen(path);

	snprintf(out, outlen, "%s", path);
	for (const char *const *t = tails; *t; t++) {
		size_t m = strlen(*t);
		if (n > m && strcmp(path + n - m, *t) == 0) {
			snprintf(out, outlen, "%.*s", (int)(n - m), path);
			return;
		}
	}
}

/* The pod's targets (or one entry saying why none) into set. */
static void pod_targets(const struct kube *k, json_t *pod, struct pfs_sd_set *set)
{
	json_t *meta = json_object_get(pod, "metadata"), *spec = json_object_get(pod, "spec"),
	       *status = json_object_get(pod, "status"), *ann = json_object_get(meta, "annotations"),
	       *labels = json_object_get(meta, "labels"), *containers = json_object_get(spec, "containers"), *v;
	const char *ns = str(meta, "namespace"), *name = str(meta, "name"), *ip = str(status, "podIP"),
		   *phase = str(status, "phase"), *key;
	struct port_want want[16];
	size_t n_want = 0;
	char buf[512], why[512] = "";
	bool annotated = false;

	if (!ns || !name)
		return;
	/* which ports, paths and profiles the annotations ask for */
	for (size_t t = 0; g_types[t]; t++) {
		char a[128];
		snprintf(a, sizeof a, "profiles.grafana.com/%s.scrape", g_types[t]);
		if (!str(ann, a) || strcmp(str(ann, a), "true"))
			continue;
		annotated = true;
		const char *port, *path, *cname, *pname;
		int number;
		snprintf(a, sizeof a, "profiles.grafana.com/%s.port", g_types[t]);
		port = str(ann, a);
		if (!port) {
			snprintf(a, sizeof a, "profiles.grafana.com/%s.port_name", g_types[t]);
			port = str(ann, a);
		}
		snprintf(a, sizeof a, "profiles.grafana.com/%s.path", g_types[t]);
		path = str(ann, a);
		char base[512] = "";
		if (path)
			base_path(path, base, sizeof base);
		if (!port) {
			snprintf(why, sizeof why, "profiles.grafana.com/%s.scrape without .port or "
				 ".port_name", g_types[t]);
			continue;
		}
		if (!find_port(containers, port, &number, &cname, &pname)) {
			snprintf(why, sizeof why, "profiles.grafana.com/%s: the pod has no container "
				 "port \"%.100s\"", g_types[t], port);
			continue;
		}
		add_want(want, &n_want, 16, number, cname, pname, base, g_type_profiles[t]);
	}
	if (str(ann, "parca.dev/scrape") && strcmp(str(ann, "parca.dev/scrape"), "true") == 0) {
		const char *port = str(ann, "parca.dev/port"), *path = str(ann, "parca.dev/path"), *cname,
			   *pname;
		int number;
		char base[512] = "";
		annotated = true;
		if (path)
			base_path(path, base, sizeof base);
		if (!port)
			snprintf(why, sizeof why, "parca.dev/scrape without parca.dev/port");
		else if (!find_port(containers, port, &number, &cname, &pname))
			snprintf(why, sizeof why, "parca.dev/port: the pod has no container port "
				 "\"%.100s\"", port);
		else
			add_want(want, &n_want, 16, number, cname, pname, base, NULL);
	}
	if (!annotated)
		snprintf(why, sizeof why, "not annotated for profiling (profiles.grafana.com/<type>."
			 "scrape or parca.dev/scrape: \"true\")");
	else if (!phase || strcmp(phase, "Running"))
		snprintf(why, sizeof why, "pod is %s, not Running", phase ? phase : "without a phase");
	else if (!ip || !*ip)
		snprintf(why, sizeof why, "pod has no IP yet");
	else if (n_want)
		why[0] = '\0'; /* some port works: the others' reasons are lost */
	if (why[0] || !n_want) {
		struct pfs_labels *l = pfs_sd_set_add(set);
		snprintf(buf, sizeof buf, "%s/%s", ns, name);
		pfs_labels_set(l, "__meta_kubernetes_pod", buf);
		pfs_labels_set(l, "__drop__", why[0] ? why : "no port to scrape");
		return;
	}
	/* the service name, as Pyroscope's Kubernetes defaults pick it */
	const char *svc = str(ann, "pyroscope.io/service_name");
	bool explicit_name = svc || (svc = str(ann, "profiles.grafana.com/service_name"));
	if (!svc)
		svc = str(labels, "app.kubernetes.io/name");
	if (!svc)
		svc = str(labels, "app");
	for (size_t w = 0; w < n_want; w++) {
		struct pfs_labels *l = pfs_sd_set_add(set);
		const char *s = svc ? svc : want[w].container ? want[w].container : name;
		char service[600], addr[300], port[8];
		if (explicit_name || k->n_ns == 1)
			snprintf(service, sizeof service, "%s", s);
		else
			snprintf(service, sizeof service, "%s.%s", ns, s);
		snprintf(port, sizeof port, "%d", want[w].port);
		snprintf(addr, sizeof addr, strchr(ip, ':') ? "[%s]:%d" : "%s:%d", ip, want[w].port);
		pfs_labels_set(l, "__address__", addr);
		pfs_labels_set(l, "__service__", service);
		if (n_want == 1) {
			pfs_labels_set(l, "__instance__", name);
		} else {
			snprintf(buf, sizeof buf, "%s:%d", name, want[w].port);
			pfs_labels_set(l, "__instance__", buf);
		}
		if (want[w].path[0])
			pfs_labels_set(l, "__profile_path__", want[w].path);
		if (want[w].profiles[0] != '*')
			pfs_labels_set(l, "__profiles__", want[w].profiles);
		pfs_labels_set(l, "__meta_kubernetes_namespace", ns);
		pfs_labels_set(l, "__meta_kubernetes_pod_name", name);
		pfs_labels_set(l, "__meta_kubernetes_pod_ip", ip);
		if ((key = str(meta, "uid")))
			pfs_labels_set(l, "__meta_kubernetes_pod_uid", key);
		if ((key = str(spec, "nodeName")))
			pfs_labels_set(l, "__meta_kubernetes_pod_node_name", key);
		pfs_labels_set(l, "__meta_kubernetes_pod_phase", phase);
		if (want[w].container)
			pfs_labels_set(l, "__meta_kubernetes_pod_container_name", want[w].container);
		if (want[w].port_name)
			pfs_labels_set(l, "__meta_kubernetes_pod_container_port_name", want[w].port_name);
		pfs_labels_set(l, "__meta_kubernetes_pod_container_port_number", port);
		json_object_foreach(labels, key, v)
			if (json_is_string(v)) {
				meta_name("__meta_kubernetes_pod_label_", key, buf, sizeof buf);
				pfs_labels_set(l, buf, json_string_value(v));
			}
		json_object_foreach(ann, key, v)
			if (json_is_string(v) && json_string_length(v) <= 4096) {
				meta_name("__meta_kubernetes_pod_annotation_", key, buf, sizeof buf);
				pfs_labels_set(l, buf, json_string_value(v));
			}
	}
}

void pfs_sd_kube_pod_labels(const char *json, size_t len, size_t n_namespaces, struct pfs_sd_set *out)
{
	struct kube k = {.n_ns = n_namespaces};
	json_error_t je;
	json_t *pod = json_loadb(json, len, 0, &je);

	if (json_is_object(pod))
		pod_targets(&k, pod, out);
	json_decref(pod);
}

/* ---- the pods known ---- */

static size_t bucket_of(const struct kube *k, const char *key)
{
	return (size_t)pfs_fnv1a(PFS_FNV_INIT, key) & (k->n_buckets - 1);
}

static struct pod **find_pod(struct kube *k, const char *key)
{
	struct pod **pp = &k->buckets[bucket_of(k, key)];

	while (*pp && strcmp((*pp)->key, key))
		pp = &(*pp)->next;
	return pp;
}

static void free_pod(struct pod *p)
{
	free(p->key);
	pfs_sd_set_free(&p->set);
	free(p);
}

static void forget_all(struct kube *k)
{
	for (size_t b = 0; b < k->n_buckets; b++)
		while (k->buckets[b]) {
			struct pod *p = k->buckets[b];
			k->buckets[b] = p->next;
			free_pod(p);
		}
	k->n_pods = 0;
}

/* Room for one more pod: the table doubles at one pod per bucket. */
static void grow(struct kube *k)
{
	struct pod **old = k->buckets;
	size_t n = k->n_buckets;

	if (k->n_pods < n)
		return;
	k->n_buckets = n ? n * 2 : 256;
	k->buckets = pfs_xcalloc(k->n_buckets, sizeof *k->buckets);
	for (size_t b = 0; b < n; b++)
		while (old[b]) {
			struct pod *p = old[b], **to = &k->buckets[bucket_of(k, p->key)];
			old[b] = p->next;
			p->next = *to;
			*to = p;
		}
	free(old);
}

static bool wanted_ns(const struct kube *k, const char *ns)
{
	if (k->n_ns <= 1)
		return true; /* one namespace is asked for by path */
	for (size_t i = 0; i < k->n_ns; i++)
		if (strcmp(k->namespaces[i], ns) == 0)
			return true;
	return false;
}

/* A pod added or changed (or, with gone, deleted). */
static void put_pod(struct kube *k, json_t *pod, bool gone)
{
	json_t *meta = json_object_get(pod, "metadata");
	const char *ns = str(meta, "namespace"), *name = str(meta, "name");
	char key[512];
	struct pod *p;

	if (!ns || !name || !wanted_ns(k, ns))
		return;
	snprintf(key, sizeof key, "%s/%s", ns, name);
	grow(k);
	struct pod **pp = find_pod(k, key);
	if (gone) {
		if ((p = *pp)) {
			*pp = p->next;
			free_pod(p);
			k->n_pods--;
		}
	} else {
		if (!(p = *pp)) {
			p = *pp = pfs_xcalloc(1, sizeof *p);
			p->key = pfs_xstrdup(key);
			k->n_pods++;
		}
		pfs_sd_set_free(&p->set);
		pod_targets(k, pod, &p->set);
	}
	k->dirty = true;
	clock_gettime(CLOCK_MONOTONIC, &k->changed_at);
}

static void publish(struct pfs_sd *sd, struct kube *k)
{
	struct pfs_sd_set all = {0};

	for (size_t b = 0; b < k->n_buckets; b++)
		for (struct pod *p = k->buckets[b]; p; p = p->next)
			for (size_t j = 0; j < p->set.n; j++)
				pfs_labels_copy(&p->set.t[j], pfs_sd_set_add(&all));
	k->dirty = false;
	pfs_sd_publish(sd, &all);
	pfs_sd_set_free(&all);
}

/* ---- HTTP ---- */

struct stream {
	struct pfs_sd *sd;
	struct kube *k;
	char *buf;
	size_t len, cap;
	size_t max;      /* bytes held at most: one watch event, or one list page */
	bool too_big;
	bool gone;       /* a 410 came: list again */
	char error[256]; /* an ERROR event other than 410 */
	long lines;
};

static int on_progress(void *arg, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
	struct stream *st = arg;
	struct timespec now;

	(void)a, (void)b, (void)c, (void)d;
	if (pfs_sd_stopping(st->sd))
		return 1;
	/* watch events are handed on a second after the last one (batched) */
	clock_gettime(CLOCK_MONOTONIC, &now);
	if (st->k->dirty && now.tv_sec - st->k->changed_at.tv_sec >= 1 && st->k->rv[0])
		publish(st->sd, st->k);
	return 0;
}

/* One watch event (a JSON line). */
static void on_event(struct stream *st, const char *line, size_t len)
{
	json_error_t je;
	json_t *ev = json_loadb(line, len, 0, &je), *obj;
	const char *type = ev ? str(ev, "type") : NULL, *rv;

	obj = ev ? json_object_get(ev, "object") : NULL;
	if (!type || !json_is_object(obj)) {
		snprintf(st->error, sizeof st->error, "a watch event that is not {\"type\", \"object\"}");
	} else if (strcmp(type, "ERROR") == 0) {
		if (json_integer_value(json_object_get(obj, "code")) == 410)
			st->gone = true;
		else
			snprintf(st->error, sizeof st->error, "watch ERROR %lld: %.200s",
				 (long long)json_integer_value(json_object_get(obj, "code")),
				 str(obj, "message") ? str(obj, "message") : "");
	} else if (strcmp(type, "ADDED") == 0 || strcmp(type, "MODIFIED") == 0 ||
		   strcmp(type, "DELETED") == 0) {
		put_pod(st->k, obj, strcmp(type, "DELETED") == 0);
	} else if (strcmp(type, "BOOKMARK") != 0) {
		snprintf(st->error, sizeof st->error, "unknown watch event type \"%.32s\"", type);
	}
	if (obj && (rv = str(json_object_get(obj, "metadata"), "resourceVersion")) &&
	    strcmp(type ? type : "", "ERROR"))
		snprintf(st->k->rv, sizeof st->k->rv, "%s", rv);
	json_decref(ev);
	st->lines++;
}

/* Keep len more bytes of the answer; false (too_big) past st->max. */
static bool take(struct stream *st, const char *data, size_t len)
{
	if (st->len + len > st->max) {
		st->too_big = true;
		return false;
	}
	if (st->len + len + 1 > st->cap) {
		st->cap = (st->len + len + 1) * 2;
		st->buf = pfs_xrealloc(st->buf, st->cap);
	}
	memcpy(st->buf + st->len, data, len);
	st->len += len;
	return true;
}

static size_t on_watch_body(char *data, size_t size, size_t n, void *arg)
{
	struct stream *st = arg;
	size_t len = size * n;

	if (!take(st, data, len))
		return 0;
	char *start = st->buf, *nl;
	while ((nl = memchr(start, '\n', st->len - (size_t)(start - st->buf)))) {
		if (nl > start)
			on_event(st, start, (size_t)(nl - start));
		start = nl + 1;
		if (st->gone || st->error[0])
			return 0; /* stop reading this watch */
	}
	st->len -= (size_t)(start - st->buf);
	memmove(st->buf, start, st->len);
	return len;
}

static size_t on_list_body(char *data, size_t size, size_t n, void *arg)
{
	return take(arg, data, size * n) ? size * n : 0;
}

/* GET path?query on the API server. 0 on HTTP 200; else -1 with why
 * (*status the HTTP status, 0 if none). */
static int get(struct kube *k, const char *url, bool watch, struct stream *st, long *status,
	       char *err, size_t errlen)
{
	struct pfs_target t = {0};
	char *hdr = NULL, tok[8192] = "", curl_err[CURL_ERROR_SIZE] = "";
	CURL *e = curl_easy_init();
	struct curl_slist *h;
	CURLcode rc;

	if (k->token_file) { /* read at each connection: tokens rotate */
		FILE *f = fopen(k->token_file, "re");
		size_t n = f ? fread(tok, 1, sizeof tok - 1, f) : 0;
		if (f)
			fclose(f);
		if (!f) {
			snprintf(err, errlen, "bearer_token_file %s: %s", k->token_file, strerror(errno));
			curl_easy_cleanup(e);
			*status = 0;
			return -1;
		}
		while (n && (tok[n - 1] == '\n' || tok[n - 1] == '\r' || tok[n - 1] == ' '))
			n--;
		tok[n] = '\0';
	} else if (k->token) {
		snprintf(tok, sizeof tok, "%s", k->token);
	}
	if (tok[0] && asprintf(&hdr, "Authorization: Bearer %s", tok) >= 0) {
		t.headers = &hdr;
		t.n_headers = 1;
	}
	h = pfs_fetch_headers(&t, NULL);
	h = curl_slist_append(h, "Accept: application/json");
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, curl_err);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)(k->timeout * 1000));
	/* a watch lasts WATCH_SECONDS (the server ends it); a list its timeout */
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
			 (long)((watch ? WATCH_SECONDS + k->timeout : k->timeout) * 1000));
	if (watch) { /* a silent connection that died: the server sends bookmarks */
		curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	}
	st->max = watch ? MAX_EVENT_BYTES : (size_t)MAX_EVENT_BYTES * 4;
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, watch ? on_watch_body : on_list_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, st);
	curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(e, CURLOPT_XFERINFODATA, st);
	if (k->ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, k->ca_file);
	rc = curl_easy_perform(e);
	*status = 0;
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, status);
	curl_easy_cleanup(e);
	curl_slist_free_all(h);
	if (hdr) {
		pfs_secret_free(hdr);
	}
	explicit_bzero(tok, sizeof tok);
	if (st->gone || st->error[0])
		return 0; /* the caller looks at these */
	if (rc == CURLE_OK && *status == 200)
		return 0;
	if (st->too_big)
		snprintf(err, errlen, "HTTP %ld, an answer over %zu MiB", *status, st->max >> 20);
	else if (rc != CURLE_OK)
		snprintf(err, errlen, "%s", curl_err[0] ? curl_err : curl_easy_strerror(rc));
	else
		pfs_http_error(err, errlen, *status, (const uint8_t *)st->buf, st->len);
	return -1;
}

/* The URL of the pods (of the one namespace, if one), with query q. */
static void pods_url(const struct kube *k, const char *q, char *out, size_t outlen)
{
	char *sel = k->selector ? curl_easy_escape(NULL, k->selector, 0) : NULL;

	if (k->n_ns == 1)
		snprintf(out, outlen, "%s/api/v1/namespaces/%s/pods?%s%s%s", k->api, k->namespaces[0],
			 q, sel ? "&labelSelector=" : "", sel ? sel : "");
	else
		snprintf(out, outlen, "%s/api/v1/pods?%s%s%s", k->api, q, sel ? "&labelSelector=" : "",
			 sel ? sel : "");
	curl_free(sel);
}

/* List every pod (in pages), replacing what is known. */
static int list(struct pfs_sd *sd, struct kube *k, char *err, size_t errlen)
{
	char url[4096], q[2048], cont[1024] = "";
	long status;

	forget_all(k);
	k->relists++;
	do {
		struct stream st = {.sd = sd, .k = k};
		json_error_t je;
		char *c = cont[0] ? curl_easy_escape(NULL, cont, 0) : NULL;
		snprintf(q, sizeof q, "limit=%d%s%s", PAGE, c ? "&continue=" : "", c ? c : "");
		curl_free(c);
		pods_url(k, q, url, sizeof url);
		int rc = get(k, url, false, &st, &status, err, errlen);
		json_t *root = rc ? NULL : json_loadb(st.buf ? st.buf : "", st.len, 0, &je), *items, *pod;
		free(st.buf);
		if (rc)
			return -1;
		items = json_object_get(root, "items");
		if (!root || (!json_is_array(items) && !json_is_null(items))) {
			snprintf(err, errlen, "HTTP 200, not a PodList");
			json_decref(root);
			return -1;
		}
		size_t i;
		json_array_foreach(items, i, pod)
			put_pod(k, pod, false);
		json_t *meta = json_object_get(root, "metadata");
		snprintf(k->rv, sizeof k->rv, "%s", str(meta, "resourceVersion") ? str(meta, "resourceVersion") : "");
		snprintf(cont, sizeof cont, "%s", str(meta, "continue") ? str(meta, "continue") : "");
		json_decref(root);
	} while (cont[0] && !pfs_sd_stopping(sd));
	return 0;
}

static void run(struct pfs_sd *sd, void *priv)
{
	struct kube *k = priv;
	char err[512], url[4096], q[512];
	double backoff = 1;
	bool listed = false;

	while (!pfs_sd_stopping(sd)) {
		long status = 0;
		if (!listed) {
			if (list(sd, k, err, sizeof err)) {
				if (pfs_sd_stopping(sd))
					break;
				pfs_sd_fail(sd, "list pods: %s", err);
				if (!pfs_sd_wait(sd, backoff))
					break;
				backoff = backoff < 30 ? backoff * 2 : 60;
				continue;
			}
			listed = true;
			publish(sd, k); /* a definite answer: even none */
		}
		struct stream st = {.sd = sd, .k = k};
		snprintf(q, sizeof q, "watch=1&allowWatchBookmarks=true&timeoutSeconds=%d&resourceVersion=%s",
			 WATCH_SECONDS, k->rv);
		pods_url(k, q, url, sizeof url);
		int rc = get(k, url, true, &st, &status, err, sizeof err);
		free(st.buf);
		if (pfs_sd_stopping(sd))
			break;
		if (k->dirty)
			publish(sd, k);
		if (st.gone || status == 410) {
			pfs_debug("discovery: %s: resourceVersion %s is gone (410): listing again",
				  k->api, k->rv);
			listed = false;
			continue;
		}
		if (st.error[0] || rc) {
			pfs_sd_fail(sd, "watch pods: %s", st.error[0] ? st.error : err);
			listed = false; /* start over, after a pause */
			if (!pfs_sd_wait(sd, backoff))
				break;
			backoff = backoff < 30 ? backoff * 2 : 60;
			continue;
		}
		backoff = 1; /* a watch the server ended: watch again from rv */
	}
}

static void describe(void *priv, char *out, size_t outlen)
{
	struct kube *k = priv;

	snprintf(out, outlen, "%s pods%s%s", k->api ? k->api : "", k->n_ns ? " in " : "",
		 k->n_ns ? k->namespaces[0] : "");
	if (k->n_ns > 1)
		snprintf(out + strlen(out), outlen - strlen(out), " ...");
}

static void free_priv(void *priv)
{
	struct kube *k = priv;

	if (!k)
		return;
	forget_all(k);
	free(k->buckets);
	free(k->api);
	pfs_secret_free(k->token);
	free(k->token_file);
	free(k->ca_file);
	for (size_t i = 0; i < k->n_ns; i++)
		free(k->namespaces[i]);
	free(k->namespaces);
	free(k->selector);
	free(k);
}

const struct pfs_sd_ops pfs_sd_kubernetes = {
	.name = "kubernetes",
	.parse = parse,
	.run = run,
	.free = free_priv,
	.describe = describe,
};
