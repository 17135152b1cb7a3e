/* Snapshot index: state, rounds and slots, and the entry points of snap.h,
 * each answered by the service's round policy (snap_i.h). */
#include "snap.h"
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/log.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct snap_index snap = {.lock = PTHREAD_MUTEX_INITIALIZER};

void pfs_snap_set_hooks(pfs_snap_change_fn on_change, bool (*interrupted)(void),
			pfs_snap_removed_fn on_removed)
{
	snap.on_change = on_change;
	snap.interrupted = interrupted;
	snap.on_removed = on_removed;
}

void pfs_snap_set_settled_hook(pfs_snap_settled_fn on_settled)
{
	snap.on_settled = on_settled;
}

/* The policy of a kind (source.h `rounds`). */
static const struct snap_policy *policy_of(const struct pfs_cluster *c)
{
	switch (c->src->rounds) {
	case PFS_ROUNDS_WINDOW:
		return &snap_window;
	case PFS_ROUNDS_LISTED:
		return &snap_listed;
	default:
		return &snap_scrape;
	}
}

/* ---- files, rounds, slots (snap.lock held) ---- */

int snap_file_index(const struct pfs_service *s, const char *file)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (strcmp(s->files[i].name, file) == 0)
			return (int)i;
	return -1;
}

int pfs_snap_file_index(const struct pfs_service *s, const char *file)
{
	/* a discovered service's files change under snap.lock */
	pthread_mutex_lock(&snap.lock);
	int i = snap_file_index(s, file);
	pthread_mutex_unlock(&snap.lock);
	return i;
}

bool pfs_snap_names_listed(const struct pfs_service *s)
{
	return snap_pol(s)->names_listed;
}

bool pfs_snap_windows(const struct pfs_service *s)
{
	return snap_pol(s)->windows;
}

size_t snap_slot_room(const struct pfs_service *s)
{
	if (snap_pol(s)->slot_room)
		return snap_pol(s)->slot_room(s);
	return s->discovered ? s->state->cap_targets * snap_per_target(s) + 1
			     : s->n_files ? s->n_files : 1;
}

struct round *snap_find_round(struct pfs_service *s, const char *name)
{
	for (struct round *r = s->state->rounds; r; r = r->next)
		if (strcmp(r->name, name) == 0)
			return r;
	return NULL;
}

struct round *snap_get_round(struct pfs_service *s, time_t t)
{
	struct round **pp = &s->state->rounds, *r;
	char name[PFS_ROUND_NAME_MAX];

	pfs_name_time(t, name);
	if ((r = snap_find_round(s, name)))
		return r;
	while (*pp && (*pp)->t < t)
		pp = &(*pp)->next;
	r = pfs_xcalloc(1, sizeof *r);
	r->t = t;
	memcpy(r->name, name, sizeof name);
	r->slots = pfs_xcalloc(snap_slot_room(s), sizeof *r->slots);
	/* Files frozen by an earlier mount are served as they are. */
	for (size_t i = 0; i < s->n_files; i++)
		if (pfs_cache_stat(s->cluster->name, s->name, name, s->files[i].key,
				   &r->slots[i].size) == 0 && r->slots[i].size > 0)
			r->slots[i].st = SLOT_READY;
		else if (s->discovered && !snap_serves(s, &s->files[i]))
			r->slots[i].st = SLOT_ABSENT; /* gone from discovery: not fetched */
	r->next = *pp;
	*pp = r;
	return r;
}

bool snap_round_has(const struct pfs_service *s, const struct round *r, enum slot_state st)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (r->slots[i].st == st)
			return true;
	return false;
}

int snap_ready(struct pfs_service *s, struct round *r, int slot, off_t *size, time_t *mtime,
	       int *fd)
{
	*size = r->slots[slot].size;
	*mtime = r->t;
	if (fd && (*fd = snap_open_slot(s, r, slot)) < 0)
		return *fd;
	return 0;
}

void snap_each_ready(struct pfs_service *s, const struct round *r, pfs_snap_file_fn fn, void *arg)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (r->slots[i].st == SLOT_READY)
			fn(s->files[i].name, arg);
}

