/* Discovery of a pprof cluster: the "discover" block, the mechanisms'
 * threads, and the mapping of their label sets to services and targets. */
#include "discovery.h"

#include "lib/confparse.h"
#include "lib/log.h"
#include "lib/names.h"
#include "sd.h"
#include "snap/snap.h"
#include "source/source.h"
#include "lib/names.h"
#include "lib/xalloc.h"

#include <pthread.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_DROPPED_SHOWN 1000

struct pfs_sd {
	const struct pfs_sd_ops *ops;
	void *priv;
	struct pfs_discovery *d;
	char source[600];  /* "file_sd /etc/..." */
	pthread_t thread;
	bool started;
	/* d->lock */
	struct pfs_sd_set set; /* the last good answer */
	bool answered;         /* once it published or failed */
	time_t last_refresh, last_error_at;
	char last_error[512];  /* of the last refresh, "" if it succeeded */
};

struct keep_rule {
	char *label, *pattern;
	regex_t re;
};

struct pfs_discovery {
	struct pfs_cluster *c;
	struct pfs_sd *sds;
	size_t n_sds;
	char **service_labels, **instance_labels;
	size_t n_service_labels, n_instance_labels;
	struct keep_rule *keep;
	size_t n_keep;
	char *scheme, *path;
	size_t max_targets;
	struct pfs_target tmpl; /* auth, headers, timeout of every target */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool stop;
	pthread_mutex_t applying; /* one mapping at a time */
	/* the last mapping (lock) */
	json_t *discovered, *dropped;
	size_t n_discovered, n_dropped, n_services;
};

static pfs_discovery_added_fn g_added;

void pfs_discovery_set_hook(pfs_discovery_added_fn fn) { g_added = fn; }

static const struct pfs_sd_ops *const g_mechanisms[] = {
	&pfs_sd_file, &pfs_sd_http, &pfs_sd_dns, &pfs_sd_kubernetes, NULL,
};

/* ---- config ---- */

static int label_list(struct pfs_parser *p, json_t *obj, const char *key, const char *where,
		      const char *const *dflt, char ***out, size_t *n)
{
	json_t *v = json_object_get(obj, key), *e;
	char field[512];
	size_t i;

	snprintf(field, sizeof field, "%s%s", where, key);
	if (!v) {
		for (i = 0; dflt[i]; i++)
			;
		*out = pfs_xcalloc(i, sizeof **out);
		for (*n = 0; *n < i; (*n)++)
			(*out)[*n] = pfs_xstrdup(dflt[*n]);
		return 0;
	}
	if (json_is_string(v))
		v = json_pack("[O]", v);
	else if (json_is_array(v) && json_array_size(v) > 0)
		json_incref(v);
	else
		return pfs_conf_fail(p, field, "must be a label name or a non-empty array of them, "
				     "tried in order");
	*out = pfs_xcalloc(json_array_size(v), sizeof **out);
	json_array_foreach(v, i, e) {
		if (!json_is_string(e) || !pfs_label_name_ok(json_string_value(e))) {
			json_decref(v);
			return pfs_conf_fail(p, field, "[%zu] must be a label name "
					     "([a-zA-Z_][a-zA-Z0-9_]*)", i);
		}
		(*out)[(*n)++] = pfs_xstrdup(json_string_value(e));
	}
	json_decref(v);
	return 0;
}

