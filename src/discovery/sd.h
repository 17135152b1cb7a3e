/* The interface of one discovery mechanism (file_sd.c, http_sd.c, ...),
 * and the label sets they yield. Private to src/discovery/. */
#ifndef PFS_SD_H
#define PFS_SD_H

#include "lib/confparse.h"

#include <stdbool.h>
#include <stddef.h>

/* One target's labels: name/value pairs (__address__, __meta_*, ...). */
struct pfs_labels {
	char **kv; /* name, value, name, value, ... */
	size_t n, cap; /* pairs */
};
const char *pfs_labels_get(const struct pfs_labels *l, const char *name);
/* Set name to value (replacing), both copied. */
void pfs_labels_set(struct pfs_labels *l, const char *name, const char *value);
/* to (empty) = a copy of from. */
void pfs_labels_copy(const struct pfs_labels *from, struct pfs_labels *to);
void pfs_labels_free(struct pfs_labels *l);
/* A Prometheus label name: [a-zA-Z_][a-zA-Z0-9_]*. */
bool pfs_label_name_ok(const char *name);

/* A mechanism's whole answer: every target it lists now. */
struct pfs_sd_set {
	struct pfs_labels *t;
	size_t n, cap;
};
struct pfs_labels *pfs_sd_set_add(struct pfs_sd_set *s);
void pfs_sd_set_free(struct pfs_sd_set *s);

/* Prometheus target groups ([{"targets": ["host:port"], "labels": {..}}],
 * as file_sd and http_sd take them) into out, each target with
 * __address__, its group's labels and meta=meta_value. -1 with why (the
 * group and field) on anything else, or over max targets. */
int pfs_sd_parse_groups(const char *text, size_t len, const char *meta, const char *meta_value,
			size_t max, struct pfs_sd_set *out, char *err, size_t errlen);

/* The label sets one Kubernetes pod (JSON) yields, as the watch makes
 * them (for the fuzzer); n_namespaces as configured. */
void pfs_sd_kube_pod_labels(const char *json, size_t len, size_t n_namespaces, struct pfs_sd_set *out);

struct pfs_sd; /* one mechanism of one cluster, run by discovery.c */

struct pfs_sd_ops {
	const char *name; /* its key in "discover" */
	/* Its settings (obj), the cluster's settings s for HTTP auth. */
	int (*parse)(struct pfs_parser *p, json_t *obj, const char *where,
		     const struct pfs_settings *s, void **priv);
	/* Its thread: refresh, pfs_sd_publish() or pfs_sd_fail(), and
	 * pfs_sd_wait() between; return once that says stop. */
	void (*run)(struct pfs_sd *sd, void *priv);
	void (*free)(void *priv);
	/* What it reads, for logs and status (no secrets). */
	void (*describe)(void *priv, char *out, size_t outlen);
};

extern const struct pfs_sd_ops pfs_sd_file, pfs_sd_http, pfs_sd_dns, pfs_sd_kubernetes;

/* A complete answer (set taken over): it replaces the last one. */
void pfs_sd_publish(struct pfs_sd *sd, struct pfs_sd_set *set);
/* The refresh failed: the last good answer stays; logged when the
 * reason changes. */
void pfs_sd_fail(struct pfs_sd *sd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sleep up to seconds; false once the mechanism must stop. */
bool pfs_sd_wait(struct pfs_sd *sd, double seconds);
bool pfs_sd_stopping(struct pfs_sd *sd);
/* Most targets one answer may hold (the cluster's max_targets). */
size_t pfs_sd_max_targets(const struct pfs_sd *sd);

/* A polling mechanism's thread: refresh() now and then every `every`
 * seconds; with changed() (asked every second), also as soon as that
 * says so. */
typedef int (*pfs_sd_refresh_fn)(struct pfs_sd *sd, void *priv, struct pfs_sd_set *out, char *err,
				 size_t errlen);
void pfs_sd_poll(struct pfs_sd *sd, void *priv, double every, pfs_sd_refresh_fn refresh,
		 bool (*changed)(void *priv));

/* Shared keys of polling mechanisms. */
#define PFS_SD_REFRESH_DEFAULT 30.0

#endif
