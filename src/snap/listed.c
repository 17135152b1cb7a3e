/* The listed round policy (source.h `list`, kind s3): a service's rounds
 * and each round's files are what the upstream lists, not scrapes or
 * windows. Listings run through the source, asynchronously, and answer
 * with listed(); the first one is waited for, later ones (after
 * list_ttl) run while the last answer is served. A round is shown once
 * complete (a .complete marker, a newer round, or older than settle), a
 * file's size is the listed one until it is fetched (when opened, with
 * the rest of its round), and names grow a service's files as listings
 * give them. */
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/log.h"
#include "lib/names.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LISTED_FILES 1024 /* names per service */
#define LIST_WAIT_FACTOR 4    /* a listing of pages: up to 4 timeouts */

static double listed_wait(const struct pfs_service *s)
{
	return s->cluster->api.target.timeout * LIST_WAIT_FACTOR + 5;
}

/* Room for `need` files. Jobs in flight point into files without snap.lock:
 * an outgrown array is kept until the service is freed. */
static void reserve_files(struct pfs_service *s, size_t need)
{
	struct pfs_svc_state *st = s->state;
	size_t cap = st->cap_files;

	if (need <= cap)
		return;
	cap = cap ? cap * 2 : 8;
	cap = cap < need ? need : cap;
	struct pfs_file *files = pfs_xcalloc(cap, sizeof *files);
	if (s->n_files)
		memcpy(files, s->files, s->n_files * sizeof *files);
	st->retired = pfs_xrealloc(st->retired, (st->n_retired + 1) * sizeof *st->retired);
	st->retired[st->n_retired++] = s->files;
	__atomic_store_n(&s->files, files, __ATOMIC_RELEASE);
	st->cap_files = cap;
	for (struct round *r = st->rounds; r; r = r->next) {
		r->slots = pfs_xrealloc(r->slots, cap * sizeof *r->slots);
		memset(r->slots + s->n_files, 0, (cap - s->n_files) * sizeof *r->slots);
	}
}

/* A file name a listing may give: "<type>[.<more>].pb.gz", a safe path
 * component. */
static bool listable(const char *name)
{
	size_t n = strlen(name);

	return n > 6 && n < sizeof(((struct pfs_file *)0)->name) && name[0] != '.' &&
	       strcmp(name + n - 6, ".pb.gz") == 0 && pfs_name_is_safe(name);
}

/* The index of a listed file name, added if new (-1: over the bound). */
static int listed_file(struct pfs_service *s, const char *name)
{
	int i = snap_file_index(s, name);

	if (i >= 0)
		return i;
	if (s->n_files >= MAX_LISTED_FILES) {
		if (!s->state->warned_files)
			pfs_warn("%s/%s: more than %d file names; %s and others are left out",
				 s->cluster->name, s->name, MAX_LISTED_FILES, name);
		s->state->warned_files = true;
		return -1;
	}
	reserve_files(s, s->n_files + 1);
	struct pfs_file *f = &s->files[s->n_files];
	memset(f, 0, sizeof *f);
	snprintf(f->name, sizeof f->name, "%s", name);
	memcpy(f->key, f->name, sizeof f->key);
	/* the merge key is the type: "heap" of heap.<instance>.pb.gz */
	snprintf(f->merge_key, sizeof f->merge_key, "%.*s", (int)strcspn(name, "."), name);
	snprintf(f->pretty, sizeof f->pretty, "%s", f->merge_key);
	f->profile = -1;
	for (int k = 0; k < PFS_NPROFILES; k++)
		if (strcmp(f->merge_key, pfs_profile_names[k]) == 0)
			f->profile = k;
	__atomic_store_n(&s->n_files, s->n_files + 1, __ATOMIC_RELEASE);
	return (int)s->n_files - 1;
}

static void learn_listed(const char *file, void *arg)
{
	if (listable(file))
		listed_file(arg, file);
}

static void learn_round(const char *cluster, const char *service, const char *round,
			void *arg)
{
	pfs_cache_files(cluster, service, round, learn_listed, arg);
}

