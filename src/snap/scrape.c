/* The scrape round policy (pprof, nats): a round is taken when latest/ is
 * read, fetching each file from the target now, and latest/ stays that
 * round while its fetches run and for latest_ttl after the last one
 * settled, so one access (lookup, getattr, open, read) is one round
 * whatever the fetch takes. A round is shown once it holds a file. */
#include "snap_i.h"

#include <errno.h>
#include <string.h>

static bool fresh(const struct pfs_service *s, const struct round *r, time_t now)
{
	time_t since = r->settled_at > r->t ? r->settled_at : r->t;

	return snap_round_has(s, r, SLOT_FETCHING) ||
	       (now >= since && now - since < (time_t)snap.cfg->latest_ttl);
}

static struct round *latest_round(struct pfs_service *s, time_t now)
{
	struct round *r = s->state->current;

	if (r && fresh(s, r, now))
		return r;
	r = snap_get_round(s, now);
	s->state->current = r;
	snap_prune(s, now);
	return r;
}

/* A remount within latest_ttl keeps serving the same latest. */
static void resume(struct pfs_service *s, time_t now)
{
	struct round *r;

	for (r = s->state->rounds; r && r->next; r = r->next)
		;
	if (r && snap_round_has(s, r, SLOT_READY) && fresh(s, r, now))
		s->state->current = r;
}

static bool holds(const struct pfs_service *s, const struct round *r, time_t now)
{
	return r == s->state->current && fresh(s, r, now);
}

static int list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
		       void *arg)
{
	int rc;

	if (settle && s->state->current && (rc = snap_wait_round(s, s->state->current, flags)))
		return rc;
	/* a round whose fetches all failed is never shown: listed while in
	 * flight, it would be gone when stat'ed */
	for (struct round *r = s->state->rounds; r; r = r->next)
		if (snap_round_has(s, r, SLOT_READY))
			fn(r->name, r->t, arg);
	return 0;
}

/* A round shown, once its fetches are done. */
static int settled_round(struct pfs_service *s, const char *round, int flags, struct round **out)
{
	struct round *r = snap_find_round(s, round);
	int rc = r ? snap_wait_round(s, r, flags) : 0;

	*out = r;
	return rc ? rc : r && snap_round_has(s, r, SLOT_READY) ? 0 : -ENOENT;
}

static int list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
		      void *arg)
{
	struct round *r;
	int rc = settled_round(s, round, flags, &r);

	if (!rc)
		snap_each_ready(s, r, fn, arg);
	return rc;
}

static int stat_file(struct pfs_service *s, const char *round, const char *file, int flags,
		off_t *size, time_t *mtime, int *fd)
{
	int slot = snap_file_index(s, file);
	struct round *r = slot < 0 ? NULL : snap_find_round(s, round);

	(void)flags;
	if (!r || r->slots[slot].st != SLOT_READY)
		return -ENOENT;
	return snap_ready(s, r, slot, size, mtime, fd);
}

static bool frozen(struct pfs_service *s, const char *round)
{
	struct round *r = snap_find_round(s, round);

	return r && !snap_round_has(s, r, SLOT_FETCHING) && snap_round_has(s, r, SLOT_READY) &&
	       !(r == s->state->current && fresh(s, r, time(NULL)));
}

static int round_time(struct pfs_service *s, const char *round, int flags, time_t *t)
{
	struct round *r;
	int rc = settled_round(s, round, flags, &r);

	if (!rc)
		*t = r->t;
	return rc;
}

static time_t latest_time(struct pfs_service *s)
{
	return s->state->current ? s->state->current->t : 0;
}

static int latest(struct pfs_service *s, const char *file, int flags,
		  char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime)
{
	return snap_latest_in(s, latest_round, file, flags, round, size, mtime);
}

static int latest_all(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg)
{
	return snap_latest_all_in(s, latest_round, flags, fn, arg);
}

static int latest_key(struct pfs_service *s, const char *merge_key, int flags)
{
	time_t now = time(NULL);
	bool ready = false, failed = false;
	int rc = 0;
	struct round *r = latest_round(s, now);

	for (size_t i = 0; i < s->n_files; i++)
		if (strcmp(s->files[i].merge_key, merge_key) == 0)
			snap_start_slot(s, r, (int)i, now, flags);
	for (size_t i = 0; i < s->n_files && !rc; i++)
		if (strcmp(s->files[i].merge_key, merge_key) == 0 &&
		    !(rc = snap_wait_slot(s, r, (int)i, flags))) {
			ready = ready || r->slots[i].st == SLOT_READY;
			failed = failed || r->slots[i].st != SLOT_ABSENT;
		}
	return rc ? rc : ready ? 0 : failed ? -EIO : -ENOENT;
}

static size_t latest_start(struct pfs_service *s, int flags)
{
	time_t now = time(NULL);

	return snap_start_round(s, latest_round(s, now), now, flags);
}

static double latest_valid(struct pfs_service *s)
{
	time_t now = time(NULL);
	struct round *r = s->state->current;
	double left = 0;

	if (r && fresh(s, r, now) && !snap_round_has(s, r, SLOT_FETCHING)) {
		time_t since = r->settled_at > r->t ? r->settled_at : r->t;
		/* a second short of it: fresh() counts whole seconds */
		left = snap.cfg->latest_ttl - (double)(now - since) - 1;
	}
	return left > 0 ? left : 0;
}

static bool latest_settled(struct pfs_service *s)
{
	struct round *r = s->state->current;
	bool ok = r && fresh(s, r, time(NULL));

	for (size_t i = 0; ok && i < s->n_files; i++)
		ok = r->slots[i].st == SLOT_READY || r->slots[i].st == SLOT_ABSENT;
	return ok;
}

/* Listing a cluster, the service or latest/ has work while latest is not
 * fresh and settled; a round found is fixed; merged/ decides for a range. */
static int listing_due(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
		       double *timeout)
{
	double v;

	(void)round;
	switch (dir) {
	case PFS_SNAP_DIR_CLUSTER:
	case PFS_SNAP_DIR_SERVICE:
	case PFS_SNAP_DIR_LATEST:
		v = latest_valid(s);
		*timeout = *timeout < v ? *timeout : v;
		return (dir == PFS_SNAP_DIR_CLUSTER ? v : *timeout) <= 0 || !latest_settled(s);
	case PFS_SNAP_DIR_RANGE:
		return -1;
	default:
		return 0;
	}
}

const struct snap_policy snap_scrape = {
	.uploads = true,
	.inputs_base = true,
	.resume = resume,
	.holds = holds,
	.list_rounds = list_rounds,
	.list_files = list_files,
	.stat = stat_file,
	.slot = snap_slot_settled,
	.frozen = frozen,
	.round_time = round_time,
	.latest_time = latest_time,
	.latest = latest,
	.latest_all = latest_all,
	.latest_key = latest_key,
	.latest_start = latest_start,
	.latest_valid = latest_valid,
	.latest_settled = latest_settled,
	.listing_due = listing_due,
};
