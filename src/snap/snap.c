/* Snapshot index: rounds, slots, and the fetch of a slot into the cache. */
#include "snap.h"
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/cpugate.h"
#include "lib/log.h"
#include "lib/names.h"
#include "lib/pprof.h"
#include "source/source.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job_priv {
	struct round *round;
	int slot;
	size_t size; /* of the snapshot being made durable */
	char *gate;  /* cpu: the key of the process it profiles (cpugate.h) */
	bool no_start_line; /* a cpu profile go build -pgo would reject */
	off_t expect; /* listed kinds: the size the listing gave */
};

pthread_mutex_t snap_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t snap_cond;
struct pfs_config *snap_cfg;
pfs_snap_change_fn snap_on_change;
static bool (*g_interrupted)(void);
static pfs_snap_removed_fn g_on_removed;
static pfs_snap_settled_fn g_on_settled;
bool snap_draining; /* unmounting: queued cpu fetches fail, none start */

void pfs_snap_set_hooks(pfs_snap_change_fn on_change, bool (*interrupted)(void),
			pfs_snap_removed_fn on_removed)
{
	snap_on_change = on_change;
	g_interrupted = interrupted;
	g_on_removed = on_removed;
}

void pfs_snap_set_settled_hook(pfs_snap_settled_fn on_settled)
{
	g_on_settled = on_settled;
}

static bool windowed(const struct pfs_service *s) { return s->cluster->src->windows; }

/* ---- names and windows ---- */

int snap_file_index(const struct pfs_service *s, const char *file)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (strcmp(s->files[i].name, file) == 0)
			return (int)i;
	return -1;
}

int pfs_snap_file_index(const struct pfs_service *s, const char *file)
{
	/* a discovered service's files change under snap_lock */
	pthread_mutex_lock(&snap_lock);
	int i = snap_file_index(s, file);
	pthread_mutex_unlock(&snap_lock);
	return i;
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

/* ---- rounds (snap_lock held) ---- */

/* A discovered service's files per target: one per served profile. */
static size_t per_target(const struct pfs_service *s)
{
	return (size_t)__builtin_popcount(s->profiles);
}

/* Slots a round of the service has: a discovered service's rounds have
 * room for every target it has room for (reserve() grows them all). */
static size_t slot_room(const struct pfs_service *s)
{
	if (listed(s))
		return s->state->cap_files ? s->state->cap_files : 1;
	return s->discovered ? s->state->cap_targets * per_target(s) + 1
			     : s->n_files ? s->n_files : 1;
}

/* A discovered service's file that new rounds fetch: its target is listed
 * and serves that profile. */
static bool serves(const struct pfs_service *s, const struct pfs_file *f)
{
	unsigned p = s->targets[f->target].profiles;

	return s->state->active[f->target] && (!p || (p & (1u << f->profile)));
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
	r = calloc(1, sizeof *r);
	r->t = t;
	memcpy(r->name, name, sizeof name);
	r->slots = calloc(slot_room(s), sizeof *r->slots);
	/* Files frozen by an earlier mount are served as they are. */
	for (size_t i = 0; i < s->n_files; i++)
		if (pfs_cache_stat(s->cluster->name, s->name, name, s->files[i].key,
				   &r->slots[i].size) == 0 && r->slots[i].size > 0)
			r->slots[i].st = SLOT_READY;
		else if (s->discovered && !serves(s, &s->files[i]))
			r->slots[i].st = SLOT_ABSENT; /* gone from discovery: not fetched */
	r->next = *pp;
	*pp = r;
	return r;
}

/* The cache file of a ready slot, opened with snap_lock held: prune (which
 * takes snap_lock) cannot remove it between the look and the open. */
int snap_open_slot(struct pfs_service *s, struct round *r, int slot)
{
	int fd = pfs_cache_open(s->cluster->name, s->name, r->name, s->files[slot].key);
	return fd == -ENOENT ? -EIO : fd; /* ready but not on disk: the cache lost it */
}

/* The round a <time> name stands for, if it is shown. */
static struct round *lookup_round(struct pfs_service *s, const char *name)
{
	time_t t;

	if (!windowed(s))
		return snap_find_round(s, name);
	if (pfs_name_parse_time(name, &t) || !valid_window(s, t, time(NULL)))
		return NULL;
	return snap_get_round(s, t);
}

bool snap_round_has(const struct pfs_service *s, const struct round *r, enum slot_state st)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (r->slots[i].st == st)
			return true;
	return false;
}

/* Scrape rounds: latest stays the same round while it has fetches in
 * flight and for latest_ttl after the last one finished, so one access
 * (lookup, getattr, open, read) is one round whatever the fetch takes. */
static bool fresh(const struct pfs_service *s, const struct round *r, time_t now)
{
	time_t since = r->settled_at > r->t ? r->settled_at : r->t;

	return snap_round_has(s, r, SLOT_FETCHING) ||
	       (now >= since && now - since < (time_t)snap_cfg->latest_ttl);
}

/* Oldest round time kept: retention; windows also while in range. */
static time_t keep_from(const struct pfs_service *s, time_t now)
{
	double keep = snap_cfg->retention;

	if ((windowed(s) || listed(s)) && s->cluster->api.range + s->cluster->api.window > keep)
		keep = s->cluster->api.range + s->cluster->api.window;
	return now - (time_t)keep;
}

static void free_round(struct round *r)
{
	free(r->slots);
	free(r);
}

/* Drop rounds older than the retention, on disk and in memory; rounds in
 * use (latest, fetching, waited on) stay until a later prune. */