static int parse_keep(struct pfs_parser *p, json_t *v, const char *where, struct pfs_discovery *d)
{
	char field[512], *anchored;
	const char *k;
	json_t *rv;

	snprintf(field, sizeof field, "%skeep", where);
	if (!v)
		return 0;
	if (!json_is_object(v))
		return pfs_conf_fail(p, field, "must be an object of label names to regular "
				     "expressions (each must match the whole value)");
	d->keep = pfs_xcalloc(json_object_size(v) ? json_object_size(v) : 1, sizeof *d->keep);
	json_object_foreach(v, k, rv) {
		char sub[600];
		snprintf(sub, sizeof sub, "%skeep.", where);
		pfs_conf_key_path(field, sizeof field, sub, k);
		if (!pfs_label_name_ok(k))
			return pfs_conf_fail(p, field, "must be a label name ([a-zA-Z_][a-zA-Z0-9_]*)");
		if (!json_is_string(rv))
			return pfs_conf_fail(p, field, "must be a regular expression string");
		size_t ops = 0;
		for (const char *c = json_string_value(rv); *c; c++)
			ops += strchr("*+?{", *c) != NULL;
		/* glibc's regcomp copies the tree per repetition: a bound keeps
		 * "a+++++..." from taking gigabytes */
		if (json_string_length(rv) > 256 || ops > 16)
			return pfs_conf_fail(p, field, "a regular expression of at most 256 bytes and "
					     "16 repetitions (*, +, ?, {n})");
		struct keep_rule *r = &d->keep[d->n_keep];
		if (asprintf(&anchored, "^(%s)$", json_string_value(rv)) < 0)
			return pfs_conf_fail(p, field, "out of memory");
		int rc = regcomp(&r->re, anchored, REG_EXTENDED | REG_NOSUB);
		free(anchored);
		if (rc) {
			char msg[128];
			regerror(rc, &r->re, msg, sizeof msg);
			return pfs_conf_fail(p, field, "not a POSIX extended regular expression: %s", msg);
		}
		r->label = pfs_xstrdup(k);
		r->pattern = pfs_xstrdup(json_string_value(rv));
		d->n_keep++;
	}
	return 0;
}

static int add_mechanism(struct pfs_parser *p, const struct pfs_sd_ops *ops, json_t *obj,
			 const char *where, const struct pfs_settings *s, struct pfs_discovery *d)
{
	struct pfs_sd *sd = &d->sds[d->n_sds];
	char field[512];

	snprintf(field, sizeof field, "%s.", where);
	if (!json_is_object(obj))
		return pfs_conf_fail(p, where, "must be an object (or an array of objects)");
	sd->ops = ops; /* freed with the rest, parsed or not */
	sd->d = d;
	d->n_sds++;
	if (ops->parse(p, obj, field, s, &sd->priv))
		return -1;
	char what[512];
	ops->describe(sd->priv, what, sizeof what);
	snprintf(sd->source, sizeof sd->source, "%s %s", ops->name, what);
	return 0;
}

