/* Snapshot index: rounds, slots, and the fetch of a slot into the cache. */
#include "snap.h"

#include "cache.h"
#include "fetch.h"
#include "log.h"
#include "pprof.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum slot_state { SLOT_EMPTY, SLOT_FETCHING, SLOT_READY, SLOT_FAILED };

struct slot {
	enum slot_state st;
	off_t size;
	time_t failed_at;
};

struct round {
	time_t t;
	char name[PFS_ROUND_NAME_MAX];
	struct slot *slots;
	struct round *next; /* ascending time */
};

struct pfs_svc_state {
	struct round *rounds;
	struct round *current; /* the round "latest" shows, if fresh */
	struct pfs_target_stats *stats;
};

struct job {
	struct pfs_fetch f;
	struct pfs_service *svc;
	struct round *round;
	int slot;
	char url[2048];
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static struct pfs_config *g_cfg;

/* ---- names ---- */

int pfs_snap_slot_count(const struct pfs_service *s)
{
	return (int)s->n_targets * PFS_NPROFILES;
}

bool pfs_snap_slot_served(const struct pfs_service *s, int slot)
{
	return slot >= 0 && slot < pfs_snap_slot_count(s) &&
	       (s->profiles & (1u << (slot % PFS_NPROFILES)));
}

void pfs_snap_slot_name(const struct pfs_service *s, int slot, char *out, size_t outlen)
{
	const char *prof = pfs_profile_names[slot % PFS_NPROFILES];

	if (s->n_targets == 1)
		snprintf(out, outlen, "%s.pb.gz", prof);
	else
		snprintf(out, outlen, "%s.%s.pb.gz", prof, s->targets[slot / PFS_NPROFILES].name);
}

int pfs_snap_slot_by_name(const struct pfs_service *s, const char *file)
{
	char name[512];

	for (int i = 0; i < pfs_snap_slot_count(s); i++) {
		pfs_snap_slot_name(s, i, name, sizeof name);
		if (strcmp(name, file) == 0)
			return pfs_snap_slot_served(s, i) ? i : -1;
	}
	return -1;
}

static void format_round(time_t t, char out[PFS_ROUND_NAME_MAX])
{
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(out, PFS_ROUND_NAME_MAX, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int parse_round(const char *name, time_t *t)
{
	char back[PFS_ROUND_NAME_MAX];
	struct tm tm = {0};
	const char *end = strptime(name, "%Y-%m-%dT%H:%M:%SZ", &tm);

	if (!end || *end)
		return -1;
	*t = timegm(&tm);
	format_round(*t, back);
	return strcmp(back, name) == 0 ? 0 : -1;
}

/* ---- rounds (g_lock held) ---- */

static struct round *find_round(struct pfs_service *s, const char *name)
{
	for (struct round *r = s->state->rounds; r; r = r->next)
		if (strcmp(r->name, name) == 0)
			return r;
	return NULL;
}

static struct round *get_round(struct pfs_service *s, time_t t)
{
	struct round **pp = &s->state->rounds, *r;
	char name[PFS_ROUND_NAME_MAX];

	format_round(t, name);
	if ((r = find_round(s, name)))
		return r;
	while (*pp && (*pp)->t < t)
		pp = &(*pp)->next;
	r = calloc(1, sizeof *r);
	r->t = t;
	memcpy(r->name, name, sizeof name);
	r->slots = calloc((size_t)pfs_snap_slot_count(s), sizeof *r->slots);
	r->next = *pp;
	*pp = r;
	return r;
}

static bool round_visible(const struct pfs_service *s, const struct round *r)
{
	for (int i = 0; i < pfs_snap_slot_count(s); i++)
		if (r->slots[i].st == SLOT_READY)
			return true;
	return false;
}

static bool round_busy(const struct pfs_service *s, const struct round *r)
{
	for (int i = 0; i < pfs_snap_slot_count(s); i++)
		if (r->slots[i].st == SLOT_FETCHING)
			return true;
	return false;
}

/* Drop rounds older than the retention, on disk and in memory. */
static void prune(struct pfs_service *s, time_t now)
{
	struct round **pp = &s->state->rounds;

	while (*pp) {
		struct round *r = *pp;
		if (r->t >= now - (time_t)g_cfg->retention || r == s->state->current ||
		    round_busy(s, r)) {
			pp = &r->next;
			continue;
		}
		int rc = pfs_cache_remove_round(s->cluster->name, s->name, r->name);
		if (rc && rc != -ENOENT)
			pfs_warn("retention: cannot remove %s/%s/%s: %s", s->cluster->name, s->name,
				 r->name, strerror(-rc));
		else
			pfs_debug("retention: removed %s/%s/%s", s->cluster->name, s->name, r->name);
		*pp = r->next;
		free(r->slots);
		free(r);
	}
}

static struct round *latest_round(struct pfs_service *s, time_t now)
{
	struct round *r = s->state->current;

	if (r && now - r->t < (time_t)g_cfg->latest_ttl && now >= r->t)
		return r;
	r = get_round(s, now);
	s->state->current = r;
	prune(s, now);
	return r;
}

/* ---- cache scan ---- */

static void on_cached(const char *cluster, const char *service, const char *round,
		      const char *file, off_t size, time_t mtime, void *arg)
{
	struct pfs_cluster *c = pfs_config_cluster(g_cfg, cluster);
	struct pfs_service *s = c ? pfs_config_service(c, service) : NULL;
	time_t t;
	int slot;

	(void)mtime;
	(void)arg;
	if (!s || parse_round(round, &t) || (slot = pfs_snap_slot_by_name(s, file)) < 0 || size <= 0)
		return;
	struct round *r = get_round(s, t);
	r->slots[slot].st = SLOT_READY;
	r->slots[slot].size = size;
}

int pfs_snap_init(struct pfs_config *cfg, char *err, size_t errlen)
{
	pthread_condattr_t ca;
	time_t now = time(NULL);

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_cond, &ca);
	g_cfg = cfg;
	if (pfs_cache_init(cfg->cache_dir, err, errlen))
		return -1;
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++) {
			struct pfs_service *s = &cfg->clusters[i].services[j];
			s->state = calloc(1, sizeof *s->state);
			s->state->stats = calloc(s->n_targets, sizeof *s->state->stats);
		}
	pfs_cache_scan(on_cached, NULL);
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++) {
			struct pfs_service *s = &cfg->clusters[i].services[j];
			struct round *r;
			prune(s, now);
			/* A remount within latest_ttl keeps serving the same latest. */
			for (r = s->state->rounds; r && r->next; r = r->next)
				;
			if (r && now >= r->t && now - r->t < (time_t)cfg->latest_ttl)
				s->state->current = r;
		}
	return 0;
}

