/* The window round policy (pyroscope, parca, coroot): one round per fixed
 * window of the cluster's `window` seconds over its `range`, each file
 * fetched for that window when it is read; latest/ is the newest complete
 * window. Rounds come and go with the clock. */
#include "snap_i.h"

#include <errno.h>
#include <string.h>

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

/* The round a <time> name stands for, made if it is a window shown. */
static struct round *lookup(struct pfs_service *s, const char *name)
{
	time_t t;

	if (pfs_name_parse_time(name, &t) || !valid_window(s, t, time(NULL)))
		return NULL;
	return snap_get_round(s, t);
}

static struct round *latest_round(struct pfs_service *s, time_t now)
{
	return snap_get_round(s, newest_window(s, now));
}

static int list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
		       void *arg)
{
	time_t now = time(NULL), w = (time_t)s->cluster->api.window;
	char name[PFS_ROUND_NAME_MAX];

	(void)flags, (void)settle;
	for (time_t t = oldest_window(s, now, 0); t <= newest_window(s, now); t += w) {
		pfs_name_time(t, name);
		fn(name, t, arg);
	}
	return 0;
}

/* Listing a window fetches all of its files at once. */
static int list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
		      void *arg)
{
	struct round *r = lookup(s, round);
	int rc;

	if (!r)
		return -ENOENT;
	snap_start_round(s, r, time(NULL), flags);
	if (!(rc = snap_wait_round(s, r, flags)))
		snap_each_ready(s, r, fn, arg);
	return rc;
}

static int stat_file(struct pfs_service *s, const char *round, const char *file, int flags,
		     off_t *size, time_t *mtime, int *fd)
{
	int slot = snap_file_index(s, file), rc;
	struct round *r = slot < 0 ? NULL : lookup(s, round);

	if (!r)
		return -ENOENT;
	snap_start_slot(s, r, slot, time(NULL), flags);
	if ((rc = snap_wait_slot(s, r, slot, flags)))
		return rc;
	if (r->slots[slot].st == SLOT_READY)
		return snap_ready(s, r, slot, size, mtime, fd);
	return r->slots[slot].st == SLOT_FAILED ? -EIO : -ENOENT;
}

/* Every file fetched or absent, nothing in flight. */
static bool frozen(struct pfs_service *s, const char *round)
{
	struct round *r = snap_find_round(s, round);

	return r && !snap_round_has(s, r, SLOT_FETCHING) && !snap_round_has(s, r, SLOT_EMPTY) &&
	       !snap_round_has(s, r, SLOT_FAILED);
}

static int round_time(struct pfs_service *s, const char *round, int flags, time_t *t)
{
	struct round *r = lookup(s, round);

	(void)flags;
	if (!r)
		return -ENOENT;
	*t = r->t;
	return 0;
}

static time_t latest_time(struct pfs_service *s)
{
	return newest_window(s, time(NULL));
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

static bool inputs_settled(struct pfs_service *s, const char *merge_key, time_t since, time_t now)
{
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

/* Every window from since on: all started, then all waited for. */
static void inputs_fetch(struct pfs_service *s, const char *merge_key, time_t since, time_t now)
{
	time_t w = (time_t)s->cluster->api.window;

	for (int pass = 0; pass < 2; pass++)
		for (time_t t = oldest_window(s, now, since); t <= newest_window(s, now); t += w) {
			struct round *r = snap_get_round(s, t);
			for (size_t i = 0; i < s->n_files; i++)
				if (strcmp(s->files[i].merge_key, merge_key) == 0) {
					if (pass == 0)
						snap_start_slot(s, r, (int)i, now, 0);
					else
						snap_wait_slot(s, r, (int)i, PFS_SNAP_WAIT);
				}
		}
}

/* Windows come and go with the clock; listing a window or a range fetches
 * it, so only a listing does. */
static int listing_due(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
		       double *timeout)
{
	(void)s, (void)round;
	switch (dir) {
	case PFS_SNAP_DIR_SERVICE:
	case PFS_SNAP_DIR_LATEST:
		*timeout = PFS_SNAP_CLOCK;
		return dir == PFS_SNAP_DIR_LATEST;
	case PFS_SNAP_DIR_ROUND:
	case PFS_SNAP_DIR_RANGE:
		return 1;
	default:
		return 0;
	}
}

const struct snap_policy snap_window = {
	.windows = true,
	.keeps_range = true,
	.fills = true,
	.uploads = true,
	.list_rounds = list_rounds,
	.list_files = list_files,
	.stat = stat_file,
	.slot = snap_slot_settled,
	.frozen = frozen,
	.round_time = round_time,
	.latest_time = latest_time,
	.latest = latest,
	.latest_all = latest_all,
	.inputs_settled = inputs_settled,
	.inputs_fetch = inputs_fetch,
	.listing_due = listing_due,
};