static void prune(struct pfs_service *s, time_t now)
{
	struct round **pp = &s->state->rounds;
	time_t from = keep_from(s, now);

	while (*pp) {
		struct round *r = *pp;
		if (r->t >= from || (r == s->state->current && fresh(s, r, now)) || r->pins ||
		    r->listing || snap_round_has(s, r, SLOT_FETCHING)) {
			pp = &r->next;
			continue;
		}
		if (r == s->state->current)
			s->state->current = NULL; /* stale: the next access takes a new one */
		int rc = pfs_cache_remove_round(s->cluster->name, s->name, r->name);
		if (rc && rc != -ENOENT)
			pfs_warn("retention: cannot remove %s/%s/%s: %s", s->cluster->name, s->name,
				 r->name, strerror(-rc));
		else
			pfs_debug("retention: removed %s/%s/%s", s->cluster->name, s->name, r->name);
		if (g_on_removed) /* the kernel may cache it: it only queues */
			g_on_removed(s, r->name);
		*pp = r->next;
		free_round(r);
	}
}

static struct round *latest_round(struct pfs_service *s, time_t now)
{
	struct round *r = s->state->current;

	if (windowed(s))
		return snap_get_round(s, newest_window(s, now));
	if (r && fresh(s, r, now))
		return r;
	r = snap_get_round(s, now);
	s->state->current = r;
	prune(s, now);
	return r;
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

static void learn_file(const char *file, void *arg);
static void learn_round(const char *cluster, const char *service, const char *round, void *arg)
{
	struct pfs_service *s = arg;
	pfs_cache_files(cluster, service, round, learn_file, s);
}

void pfs_snap_service_init(struct pfs_service *s)
{
	struct round *r;
	time_t now = time(NULL);

	s->state = calloc(1, sizeof *s->state);
	s->state->n_stats = s->n_targets || s->discovered ? s->n_targets : 1;
	s->state->stats = calloc(s->state->n_stats ? s->state->n_stats : 1, sizeof *s->state->stats);
	pthread_mutex_lock(&snap_lock);
	/* A discovered service's snapshots on disk name their targets: they
	 * come back inactive, so those snapshots show as they were. */
	if (s->discovered)
		pfs_cache_rounds(s->cluster->name, s->name, learn_round, s);
	else if (listed(s)) /* the names of the files it stored */
		pfs_cache_rounds(s->cluster->name, s->name, listed_learn_round, s);
	/* Rounds frozen by an earlier mount are served as they are (a
	 * discovered service finds its own when it is discovered). */
	pfs_cache_rounds(s->cluster->name, s->name, on_cached_round, s);
	prune(s, now);
	/* A remount within latest_ttl keeps serving the same latest. */
	for (r = s->state->rounds; r && r->next; r = r->next)
		;
	if (r && !windowed(s) && snap_round_has(s, r, SLOT_READY) && fresh(s, r, now))
		s->state->current = r;
	pthread_mutex_unlock(&snap_lock);
}

void pfs_snap_service_free(struct pfs_service *s)
{
	if (!s->state)
		return;
	while (s->state->rounds) {
		struct round *r = s->state->rounds;
		s->state->rounds = r->next;
		free_round(r);
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

/* Rounds on disk of services this mount does not know (not in the config,
 * not discovered yet) go by retention too. */
static void sweep_round(const char *cluster, const char *service, const char *round, void *arg)
{
	time_t now = *(time_t *)arg, t;
	struct pfs_cluster *c = pfs_registry_cluster(snap_cfg, cluster);

	if (pfs_name_parse_time(round, &t) || t >= now - (time_t)snap_cfg->retention)
		return;
	if (c) {
		pthread_mutex_lock(&c->lock);
		for (size_t i = 0; i < c->n_services; i++)
			if (strcmp(c->services[i]->name, service) == 0) {
				pthread_mutex_unlock(&c->lock); /* known: prune() decides */
				return;
			}
	}
	if (pfs_cache_remove_round(cluster, service, round) == 0)
		pfs_debug("retention: removed %s/%s/%s", cluster, service, round);
	if (c)
		pthread_mutex_unlock(&c->lock);
}

void pfs_snap_sweep(void)
{
	time_t now = time(NULL);

	for (size_t i = 0; i < snap_cfg->n_clusters; i++) {
		struct pfs_service **svcs;
		size_t n = pfs_registry_services(&snap_cfg->clusters[i], &svcs);
		pthread_mutex_lock(&snap_lock);
		for (size_t j = 0; j < n; j++)
			prune(svcs[j], now);
		pthread_mutex_unlock(&snap_lock);
		free(svcs);
	}
	pfs_cache_each_round(sweep_round, &now);
}

static pthread_t g_sweeper;
static pthread_cond_t g_sweep_cond;
static bool g_sweep_stop;

static void *sweeper_main(void *unused)
{
	/* Often enough that nothing outlives retention by more than half of
	 * it; at most every 5 minutes, at least every second. */
	double every = snap_cfg->retention / 2 > 300 ? 300 : snap_cfg->retention / 2 < 1 ? 1 : snap_cfg->retention / 2;
	struct timespec dl;

	(void)unused;
	pthread_mutex_lock(&snap_lock);
	while (!g_sweep_stop) {
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_sec += (time_t)every;
		if (pthread_cond_timedwait(&g_sweep_cond, &snap_lock, &dl) != ETIMEDOUT || g_sweep_stop)
			continue;
		pthread_mutex_unlock(&snap_lock);
		pfs_snap_sweep();
		pthread_mutex_lock(&snap_lock);
	}
	pthread_mutex_unlock(&snap_lock);
	return NULL;
}

int pfs_snap_sweeper_start(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_sweep_cond, &ca);
	return pthread_create(&g_sweeper, NULL, sweeper_main, NULL) ? -1 : 0;
}

void pfs_snap_sweeper_stop(void)
{
	pthread_mutex_lock(&snap_lock);
	g_sweep_stop = true;
	pthread_cond_signal(&g_sweep_cond);
	pthread_mutex_unlock(&snap_lock);
	pthread_join(g_sweeper, NULL);
}

int pfs_snap_init(struct pfs_config *cfg, char *err, size_t errlen)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&snap_cond, &ca);
	snap_cfg = cfg;
	if (pfs_cache_init(cfg->cache_dir, err, errlen))
		return -1;
	for (size_t i = 0; i < cfg->n_clusters; i++)
		for (size_t j = 0; j < cfg->clusters[i].n_services; j++)
			pfs_snap_service_init(cfg->clusters[i].services[j]);
	pfs_snap_sweep();
	return 0;
}