/* The names of the files an earlier mount stored. */
static void learn(struct pfs_service *s)
{
	pfs_cache_rounds(s->cluster->name, s->name, learn_round, s);
}

bool snap_listed_present(const struct slot *sl)
{
	return sl->st == SLOT_READY || (sl->listed > 0 && sl->st != SLOT_ABSENT && sl->st != SLOT_EMPTY);
}

static bool rounds_busy(const struct pfs_service *s, const struct round *r, int slot)
{
	(void)r, (void)slot;
	return s->state->listing;
}

static bool files_busy(const struct pfs_service *s, const struct round *r, int slot)
{
	(void)s, (void)slot;
	return r->listing;
}

/* Its files were listed once it was older than settle: never again. */
static bool final(const struct pfs_service *s, const struct round *r)
{
	return r->listed_ok && r->listed_at - r->t >= (time_t)s->cluster->api.settle;
}

static void listed(struct pfs_service *s, const char *round, const struct pfs_listed *e,
		   size_t n, const char *err);

/* Start listing the rounds (r NULL) or r's files, if that is due: never
 * listed, older than list_ttl, failed longer than retry_after ago. A
 * round listed once it was older than settle is final. */
static void start_listing(struct pfs_service *s, struct round *r, time_t now, int flags)
{
	struct pfs_svc_state *st = s->state;
	const struct pfs_api *a = &s->cluster->api;
	time_t at = r ? r->listed_at : st->listed_at;
	bool ok = r ? r->listed_ok : st->listed_ok, *busy = r ? &r->listing : &st->listing;

	if (*busy || snap.draining)
		return;
	if (at && now >= at) {
		if (r && final(s, r))
			return;
		/* a parked request asks again once the listing it waited for
		 * answered: it takes that answer (and never lists in a loop) */
		if ((flags & PFS_SNAP_NO_RETRY) || now - at < 1)
			return;
		if (ok ? now - at < (time_t)a->list_ttl : now - at < (time_t)snap.cfg->retry_after)
			return;
	}
	*busy = true;
	if (r)
		r->pins++; /* prune leaves it until the answer */
	s->cluster->src->list(s, r ? r->name : NULL, listed);
}

/* Start listing the rounds (r NULL) or r's files if that is due, and wait
 * for the answer only if there never was one: later listings run while
 * the last answer is served. */
static int list_now(struct pfs_service *s, struct round *r, int flags)
{
	start_listing(s, r, time(NULL), flags);
	if (r ? r->listed_ok : s->state->listed_ok)
		return 0;
	return snap_wait_busy(s, r, 0, r ? files_busy : rounds_busy, listed_wait(s), flags);
}

/* Shown: on disk already, or listed and complete (a .complete marker, a
 * newer round listed, or older than settle). */
static bool shown(const struct pfs_service *s, const struct round *r, time_t now)
{
	if (snap_round_has(s, r, SLOT_READY))
		return true;
	if (!r->in_bucket)
		return false;
	if (r->marked || now - r->t >= (time_t)s->cluster->api.settle)
		return true;
	for (const struct round *q = r->next; q; q = q->next)
		if (q->in_bucket)
			return true;
	return false;
}

/* The rounds listed: the first listing is waited for, later ones (after
 * list_ttl) run while the last answer is served. -EIO if no listing ever
 * answered. The newest round, too young to be complete by its age,
 * has its files listed: a .complete marker shows it. */
static int rounds_listed(struct pfs_service *s, int flags)
{
	time_t now = time(NULL);
	struct round *newest = NULL;
	int rc = 0;

	if ((rc = list_now(s, NULL, flags)))
		return rc;
	if (!s->state->listed_ok && !s->state->rounds)
		return -EIO; /* the failure is logged */
	for (struct round *r = s->state->rounds; r; r = r->next)
		if (r->in_bucket)
			newest = r;
	if (newest && !shown(s, newest, now)) /* again after list_ttl */
		rc = list_now(s, newest, flags);
	return rc;
}

static int files_listed(struct pfs_service *s, struct round *r, int flags)
{
	int rc = list_now(s, r, flags);

	if (!rc && !r->listed_ok && !snap_round_has(s, r, SLOT_READY))
		rc = -EIO; /* logged */
	return rc;
}