int pfs_discovery_parse(struct pfs_parser *p, json_t *v, const char *where,
			const struct pfs_settings *s, struct pfs_cluster *c)
{
	static const char *const keys[] = {"file_sd", "http_sd", "dns_sd", "kubernetes", "service",
					   "instance", "keep", "scheme", "path", "max_targets", NULL};
	static const char *const dflt_service[] = {"__service__", "service_name", "service", "job",
						   NULL};
	static const char *const dflt_instance[] = {"__instance__", "instance", "__address__", NULL};
	struct pfs_discovery *d = pfs_xcalloc(1, sizeof *d);
	const char *scheme = "http", *path = "/debug/pprof";
	char field[512], sub[512];
	size_t cap = 0;
	json_t *mv;

	c->discovery = d;
	d->c = c;
	pthread_mutex_init(&d->lock, NULL);
	pthread_mutex_init(&d->applying, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	d->discovered = json_array();
	d->dropped = json_array();
	c->profiles = s->profiles;
	c->cpu_seconds = s->cpu_seconds;
	pfs_conf_template(s, &d->tmpl);
	d->max_targets = 10000;
	if (!json_is_object(v))
		return pfs_conf_fail(p, where, "must be an object with one of file_sd, http_sd, "
				     "dns_sd, kubernetes");
	snprintf(sub, sizeof sub, "%s.", where);
	if (pfs_conf_keys(p, v, sub, keys) ||
	    label_list(p, v, "service", sub, dflt_service, &d->service_labels,
		       &d->n_service_labels) ||
	    label_list(p, v, "instance", sub, dflt_instance, &d->instance_labels,
		       &d->n_instance_labels) ||
	    parse_keep(p, json_object_get(v, "keep"), sub, d) ||
	    pfs_conf_string(p, v, "scheme", sub, &scheme) || pfs_conf_string(p, v, "path", sub, &path))
		return -1;
	if (strcmp(scheme, "http") && strcmp(scheme, "https")) {
		snprintf(field, sizeof field, "%sscheme", sub);
		return pfs_conf_fail(p, field, "must be \"http\" or \"https\"");
	}
	if (path[0] != '/' || strpbrk(path, "?#\r\n ")) {
		snprintf(field, sizeof field, "%spath", sub);
		return pfs_conf_fail(p, field, "must be a URL path starting with '/'");
	}
	d->scheme = pfs_xstrdup(scheme);
	d->path = pfs_xstrdup(path);
	if ((mv = json_object_get(v, "max_targets"))) {
		snprintf(field, sizeof field, "%smax_targets", sub);
		if (!json_is_integer(mv) || json_integer_value(mv) < 1 ||
		    json_integer_value(mv) > 1000000)
			return pfs_conf_fail(p, field, "must be an integer from 1 to 1000000");
		d->max_targets = (size_t)json_integer_value(mv);
	}
	for (const struct pfs_sd_ops *const *m = g_mechanisms; *m; m++)
		if ((mv = json_object_get(v, (*m)->name)))
			cap += json_is_array(mv) ? json_array_size(mv) : 1;
	if (!cap)
		return pfs_conf_fail(p, where, "needs one of file_sd, http_sd, dns_sd, kubernetes");
	d->sds = pfs_xcalloc(cap, sizeof *d->sds);
	for (const struct pfs_sd_ops *const *m = g_mechanisms; *m; m++) {
		size_t i;
		json_t *e;
		if (!(mv = json_object_get(v, (*m)->name)))
			continue;
		snprintf(field, sizeof field, "%s%s", sub, (*m)->name);
		if (!json_is_array(mv))
			mv = json_pack("[O]", mv);
		else
			json_incref(mv);
		json_array_foreach(mv, i, e) {
			char one[600];
			snprintf(one, sizeof one, json_array_size(mv) > 1 || json_is_array(json_object_get(v, (*m)->name)) ? "%s[%zu]" : "%s", field, i);
			if (add_mechanism(p, *m, e, one, s, d)) {
				json_decref(mv);
				return -1;
			}
		}
		json_decref(mv);
	}
	return 0;
}

void pfs_discovery_free(struct pfs_cluster *c)
{
	struct pfs_discovery *d = c->discovery;

	if (!d)
		return;
	for (size_t i = 0; i < d->n_sds; i++) {
		if (d->sds[i].ops)
			d->sds[i].ops->free(d->sds[i].priv);
		pfs_sd_set_free(&d->sds[i].set);
	}
	free(d->sds);
	for (size_t i = 0; i < d->n_service_labels; i++)
		free(d->service_labels[i]);
	for (size_t i = 0; i < d->n_instance_labels; i++)
		free(d->instance_labels[i]);
	free(d->service_labels);
	free(d->instance_labels);
	for (size_t i = 0; i < d->n_keep; i++) {
		regfree(&d->keep[i].re);
		free(d->keep[i].label);
		free(d->keep[i].pattern);
	}
	free(d->keep);
	free(d->scheme);
	free(d->path);
	pfs_target_free(&d->tmpl);
	json_decref(d->discovered);
	json_decref(d->dropped);
	free(d);
	c->discovery = NULL;
}

/* ---- mapping ---- */

/* "host:port", "[v6]:port": no userinfo, path or odd bytes. */
static bool address_ok(const char *a)
{
	const char *colon = strrchr(a, ':');
	size_t n = strlen(a);

	if (!colon || colon == a || n > 300 || strspn(colon + 1, "0123456789") != strlen(colon + 1) ||
	    !colon[1] || strlen(colon + 1) > 5 || atoi(colon + 1) < 1 || atoi(colon + 1) > 65535)
		return false;
	if (a[0] == '[')
		return colon[-1] == ']' && strspn(a + 1, "0123456789abcdefABCDEF:.") ==
						   (size_t)(colon - a - 2);
	for (const char *c = a; c < colon; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_'))
			return false;
	return true;
}

/* The first non-empty value of the labels in names. */
static const char *first_of(const struct pfs_labels *l, char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		const char *v = pfs_labels_get(l, names[i]);
		if (v && *v)
			return v;
	}
	return NULL;
}

struct group {
	char *service; /* as upstream says it */
	struct pfs_target *targets;
	size_t n, cap;
};

struct mapping {
	struct group *groups;
	size_t n_groups, cap_groups;
	size_t *buckets; /* open hash of service -> group index + 1 */
	size_t n_buckets;
	size_t n_targets;
	size_t known, n_new; /* services the cluster has; new ones in this mapping */
};

/* The bucket of service in m's hash: its group's index + 1, or 0. */
static size_t *group_bucket(struct mapping *m, const char *service)
{
	size_t b = (size_t)pfs_fnv1a(PFS_FNV_INIT, service) & (m->n_buckets - 1);

	while (m->buckets[b] && strcmp(m->groups[m->buckets[b] - 1].service, service))
		b = (b + 1) & (m->n_buckets - 1);
	return &m->buckets[b];
}

static struct group *group_find(struct mapping *m, const char *service)
{
	size_t *b = group_bucket(m, service);

	return *b ? &m->groups[*b - 1] : NULL;
}

/* The group of service, made if new. */
static struct group *group_of(struct mapping *m, const char *service)
{
	size_t *b = group_bucket(m, service);

	if (!*b) {
		if (m->n_groups == m->cap_groups) {
			m->cap_groups = m->cap_groups ? m->cap_groups * 2 : 16;
			m->groups = pfs_xrealloc(m->groups, m->cap_groups * sizeof *m->groups);
		}
		memset(&m->groups[m->n_groups], 0, sizeof m->groups[m->n_groups]);
		m->groups[m->n_groups].service = pfs_xstrdup(service);
		*b = ++m->n_groups;
	}
	return &m->groups[*b - 1];
}

/* The cluster's service of this upstream name, if it knows one. */
static struct pfs_service *known_service(struct pfs_cluster *c, const char *upstream)
{
	char name[224];
	struct pfs_service *s;

	pfs_name_stable(upstream, name, sizeof name);
	s = pfs_registry_service(c, name);
	return s && strcmp(s->upstream, upstream) == 0 ? s : NULL;
}

static void drop(struct pfs_discovery *d, json_t *dropped, const struct pfs_sd *sd,
		 const struct pfs_labels *l, const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void drop(struct pfs_discovery *d, json_t *dropped, const struct pfs_sd *sd,
		 const struct pfs_labels *l, const char *fmt, ...)
{
	char why[600];
	va_list ap;

	d->n_dropped++;
	if (json_array_size(dropped) >= MAX_DROPPED_SHOWN)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	json_t *labels = json_object();
	for (size_t i = 0; i < l->n; i++)
		json_object_set_new(labels, l->kv[2 * i], json_string(l->kv[2 * i + 1]));
	const char *a = pfs_labels_get(l, "__address__"), *pod = pfs_labels_get(l, "__meta_kubernetes_pod");
	json_t *one = json_pack("{s:s?, s:s, s:s, s:o}", "address", a, "reason", why, "from",
				sd->source, "labels", labels);
	if (pod)
		json_object_set_new(one, "pod", json_string(pod));
	json_array_append_new(dropped, one);
}

/* One label set: into its service's group, or dropped with why. */
static void map_one(struct pfs_discovery *d, struct mapping *m, json_t *found, json_t *dropped,
		    const struct pfs_sd *sd, const struct pfs_labels *l)
{
	const char *addr = pfs_labels_get(l, "__address__"), *svc, *inst, *scheme, *path;
	const char *why = pfs_labels_get(l, "__drop__"), *prof = pfs_labels_get(l, "__profiles__");
	char name[256], url[1024];
	unsigned mask = 0;

	if (why) { /* the mechanism's own reason (a pod not annotated, say) */
		drop(d, dropped, sd, l, "%s", why);
		return;
	}
	if (!addr || !*addr) {
		drop(d, dropped, sd, l, "no __address__");
		return;
	}
	for (size_t i = 0; i < d->n_keep; i++) {
		const char *v = pfs_labels_get(l, d->keep[i].label);
		if (regexec(&d->keep[i].re, v ? v : "", 0, NULL, 0)) {
			drop(d, dropped, sd, l, "keep: %s=\"%.200s\" does not match \"%s\"",
			     d->keep[i].label, v ? v : "", d->keep[i].pattern);
			return;
		}
	}
	if (!(svc = first_of(l, d->service_labels, d->n_service_labels))) {
		char tried[512] = "";
		for (size_t i = 0; i < d->n_service_labels; i++)
			snprintf(tried + strlen(tried), sizeof tried - strlen(tried), "%s%s",
				 i ? ", " : "", d->service_labels[i]);
		drop(d, dropped, sd, l, "no service name: none of the labels %s is set", tried);
		return;
	}
	if (!(inst = first_of(l, d->instance_labels, d->n_instance_labels))) {
		drop(d, dropped, sd, l, "no instance name: none of its instance labels is set");
		return;
	}
	if (!address_ok(addr)) {
		drop(d, dropped, sd, l, "__address__ \"%.200s\" is not host:port", addr);
		return;
	}
	scheme = pfs_labels_get(l, "__scheme__");
	scheme = scheme && *scheme ? scheme : d->scheme;
	path = pfs_labels_get(l, "__profile_path__");
	path = path && *path ? path : d->path;
	if ((strcmp(scheme, "http") && strcmp(scheme, "https")) || path[0] != '/' ||
	    strpbrk(path, "?#\r\n \"\\<>{}|^`") || strlen(path) > 512) {
		drop(d, dropped, sd, l, "__scheme__ or __profile_path__ is not http(s) and a path");
		return;
	}
	if (prof && *prof) { /* the profiles this target serves: "heap,cpu" */
		char *copy = pfs_xstrdup(prof), *save = NULL;
		for (char *w = strtok_r(copy, ",", &save); w; w = strtok_r(NULL, ",", &save))
			for (int k = 0; k < PFS_NPROFILES; k++)
				if (strcmp(w, pfs_profile_names[k]) == 0)
					mask |= 1u << k;
		free(copy);
		if (!(mask & d->c->profiles)) {
			drop(d, dropped, sd, l, "__profiles__ \"%.200s\" names none of the cluster's "
			     "profiles", prof);
			return;
		}
	}
	if (m->n_targets >= d->max_targets) {
		drop(d, dropped, sd, l, "over max_targets (%zu)", d->max_targets);
		return;
	}
	pfs_name_sanitize(inst, name, sizeof name);
	snprintf(url, sizeof url, "%s://%s%s", scheme, addr, path);
	for (size_t n = strlen(url); n > 0 && url[n - 1] == '/'; n--)
		url[n - 1] = '\0';
	struct group *g = group_find(m, svc);
	if (!g) {
		/* services discovered once stay known until unmount: bounded */
		bool known = known_service(d->c, svc) != NULL;
		if (!known && m->known + m->n_new >= d->max_targets) {
			drop(d, dropped, sd, l, "a new service %.200s, but the cluster knows max_targets "
			     "(%zu) services already (an unmount forgets those gone)", svc,
			     d->max_targets);
			return;
		}
		m->n_new += !known;
		g = group_of(m, svc);
	}
	for (size_t i = 0; i < g->n; i++)
		if (strcmp(g->targets[i].name, name) == 0) {
			drop(d, dropped, sd, l, "instance %s of service %.200s is listed already (%s)",
			     name, svc, g->targets[i].url);
			return;
		}
	if (g->n == g->cap) {
		g->cap = g->cap ? g->cap * 2 : 4;
		g->targets = pfs_xrealloc(g->targets, g->cap * sizeof *g->targets);
	}
	struct pfs_target *t = &g->targets[g->n++];
	pfs_target_copy(&d->tmpl, t);
	t->name = pfs_xstrdup(name);
	t->url = pfs_xstrdup(url);
	t->log_url = pfs_xstrdup(url);
	t->profiles = mask;
	m->n_targets++;
	json_array_append_new(found, json_pack("{s:s, s:s, s:s, s:s}", "service", svc, "instance",
					       name, "url", url, "from", sd->source));
}

/* The service of this upstream name, made if new (*made). */
/* Every mechanism's last answer, mapped and handed to the services. */
static void apply(struct pfs_discovery *d)
{
	struct pfs_cluster *c = d->c;
	struct mapping m = {0};
	json_t *found = json_array(), *dropped = json_array();
	size_t added = 0, gone = 0, total = 0, n_made = 0;

	pthread_mutex_lock(&d->applying);
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->n_sds; i++)
		total += d->sds[i].set.n;
	m.n_buckets = 16;
	while (m.n_buckets < 2 * total)
		m.n_buckets *= 2;
	m.buckets = pfs_xcalloc(m.n_buckets, sizeof *m.buckets);
	pthread_mutex_lock(&c->lock);
	m.known = c->n_services;
	pthread_mutex_unlock(&c->lock);
	size_t prev_dropped = d->n_dropped;
	d->n_dropped = 0;
	for (size_t i = 0; i < d->n_sds; i++)
		for (size_t k = 0; k < d->sds[i].set.n; k++)
			map_one(d, &m, found, dropped, &d->sds[i], &d->sds[i].set.t[k]);
	size_t n_dropped = d->n_dropped;
	pthread_mutex_unlock(&d->lock);

	/* apply is the only one to add this cluster's services */
	for (size_t g = 0; g < m.n_groups; g++) {
		struct pfs_service *s = known_service(c, m.groups[g].service);
		size_t a, o;
		if (!s) {
			s = pfs_registry_add_discovered(c, m.groups[g].service);
			n_made++;
		}
		pfs_snap_set_targets(s, m.groups[g].targets, m.groups[g].n, &a, &o);
		added += a;
		gone += o;
		free(m.groups[g].targets);
	}
	struct pfs_service **svcs;
	size_t n_svcs = pfs_registry_services(c, &svcs);
	for (size_t i = 0; i < n_svcs; i++)
		if (!group_find(&m, svcs[i]->upstream)) { /* every instance gone: its snapshots stay */
			size_t a, o;
			pfs_snap_set_targets(svcs[i], NULL, 0, &a, &o);
			gone += o;
		}
	free(svcs);
	for (size_t g = 0; g < m.n_groups; g++)
		free(m.groups[g].service);

	pthread_mutex_lock(&d->lock);
	bool changed = added || gone || m.n_groups != d->n_services || n_dropped != prev_dropped ||
		       m.n_targets != d->n_discovered;
	json_decref(d->discovered);
	json_decref(d->dropped);
	d->discovered = found;
	d->dropped = dropped;
	d->n_discovered = m.n_targets;
	d->n_services = m.n_groups;
	d->n_dropped = n_dropped;
	pthread_mutex_unlock(&d->lock);
	if (changed)
		pfs_info("discovery %s: %zu targets in %zu services (%zu new, %zu gone), %zu dropped%s",
			 c->name, m.n_targets, m.n_groups, added, gone, n_dropped,
			 n_dropped ? " (why: .status.json)" : "");
	pthread_mutex_unlock(&d->applying);
	if (n_made && g_added)
		g_added(c);
	free(m.groups);
	free(m.buckets);
}

/* ---- the mechanisms' side ---- */

void pfs_sd_publish(struct pfs_sd *sd, struct pfs_sd_set *set)
{
	struct pfs_discovery *d = sd->d;

	pthread_mutex_lock(&d->lock);
	if (sd->last_error[0])
		pfs_info("discovery %s: %s works again (%zu targets)", d->c->name, sd->source, set->n);
	pfs_sd_set_free(&sd->set);
	sd->set = *set;
	memset(set, 0, sizeof *set);
	sd->answered = true;
	sd->last_refresh = time(NULL);
	sd->last_error[0] = '\0';
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
	apply(d);
}

void pfs_sd_fail(struct pfs_sd *sd, const char *fmt, ...)
{
	struct pfs_discovery *d = sd->d;
	char why[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&d->lock);
	size_t kept = 0;
	for (size_t i = 0; i < sd->set.n; i++)
		kept += !pfs_labels_get(&sd->set.t[i], "__drop__");
	if (strcmp(why, sd->last_error))
		pfs_err("discovery %s: %s failed: %s (keeping its last %zu targets)", d->c->name,
			sd->source, why, kept);
	snprintf(sd->last_error, sizeof sd->last_error, "%s", why);
	sd->last_error_at = time(NULL);
	sd->answered = true;
	pthread_cond_broadcast(&d->cond);
	pthread_mutex_unlock(&d->lock);
}

bool pfs_sd_wait(struct pfs_sd *sd, double seconds)
{
	struct pfs_discovery *d = sd->d;
	struct timespec dl;
	bool go;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)seconds;
	dl.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (dl.tv_nsec >= 1000000000L) {
		dl.tv_sec++;
		dl.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&d->lock);
	while (!d->stop && pthread_cond_timedwait(&d->cond, &d->lock, &dl) == 0)
		;
	go = !d->stop;
	pthread_mutex_unlock(&d->lock);
	return go;
}