/* ---- fetching (snap_lock held unless said) ---- */

void snap_stats_failed(struct pfs_target_stats *ts, time_t now, const char *file,
		       const char *fmt, ...)
{
	va_list ap;

	ts->failures++;
	ts->last_error_at = now;
	va_start(ap, fmt);
	vsnprintf(ts->last_error, sizeof ts->last_error, fmt, ap);
	va_end(ap);
	snprintf(ts->last_error_file, sizeof ts->last_error_file, "%s", file);
}

static size_t stats_index(const struct pfs_service *s, int slot)
{
	return s->n_targets ? s->files[slot].target : 0;
}

static void settle(struct pfs_job *j, int rc, size_t gzlen, const char *reason);

/* A cpu fetch of `gate`'s process is done: start the next one waiting for
 * it, or (unmounting) fail them all. Without snap_lock; frees gate. */
static void gate_next(char *gate)
{
	for (;;) {
		pthread_mutex_lock(&snap_lock);
		struct pfs_job *next = pfs_cpugate_leave(gate);
		if (next && !snap_draining) {
			next->svc->cluster->src->start(next);
			next = NULL;
		}
		pthread_mutex_unlock(&snap_lock);
		if (!next)
			break;
		struct job_priv *jp = next->priv;
		free(jp->gate); /* it holds the gate: this loop lets it go */
		jp->gate = NULL;
		settle(next, -1, 0, "unmounting; it was queued behind another cpu profile of that "
			    "process and never started");
	}
	free(gate);
}

void pfs_snap_stop_starts(void)
{
	pthread_mutex_lock(&snap_lock);
	snap_draining = true;
	pthread_mutex_unlock(&snap_lock);
}

static bool is_cpu(const struct pfs_file *f)
{
	return strcmp(f->merge_key, pfs_profile_names[PFS_CPU]) == 0;
}

/* A cpu profile fetched: whether it can drive go build -pgo, said in the
 * log when that changes (snap_lock held). */
static void pgo_note(struct pfs_service *s, const struct pfs_job *j, struct pfs_target_stats *ts,
		     bool no_start_line)
{
	int was = ts->pgo;

	ts->pgo = no_start_line ? -1 : 1;
	if (no_start_line && was != -1)
		pfs_warn("%s/%s %s from %s has no Function.start_line: go build -pgo rejects it "
			 "(%s); it stays out of merged/<range>/default.pgo",
			 s->cluster->name, s->name, j->file->name, j->what,
			 s->cluster->src->pgo ? "a program built by Go < 1.20?"
					      : "this source kind has no line numbers");
}

/* The end of a job: its slot settles. rc as job_finish's, reason of a
 * failure. */
static void settle(struct pfs_job *j, int rc, size_t gzlen, const char *reason)
{
	struct job_priv *jp = j->priv;
	struct pfs_service *s = j->svc;
	struct round *r = jp->round;
	const char *file = j->file->name;
	time_t now = time(NULL);

	if (rc == 0)
		pfs_debug("fetched %s/%s/%s/%s: %zu bytes", s->cluster->name, s->name, r->name, file,
			  gzlen);
	else if (rc == PFS_ABSENT)
		pfs_debug("no data for %s/%s/%s/%s", s->cluster->name, s->name, r->name, file);
	else
		pfs_err("fetch %s/%s %s from %s failed: %s", s->cluster->name, s->name, file, j->what,
			reason);

	pthread_mutex_lock(&snap_lock);
	struct slot *sl = &r->slots[jp->slot];
	struct pfs_target_stats *ts = &s->state->stats[stats_index(s, jp->slot)];
	sl->st = rc == 0 ? SLOT_READY : rc == PFS_ABSENT ? SLOT_ABSENT : SLOT_FAILED;
	sl->size = rc == 0 ? (off_t)gzlen : 0;
	sl->failed_at = now;
	r->settled_at = now;
	if (ts->in_flight && --ts->in_flight == 0)
		ts->in_flight_since = 0;
	ts->fetches++;
	ts->last_fetch = now;
	if (rc >= 0) {
		ts->last_ok = now;
		ts->bytes += rc == 0 ? gzlen : 0;
		if (rc == 0 && is_cpu(j->file))
			pgo_note(s, j, ts, jp->no_start_line);
	} else {
		snap_stats_failed(ts, now, file, "%s", reason);
	}
	/* a settled round with a file: the uploader's (main.c wires it) */
	bool upload = !listed(s) && !snap_round_has(s, r, SLOT_FETCHING) && snap_round_has(s, r, SLOT_READY);
	char round[PFS_ROUND_NAME_MAX];
	memcpy(round, r->name, sizeof round);
	pthread_cond_broadcast(&snap_cond);
	pthread_mutex_unlock(&snap_lock);
	if (snap_on_change)
		snap_on_change(s);
	if (upload && g_on_settled)
		g_on_settled(s, round);

	char *gate = jp->gate;
	free(j->post);
	free(j->url);
	free(j->what);
	free(jp);
	free(j);
	if (gate)
		gate_next(gate);
}

/* On the committer thread: the snapshot is on disk, or could not be. */
static void published(void *arg, int rc, const char *why)
{
	struct pfs_job *j = arg;

	settle(j, rc ? -1 : 0, ((struct job_priv *)j->priv)->size, why);
}