/* A shown round, its files listed: -ENOENT if there is none such, -EIO if
 * its files were never listed (logged). */
static int shown_round(struct pfs_service *s, const char *name, bool files, int flags,
		      struct round **out)
{
	struct round *r;
	int rc;

	*out = NULL;
	if ((rc = rounds_listed(s, flags)))
		return rc;
	if (!(r = snap_find_round(s, name)) || !shown(s, r, time(NULL)))
		return -ENOENT;
	if (files && (rc = files_listed(s, r, flags)))
		return rc;
	*out = r;
	return 0;
}

static struct round *newest_shown(struct pfs_service *s, time_t now)
{
	struct round *n = NULL;

	for (struct round *r = s->state->rounds; r; r = r->next)
		if (shown(s, r, now))
			n = r;
	return n;
}

/* Size and mtime of a listed file; its cache file (fetched first) if fd. */
static int slot_of(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		   time_t *mtime, int *fd)
{
	int rc;

	if (slot < 0 || !snap_listed_present(&r->slots[slot]))
		return -ENOENT;
	if (fd) {
		/* the round's other files too: a copy of one reads the rest next
		 * (rsync, cp -r), and each is one more round trip to the bucket */
		for (size_t i = 0; i < s->n_files; i++)
			if ((int)i == slot || r->slots[i].st == SLOT_LISTED)
				snap_start_slot(s, r, (int)i, time(NULL), flags);
		if ((rc = snap_wait_slot(s, r, slot, flags)))
			return rc;
		if (r->slots[slot].st != SLOT_READY)
			return -EIO; /* logged */
		if ((*fd = snap_open_slot(s, r, slot)) < 0)
			return *fd;
	}
	*size = r->slots[slot].st == SLOT_READY ? r->slots[slot].size : r->slots[slot].listed;
	*mtime = r->t;
	return 0;
}

static void apply_rounds(struct pfs_service *s, const struct pfs_listed *e, size_t n, time_t now)
{
	time_t from = now - (time_t)s->cluster->api.range, t;

	for (struct round *r = s->state->rounds; r; r = r->next)
		r->in_bucket = false;
	for (size_t i = 0; i < n; i++)
		if (pfs_name_parse_time(e[i].name, &t) == 0 && t >= from && t <= now + 86400)
			snap_get_round(s, t)->in_bucket = true;
}

static void apply_files(struct pfs_service *s, struct round *r, const struct pfs_listed *e,
			size_t n)
{
	bool *seen = pfs_xcalloc(MAX_LISTED_FILES + 1, sizeof *seen);

	r->marked = false;
	for (size_t k = 0; k < n; k++) {
		int i;
		if (strcmp(e[k].name, ".complete") == 0) {
			r->marked = true;
			continue;
		}
		if (e[k].size <= 0 || !listable(e[k].name) || (i = listed_file(s, e[k].name)) < 0)
			continue; /* an empty object is no profile */
		struct slot *sl = &r->slots[i];
		seen[i] = true;
		if (sl->st == SLOT_READY && sl->size != e[k].size)
			pfs_warn("%s/%s/%s/%s: listed as %lld bytes, %lld fetched before: serving "
				 "what was fetched", s->cluster->name, s->name, r->name, e[k].name,
				 (long long)e[k].size, (long long)sl->size);
		if (sl->st != SLOT_FETCHING) /* its job compares against the old one */
			sl->listed = e[k].size;
		if (sl->st == SLOT_EMPTY || sl->st == SLOT_ABSENT)
			sl->st = SLOT_LISTED;
	}
	for (size_t i = 0; i < s->n_files; i++)
		if (!seen[i] && r->slots[i].st == SLOT_LISTED) {
			r->slots[i].st = SLOT_EMPTY; /* gone from the bucket */
			r->slots[i].listed = 0;
		}
	free(seen);
}