static void wait_slot(struct pfs_service *s, struct round *r, int slot);

/* Wait (g_lock held) until no fetch of the round is in flight. */
static void wait_round(struct pfs_service *s, struct round *r)
{
	for (int i = 0; i < pfs_snap_slot_count(s); i++)
		wait_slot(s, r, i);
}

/* ---- listing ---- */

void pfs_snap_list_rounds(struct pfs_service *s, pfs_snap_round_fn fn, void *arg)
{
	pthread_mutex_lock(&g_lock);
	for (struct round *r = s->state->rounds; r; r = r->next)
		if (round_visible(s, r) || round_busy(s, r))
			fn(r->name, r->t, arg);
	pthread_mutex_unlock(&g_lock);
}

int pfs_snap_list_files(struct pfs_service *s, const char *round, pfs_snap_file_fn fn, void *arg)
{
	char name[512];
	int rc = -ENOENT;

	pthread_mutex_lock(&g_lock);
	struct round *r = find_round(s, round);
	if (r)
		wait_round(s, r);
	for (int i = 0; r && i < pfs_snap_slot_count(s); i++)
		if (r->slots[i].st == SLOT_READY) {
			pfs_snap_slot_name(s, i, name, sizeof name);
			fn(name, r->slots[i].size, r->t, arg);
			rc = 0;
		}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, off_t *size,
		  time_t *mtime)
{
	int slot = pfs_snap_slot_by_name(s, file), rc = -ENOENT;

	pthread_mutex_lock(&g_lock);
	struct round *r = slot >= 0 ? find_round(s, round) : NULL;
	if (r && r->slots[slot].st == SLOT_READY) {
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int pfs_snap_round_time(struct pfs_service *s, const char *round, time_t *t)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&g_lock);
	struct round *r = find_round(s, round);
	if (r)
		wait_round(s, r);
	if (r && round_visible(s, r)) {
		*t = r->t;
		rc = 0;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

time_t pfs_snap_latest_time(struct pfs_service *s)
{
	time_t t;

	pthread_mutex_lock(&g_lock);
	t = s->state->current ? s->state->current->t : 0;
	pthread_mutex_unlock(&g_lock);
	return t;
}

size_t pfs_snap_inputs(struct pfs_service *s, int profile, time_t since,
		       struct pfs_snap_input **out)
{
	size_t n = 0, cap = 0;

	*out = NULL;
	pthread_mutex_lock(&g_lock);
	for (struct round *r = s->state->rounds; r; r = r->next) {
		if (r->t < since)
			continue;
		for (size_t t = 0; t < s->n_targets; t++) {
			int slot = (int)t * PFS_NPROFILES + profile;
			if (r->slots[slot].st != SLOT_READY)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				*out = realloc(*out, cap * sizeof **out);
			}
			memcpy((*out)[n].round, r->name, sizeof r->name);
			pfs_snap_slot_name(s, slot, (*out)[n].file, sizeof (*out)[n].file);
			(*out)[n++].t = r->t;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return n;
}

void pfs_snap_target_stats(struct pfs_service *s, size_t target, struct pfs_target_stats *out)
{
	pthread_mutex_lock(&g_lock);
	*out = s->state->stats[target];
	pthread_mutex_unlock(&g_lock);
}

/* ---- fetching ---- */

static void job_done(struct pfs_fetch *f)
{
	struct job *j = (struct job *)f;
	struct pfs_service *s = j->svc;
	struct pfs_target_stats *ts = &s->state->stats[j->slot / PFS_NPROFILES];
	char why[512] = "", file[512];
	time_t now = time(NULL);
	int ok = f->ok;

	pfs_snap_slot_name(s, j->slot, file, sizeof file);
	if (!ok) {
		snprintf(why, sizeof why, "%s", f->error);
	} else {
		char verr[256];
		if (pfs_pprof_validate_gz(f->body, f->len, g_cfg->max_bytes * 8, verr, sizeof verr)) {
			snprintf(why, sizeof why, "HTTP 200, invalid profile: %s", verr);
			ok = 0;
		} else if (pfs_cache_publish(s->cluster->name, s->name, j->round->name, file, f->body,
					     f->len, j->round->t, verr, sizeof verr)) {
			snprintf(why, sizeof why, "HTTP 200, %s", verr);
			ok = 0;
		}
	}
	if (ok)
		pfs_debug("fetched %s/%s/%s/%s: %zu bytes", s->cluster->name, s->name, j->round->name,
			  file, f->len);
	else
		pfs_err("fetch %s/%s %s from %s/%s failed: %s", s->cluster->name, s->name,
			pfs_profile_names[j->slot % PFS_NPROFILES],
			s->targets[j->slot / PFS_NPROFILES].log_url,
			j->slot % PFS_NPROFILES == PFS_CPU ? "profile" : pfs_profile_names[j->slot % PFS_NPROFILES],
			why);

	pthread_mutex_lock(&g_lock);
	struct slot *sl = &j->round->slots[j->slot];
	sl->st = ok ? SLOT_READY : SLOT_FAILED;
	sl->size = ok ? (off_t)f->len : 0;
	sl->failed_at = now;
	ts->fetches++;
	ts->last_fetch = now;
	if (ok) {
		ts->last_ok = now;
		ts->bytes += f->len;
		ts->last_error[0] = '\0';
	} else {
		ts->failures++;
		snprintf(ts->last_error, sizeof ts->last_error, "%s", why);
	}
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);

	pfs_fetch_release(f);
	free(j);
}

static double slot_timeout(const struct pfs_service *s, int slot)
{
	double t = s->targets[slot / PFS_NPROFILES].timeout;
	return slot % PFS_NPROFILES == PFS_CPU ? t + s->cpu_seconds : t;
}

/* Start the fetch of a slot unless it is ready, in flight, or failed too
 * recently. g_lock held. */
static void start_slot(struct pfs_service *s, struct round *r, int slot, time_t now)
{
	struct slot *sl = &r->slots[slot];
	const struct pfs_target *t = &s->targets[slot / PFS_NPROFILES];
	int prof = slot % PFS_NPROFILES;
	struct job *j;

	if (sl->st == SLOT_READY || sl->st == SLOT_FETCHING ||
	    (sl->st == SLOT_FAILED && now - sl->failed_at < (time_t)g_cfg->retry_after &&
	     now >= sl->failed_at))
		return;
	j = calloc(1, sizeof *j);
	j->svc = s;
	j->round = r;
	j->slot = slot;
	if (prof == PFS_CPU)
		snprintf(j->url, sizeof j->url, "%s/profile?seconds=%ld", t->url, (long)s->cpu_seconds);
	else
		snprintf(j->url, sizeof j->url, "%s/%s", t->url, pfs_profile_names[prof]);
	j->f.url = j->url;
	j->f.target = t;
	j->f.timeout_ms = (long)(slot_timeout(s, slot) * 1000);
	j->f.max_bytes = g_cfg->max_bytes;
	j->f.done = job_done;
	sl->st = SLOT_FETCHING;
	pfs_fetch_submit(&j->f);
}

/* Wait (g_lock held) until the slot is no longer in flight, at most until
 * a little after its fetch timeout: the fetcher always finishes by then. */
static void wait_slot(struct pfs_service *s, struct round *r, int slot)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)slot_timeout(s, slot) + 5;
	while (r->slots[slot].st == SLOT_FETCHING)
		if (pthread_cond_timedwait(&g_cond, &g_lock, &dl) == ETIMEDOUT)
			break;
}