/* j->finish: the source's result (pfs_job_finish). */
static void job_finish(struct pfs_job *j, int rc, uint8_t *gz, size_t gzlen, const char *why)
{
	struct pfs_service *s = j->svc;
	struct job_priv *jp = j->priv;
	struct round *r = jp->round;
	char reason[512] = "", verr[256];

	/* Called without snap_lock, on a worker or a source's own thread. */
	if (rc == 0 && jp->expect && (off_t)gzlen != jp->expect) {
		snprintf(reason, sizeof reason, "%zu bytes, listed as %lld: the object changed",
			 gzlen, (long long)jp->expect);
		rc = -1;
	} else if (rc == 0 && pfs_pprof_validate_gz(gz, gzlen, snap_cfg->max_raw_bytes, &jp->no_start_line,
					     verr, sizeof verr)) {
		snprintf(reason, sizeof reason, "invalid profile: %s", verr);
		rc = -1;
	} else if (rc == 0) {
		struct pfs_staged *st = pfs_cache_stage(s->cluster->name, s->name, r->name,
							j->file->key, gz, gzlen, r->t, verr,
							sizeof verr);
		free(gz);
		pfs_fetch_release(&j->f);
		if (st) {
			jp->size = gzlen;
			pfs_cache_commit(st, published, j); /* settled once on disk */
			return;
		}
		snprintf(reason, sizeof reason, "%s", verr);
		settle(j, -1, 0, reason);
		return;
	} else if (rc < 0) {
		snprintf(reason, sizeof reason, "%s", why ? why : "failed");
	}
	free(gz);
	pfs_fetch_release(&j->f);
	settle(j, rc, gzlen, reason);
}

static double slot_timeout(const struct pfs_service *s, int slot)
{
	const struct pfs_file *f = &s->files[slot];
	double t = s->n_targets ? s->targets[f->target].timeout : s->cluster->api.target.timeout;

	return f->profile == PFS_CPU ? t + s->cpu_seconds : t;
}

/* The cpu gate key of a slot, or false (not cpu, or the kind has none). */
static bool gate_key(const struct pfs_service *s, int slot, char *out, size_t outlen)
{
	const struct pfs_source_ops *src = s->cluster->src;

	return s->files[slot].profile == PFS_CPU && src->cpu_key &&
	       src->cpu_key(s, &s->files[slot], out, outlen);
}

/* How long a reader of the slot may have to wait: its fetch's timeout, or
 * longer while it queues behind other cpu profiles of its process. */
static double slot_wait(const struct pfs_service *s, int slot)
{
	double t = slot_timeout(s, slot), b;
	char key[512];

	if (gate_key(s, slot, key, sizeof key) && (b = pfs_cpugate_backlog(key)) > t)
		t = b;
	return t;
}


/* Start the fetch of a slot unless it is done, in flight, or failed too
 * recently (or failed at all, with PFS_SNAP_NO_RETRY). */
static void start_slot(struct pfs_service *s, struct round *r, int slot, time_t now)
{
	snap_start_slot_ex(s, r, slot, now, 0);
}

void snap_start_slot_ex(struct pfs_service *s, struct round *r, int slot, time_t now, int flags)
{
	struct slot *sl = &r->slots[slot];
	struct pfs_job *j;
	struct job_priv *jp;

	if (snap_draining || sl->st == SLOT_READY || sl->st == SLOT_FETCHING || sl->st == SLOT_ABSENT ||
	    (sl->st == SLOT_FAILED && ((flags & PFS_SNAP_NO_RETRY) ||
	     (now - sl->failed_at < (time_t)snap_cfg->retry_after && now >= sl->failed_at))))
		return;
	j = calloc(1, sizeof *j);
	jp = calloc(1, sizeof *jp);
	jp->round = r;
	jp->slot = slot;
	jp->expect = listed(s) ? sl->listed : 0;
	j->priv = jp;
	j->finish = job_finish;
	j->svc = s;
	j->file = &s->files[slot];
	j->from = r->t;
	j->to = windowed(s) ? r->t + (time_t)s->cluster->api.window : r->t;
	j->timeout_ms = (long)(slot_timeout(s, slot) * 1000);
	j->f.max_bytes = snap_cfg->max_bytes;
	sl->st = SLOT_FETCHING;
	sl->since = now;
	struct pfs_target_stats *ts = &s->state->stats[stats_index(s, slot)];
	if (ts->in_flight++ == 0)
		ts->in_flight_since = now;
	char key[512];
	if (gate_key(s, slot, key, sizeof key)) {
		jp->gate = strdup(key);
		if (!pfs_cpugate_enter(key, j, slot_timeout(s, slot))) {
			pfs_job_set(&j->what, "%s", key); /* until it starts */
			pfs_debug("cpu profile of %s/%s waits: another one of %s is being taken",
				  s->cluster->name, s->name, key);
			return;
		}
	}
	/* Sources submit to the fetcher or hand off to a thread: neither
	 * takes snap_lock before returning. */
	s->cluster->src->start(j);
}

double pfs_snap_max_wait(const struct pfs_service *s)
{
	double w = 0;

	pthread_mutex_lock(&snap_lock);
	for (size_t i = 0; i < s->n_files; i++) {
		double t = slot_wait(s, (int)i);
		if (t > w)
			w = t;
	}
	if (listed(s) && listed_wait(s) > w)
		w = listed_wait(s);
	pthread_mutex_unlock(&snap_lock);
	return w + 5;
}

/* Wait until the slot is no longer in flight, at most until a little
 * after its fetch timeout (every source finishes by then), checking for
 * an interrupt of the request that waits. The round is pinned meanwhile:
 * prune() leaves it. Without wait, -EAGAIN if it is in flight. */

static bool slot_busy(const struct pfs_service *s, const struct round *r, int slot)
{
	(void)s;
	return r->slots[slot].st == SLOT_FETCHING; /* slots may move: looked up each time */
}

/* Wait while busy(s, r, slot), at most `seconds` (r, if any, pinned). */
int snap_wait_busy(struct pfs_service *s, struct round *r, int slot, snap_busy_fn busy,
		     double seconds, int flags)
{
	struct timespec dl, step;
	int rc = 0;

	if (!busy(s, r, slot))
		return 0;
	if (!(flags & PFS_SNAP_WAIT))
		return -EAGAIN;
	clock_gettime(CLOCK_MONOTONIC, &dl);
	dl.tv_sec += (time_t)seconds;
	if (r)
		r->pins++;
	while (busy(s, r, slot)) {
		clock_gettime(CLOCK_MONOTONIC, &step);
		if (step.tv_sec > dl.tv_sec || (step.tv_sec == dl.tv_sec && step.tv_nsec >= dl.tv_nsec))
			break;
		if (g_interrupted && g_interrupted()) {
			rc = -EINTR;
			break;
		}
		step.tv_nsec += 100 * 1000000L; /* look for interrupts 10 times a second */
		if (step.tv_nsec >= 1000000000L) {
			step.tv_sec++;
			step.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&snap_cond, &snap_lock, &step);
	}
	if (r)
		r->pins--;
	return rc;
}