bool pfs_sd_stopping(struct pfs_sd *sd)
{
	pthread_mutex_lock(&sd->d->lock);
	bool stop = sd->d->stop;
	pthread_mutex_unlock(&sd->d->lock);
	return stop;
}

size_t pfs_sd_max_targets(const struct pfs_sd *sd) { return sd->d->max_targets; }

void pfs_sd_poll(struct pfs_sd *sd, void *priv, double every, pfs_sd_refresh_fn refresh,
		 bool (*changed)(void *priv))
{
	char err[512];

	do {
		struct pfs_sd_set set = {0};
		err[0] = '\0';
		int rc = refresh(sd, priv, &set, err, sizeof err);
		if (pfs_sd_stopping(sd)) { /* cut short: no answer */
			pfs_sd_set_free(&set);
			return;
		}
		if (rc == 0)
			pfs_sd_publish(sd, &set);
		else
			pfs_sd_fail(sd, "%s", err);
		pfs_sd_set_free(&set);
		for (double waited = 0; waited < every; waited += 1)
			if (!pfs_sd_wait(sd, every - waited < 1 ? every - waited : 1))
				return;
			else if (changed && changed(priv))
				break;
	} while (!pfs_sd_stopping(sd));
}

static void *sd_main(void *arg)
{
	struct pfs_sd *sd = arg;

	sd->ops->run(sd, sd->priv);
	return NULL;
}

