/* The registry: clusters and their services. */
#include "registry.h"

#include "lib/log.h"
#include "lib/names.h"
#include "lib/xalloc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void (*g_on_added)(struct pfs_service *s);
static void (*g_on_unknown)(struct pfs_cluster *c);

void pfs_registry_set_hooks(void (*on_added)(struct pfs_service *s),
			    void (*on_unknown)(struct pfs_cluster *c))
{
	g_on_added = on_added;
	g_on_unknown = on_unknown;
}

static void free_service(struct pfs_service *s)
{
	for (size_t k = 0; k < s->n_targets; k++)
		pfs_target_free(&s->targets[k]);
	free(s->targets);
	for (size_t k = 0; k < s->n_files; k++)
		free(s->files[k].type_id);
	free(s->files);
	free(s->name);
	free(s->upstream);
	free(s);
}

struct pfs_cluster *pfs_registry_cluster(struct pfs_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_clusters; i++)
		if (strcmp(cfg->clusters[i].name, name) == 0)
			return &cfg->clusters[i];
	return NULL;
}

static size_t name_hash(const char *s)
{
	return (size_t)pfs_fnv1a(PFS_FNV_INIT, s);
}

/* c->lock held. Services are only ever appended: the index covers the
 * first n_indexed and is rebuilt when more came. */
static void index_services(struct pfs_cluster *c)
{
	if (c->by_name && c->n_indexed == c->n_services)
		return;
	free(c->by_name);
	c->name_buckets = 16;
	while (c->name_buckets < 2 * c->n_services)
		c->name_buckets *= 2;
	c->by_name = pfs_xcalloc(c->name_buckets, sizeof *c->by_name);
	for (size_t i = 0; i < c->n_services; i++) {
		size_t b = name_hash(c->services[i]->name) & (c->name_buckets - 1);
		while (c->by_name[b])
			b = (b + 1) & (c->name_buckets - 1);
		c->by_name[b] = c->services[i];
	}
	c->n_indexed = c->n_services;
}

static struct pfs_service *find_service(struct pfs_cluster *c, const char *name)
{
	struct pfs_service *found = NULL;

	pthread_mutex_lock(&c->lock);
	index_services(c);
	for (size_t b = name_hash(name) & (c->name_buckets - 1); !found && c->by_name[b];
	     b = (b + 1) & (c->name_buckets - 1))
		if (strcmp(c->by_name[b]->name, name) == 0)
			found = c->by_name[b];
	pthread_mutex_unlock(&c->lock);
	return found;
}

struct pfs_service *pfs_registry_service(struct pfs_cluster *c, const char *name)
{
	struct pfs_service *s = find_service(c, name);

	if (!s && g_on_unknown) {
		g_on_unknown(c);
		s = find_service(c, name);
	}
	return s;
}

size_t pfs_registry_services(struct pfs_cluster *c, struct pfs_service ***out)
{
	size_t n;

	pthread_mutex_lock(&c->lock);
	n = c->n_services;
	*out = pfs_xmalloc((n ? n : 1) * sizeof **out);
	if (n) /* services is NULL before the first discovery */
		memcpy(*out, c->services, n * sizeof **out);
	pthread_mutex_unlock(&c->lock);
	return n;
}

/* A type's file names: its pretty name, unless another type of the set
 * has that pretty name too; then each of them is named by its type id.
 * So names depend on the set of types, not on the order they came in. */
static void name_type(struct pfs_file *f, bool shared)
{
	char base[224];

	pfs_name_stable(shared ? f->type_id : f->pretty, base, sizeof base);
	snprintf(f->merge_key, sizeof f->merge_key, "%s", base);
	snprintf(f->name, sizeof f->name, "%s.pb.gz", base);
}

void pfs_registry_add_type(struct pfs_cluster *c, const char *type_id, const char *pretty)
{
	char key[224];
	struct pfs_file *f;
	bool shared = false;

	for (size_t i = 0; i < c->n_types; i++)
		if (strcmp(c->types[i].type_id, type_id) == 0)
			return;
	for (size_t i = 0; i < c->n_types; i++)
		if (strcmp(c->types[i].pretty, pretty) == 0) {
			name_type(&c->types[i], true);
			shared = true;
		}
	c->types = pfs_xrealloc(c->types, (c->n_types + 1) * sizeof *c->types);
	f = &c->types[c->n_types++];
	memset(f, 0, sizeof *f);
	snprintf(f->pretty, sizeof f->pretty, "%s", pretty);
	f->profile = -1;
	f->type_id = pfs_xstrdup(type_id);
	name_type(f, shared);
	/* the cache knows a type by its id, whatever it is shown as */
	pfs_name_stable(type_id, key, sizeof key);
	snprintf(f->key, sizeof f->key, "%s.pb.gz", key);
}

static struct pfs_service *add_service(struct pfs_cluster *c, const char *upstream,
				       const char *display, const struct pfs_file *files,
				       size_t n_files, bool discovered)
{
	char name[224];
	struct pfs_service *s = NULL;

	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < c->n_services; i++)
		if (strcmp(c->services[i]->upstream, upstream) == 0) {
			s = c->services[i];
			goto out;
		}
	pfs_name_stable(display, name, sizeof name);
	for (size_t i = 0; i < c->n_services; i++)
		if (strcmp(c->services[i]->name, name) == 0) {
			/* two upstreams with one display name (NATS server names) */
			char both[1024];
			snprintf(both, sizeof both, "%s/%s", display, upstream);
			pfs_name_stable(both, name, sizeof name);
			break;
		}
	s = pfs_xcalloc(1, sizeof *s);
	s->name = pfs_xstrdup(name);
	s->upstream = pfs_xstrdup(upstream);
	s->cluster = c;
	s->profiles = c->profiles;
	s->cpu_seconds = c->cpu_seconds;
	s->files = pfs_xcalloc(n_files ? n_files : 1, sizeof *s->files);
	for (size_t i = 0; i < n_files; i++) {
		s->files[i] = files[i];
		s->files[i].type_id = files[i].type_id ? pfs_xstrdup(files[i].type_id) : NULL;
	}
	s->n_files = n_files;
	s->discovered = discovered;
	if (g_on_added)
		g_on_added(s);
	if (c->n_services == c->cap_services) {
		c->cap_services = c->cap_services ? c->cap_services * 2 : 16;
		c->services = pfs_xrealloc(c->services, c->cap_services * sizeof *c->services);
	}
	c->services[c->n_services++] = s;
	if (strcmp(name, display))
		pfs_info("%s: upstream name \"%.100s\" shown as %s", c->name, display, name);
out:
	pthread_mutex_unlock(&c->lock);
	return s;
}

struct pfs_service *pfs_registry_add_service(struct pfs_cluster *c, const char *upstream,
					    const char *display, const struct pfs_file *files,
					    size_t n_files)
{
	return add_service(c, upstream, display, files, n_files, false);
}

struct pfs_service *pfs_registry_add_discovered(struct pfs_cluster *c, const char *upstream)
{
	return add_service(c, upstream, upstream, NULL, 0, true);
}

void pfs_registry_free(struct pfs_config *cfg)
{
	for (size_t i = 0; i < cfg->n_clusters; i++) {
		struct pfs_cluster *c = &cfg->clusters[i];
		for (size_t j = 0; j < c->n_services; j++)
			free_service(c->services[j]);
		free(c->services);
		free(c->by_name);
		for (size_t k = 0; k < c->n_types; k++)
			free(c->types[k].type_id);
		free(c->types);
	}
}