int snap_wait_slot(struct pfs_service *s, struct round *r, int slot, int flags)
{
	return snap_wait_busy(s, r, slot, slot_busy, slot_wait(s, slot) + 5, flags);
}

static int wait_round(struct pfs_service *s, struct round *r, int flags)
{
	int rc = 0;

	for (size_t i = 0; i < s->n_files && !rc; i++)
		rc = snap_wait_slot(s, r, (int)i, flags);
	return rc;
}

/* Start every file of the round; returns how many cpu profiles that began
 * to take (a reader waits cpu_seconds for those). */
static size_t start_round(struct pfs_service *s, struct round *r, time_t now, int flags)
{
	size_t cpu = 0;

	for (size_t i = 0; i < s->n_files; i++) {
		bool idle = r->slots[i].st != SLOT_FETCHING;
		snap_start_slot_ex(s, r, (int)i, now, flags);
		cpu += idle && r->slots[i].st == SLOT_FETCHING && is_cpu(&s->files[i]);
	}
	return cpu;
}

void pfs_snap_say_cpu(const char *what, size_t n, double seconds)
{
	if (n)
		pfs_info("%s: taking cpu profile%s of %zu target%s (%g s)", what, n == 1 ? "" : "s",
			 n, n == 1 ? "" : "s", seconds);
}

/* ---- listing ---- */

int pfs_snap_list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
			 void *arg)
{
	char name[PFS_ROUND_NAME_MAX];
	time_t now = time(NULL);
	int rc = 0;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		if (!(rc = listed_rounds(s, flags)))
			for (struct round *r = s->state->rounds; r; r = r->next)
				if (listed_shown(s, r, now))
					fn(r->name, r->t, arg);
	} else if (windowed(s)) {
		time_t w = (time_t)s->cluster->api.window;
		for (time_t t = oldest_window(s, now, 0); t <= newest_window(s, now); t += w) {
			pfs_name_time(t, name);
			fn(name, t, arg);
		}
	} else if (!settle || !s->state->current ||
		   !(rc = wait_round(s, s->state->current, flags))) {
		/* a round whose fetches all failed is never shown: listed
		 * while in flight, it would be gone when stat'ed */
		for (struct round *r = s->state->rounds; r; r = r->next)
			if (snap_round_has(s, r, SLOT_READY))
				fn(r->name, r->t, arg);
	}
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

/* A round ready to list: windows fetched, scrapes' fetches finished. */
static int settled_round(struct pfs_service *s, const char *round, int flags, struct round **out)
{
	struct round *r = lookup_round(s, round);

	*out = r;
	if (r && windowed(s))
		start_round(s, r, time(NULL), flags);
	return r ? wait_round(s, r, flags) : 0;
}

int pfs_snap_list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
			void *arg)
{
	struct round *r;
	int rc;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		if (!(rc = listed_round(s, round, true, flags, &r)))
			for (size_t i = 0; i < s->n_files; i++)
				if (listed_present(&r->slots[i]))
					fn(s->files[i].name, arg);
		goto out;
	}
	if ((rc = settled_round(s, round, flags, &r)))
		goto out;
	rc = r && (windowed(s) || snap_round_has(s, r, SLOT_READY)) ? 0 : -ENOENT;
	for (size_t i = 0; !rc && i < s->n_files; i++)
		if (r->slots[i].st == SLOT_READY) /* a failure is EIO by name only */
			fn(s->files[i].name, arg);
out:
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

int pfs_snap_stat(struct pfs_service *s, const char *round, const char *file, int flags,
		  off_t *size, time_t *mtime)
{
	return pfs_snap_stat_fd(s, round, file, flags, size, mtime, NULL);
}

int pfs_snap_stat_fd(struct pfs_service *s, const char *round, const char *file, int flags,
		     off_t *size, time_t *mtime, int *fd)
{
	int slot, rc = -ENOENT;

	if (listed(s)) {
		struct round *r;
		pthread_mutex_lock(&snap_lock);
		if (!(rc = listed_round(s, round, true, flags, &r)))
			rc = listed_slot(s, r, snap_file_index(s, file), flags, size, mtime, fd);
		pthread_mutex_unlock(&snap_lock);
		return rc;
	}
	if ((slot = pfs_snap_file_index(s, file)) < 0)
		return -ENOENT;
	pthread_mutex_lock(&snap_lock);
	struct round *r = lookup_round(s, round);
	if (r && windowed(s)) {
		snap_start_slot_ex(s, r, slot, time(NULL), flags);
		if ((rc = snap_wait_slot(s, r, slot, flags)))
			goto out;
		rc = -ENOENT;
	}
	if (r && r->slots[slot].st == SLOT_READY) {
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
		if (fd && (*fd = snap_open_slot(s, r, slot)) < 0)
			rc = *fd;
	} else if (r && windowed(s) && r->slots[slot].st == SLOT_FAILED) {
		rc = -EIO;
	}
out:
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

bool pfs_snap_round_frozen(struct pfs_service *s, const char *round)
{
	bool frozen;

	pthread_mutex_lock(&snap_lock);
	struct round *r = windowed(s) ? snap_find_round(s, round) : lookup_round(s, round);
	if (listed(s)) { /* its files' listing is final */
		frozen = r && listed_shown(s, r, time(NULL)) && listed_final(s, r);
		pthread_mutex_unlock(&snap_lock);
		return frozen;
	}
	frozen = r && !snap_round_has(s, r, SLOT_FETCHING) &&
		 (windowed(s) ? !snap_round_has(s, r, SLOT_EMPTY) && !snap_round_has(s, r, SLOT_FAILED)
			      : snap_round_has(s, r, SLOT_READY) &&
				!(r == s->state->current && fresh(s, r, time(NULL))));
	pthread_mutex_unlock(&snap_lock);
	return frozen;
}

int pfs_snap_round_time(struct pfs_service *s, const char *round, int flags, time_t *t)
{
	int rc = 0;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		struct round *lr;
		if (!(rc = listed_round(s, round, false, flags, &lr)))
			*t = lr->t;
		pthread_mutex_unlock(&snap_lock);
		return rc;
	}
	struct round *r = lookup_round(s, round);
	if (r && !windowed(s))
		rc = wait_round(s, r, flags);
	if (!rc)
		rc = r && (windowed(s) || snap_round_has(s, r, SLOT_READY)) ? 0 : -ENOENT;
	if (!rc)
		*t = r->t;
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

time_t pfs_snap_latest_time(struct pfs_service *s)
{
	time_t t;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		struct round *r = listed_newest(s, time(NULL));
		t = r ? r->t : 0;
	} else if (windowed(s))
		t = newest_window(s, time(NULL));
	else
		t = s->state->current ? s->state->current->t : 0;
	pthread_mutex_unlock(&snap_lock);
	return t;
}

