/* Discovered services (discovery.h): their targets come and go, each
 * with one file per served profile named after it; a target that left
 * stays, inactive, while a snapshot holds its files. snap.lock held
 * unless said. */
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/names.h"
#include "lib/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A discovered service's files per target: one per served profile. */
size_t snap_per_target(const struct pfs_service *s)
{
	return (size_t)__builtin_popcount(s->profiles);
}

/* A discovered service's file that new rounds fetch: its target is listed
 * and serves that profile. */
bool snap_serves(const struct pfs_service *s, const struct pfs_file *f)
{
	unsigned p = s->targets[f->target].profiles;

	return s->state->active[f->target] && (!p || (p & (1u << f->profile)));
}

static void learn_file(const char *file, void *arg);
void snap_learn_targets(const char *cluster, const char *service, const char *round, void *arg)
{
	struct pfs_service *s = arg;
	pfs_cache_files(cluster, service, round, learn_file, s);
}


/* Target t's files: one per served profile, named after it. */
static void name_files(struct pfs_service *s, size_t t)
{
	struct pfs_file *f = &s->files[t * snap_per_target(s)];

	for (int k = 0; k < PFS_NPROFILES; k++) {
		if (!(s->profiles & (1u << k)))
			continue;
		memset(f, 0, sizeof *f);
		f->profile = k;
		f->target = t;
		snprintf(f->merge_key, sizeof f->merge_key, "%s", pfs_profile_names[k]);
		/* always with the instance: names do not change when a
		 * service goes from one replica to two */
		snprintf(f->name, sizeof f->name, "%s.%s.pb.gz", pfs_profile_names[k],
			 s->targets[t].name);
		memcpy(f->key, f->name, sizeof f->key);
		f++;
	}
}

/* Room for `need` targets. Jobs in flight point into targets and files
 * (j->file, the fetch's target) without snap.lock: outgrown arrays are kept
 * until the service is freed (at most as much again: they double). */
static void reserve(struct pfs_service *s, size_t need)
{
	struct pfs_svc_state *st = s->state;
	size_t per = snap_per_target(s), cap = st->cap_targets;

	if (need <= cap)
		return;
	cap = cap ? cap * 2 : 1; /* most services have one instance */
	cap = cap < need ? need : cap;
	struct pfs_target *targets = pfs_xcalloc(cap, sizeof *targets);
	struct pfs_file *files = pfs_xcalloc(cap * per, sizeof *files);
	if (s->n_targets)
		memcpy(targets, s->targets, s->n_targets * sizeof *targets);
	if (s->n_files)
		memcpy(files, s->files, s->n_files * sizeof *files);
	st->retired = pfs_xrealloc(st->retired, (st->n_retired + 2) * sizeof *st->retired);
	st->retired[st->n_retired++] = s->targets;
	st->retired[st->n_retired++] = s->files;
	/* readers without snap.lock (status, merged keys) read the count first */
	__atomic_store_n(&s->targets, targets, __ATOMIC_RELEASE);
	__atomic_store_n(&s->files, files, __ATOMIC_RELEASE);
	st->active = pfs_xrealloc(st->active, cap * sizeof *st->active);
	st->stats = pfs_xrealloc(st->stats, cap * sizeof *st->stats);
	memset(st->stats + st->n_stats, 0, (cap - st->n_stats) * sizeof *st->stats);
	st->cap_targets = cap;
	for (struct round *r = st->rounds; r; r = r->next) {
		r->slots = pfs_xrealloc(r->slots, snap_slot_room(s) * sizeof *r->slots);
		memset(r->slots + s->n_files, 0, (snap_slot_room(s) - s->n_files) * sizeof *r->slots);
	}
}

/* Target t's slots in every round: not there, except in an earlier
 * mount's rounds that stored it (only when it is new to this mount). */
static void reset_slots(struct pfs_service *s, size_t t, bool look_on_disk)
{
	size_t per = snap_per_target(s);

	for (struct round *r = s->state->rounds; r; r = r->next)
		for (size_t i = t * per; i < (t + 1) * per; i++) {
			struct slot *sl = &r->slots[i];
			memset(sl, 0, sizeof *sl);
			sl->st = SLOT_ABSENT;
			if (look_on_disk && r->from_disk &&
			    pfs_cache_stat(s->cluster->name, s->name, r->name, s->files[i].key,
					   &sl->size) == 0 && sl->size > 0)
				sl->st = SLOT_READY;
		}
}

/* Append target t (taken over) with its files. */
static size_t append_target(struct pfs_service *s, struct pfs_target *t, bool active)
{
	size_t i = s->n_targets;

	reserve(s, i + 1);
	s->targets[i] = *t;
	s->state->active[i] = active;
	memset(&s->state->stats[i], 0, sizeof s->state->stats[i]);
	s->state->n_stats = i + 1;
	name_files(s, i);
	__atomic_store_n(&s->n_targets, i + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&s->n_files, (i + 1) * snap_per_target(s), __ATOMIC_RELEASE);
	reset_slots(s, i, true);
	return i;
}

/* A stored file "<profile>.<instance>.pb.gz" of a discovered service: its
 * instance comes back as an inactive target (at init, no round yet). */
