/* Listed kinds (source.h `list`, kind s3): a service's rounds and each
 * round's files are what the upstream lists, not scrapes or windows.
 * Listings run through the source, asynchronously, and answer with
 * pfs_snap_listed(); the first one is waited for, later ones (after
 * list_ttl) run while the last answer is served. A round is shown once
 * complete (a .complete marker, a newer round, or older than settle), a
 * file's size is the listed one until it is fetched (when opened, with
 * the rest of its round), and names grow a service's files as listings
 * give them. */
#include "snap_i.h"

#include "lib/cache.h"
#include "lib/log.h"
#include "lib/names.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LISTED_FILES 1024 /* names per service */
#define LIST_WAIT_FACTOR 4    /* a listing of pages: up to 4 timeouts */

double listed_wait(const struct pfs_service *s)
{
	return s->cluster->api.target.timeout * LIST_WAIT_FACTOR + 5;
}

/* Room for `need` files. Jobs in flight point into files without snap_lock:
 * an outgrown array is kept until the service is freed. */
static void reserve_files(struct pfs_service *s, size_t need)
{
	struct pfs_svc_state *st = s->state;
	size_t cap = st->cap_files;

	if (need <= cap)
		return;
	cap = cap ? cap * 2 : 8;
	cap = cap < need ? need : cap;
	struct pfs_file *files = calloc(cap, sizeof *files);
	if (s->n_files)
		memcpy(files, s->files, s->n_files * sizeof *files);
	st->retired = realloc(st->retired, (st->n_retired + 1) * sizeof *st->retired);
	st->retired[st->n_retired++] = s->files;
	__atomic_store_n(&s->files, files, __ATOMIC_RELEASE);
	st->cap_files = cap;
	for (struct round *r = st->rounds; r; r = r->next) {
		r->slots = realloc(r->slots, cap * sizeof *r->slots);
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

void listed_learn_round(const char *cluster, const char *service, const char *round,
			       void *arg)
{
	pfs_cache_files(cluster, service, round, learn_listed, arg);
}

/* A slot the upstream lists (or that is on disk already). */
bool listed_present(const struct slot *sl)
{
	return sl->st == SLOT_READY || (sl->listed > 0 && sl->st != SLOT_ABSENT && sl->st != SLOT_EMPTY);
}

static bool rounds_busy(const struct pfs_service *s, const struct round *r, int slot)
{
	(void)r, (void)slot;
	return s->state->listing;
}

bool listed_files_busy(const struct pfs_service *s, const struct round *r, int slot)
{
	(void)s, (void)slot;
	return r->listing;
}

/* Start listing the rounds (r NULL) or r's files, if that is due: never
 * listed, older than list_ttl, failed longer than retry_after ago. A
 * round listed once it was older than settle is final. */
void listed_start(struct pfs_service *s, struct round *r, time_t now, int flags)
{
	struct pfs_svc_state *st = s->state;
	const struct pfs_api *a = &s->cluster->api;
	time_t at = r ? r->listed_at : st->listed_at;
	bool ok = r ? r->listed_ok : st->listed_ok, *busy = r ? &r->listing : &st->listing;

	if (*busy || snap_draining)
		return;
	if (at && now >= at) {
		if (r && listed_final(s, r))
			return;
		/* a parked request asks again once the listing it waited for
		 * answered: it takes that answer (and never lists in a loop) */
		if ((flags & PFS_SNAP_NO_RETRY) || now - at < 1)
			return;
		if (ok ? now - at < (time_t)a->list_ttl : now - at < (time_t)snap_cfg->retry_after)
			return;
	}
	*busy = true;
	if (r)
		r->pins++; /* prune leaves it until the answer */
	s->cluster->src->list(s, r ? r->name : NULL, pfs_snap_listed);
}

bool listed_final(const struct pfs_service *s, const struct round *r)
{
	return r->listed_ok && r->listed_at - r->t >= (time_t)s->cluster->api.settle;
}

/* Start listing the rounds (r NULL) or r's files if that is due, and wait
 * for the answer only if there never was one: later listings run while
 * the last answer is served. */
static int list_now(struct pfs_service *s, struct round *r, int flags)
{
	listed_start(s, r, time(NULL), flags);
	if (r ? r->listed_ok : s->state->listed_ok)
		return 0;
	return snap_wait_busy(s, r, 0, r ? listed_files_busy : rounds_busy, listed_wait(s), flags);
}

/* Shown: on disk already, or listed and complete (a .complete marker, a
 * newer round listed, or older than settle). */
bool listed_shown(const struct pfs_service *s, const struct round *r, time_t now)
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
int listed_rounds(struct pfs_service *s, int flags)
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
	if (newest && !listed_shown(s, newest, now)) /* again after list_ttl */
		rc = list_now(s, newest, flags);
	return rc;
}

int listed_files(struct pfs_service *s, struct round *r, int flags)
{
	int rc = list_now(s, r, flags);

	if (!rc && !r->listed_ok && !snap_round_has(s, r, SLOT_READY))
		rc = -EIO; /* logged */
	return rc;
}

/* A shown round, its files listed: -ENOENT if there is none such, -EIO if
 * its files were never listed (logged). */
int listed_round(struct pfs_service *s, const char *name, bool files, int flags,
			struct round **out)
{
	struct round *r;
	int rc;

	*out = NULL;
	if ((rc = listed_rounds(s, flags)))
		return rc;
	if (!(r = snap_find_round(s, name)) || !listed_shown(s, r, time(NULL)))
		return -ENOENT;
	if (files && (rc = listed_files(s, r, flags)))
		return rc;
	*out = r;
	return 0;
}

struct round *listed_newest(struct pfs_service *s, time_t now)
{
	struct round *n = NULL;

	for (struct round *r = s->state->rounds; r; r = r->next)
		if (listed_shown(s, r, now))
			n = r;
	return n;
}

/* Size and mtime of a listed file; its cache file (fetched first) if fd. */
int listed_slot(struct pfs_service *s, struct round *r, int slot, int flags, off_t *size,
		       time_t *mtime, int *fd)
{
	int rc;

	if (slot < 0 || !listed_present(&r->slots[slot]))
		return -ENOENT;
	if (fd) {
		/* the round's other files too: a copy of one reads the rest next
		 * (rsync, cp -r), and each is one more round trip to the bucket */
		for (size_t i = 0; i < s->n_files; i++)
			if ((int)i == slot || r->slots[i].st == SLOT_LISTED)
				snap_start_slot_ex(s, r, (int)i, time(NULL), flags);
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
	bool *seen = calloc(MAX_LISTED_FILES + 1, sizeof *seen);

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

void pfs_snap_listed(struct pfs_service *s, const char *round, const struct pfs_listed *e,
		     size_t n, const char *err)
{
	struct pfs_svc_state *st = s->state;
	time_t now = time(NULL);
	bool say = false, again = false;
	char what[512];

	pthread_mutex_lock(&snap_lock);
	struct round *r = round ? snap_find_round(s, round) : NULL; /* pinned: still there */
	if (round && !r) {
		pthread_mutex_unlock(&snap_lock);
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
	pthread_cond_broadcast(&snap_cond);
	pthread_mutex_unlock(&snap_lock);
	snprintf(what, sizeof what, "%s/%s%s%s", s->cluster->name, s->name, round ? "/" : "",
		 round ? round : "");
	if (say)
		pfs_err("list %s failed: %s", what, err);
	else if (again)
		pfs_info("list %s works again", what);
	if (snap_on_change)
		snap_on_change(s);
}