int snap_latest_in(struct pfs_service *s, snap_latest_fn latest_round, const char *file,
		   int flags, char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime)
{
	time_t now = time(NULL);
	int rc, slot;

	if ((slot = snap_file_index(s, file)) < 0)
		return -ENOENT;
	struct round *r = latest_round(s, now);
	snap_start_slot(s, r, slot, now, flags);
	memcpy(round, r->name, PFS_ROUND_NAME_MAX);
	if ((rc = snap_wait_slot(s, r, slot, flags)))
		return rc;
	if (r->slots[slot].st == SLOT_READY)
		return snap_ready(s, r, slot, size, mtime, NULL);
	return r->slots[slot].st == SLOT_ABSENT ? -ENOENT : -EIO;
}

int snap_latest_all_in(struct pfs_service *s, snap_latest_fn latest_round, int flags,
		       pfs_snap_file_fn fn, void *arg)
{
	time_t now = time(NULL);
	struct round *r = latest_round(s, now);
	char what[512];
	int rc;

	snprintf(what, sizeof what, "%s/%s", s->cluster->name, s->name);
	pfs_snap_say_cpu(what, snap_start_round(s, r, now, flags), s->cpu_seconds);
	if (!(rc = snap_wait_round(s, r, flags)))
		snap_each_ready(s, r, fn, arg);
	return rc;
}

int snap_slot_settled(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		      time_t *mtime, int *fd)
{
	int rc;

	if ((rc = snap_wait_slot(s, r, slot, flags)))
		return rc;
	switch (r->slots[slot].st) {
	case SLOT_READY:
		return snap_ready(s, r, slot, size, mtime, fd);
	case SLOT_ABSENT:
		return -ENOENT;
	default: /* failed, or never started (the round was not latest) */
		return -EIO;
	}
}

/* ---- setup ---- */

static void on_cached_round(const char *cluster, const char *service, const char *round, void *arg)
{
	struct pfs_service *s = arg;
	time_t t;

	(void)cluster, (void)service;
	if (pfs_name_parse_time(round, &t) == 0)
		snap_get_round(s, t)->from_disk = true; /* reads which of its files are there */
}

void pfs_snap_service_init(struct pfs_service *s)
{
	time_t now = time(NULL);

	s->state = pfs_xcalloc(1, sizeof *s->state);
	s->state->pol = policy_of(s->cluster);
	s->state->n_stats = s->n_targets || s->discovered ? s->n_targets : 1;
	s->state->stats = pfs_xcalloc(s->state->n_stats ? s->state->n_stats : 1, sizeof *s->state->stats);
	pthread_mutex_lock(&snap.lock);
	/* A discovered service's snapshots on disk name their targets: they
	 * come back inactive, so those snapshots show as they were; a listed
	 * kind learns the names of the files it stored. */
	if (s->discovered)
		pfs_cache_rounds(s->cluster->name, s->name, snap_learn_targets, s);
	if (snap_pol(s)->learn)
		snap_pol(s)->learn(s);
	/* Rounds frozen by an earlier mount are served as they are (a
	 * discovered service finds its own when it is discovered). */
	pfs_cache_rounds(s->cluster->name, s->name, on_cached_round, s);
	snap_prune(s, now);
	if (snap_pol(s)->resume)
		snap_pol(s)->resume(s, now);
	pthread_mutex_unlock(&snap.lock);
}

void pfs_snap_service_free(struct pfs_service *s)
{
	if (!s->state)
		return;
	while (s->state->rounds) {
		struct round *r = s->state->rounds;
		s->state->rounds = r->next;
		snap_free_round(r);
	}
	free(s->state->stats);
	free(s->state->active);
	for (size_t i = 0; i < s->state->n_retired; i++)
		free(s->state->retired[i]);
	free(s->state->retired);
	free(s->state);
	s->state = NULL;
}

void pfs_snap_free(struct pfs_config *cfg)
{
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++)
			pfs_snap_service_free(cfg->clusters[i].services[j]);
}