int pfs_snap_latest(struct pfs_service *s, int slot, char round[PFS_ROUND_NAME_MAX],
		    off_t *size, time_t *mtime)
{
	time_t now = time(NULL);
	int rc = -EIO;

	pthread_mutex_lock(&g_lock);
	struct round *r = latest_round(s, now);
	start_slot(s, r, slot, now);
	wait_slot(s, r, slot);
	if (r->slots[slot].st == SLOT_READY) {
		memcpy(round, r->name, PFS_ROUND_NAME_MAX);
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

/* Start every served slot of the latest round; g_lock held. */
static struct round *start_latest(struct pfs_service *s)
{
	time_t now = time(NULL);
	struct round *r = latest_round(s, now);

	for (int i = 0; i < pfs_snap_slot_count(s); i++)
		if (pfs_snap_slot_served(s, i))
			start_slot(s, r, i, now);
	return r;
}

void pfs_snap_latest_start(struct pfs_service *s)
{
	pthread_mutex_lock(&g_lock);
	start_latest(s);
	pthread_mutex_unlock(&g_lock);
}

void pfs_snap_latest_all(struct pfs_service *s)
{
	pthread_mutex_lock(&g_lock);
	wait_round(s, start_latest(s));
	pthread_mutex_unlock(&g_lock);
}