/* The source's answer to a listing (pfs_listed_fn). */
static void listed(struct pfs_service *s, const char *round, const struct pfs_listed *e,
		   size_t n, const char *err)
{
	struct pfs_svc_state *st = s->state;
	time_t now = time(NULL);
	bool say = false, again = false;
	char what[512];

	pthread_mutex_lock(&snap.lock);
	struct round *r = round ? snap_find_round(s, round) : NULL; /* pinned: still there */
	if (round && !r) {
		pthread_mutex_unlock(&snap.lock);
		return;
	}
	if (!err) {
		if (r)
			apply_files(s, r, e, n);
		else
			apply_rounds(s, e, n, now);
		again = st->list_error[0] != '\0';
		st->list_error[0] = '\0';
	} else {
		/* .status.json shows it as the service's last error */
		snap_stats_failed(&st->stats[0], now, round ? round : "", "listing: %s", err);
		if (strcmp(st->list_error, err)) {
			snprintf(st->list_error, sizeof st->list_error, "%s", err);
			say = true;
		}
	}
	if (r) {
		r->listing = false;
		r->listed_at = now;
		r->listed_ok = r->listed_ok || !err;
		r->pins--;
	} else {
		st->listing = false;
		st->listed_at = now;
		st->listed_ok = st->listed_ok || !err;
	}
	pthread_cond_broadcast(&snap.cond);
	pthread_mutex_unlock(&snap.lock);
	snprintf(what, sizeof what, "%s/%s%s%s", s->cluster->name, s->name, round ? "/" : "",
		 round ? round : "");
	if (say)
		pfs_err("list %s failed: %s", what, err);
	else if (again)
		pfs_info("list %s works again", what);
	if (snap.on_change)
		snap.on_change(s);
}

/* ---- the policy ---- */

static size_t slot_room(const struct pfs_service *s)
{
	return s->state->cap_files ? s->state->cap_files : 1;
}

static bool holds(const struct pfs_service *s, const struct round *r, time_t now)
{
	(void)s, (void)now;
	return r->listing;
}

static int list_rounds(struct pfs_service *s, int flags, bool settle, pfs_snap_round_fn fn,
		       void *arg)
{
	time_t now = time(NULL);
	int rc = rounds_listed(s, flags);

	(void)settle;
	for (struct round *r = s->state->rounds; !rc && r; r = r->next)
		if (shown(s, r, now))
			fn(r->name, r->t, arg);
	return rc;
}

static void each_present(struct pfs_service *s, const struct round *r, pfs_snap_file_fn fn,
			 void *arg)
{
	for (size_t i = 0; i < s->n_files; i++)
		if (snap_listed_present(&r->slots[i]))
			fn(s->files[i].name, arg);
}

static int list_files(struct pfs_service *s, const char *round, int flags, pfs_snap_file_fn fn,
		      void *arg)
{
	struct round *r;
	int rc = shown_round(s, round, true, flags, &r);

	if (!rc)
		each_present(s, r, fn, arg);
	return rc;
}

static int stat_file(struct pfs_service *s, const char *round, const char *file, int flags,
		     off_t *size, time_t *mtime, int *fd)
{
	struct round *r;
	int rc = shown_round(s, round, true, flags, &r);

	return rc ? rc : slot_of(s, r, snap_file_index(s, file), flags, size, mtime, fd);
}

/* Its files' listing is final. */
static bool frozen(struct pfs_service *s, const char *round)
{
	struct round *r = snap_find_round(s, round);

	return r && shown(s, r, time(NULL)) && final(s, r);
}

static int round_time(struct pfs_service *s, const char *round, int flags, time_t *t)
{
	struct round *r;
	int rc = shown_round(s, round, false, flags, &r);

	if (!rc)
		*t = r->t;
	return rc;
}

static time_t latest_time(struct pfs_service *s)
{
	struct round *r = newest_shown(s, time(NULL));

	return r ? r->t : 0;
}

/* latest/: the newest round shown, its files listed. */
static int newest_listed(struct pfs_service *s, int flags, struct round **out)
{
	int rc = rounds_listed(s, flags);

	if (!rc && !(*out = newest_shown(s, time(NULL))))
		rc = -ENOENT;
	return rc ? rc : files_listed(s, *out, flags);
}