int pfs_snap_init(struct pfs_config *cfg, char *err, size_t errlen)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&snap.cond, &ca);
	snap.cfg = cfg;
	if (pfs_cache_init(cfg->cache_dir, err, errlen))
		return -1;
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++)
			pfs_snap_service_init(cfg->clusters[i].services[j]);
	pfs_snap_sweep();
	return 0;
}

/* ---- entry points: the policy answers, under snap.lock ---- */

int pfs_snap_list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
			 void *arg)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->list_rounds(s, flags, settle, fn, arg);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
			void *arg)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->list_files(s, round, flags, fn, arg);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, int flags,
		  off_t *size, time_t *mtime)
{
	return pfs_snap_stat_fd(s, round, file, flags, size, mtime, NULL);
}

int pfs_snap_stat_fd(struct pfs_service *s, const char *round, const char *file, int flags,
		     off_t *size, time_t *mtime, int *fd)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->stat(s, round, file, flags, size, mtime, fd);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

bool pfs_snap_round_frozen(struct pfs_service *s, const char *round)
{
	pthread_mutex_lock(&snap.lock);
	bool r = snap_pol(s)->frozen(s, round);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

bool pfs_snap_round_may_change(struct pfs_service *s, const char *round)
{
	if (!snap_pol(s)->fills)
		return false;
	pthread_mutex_lock(&snap.lock);
	bool r = !snap_pol(s)->frozen(s, round);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_listing_due(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
			 double *timeout)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->listing_due(s, dir, round, timeout);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_round_time(struct pfs_service *s, const char *round, int flags, time_t *t)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->round_time(s, round, flags, t);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

time_t pfs_snap_latest_time(struct pfs_service *s)
{
	pthread_mutex_lock(&snap.lock);
	time_t r = snap_pol(s)->latest_time(s);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

double pfs_snap_latest_valid(struct pfs_service *s)
{
	if (!snap_pol(s)->latest_valid)
		return 0;
	pthread_mutex_lock(&snap.lock);
	double r = snap_pol(s)->latest_valid(s);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

bool pfs_snap_latest_settled(struct pfs_service *s)
{
	if (!snap_pol(s)->latest_settled)
		return false;
	pthread_mutex_lock(&snap.lock);
	bool r = snap_pol(s)->latest_settled(s);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_latest(struct pfs_service *s, const char *file, int flags,
		    char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->latest(s, file, flags, round, size, mtime);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_latest_all(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg)
{
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->latest_all(s, flags, fn, arg);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_latest_key(struct pfs_service *s, const char *merge_key, int flags)
{
	/* the others' merged/ inputs are fetched by pfs_snap_inputs */
	if (!snap_pol(s)->latest_key)
		return -ENOENT;
	pthread_mutex_lock(&snap.lock);
	int r = snap_pol(s)->latest_key(s, merge_key, flags);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

size_t pfs_snap_latest_start(struct pfs_service *s, int flags)
{
	/* the others' files are fetched when read */
	if (!snap_pol(s)->latest_start)
		return 0;
	pthread_mutex_lock(&snap.lock);
	size_t r = snap_pol(s)->latest_start(s, flags);
	pthread_mutex_unlock(&snap.lock);
	return r;
}

int pfs_snap_slot(struct pfs_service *s, const char *round, int slot, int flags, off_t *size,
		  time_t *mtime, int *fd)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&snap.lock);
	struct round *r = snap_find_round(s, round);
	if (r && slot >= 0 && (size_t)slot < s->n_files)
		rc = snap_pol(s)->slot(s, r, slot, flags, size, mtime, fd);
	pthread_mutex_unlock(&snap.lock);
	return rc;
}

void pfs_snap_say_cpu(const char *what, size_t n, double seconds)
{
	if (n)
		pfs_info("%s: taking cpu profile%s of %zu target%s (%g s)", what, n == 1 ? "" : "s",
			 n, n == 1 ? "" : "s", seconds);
}

/* ---- merged/ inputs ---- */

/* Append round r's file i to *out as an input. */
static void add_input(struct pfs_service *s, struct round *r, size_t i, bool base,
		      struct pfs_snap_input **out, size_t *n, size_t *cap)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		*out = pfs_xrealloc(*out, *cap * sizeof **out);
	}
	memcpy((*out)[*n].round, r->name, sizeof r->name);
	snprintf((*out)[*n].file, sizeof (*out)[*n].file, "%s", s->files[i].key);
	(*out)[*n].t = r->t;
	(*out)[(*n)++].base = base;
}

int pfs_snap_inputs(struct pfs_service *s, const char *merge_key, time_t since, int flags,
		    struct pfs_snap_input **out, size_t *count)
{
	const struct snap_policy *pol = snap_pol(s);
	size_t n = 0, cap = 0;
	time_t now = time(NULL);
	bool *in_range;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&snap.lock);
	if (!(flags & PFS_SNAP_WAIT) && pol->inputs_settled &&
	    !pol->inputs_settled(s, merge_key, since, now)) {
		pthread_mutex_unlock(&snap.lock);
		return -EAGAIN;
	}
	if ((flags & PFS_SNAP_WAIT) && pol->inputs_fetch)
		pol->inputs_fetch(s, merge_key, since, now);
	/* settled: only what is there is taken. Sized here: a listing the
	 * waits above let in may have added files. */
	in_range = pfs_xcalloc(s->n_files ? s->n_files : 1, sizeof *in_range);
	for (struct round *r = s->state->rounds; in_range && r; r = r->next) {
		if (r->t < since)
			continue;
		for (size_t i = 0; i < s->n_files; i++)
			if (r->slots[i].st == SLOT_READY && strcmp(s->files[i].merge_key, merge_key) == 0) {
				add_input(s, r, i, false, out, &n, &cap);
				in_range[i] = true;
			}
	}
	/* snapshots of counters: each file's newest one before the range
	 * (rounds are oldest first), the base of its first difference */
	for (size_t i = 0; in_range && pol->inputs_base && i < s->n_files; i++) {
		struct round *base = NULL;
		for (struct round *r = s->state->rounds; in_range[i] && r && r->t < since; r = r->next)
			if (r->slots[i].st == SLOT_READY)
				base = r;
		if (base)
			add_input(s, base, i, true, out, &n, &cap);
	}
	pthread_mutex_unlock(&snap.lock);
	free(in_range);
	*count = n;
	return 0;
}

/* ---- .status.json ---- */

size_t pfs_snap_stats_count(const struct pfs_service *s)
{
	pthread_mutex_lock(&snap.lock);
	size_t n = s->state->n_stats;
	pthread_mutex_unlock(&snap.lock);
	return n;
}

void pfs_snap_target_stats(struct pfs_service *s, size_t i, struct pfs_target_stats *out)
{
	pthread_mutex_lock(&snap.lock);
	*out = s->state->stats[i];
	const struct pfs_target *t = s->n_targets ? &s->targets[i] : &s->cluster->api.target;
	snprintf(out->target, sizeof out->target, "%s", t->name ? t->name : "");
	snprintf(out->url, sizeof out->url, "%s", t->log_url ? t->log_url : "");
	out->active = !s->discovered || s->state->active[i];
	/* what is in flight (rounds oldest first: the newest PFS_FLIGHT_MAX kept) */
	out->n_flight = 0;
	for (struct round *r = s->state->rounds; r && out->in_flight; r = r->next)
		for (size_t f = 0; f < s->n_files; f++) {
			if (r->slots[f].st != SLOT_FETCHING || snap_stats_index(s, (int)f) != i)
				continue;
			size_t k = out->n_flight < PFS_FLIGHT_MAX ? out->n_flight : PFS_FLIGHT_MAX - 1;
			if (out->n_flight == PFS_FLIGHT_MAX) /* keep the newest */
				memmove(out->flight, out->flight + 1, (PFS_FLIGHT_MAX - 1) * sizeof *out->flight);
			else
				out->n_flight++;
			snprintf(out->flight[k].file, sizeof out->flight[k].file, "%s", s->files[f].name);
			memcpy(out->flight[k].round, r->name, sizeof r->name);
			out->flight[k].since = r->slots[f].since;
		}
	pthread_mutex_unlock(&snap.lock);
}