double pfs_snap_latest_valid(struct pfs_service *s)
{
	time_t now = time(NULL);
	double left = 0;

	pthread_mutex_lock(&snap_lock);
	struct round *r = s->state->current;
	if (!windowed(s) && r && fresh(s, r, now) && !snap_round_has(s, r, SLOT_FETCHING)) {
		time_t since = r->settled_at > r->t ? r->settled_at : r->t;
		/* a second short of it: fresh() counts whole seconds */
		left = snap_cfg->latest_ttl - (double)(now - since) - 1;
	}
	pthread_mutex_unlock(&snap_lock);
	return left > 0 ? left : 0;
}

bool pfs_snap_latest_settled(struct pfs_service *s)
{
	bool ok = false;

	pthread_mutex_lock(&snap_lock);
	struct round *r = s->state->current;
	if (!windowed(s) && r && fresh(s, r, time(NULL))) {
		ok = true;
		for (size_t i = 0; i < s->n_files && ok; i++)
			ok = r->slots[i].st == SLOT_READY || r->slots[i].st == SLOT_ABSENT;
	}
	pthread_mutex_unlock(&snap_lock);
	return ok;
}

size_t pfs_snap_stats_count(const struct pfs_service *s)
{
	pthread_mutex_lock(&snap_lock);
	size_t n = s->state->n_stats;
	pthread_mutex_unlock(&snap_lock);
	return n;
}

void pfs_snap_target_stats(struct pfs_service *s, size_t i, struct pfs_target_stats *out)
{
	pthread_mutex_lock(&snap_lock);
	*out = s->state->stats[i];
	const struct pfs_target *t = s->n_targets ? &s->targets[i] : &s->cluster->api.target;
	snprintf(out->target, sizeof out->target, "%s", t->name ? t->name : "");
	snprintf(out->url, sizeof out->url, "%s", t->log_url ? t->log_url : "");
	out->active = !s->discovered || s->state->active[i];
	/* what is in flight (rounds oldest first: the newest PFS_FLIGHT_MAX kept) */
	out->n_flight = 0;
	for (struct round *r = s->state->rounds; r && out->in_flight; r = r->next)
		for (size_t f = 0; f < s->n_files; f++) {
			if (r->slots[f].st != SLOT_FETCHING || stats_index(s, (int)f) != i)
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
	pthread_mutex_unlock(&snap_lock);
}

/* Append round r's file i to *out as an input. */
static void add_input(struct pfs_service *s, struct round *r, size_t i, bool base,
		      struct pfs_snap_input **out, size_t *n, size_t *cap)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 16;
		*out = realloc(*out, *cap * sizeof **out);
	}
	memcpy((*out)[*n].round, r->name, sizeof r->name);
	snprintf((*out)[*n].file, sizeof (*out)[*n].file, "%s", s->files[i].key);
	(*out)[*n].t = r->t;
	(*out)[(*n)++].base = base;
}

/* Without waiting: true if the inputs from `since` on are all there to
 * take (windows fetched, listed rounds and their files): nothing to start
 * or wait for. snap_lock held. */
static bool inputs_settled(struct pfs_service *s, const char *merge_key, time_t since, time_t now)
{
	if (windowed(s)) {
		time_t w = (time_t)s->cluster->api.window;
		for (time_t t = oldest_window(s, now, since); t <= newest_window(s, now); t += w) {
			char name[PFS_ROUND_NAME_MAX];
			pfs_name_time(t, name);
			struct round *r = snap_find_round(s, name);
			for (size_t i = 0; i < s->n_files; i++)
				if (strcmp(s->files[i].merge_key, merge_key) == 0 &&
				    (!r || (r->slots[i].st != SLOT_READY && r->slots[i].st != SLOT_ABSENT)))
					return false;
		}
		return true;
	}
	if (listed(s)) {
		if (!s->state->listed_ok)
			return false;
		for (struct round *r = s->state->rounds; r; r = r->next) {
			if (!listed_shown(s, r, now))
				continue;
			if (r->t >= since && !r->listed_ok)
				return false;
			for (size_t i = 0; i < s->n_files; i++)
				if (r->t >= since && listed_present(&r->slots[i]) &&
				    r->slots[i].st != SLOT_READY && strcmp(s->files[i].merge_key, merge_key) == 0)
					return false;
		}
	}
	return true;
}

int pfs_snap_inputs(struct pfs_service *s, const char *merge_key, time_t since, int flags,
		    struct pfs_snap_input **out, size_t *count)
{
	size_t n = 0, cap = 0;
	time_t now = time(NULL), from = since;
	bool *in_range;

