/* Snapshot index: rounds, slots, and the fetch of a slot into the cache. */
#include "snap.h"

#include "cache.h"
#include "log.h"
#include "pprof.h"
#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A slot is one file of one round: file i of the service is slot i. */
enum slot_state { SLOT_EMPTY, SLOT_FETCHING, SLOT_READY, SLOT_FAILED, SLOT_ABSENT };

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
	struct round *current; /* scrape kinds: the round "latest" shows, if fresh */
	struct pfs_target_stats *stats;
	size_t n_stats;
};

struct job_priv {
	struct round *round;
	int slot;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static struct pfs_config *g_cfg;

static bool windowed(const struct pfs_service *s) { return s->cluster->src->windows; }

/* ---- names and windows ---- */

int pfs_snap_file_index(const struct pfs_service *s, const char *file)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (strcmp(s->files[i].name, file) == 0)
			return (int)i;
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

/* Start of the newest complete window. */
static time_t newest_window(const struct pfs_service *s, time_t now)
{
	time_t w = (time_t)s->cluster->api.window;
	return now / w * w - w;
}

/* Start of the oldest window shown (from `since` on, within the range). */
static time_t oldest_window(const struct pfs_service *s, time_t now, time_t since)
{
	time_t w = (time_t)s->cluster->api.window, newest = newest_window(s, now);
	time_t n = (time_t)(s->cluster->api.range / s->cluster->api.window);
	time_t oldest = newest - (n - 1) * w;

	if (since > oldest)
		oldest = (since + w - 1) / w * w;
	return oldest;
}

static bool valid_window(const struct pfs_service *s, time_t t, time_t now)
{
	return t % (time_t)s->cluster->api.window == 0 && t <= newest_window(s, now) &&
	       t >= oldest_window(s, now, 0);
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
	r->slots = calloc(s->n_files ? s->n_files : 1, sizeof *r->slots);
	/* Files frozen by an earlier mount are served as they are. */
	for (size_t i = 0; i < s->n_files; i++)
		if (pfs_cache_stat(s->cluster->name, s->name, name, s->files[i].name,
				   &r->slots[i].size) == 0 && r->slots[i].size > 0)
			r->slots[i].st = SLOT_READY;
	r->next = *pp;
	*pp = r;
	return r;
}

/* The round a <time> name stands for, if it is shown. */
static struct round *lookup_round(struct pfs_service *s, const char *name)
{
	time_t t;

	if (!windowed(s))
		return find_round(s, name);
	if (parse_round(name, &t) || !valid_window(s, t, time(NULL)))
		return NULL;
	return get_round(s, t);
}

static bool round_has(const struct pfs_service *s, const struct round *r, enum slot_state st)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (r->slots[i].st == st)
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
		    round_has(s, r, SLOT_FETCHING)) {
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

	if (windowed(s))
		return get_round(s, newest_window(s, now));
	if (r && now - r->t < (time_t)g_cfg->latest_ttl && now >= r->t)
		return r;
	r = get_round(s, now);
	s->state->current = r;
	prune(s, now);
	return r;
}

/* ---- setup ---- */

static void on_cached(const char *cluster, const char *service, const char *round,
		      const char *file, off_t size, time_t mtime, void *arg)
{
	struct pfs_cluster *c = pfs_config_cluster(g_cfg, cluster);
	struct pfs_service *s = NULL;
	time_t t;

	(void)file, (void)size, (void)mtime, (void)arg;
	if (c && !c->src->discover) /* discovered services find theirs on demand */
		s = pfs_config_service(c, service);
	if (s && parse_round(round, &t) == 0)
		get_round(s, t); /* reads which of its files are there */
}