static int latest(struct pfs_service *s, const char *file, int flags,
		  char round[PFS_ROUND_NAME_MAX], off_t *size, time_t *mtime)
{
	struct round *r = NULL;
	int rc = newest_listed(s, flags, &r);

	if (rc)
		return rc;
	memcpy(round, r->name, PFS_ROUND_NAME_MAX);
	return slot_of(s, r, snap_file_index(s, file), flags, size, mtime, NULL);
}

static int latest_all(struct pfs_service *s, int flags, pfs_snap_file_fn fn, void *arg)
{
	struct round *r = NULL;
	int rc = newest_listed(s, flags, &r);

	if (rc == -ENOENT)
		return 0; /* no round yet: an empty latest/ */
	if (!rc)
		each_present(s, r, fn, arg);
	return rc;
}

/* Every shown round from since on listed, and each listed file of it there. */
static bool inputs_settled(struct pfs_service *s, const char *merge_key, time_t since, time_t now)
{
	if (!s->state->listed_ok)
		return false;
	for (struct round *r = s->state->rounds; r; r = r->next) {
		if (!shown(s, r, now))
			continue;
		if (r->t >= since && !r->listed_ok)
			return false;
		for (size_t i = 0; i < s->n_files; i++)
			if (r->t >= since && snap_listed_present(&r->slots[i]) &&
			    r->slots[i].st != SLOT_READY && strcmp(s->files[i].merge_key, merge_key) == 0)
				return false;
	}
	return true;
}

/* Every shown round in range listed, then its files fetched; and the
 * newest round before the range: the base of differences. */
static void inputs_fetch(struct pfs_service *s, const char *merge_key, time_t since, time_t now)
{
	time_t from = since;

	if (rounds_listed(s, PFS_SNAP_WAIT))
		return;
	for (struct round *r = s->state->rounds; r && r->t < since; r = r->next)
		if (shown(s, r, now))
			from = r->t;
	for (int pass = 0; pass < 4; pass++)
		for (struct round *r = s->state->rounds; r; r = r->next) {
			if (r->t < from || !shown(s, r, now))
				continue;
			if (pass == 0)
				start_listing(s, r, now, 0);
			else if (pass == 1)
				snap_wait_busy(s, r, 0, files_busy, listed_wait(s), PFS_SNAP_WAIT);
			for (size_t i = 0; pass >= 2 && i < s->n_files; i++) {
				if (!snap_listed_present(&r->slots[i]) || strcmp(s->files[i].merge_key, merge_key))
					continue;
				if (pass == 2)
					snap_start_slot(s, r, (int)i, now, 0);
				else
					snap_wait_slot(s, r, (int)i, PFS_SNAP_WAIT);
			}
		}
}

/* A bucket's rounds and files may change until a round's listing is
 * final: the service and latest/ are listed again each time; merged/
 * decides for a range. */
static int listing_due(struct pfs_service *s, enum pfs_snap_dir dir, const char *round,
		       double *timeout)
{
	switch (dir) {
	case PFS_SNAP_DIR_SERVICE:
	case PFS_SNAP_DIR_LATEST:
		*timeout = *timeout < 0 ? *timeout : 0;
		return 1;
	case PFS_SNAP_DIR_ROUND:
		return !frozen(s, round);
	case PFS_SNAP_DIR_RANGE:
		return -1;
	default:
		return 0;
	}
}

const struct snap_policy snap_listed = {
	.keeps_range = true,
	.fills = true,
	.sizes_listed = true,
	.names_listed = true,
	.inputs_base = true,
	.learn = learn,
	.slot_room = slot_room,
	.extra_wait = listed_wait,
	.holds = holds,
	.list_rounds = list_rounds,
	.list_files = list_files,
	.stat = stat_file,
	.slot = slot_of,
	.frozen = frozen,
	.round_time = round_time,
	.latest_time = latest_time,
	.latest = latest,
	.latest_all = latest_all,
	.inputs_settled = inputs_settled,
	.inputs_fetch = inputs_fetch,
	.listing_due = listing_due,
};