	*out = NULL;
	*count = 0;
	pthread_mutex_lock(&snap_lock);
	if (!(flags & PFS_SNAP_WAIT) && !inputs_settled(s, merge_key, since, now)) {
		pthread_mutex_unlock(&snap_lock);
		return -EAGAIN;
	}
	if (!(flags & PFS_SNAP_WAIT)) {
		/* settled: only what is there is taken */
	} else if (listed(s) && listed_rounds(s, PFS_SNAP_WAIT) == 0) {
		/* every shown round in range listed, then its files fetched; and
		 * the newest round before the range: the base of differences */
		for (struct round *r = s->state->rounds; r && r->t < since; r = r->next)
			if (listed_shown(s, r, now))
				from = r->t;
		for (int pass = 0; pass < 4; pass++)
			for (struct round *r = s->state->rounds; r; r = r->next) {
				if (r->t < from || !listed_shown(s, r, now))
					continue;
				if (pass == 0)
					listed_start(s, r, now, 0);
				else if (pass == 1)
					snap_wait_busy(s, r, 0, listed_files_busy, listed_wait(s), PFS_SNAP_WAIT);
				for (size_t i = 0; pass >= 2 && i < s->n_files; i++) {
					if (!listed_present(&r->slots[i]) || strcmp(s->files[i].merge_key, merge_key))
						continue;
					if (pass == 2)
						start_slot(s, r, (int)i, now);
					else
						snap_wait_slot(s, r, (int)i, PFS_SNAP_WAIT);
				}
			}
	} else if (windowed(s)) {
		time_t w = (time_t)s->cluster->api.window;
		for (int pass = 0; pass < 2; pass++)
			for (time_t t = oldest_window(s, now, since); t <= newest_window(s, now); t += w) {
				struct round *r = snap_get_round(s, t);
				for (size_t i = 0; i < s->n_files; i++)
					if (strcmp(s->files[i].merge_key, merge_key) == 0) {
						if (pass == 0)
							start_slot(s, r, (int)i, now);
						else
							snap_wait_slot(s, r, (int)i, PFS_SNAP_WAIT);
					}
			}
	}
	/* sized here: a listing the waits above let in may have added files */
	in_range = calloc(s->n_files ? s->n_files : 1, sizeof *in_range);
	for (struct round *r = s->state->rounds; in_range && r; r = r->next) {
		if (r->t < since)
			continue;
		for (size_t i = 0; i < s->n_files; i++)
			if (r->slots[i].st == SLOT_READY && strcmp(s->files[i].merge_key, merge_key) == 0) {
				add_input(s, r, i, false, out, &n, &cap);
				in_range[i] = true;
			}
	}
	/* scraped snapshots: each file's newest one before the range (rounds
	 * are oldest first), the base of its first difference */
	for (size_t i = 0; in_range && !windowed(s) && i < s->n_files; i++) {
		struct round *base = NULL;
		for (struct round *r = s->state->rounds; in_range[i] && r && r->t < since; r = r->next)
			if (r->slots[i].st == SLOT_READY)
				base = r;
		if (base)
			add_input(s, base, i, true, out, &n, &cap);
	}
	pthread_mutex_unlock(&snap_lock);
	free(in_range);
	*count = n;
	return 0;
}

/* ---- latest ---- */

int pfs_snap_latest(struct pfs_service *s, const char *file, int flags,
		    char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime)
{
	time_t now = time(NULL);
	int rc, slot;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		struct round *lr = NULL;
		if (!(rc = listed_rounds(s, flags)) && !(lr = listed_newest(s, now)))
			rc = -ENOENT;
		if (!rc && !(rc = listed_files(s, lr, flags))) {
			memcpy(round, lr->name, PFS_ROUND_NAME_MAX);
			rc = listed_slot(s, lr, snap_file_index(s, file), flags, size, mtime, NULL);
		}
		goto out;
	}
	if ((slot = snap_file_index(s, file)) < 0) {
		rc = -ENOENT;
		goto out;
	}
	struct round *r = latest_round(s, now);
	snap_start_slot_ex(s, r, slot, now, flags);
	memcpy(round, r->name, PFS_ROUND_NAME_MAX);
	if ((rc = snap_wait_slot(s, r, slot, flags)))
		goto out;
	rc = -EIO;
	if (r->slots[slot].st == SLOT_READY) {
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
	} else if (r->slots[slot].st == SLOT_ABSENT) {
		rc = -ENOENT;
	}
out:
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