/* ---- start, stop, status ---- */

int pfs_discovery_start(struct pfs_config *cfg, double wait)
{
	struct timespec dl;

	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_discovery *d = cfg->clusters[i].discovery;
		for (size_t k = 0; d && k < d->n_sds; k++) {
			if (pthread_create(&d->sds[k].thread, NULL, sd_main, &d->sds[k]))
				return -1;
			d->sds[k].started = true;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)wait;
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_discovery *d = cfg->clusters[i].discovery;
		for (size_t k = 0; d && k < d->n_sds; k++) {
			pthread_mutex_lock(&d->lock);
			while (!d->sds[k].answered &&
			       pthread_cond_timedwait(&d->cond, &d->lock, &dl) == 0)
				;
			if (!d->sds[k].answered)
				pfs_warn("discovery %s: %s has not answered yet; mounting without it",
					 d->c->name, d->sds[k].source);
			pthread_mutex_unlock(&d->lock);
		}
	}
	return 0;
}

void pfs_discovery_stop(struct pfs_config *cfg)
{
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_discovery *d = cfg->clusters[i].discovery;
		if (!d)
			continue;
		pthread_mutex_lock(&d->lock);
		d->stop = true;
		pthread_cond_broadcast(&d->cond);
		pthread_mutex_unlock(&d->lock);
		for (size_t k = 0; k < d->n_sds; k++)
			if (d->sds[k].started) {
				pthread_join(d->sds[k].thread, NULL);
				d->sds[k].started = false;
			}
	}
}

json_t *pfs_discovery_status(struct pfs_cluster *c)
{
	struct pfs_discovery *d = c->discovery;
	json_t *mech, *out;

	if (!d)
		return NULL;
	mech = json_array();
	pthread_mutex_lock(&d->lock);
	for (size_t i = 0; i < d->n_sds; i++) {
		struct pfs_sd *sd = &d->sds[i];
		json_array_append_new(mech, json_pack(
			"{s:s, s:I, s:o, s:s?, s:o}", "source", sd->source, "targets",
			(json_int_t)sd->set.n, "last_refresh", pfs_name_time_json(sd->last_refresh), "last_error",
			sd->last_error[0] ? sd->last_error : NULL, "last_error_at",
			pfs_name_time_json(sd->last_error_at)));
	}
	out = json_pack("{s:s, s:o, s:I, s:I, s:O, s:I, s:O}", "cluster", c->name, "mechanisms",
			mech, "services", (json_int_t)d->n_services, "n_discovered",
			(json_int_t)d->n_discovered, "discovered", d->discovered, "n_dropped",
			(json_int_t)d->n_dropped, "dropped", d->dropped);
	pthread_mutex_unlock(&d->lock);
	return out;
}
