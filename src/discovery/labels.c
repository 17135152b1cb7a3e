/* Label sets and Prometheus target groups, as the mechanisms yield them. */
#include "sd.h"
#include "lib/xalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *pfs_labels_get(const struct pfs_labels *l, const char *name)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->kv[2 * i], name) == 0)
			return l->kv[2 * i + 1];
	return NULL;
}

void pfs_labels_set(struct pfs_labels *l, const char *name, const char *value)
{
	for (size_t i = 0; i < l->n; i++)
		if (strcmp(l->kv[2 * i], name) == 0) {
			free(l->kv[2 * i + 1]);
			l->kv[2 * i + 1] = pfs_xstrdup(value);
			return;
		}
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 8;
		l->kv = pfs_xrealloc(l->kv, 2 * l->cap * sizeof *l->kv);
	}
	l->kv[2 * l->n] = pfs_xstrdup(name);
	l->kv[2 * l->n + 1] = pfs_xstrdup(value);
	l->n++;
}

void pfs_labels_copy(const struct pfs_labels *from, struct pfs_labels *to)
{
	to->n = to->cap = from->n;
	to->kv = pfs_xmalloc((2 * from->n + 1) * sizeof *to->kv);
	for (size_t i = 0; i < 2 * from->n; i++)
		to->kv[i] = pfs_xstrdup(from->kv[i]);
}

void pfs_labels_free(struct pfs_labels *l)
{
	for (size_t i = 0; i < 2 * l->n; i++)
		free(l->kv[i]);
	free(l->kv);
	memset(l, 0, sizeof *l);
}

bool pfs_label_name_ok(const char *name)
{
	if (!*name || (*name >= '0' && *name <= '9'))
		return false;
	for (const char *c = name; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_'))
			return false;
	return true;
}

struct pfs_labels *pfs_sd_set_add(struct pfs_sd_set *s)
{
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 16;
		s->t = pfs_xrealloc(s->t, s->cap * sizeof *s->t);
	}
	memset(&s->t[s->n], 0, sizeof s->t[s->n]);
	return &s->t[s->n++];
}

void pfs_sd_set_free(struct pfs_sd_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		pfs_labels_free(&s->t[i]);
	free(s->t);
	memset(s, 0, sizeof *s);
}

/* A string of at most 4096 bytes with no NUL (label values are shown in
 * .status.json and used in paths only once sanitized). */
static bool plain_value(json_t *v)
{
	return json_is_string(v) && json_string_length(v) <= 4096 &&
	       strlen(json_string_value(v)) == json_string_length(v);
}

int pfs_sd_parse_groups(const char *text, size_t len, const char *meta, const char *meta_value,
			size_t max, struct pfs_sd_set *out, char *err, size_t errlen)
{
	json_error_t je;
	/* bounded depth: jansson refuses nesting past 2048 levels */
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &je), *g, *v, *lv;
	size_t i, j;
	const char *k;

	if (!root) {
		snprintf(err, errlen, "not JSON: %s (line %d)", je.text, je.line);
		return -1;
	}
	if (!json_is_array(root)) {
		snprintf(err, errlen, "must be a JSON array of target groups "
			 "[{\"targets\": [\"host:port\"], \"labels\": {...}}]");
		goto fail;
	}
	json_array_foreach(root, i, g) {
		json_t *targets = json_object_get(g, "targets"), *labels = json_object_get(g, "labels");
		if (!json_is_object(g) || !json_is_array(targets)) {
			snprintf(err, errlen, "group %zu: must be an object with a \"targets\" array", i);
			goto fail;
		}
		if (labels && !json_is_object(labels)) {
			snprintf(err, errlen, "group %zu: \"labels\" must be an object of strings", i);
			goto fail;
		}
		json_object_foreach(labels, k, lv)
			if (!pfs_label_name_ok(k) || !plain_value(lv)) {
				snprintf(err, errlen, "group %zu: label \"%.64s\": a name must be "
					 "[a-zA-Z_][a-zA-Z0-9_]* and its value a string", i, k);
				goto fail;
			}
		json_array_foreach(targets, j, v) {
			if (!plain_value(v) || !json_string_length(v)) {
				snprintf(err, errlen, "group %zu: targets[%zu] must be a \"host:port\" string",
					 i, j);
				goto fail;
			}
			if (out->n >= max) {
				snprintf(err, errlen, "more than max_targets (%zu) targets", max);
				goto fail;
			}
			struct pfs_labels *l = pfs_sd_set_add(out);
			json_object_foreach(labels, k, lv)
				pfs_labels_set(l, k, json_string_value(lv));
			pfs_labels_set(l, "__address__", json_string_value(v));
			if (meta)
				pfs_labels_set(l, meta, meta_value);
		}
	}
	json_decref(root);
	return 0;
fail:
	json_decref(root);
	pfs_sd_set_free(out);
	return -1;
}