int pfs_snap_slot(struct pfs_service *s, const char *round, int slot, int flags, off_t *size,
		  time_t *mtime, int *fd)
{
	int rc;

	pthread_mutex_lock(&snap_lock);
	struct round *r = snap_find_round(s, round);
	if (!r || slot < 0 || (size_t)slot >= s->n_files) {
		rc = -ENOENT;
		goto out;
	}
	if (listed(s)) {
		rc = listed_slot(s, r, slot, flags, size, mtime, fd);
		goto out;
	}
	if ((rc = snap_wait_slot(s, r, slot, flags)))
		goto out;
	switch (r->slots[slot].st) {
	case SLOT_READY:
		*size = r->slots[slot].size;
		*mtime = r->t;
		rc = 0;
		if (fd && (*fd = snap_open_slot(s, r, slot)) < 0)
			rc = *fd;
		break;
	case SLOT_ABSENT:
		rc = -ENOENT;
		break;
	default: /* failed, or never started (the round was not latest) */
		rc = -EIO;
	}
out:
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

int pfs_snap_latest_key(struct pfs_service *s, const char *merge_key, int flags)
{
	time_t now = time(NULL);
	bool ready = false, failed = false;
	int rc = 0;

	if (windowed(s) || listed(s))
		return -ENOENT; /* pfs_snap_inputs fetches windows and listed files */
	pthread_mutex_lock(&snap_lock);
	struct round *r = latest_round(s, now);
	for (size_t i = 0; i < s->n_files; i++)
		if (strcmp(s->files[i].merge_key, merge_key) == 0)
			snap_start_slot_ex(s, r, (int)i, now, flags);
	for (size_t i = 0; i < s->n_files && !rc; i++)
		if (strcmp(s->files[i].merge_key, merge_key) == 0 &&
		    !(rc = snap_wait_slot(s, r, (int)i, flags))) {
			ready = ready || r->slots[i].st == SLOT_READY;
			failed = failed || r->slots[i].st != SLOT_ABSENT;
		}
	pthread_mutex_unlock(&snap_lock);
	return rc ? rc : ready ? 0 : failed ? -EIO : -ENOENT;
}

size_t pfs_snap_latest_start(struct pfs_service *s, int flags)
{
	time_t now = time(NULL);
	size_t cpu;

	if (windowed(s) || listed(s))
		return 0; /* windows and listed files are fetched when read */
	pthread_mutex_lock(&snap_lock);
	cpu = start_round(s, latest_round(s, now), now, flags);
	pthread_mutex_unlock(&snap_lock);
	return cpu;
}

int pfs_snap_latest_all(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg)
{
	time_t now = time(NULL);
	int rc;

	pthread_mutex_lock(&snap_lock);
	if (listed(s)) {
		struct round *lr = NULL;
		if (!(rc = listed_rounds(s, flags)) && (lr = listed_newest(s, now)) &&
		    !(rc = listed_files(s, lr, flags)))
			for (size_t i = 0; i < s->n_files; i++)
				if (listed_present(&lr->slots[i]))
					fn(s->files[i].name, arg);
		pthread_mutex_unlock(&snap_lock);
		return rc;
	}
	struct round *r = latest_round(s, now);
	char what[512];
	snprintf(what, sizeof what, "%s/%s", s->cluster->name, s->name);
	pfs_snap_say_cpu(what, start_round(s, r, now, flags), s->cpu_seconds);
	rc = wait_round(s, r, flags);
	for (size_t i = 0; !rc && i < s->n_files; i++)
		if (r->slots[i].st == SLOT_READY) /* a failure is EIO by name only */
			fn(s->files[i].name, arg);
	pthread_mutex_unlock(&snap_lock);
	return rc;
}

/* ---- discovered targets (snap_lock held) ---- */

/* Target t's files: one per served profile, named after it. */
static void name_files(struct pfs_service *s, size_t t)
{
	struct pfs_file *f = &s->files[t * per_target(s)];

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
 * (j->file, the fetch's target) without snap_lock: outgrown arrays are kept
 * until the service is freed (at most as much again: they double). */
static void reserve(struct pfs_service *s, size_t need)
{
	struct pfs_svc_state *st = s->state;
	size_t per = per_target(s), cap = st->cap_targets;

	if (need <= cap)
		return;
	cap = cap ? cap * 2 : 1; /* most services have one instance */
	cap = cap < need ? need : cap;
	struct pfs_target *targets = calloc(cap, sizeof *targets);
	struct pfs_file *files = calloc(cap * per, sizeof *files);
	if (s->n_targets)
		memcpy(targets, s->targets, s->n_targets * sizeof *targets);
	if (s->n_files)
		memcpy(files, s->files, s->n_files * sizeof *files);
	st->retired = realloc(st->retired, (st->n_retired + 2) * sizeof *st->retired);
	st->retired[st->n_retired++] = s->targets;
	st->retired[st->n_retired++] = s->files;
	/* readers without snap_lock (status, merged keys) read the count first */
	__atomic_store_n(&s->targets, targets, __ATOMIC_RELEASE);
	__atomic_store_n(&s->files, files, __ATOMIC_RELEASE);
	st->active = realloc(st->active, cap * sizeof *st->active);
	st->stats = realloc(st->stats, cap * sizeof *st->stats);
	memset(st->stats + st->n_stats, 0, (cap - st->n_stats) * sizeof *st->stats);
	st->cap_targets = cap;
	for (struct round *r = st->rounds; r; r = r->next) {
		r->slots = realloc(r->slots, slot_room(s) * sizeof *r->slots);
		memset(r->slots + s->n_files, 0, (slot_room(s) - s->n_files) * sizeof *r->slots);
	}
}

/* Target t's slots in every round: not there, except in an earlier
 * mount's rounds that stored it (only when it is new to this mount). */
static void reset_slots(struct pfs_service *s, size_t t, bool look_on_disk)
{
	size_t per = per_target(s);

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
	__atomic_store_n(&s->n_files, (i + 1) * per_target(s), __ATOMIC_RELEASE);
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
		struct pfs_target t = {.name = strdup(inst), .url = strdup(""),
				       .log_url = strdup("(not discovered now)"),
				       .headers = calloc(1, sizeof(char *))};
		append_target(s, &t, false);
		return;
	}
}

/* Targets nothing refers to any more: not listed, nothing in flight, no
 * round holds (or fetches) a file of theirs. */
static void find_unused(struct pfs_service *s, bool *unused)
{
	size_t per = per_target(s);

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
	bool *was = calloc(known ? known : 1, sizeof *was), *unused = NULL;
	size_t *index, *fresh = calloc(n ? n : 1, sizeof *fresh), n_fresh = 0, reuse = 0;

	*added = *gone = 0;
	while (nb < 2 * known)
		nb *= 2;
	index = malloc(nb * sizeof *index); /* open hash of known names: index + 1 */
	memset(index, 0, nb * sizeof *index);
	pthread_mutex_lock(&snap_lock);
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
		unused = calloc(known ? known : 1, sizeof *unused);
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
		 * names hold snap_lock) */
		size_t i = reuse++;
		pfs_target_free(&s->targets[i]);
		s->targets[i] = *t;
		st->active[i] = true;
		memset(&st->stats[i], 0, sizeof st->stats[i]);
		name_files(s, i);
		reset_slots(s, i, false);
	}
	pthread_mutex_unlock(&snap_lock);
	free(unused);
	free(index);
	free(fresh);
	free(was);
}

bool pfs_snap_service_gone(struct pfs_service *s)
{
	bool gone = s->discovered;

	pthread_mutex_lock(&snap_lock);
	for (size_t i = 0; gone && i < s->n_targets; i++)
		gone = !s->state->active[i];
	for (struct round *r = s->state->rounds; gone && r; r = r->next)
		gone = !snap_round_has(s, r, SLOT_READY) && !snap_round_has(s, r, SLOT_FETCHING);
	pthread_mutex_unlock(&snap_lock);
	return gone;
}