void pfs_snap_service_init(struct pfs_service *s)
{
	s->state = calloc(1, sizeof *s->state);
	s->state->n_stats = s->n_targets ? s->n_targets : 1;
	s->state->stats = calloc(s->state->n_stats, sizeof *s->state->stats);
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
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++)
			pfs_snap_service_init(cfg->clusters[i].services[j]);
	pfs_cache_scan(on_cached, NULL);
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++) {
			struct pfs_service *s = cfg->clusters[i].services[j];
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

/* ---- fetching (g_lock held unless said) ---- */

static size_t stats_index(const struct pfs_service *s, int slot)
{
	return s->n_targets ? s->files[slot].target : 0;
}

void pfs_job_finish(struct pfs_job *j, int rc, uint8_t *gz, size_t gzlen, const char *why)
{
	struct job_priv *jp = j->priv;
	struct pfs_service *s = j->svc;
	struct round *r = jp->round;
	const char *file = j->file->name;
	char reason[512] = "", verr[256];
	time_t now = time(NULL);

	/* Called without g_lock, on the fetcher thread or a source's own. */
	if (rc == 0 && pfs_pprof_validate_gz(gz, gzlen, g_cfg->max_bytes * 8, verr, sizeof verr)) {
		snprintf(reason, sizeof reason, "invalid profile: %s", verr);
		rc = -1;
	} else if (rc == 0 && pfs_cache_publish(s->cluster->name, s->name, r->name, file, gz, gzlen,
						r->t, verr, sizeof verr)) {
		snprintf(reason, sizeof reason, "%s", verr);
		rc = -1;
	} else if (rc < 0) {
		snprintf(reason, sizeof reason, "%s", why ? why : "failed");
	}
	if (rc == 0)
		pfs_debug("fetched %s/%s/%s/%s: %zu bytes", s->cluster->name, s->name, r->name, file,
			  gzlen);
	else if (rc == PFS_ABSENT)
		pfs_debug("no data for %s/%s/%s/%s", s->cluster->name, s->name, r->name, file);
	else
		pfs_err("fetch %s/%s %s from %s failed: %s", s->cluster->name, s->name, file, j->what,
			reason);

	pthread_mutex_lock(&g_lock);
	struct slot *sl = &r->slots[jp->slot];
	struct pfs_target_stats *ts = &s->state->stats[stats_index(s, jp->slot)];
	sl->st = rc == 0 ? SLOT_READY : rc == PFS_ABSENT ? SLOT_ABSENT : SLOT_FAILED;
	sl->size = rc == 0 ? (off_t)gzlen : 0;
	sl->failed_at = now;
	ts->fetches++;
	ts->last_fetch = now;
	if (rc >= 0) {
		ts->last_ok = now;
		ts->bytes += rc == 0 ? gzlen : 0;
		ts->last_error[0] = '\0';
	} else {
		ts->failures++;
		snprintf(ts->last_error, sizeof ts->last_error, "%s", reason);
	}
	pthread_cond_broadcast(&g_cond);
	pthread_mutex_unlock(&g_lock);

	free(gz);
	pfs_fetch_release(&j->f);
	free(j->post);
	free(jp);
	free(j);
}

static double slot_timeout(const struct pfs_service *s, int slot)
{
	const struct pfs_file *f = &s->files[slot];
	double t = s->n_targets ? s->targets[f->target].timeout : s->cluster->api.target.timeout;

	return f->profile == PFS_CPU ? t + s->cpu_seconds : t;
}

/* Start the fetch of a slot unless it is done, in flight, or failed too
 * recently. */
static void start_slot(struct pfs_service *s, struct round *r, int slot, time_t now)
{
	struct slot *sl = &r->slots[slot];
	struct pfs_job *j;
	struct job_priv *jp;

	if (sl->st == SLOT_READY || sl->st == SLOT_FETCHING || sl->st == SLOT_ABSENT ||
	    (sl->st == SLOT_FAILED && now - sl->failed_at < (time_t)g_cfg->retry_after &&
	     now >= sl->failed_at))
		return;
	j = calloc(1, sizeof *j);
	jp = calloc(1, sizeof *jp);
	jp->round = r;
	jp->slot = slot;
	j->priv = jp;
	j->svc = s;
	j->file = &s->files[slot];
	j->from = r->t;
	j->to = windowed(s) ? r->t + (time_t)s->cluster->api.window : r->t;
	j->timeout_ms = (long)(slot_timeout(s, slot) * 1000);
	j->f.max_bytes = g_cfg->max_bytes;
	sl->st = SLOT_FETCHING;
	/* Sources submit to the fetcher or hand off to a thread: neither
	 * takes g_lock before returning. */
	s->cluster->src->start(j);
}

/* Wait until the slot is no longer in flight, at most until a little
 * after its fetch timeout: every source finishes by then. */
static void wait_slot(struct pfs_service *s, struct round *r, int slot)
{
	struct timespec dl;

	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)slot_timeout(s, slot) + 5;
	while (r->slots[slot].st == SLOT_FETCHING)
		if (pthread_cond_timedwait(&g_cond, &g_lock, &dl) == ETIMEDOUT)
			break;
}

static void wait_round(struct pfs_service *s, struct round *r)
{
	for (size_t i = 0; i < s->n_files; i++)
		wait_slot(s, r, (int)i);
}

static void start_round(struct pfs_service *s, struct round *r, time_t now)
{
	for (size_t i = 0; i < s->n_files; i++)
		start_slot(s, r, (int)i, now);
}

/* ---- listing ---- */

void pfs_snap_list_rounds(struct pfs_service *s, pfs_snap_round_fn fn, void *arg)
{
	char name[PFS_ROUND_NAME_MAX];
	time_t now = time(NULL);

	pthread_mutex_lock(&g_lock);
	if (windowed(s)) {
		time_t w = (time_t)s->cluster->api.window;
		for (time_t t = oldest_window(s, now, 0); t <= newest_window(s, now); t += w) {
			format_round(t, name);
			fn(name, t, arg);
		}
	} else {
		for (struct round *r = s->state->rounds; r; r = r->next)
			if (round_has(s, r, SLOT_READY) || round_has(s, r, SLOT_FETCHING))
				fn(r->name, r->t, arg);
	}
	pthread_mutex_unlock(&g_lock);
}

