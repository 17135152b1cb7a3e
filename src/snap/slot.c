/* The fetch of one slot into the cache: started through the cluster's
 * source, one cpu profile per process at a time (cpugate.h), validated,
 * staged and committed (cache.h), then settled; and readers' waits. */
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/cpugate.h"
#include "lib/log.h"
#include "lib/pprof.h"
#include "lib/xalloc.h"

#include <errno.h>
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

/* The cache file of a ready slot, opened with snap.lock held: prune (which
 * takes snap.lock) cannot remove it between the look and the open. */
int snap_open_slot(struct pfs_service *s, struct round *r, int slot)
{
	int fd = pfs_cache_open(s->cluster->name, s->name, r->name, s->files[slot].key);
	return fd == -ENOENT ? -EIO : fd; /* ready but not on disk: the cache lost it */
}


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

size_t snap_stats_index(const struct pfs_service *s, int slot)
{
	return s->n_targets ? s->files[slot].target : 0;
}

static void settle(struct pfs_job *j, int rc, size_t gzlen, const char *reason);

/* A cpu fetch of `gate`'s process is done: start the next one waiting for
 * it, or (unmounting) fail them all. Without snap.lock; frees gate. */
static void gate_next(char *gate)
{
	for (;;) {
		pthread_mutex_lock(&snap.lock);
		struct pfs_job *next = pfs_cpugate_leave(gate);
		if (next && !snap.draining) {
			next->svc->cluster->src->start(next);
			next = NULL;
		}
		pthread_mutex_unlock(&snap.lock);
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
	pthread_mutex_lock(&snap.lock);
	snap.draining = true;
	pthread_mutex_unlock(&snap.lock);
}

bool snap_is_cpu(const struct pfs_file *f)
{
	return strcmp(f->merge_key, pfs_profile_names[PFS_CPU]) == 0;
}

/* A cpu profile fetched: whether it can drive go build -pgo, said in the
 * log when that changes (snap.lock held). */
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

	pthread_mutex_lock(&snap.lock);
	struct slot *sl = &r->slots[jp->slot];
	struct pfs_target_stats *ts = &s->state->stats[snap_stats_index(s, jp->slot)];
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
		if (rc == 0 && snap_is_cpu(j->file))
			pgo_note(s, j, ts, jp->no_start_line);
	} else {
		snap_stats_failed(ts, now, file, "%s", reason);
	}
	/* a settled round with a file: the uploader's (main.c wires it) */
	bool upload = snap_pol(s)->uploads && !snap_round_has(s, r, SLOT_FETCHING) && snap_round_has(s, r, SLOT_READY);
	char round[PFS_ROUND_NAME_MAX];
	memcpy(round, r->name, sizeof round);
	pthread_cond_broadcast(&snap.cond);
	pthread_mutex_unlock(&snap.lock);
	if (snap.on_change)
		snap.on_change(s);
	if (upload && snap.on_settled)
		snap.on_settled(s, round);

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

	/* Called without snap.lock, on a worker or a source's own thread. */
	if (rc == 0 && jp->expect && (off_t)gzlen != jp->expect) {
		snprintf(reason, sizeof reason, "%zu bytes, listed as %lld: the object changed",
			 gzlen, (long long)jp->expect);
		rc = -1;
	} else if (rc == 0 && pfs_pprof_validate_gz(gz, gzlen, snap.cfg->max_raw_bytes, &jp->no_start_line,
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
double snap_slot_wait(const struct pfs_service *s, int slot)
{
	double t = slot_timeout(s, slot), b;
	char key[512];

	if (gate_key(s, slot, key, sizeof key) && (b = pfs_cpugate_backlog(key)) > t)
		t = b;
	return t;
}


/* Start the fetch of a slot unless it is done, in flight, or failed too
 * recently (or failed at all, with PFS_SNAP_NO_RETRY). */
void snap_start_slot(struct pfs_service *s, struct round *r, int slot, time_t now, int flags)
{
	struct slot *sl = &r->slots[slot];
	struct pfs_job *j;
	struct job_priv *jp;

	if (snap.draining || sl->st == SLOT_READY || sl->st == SLOT_FETCHING || sl->st == SLOT_ABSENT ||
	    (sl->st == SLOT_FAILED && ((flags & PFS_SNAP_NO_RETRY) ||
	     (now - sl->failed_at < (time_t)snap.cfg->retry_after && now >= sl->failed_at))))
		return;
	j = pfs_xcalloc(1, sizeof *j);
	jp = pfs_xcalloc(1, sizeof *jp);
	jp->round = r;
	jp->slot = slot;
	jp->expect = snap_pol(s)->sizes_listed ? sl->listed : 0;
	j->priv = jp;
	j->finish = job_finish;
	j->svc = s;
	j->file = &s->files[slot];
	j->from = r->t;
	j->to = snap_pol(s)->windows ? r->t + (time_t)s->cluster->api.window : r->t;
	j->timeout_ms = (long)(slot_timeout(s, slot) * 1000);
	j->f.max_bytes = snap.cfg->max_bytes;
	sl->st = SLOT_FETCHING;
	sl->since = now;
	struct pfs_target_stats *ts = &s->state->stats[snap_stats_index(s, slot)];
	if (ts->in_flight++ == 0)
		ts->in_flight_since = now;
	char key[512];
	if (gate_key(s, slot, key, sizeof key)) {
		jp->gate = pfs_xstrdup(key);
		if (!pfs_cpugate_enter(key, j, slot_timeout(s, slot))) {
			pfs_job_set(&j->what, "%s", key); /* until it starts */
			pfs_debug("cpu profile of %s/%s waits: another one of %s is being taken",
				  s->cluster->name, s->name, key);
			return;
		}
	}
	/* Sources submit to the fetcher or hand off to a thread: neither
	 * takes snap.lock before returning. */
	s->cluster->src->start(j);
}

double pfs_snap_max_wait(const struct pfs_service *s)
{
	double w = 0;

	pthread_mutex_lock(&snap.lock);
	for (size_t i = 0; i < s->n_files; i++) {
		double t = snap_slot_wait(s, (int)i);
		if (t > w)
			w = t;
	}
	if (snap_pol(s)->extra_wait && snap_pol(s)->extra_wait(s) > w)
		w = snap_pol(s)->extra_wait(s);
	pthread_mutex_unlock(&snap.lock);
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
		if (snap.interrupted && snap.interrupted()) {
			rc = -EINTR;
			break;
		}
		step.tv_nsec += 100 * 1000000L; /* look for interrupts 10 times a second */
		if (step.tv_nsec >= 1000000000L) {
			step.tv_sec++;
			step.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&snap.cond, &snap.lock, &step);
	}
	if (r)
		r->pins--;
	return rc;
}

int snap_wait_slot(struct pfs_service *s, struct round *r, int slot, int flags)
{
	return snap_wait_busy(s, r, slot, slot_busy, snap_slot_wait(s, slot) + 5, flags);
}

int snap_wait_round(struct pfs_service *s, struct round *r, int flags)
{
	int rc = 0;

	for (size_t i = 0; i < s->n_files && !rc; i++)
		rc = snap_wait_slot(s, r, (int)i, flags);
	return rc;
}

/* Start every file of the round; returns how many cpu profiles that began
 * to take (a reader waits cpu_seconds for those). */
size_t snap_start_round(struct pfs_service *s, struct round *r, time_t now, int flags)
{
	size_t cpu = 0;

	for (size_t i = 0; i < s->n_files; i++) {
		bool idle = r->slots[i].st != SLOT_FETCHING;
		snap_start_slot(s, r, (int)i, now, flags);
		cpu += idle && r->slots[i].st == SLOT_FETCHING && snap_is_cpu(&s->files[i]);
	}
	return cpu;
}