static void learn_file(const char *file, void *arg)
{
	struct pfs_service *s = arg;
	size_t n = strlen(file);

	if (n < 7 || strcmp(file + n - 6, ".pb.gz"))
		return;
	for (int k = 0; k < PFS_NPROFILES; k++) {
		size_t p = strlen(pfs_profile_names[k]);
		if (!(s->profiles & (1u << k)) || n <= p + 7 ||
		    strncmp(file, pfs_profile_names[k], p) || file[p] != '.')
			continue;
		char inst[256];
		snprintf(inst, sizeof inst, "%.*s", (int)(n - p - 7), file + p + 1);
		for (size_t i = 0; i < s->n_targets; i++)
			if (strcmp(s->targets[i].name, inst) == 0)
				return;
		struct pfs_target t = {.name = pfs_xstrdup(inst), .url = pfs_xstrdup(""),
				       .log_url = pfs_xstrdup("(not discovered now)"),
				       .headers = pfs_xcalloc(1, sizeof(char *))};
		append_target(s, &t, false);
		return;
	}
}

/* Targets nothing refers to any more: not listed, nothing in flight, no
 * round holds (or fetches) a file of theirs. */
static void find_unused(struct pfs_service *s, bool *unused)
{
	size_t per = snap_per_target(s);

	for (size_t t = 0; t < s->n_targets; t++)
		unused[t] = !s->state->active[t] && !s->state->stats[t].in_flight;
	for (struct round *r = s->state->rounds; r; r = r->next)
		for (size_t i = 0; i < s->n_files; i++)
			if (r->slots[i].st == SLOT_READY || r->slots[i].st == SLOT_FETCHING)
				unused[i / per] = false;
}

static bool same_str(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static bool same_endpoint(const struct pfs_target *a, const struct pfs_target *b)
{
	if (!same_str(a->url, b->url) || !same_str(a->username, b->username) ||
	    !same_str(a->password, b->password) || a->n_headers != b->n_headers ||
	    a->timeout != b->timeout || a->profiles != b->profiles)
		return false;
	for (size_t i = 0; i < a->n_headers; i++)
		if (strcmp(a->headers[i], b->headers[i]))
			return false;
	return true;
}

void pfs_snap_set_targets(struct pfs_service *s, struct pfs_target *ts, size_t n, size_t *added,
			  size_t *gone)
{
	struct pfs_svc_state *st = s->state;
	size_t known = s->n_targets, nb = 16;
	bool *was = pfs_xcalloc(known ? known : 1, sizeof *was), *unused = NULL;
	size_t *index, *fresh = pfs_xcalloc(n ? n : 1, sizeof *fresh), n_fresh = 0, reuse = 0;

	*added = *gone = 0;
	while (nb < 2 * known)
		nb *= 2;
	index = pfs_xmalloc(nb * sizeof *index); /* open hash of known names: index + 1 */
	memset(index, 0, nb * sizeof *index);
	pthread_mutex_lock(&snap.lock);
	for (size_t i = 0; i < known; i++) {
		size_t b = (size_t)pfs_fnv1a(PFS_FNV_INIT, s->targets[i].name) & (nb - 1);
		while (index[b])
			b = (b + 1) & (nb - 1);
		index[b] = i + 1;
		was[i] = st->active[i];
		st->active[i] = false;
	}
	for (size_t k = 0; k < n; k++) {
		size_t b = (size_t)pfs_fnv1a(PFS_FNV_INIT, ts[k].name) & (nb - 1), i = 0;
		while (index[b] && strcmp(s->targets[index[b] - 1].name, ts[k].name))
			b = (b + 1) & (nb - 1);
		if (!index[b]) {
			fresh[n_fresh++] = k;
			continue;
		}
		i = index[b] - 1;
		st->active[i] = true;
		*added += !was[i];
		/* a fetch in flight reads its target: it changes once none is */
		if (!same_endpoint(&s->targets[i], &ts[k]) && !st->stats[i].in_flight) {
			char *name = s->targets[i].name;
			s->targets[i].name = NULL;
			pfs_target_free(&s->targets[i]);
			s->targets[i] = ts[k];
			free(s->targets[i].name);
			s->targets[i].name = name;
		} else {
			pfs_target_free(&ts[k]);
		}
	}
	for (size_t i = 0; i < known; i++)
		*gone += was[i] && !st->active[i];
	if (n_fresh) {
		unused = pfs_xcalloc(known ? known : 1, sizeof *unused);
		find_unused(s, unused);
	}
	for (size_t f = 0; f < n_fresh; f++) {
		struct pfs_target *t = &ts[fresh[f]];
		while (reuse < known && !unused[reuse])
			reuse++;
		(*added)++;
		if (reuse == known) {
			append_target(s, t, true);
			continue;
		}
		/* its files were in no round: new names in place (readers of
		 * names hold snap.lock) */
		size_t i = reuse++;
		pfs_target_free(&s->targets[i]);
		s->targets[i] = *t;
		st->active[i] = true;
		memset(&st->stats[i], 0, sizeof st->stats[i]);
		name_files(s, i);
		reset_slots(s, i, false);
	}
	pthread_mutex_unlock(&snap.lock);
	free(unused);
	free(index);
	free(fresh);
	free(was);
}

bool pfs_snap_service_gone(struct pfs_service *s)
{
	bool gone = s->discovered;

	pthread_mutex_lock(&snap.lock);
	for (size_t i = 0; gone && i < s->n_targets; i++)
		gone = !s->state->active[i];
	for (struct round *r = s->state->rounds; gone && r; r = r->next)
		gone = !snap_round_has(s, r, SLOT_READY) && !snap_round_has(s, r, SLOT_FETCHING);
	pthread_mutex_unlock(&snap.lock);
	return gone;
}