/* A round ready to list: windows fetched, scrapes' fetches finished. */
static struct round *settled_round(struct pfs_service *s, const char *round)
{
	struct round *r = lookup_round(s, round);

	if (r && windowed(s))
		start_round(s, r, time(NULL));
	if (r)
		wait_round(s, r);
	return r;
}

int pfs_snap_list_files(struct pfs_service *s, const char *round, pfs_snap_file_fn fn, void *arg)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&g_lock);
	struct round *r = settled_round(s, round);
	for (size_t i = 0; r && i < s->n_files; i++) {
		enum slot_state st = r->slots[i].st;
		/* a window shows its failures (EIO on access), a scrape round not */
		if (st == SLOT_READY || (windowed(s) && st == SLOT_FAILED))
			fn(s->files[i].name, arg);
	}
	if (r && (windowed(s) || round_has(s, r, SLOT_READY)))
		rc = 0;
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, off_t *size,
		  time_t *mtime)
{
	int slot = pfs_snap_file_index(s, file), rc = -ENOENT;

	if (slot < 0)
		return -ENOENT;
	pthread_mutex_lock(&g_lock);
	struct round *r = lookup_round(s, round);
	if (r && windowed(s)) {
		start_slot(s, r, slot, time(NULL));
		wait_slot(s, r, slot);
	}
	if (r && r->slots[slot].st == SLOT_READY) {
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
	} else if (r && windowed(s) && r->slots[slot].st == SLOT_FAILED) {
		rc = -EIO;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

int pfs_snap_round_time(struct pfs_service *s, const char *round, time_t *t)
{
	int rc = -ENOENT;

	pthread_mutex_lock(&g_lock);
	struct round *r = lookup_round(s, round);
	if (r && !windowed(s))
		wait_round(s, r);
	if (r && (windowed(s) || round_has(s, r, SLOT_READY))) {
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
	if (windowed(s))
		t = newest_window(s, time(NULL));
	else
		t = s->state->current ? s->state->current->t : 0;
	pthread_mutex_unlock(&g_lock);
	return t;
}

size_t pfs_snap_stats_count(const struct pfs_service *s)
{
	return s->state->n_stats;
}

void pfs_snap_target_stats(struct pfs_service *s, size_t i, struct pfs_target_stats *out)
{
	pthread_mutex_lock(&g_lock);
	*out = s->state->stats[i];
	pthread_mutex_unlock(&g_lock);
}

size_t pfs_snap_inputs(struct pfs_service *s, const char *merge_key, time_t since,
		       struct pfs_snap_input **out)
{
	size_t n = 0, cap = 0;
	time_t now = time(NULL);

	*out = NULL;
	pthread_mutex_lock(&g_lock);
	if (windowed(s)) {
		time_t w = (time_t)s->cluster->api.window;
		for (int pass = 0; pass < 2; pass++)
			for (time_t t = oldest_window(s, now, since); t <= newest_window(s, now); t += w) {
				struct round *r = get_round(s, t);
				for (size_t i = 0; i < s->n_files; i++)
					if (strcmp(s->files[i].merge_key, merge_key) == 0) {
						if (pass == 0)
							start_slot(s, r, (int)i, now);
						else
							wait_slot(s, r, (int)i);
					}
			}
	}
	for (struct round *r = s->state->rounds; r; r = r->next) {
		if (r->t < since)
			continue;
		for (size_t i = 0; i < s->n_files; i++) {
			if (r->slots[i].st != SLOT_READY || strcmp(s->files[i].merge_key, merge_key))
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 16;
				*out = realloc(*out, cap * sizeof **out);
			}
			memcpy((*out)[n].round, r->name, sizeof r->name);
			snprintf((*out)[n].file, sizeof (*out)[n].file, "%s", s->files[i].name);
			(*out)[n++].t = r->t;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return n;
}

/* ---- latest ---- */

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
	} else if (r->slots[slot].st == SLOT_ABSENT) {
		rc = -ENOENT;
	}
	pthread_mutex_unlock(&g_lock);
	return rc;
}

void pfs_snap_latest_start(struct pfs_service *s)
{
	time_t now = time(NULL);

	if (windowed(s))
		return; /* windows are fetched when read */
	pthread_mutex_lock(&g_lock);
	start_round(s, latest_round(s, now), now);
	pthread_mutex_unlock(&g_lock);
}

void pfs_snap_latest_all(struct pfs_service *s, pfs_snap_file_fn fn, void *arg)
{
	time_t now = time(NULL);

	pthread_mutex_lock(&g_lock);
	struct round *r = latest_round(s, now);
	start_round(s, r, now);
	wait_round(s, r);
	for (size_t i = 0; i < s->n_files; i++)
		if (r->slots[i].st != SLOT_ABSENT)
			fn(s->files[i].name, arg);
	pthread_mutex_unlock(&g_lock);
}
