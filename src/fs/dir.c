/* Directory listings, and the open handles of files and listings. */
#include "fs_i.h"

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_ref g_open = {&g_open, &g_open, NULL};

void fs_open_track(struct open_ref *r, void (*free_fn)(struct open_ref *r))
{
	r->free = free_fn;
	pthread_mutex_lock(&g_open_lock);
	r->next = g_open.next;
	r->prev = &g_open;
	g_open.next->prev = r;
	g_open.next = r;
	pthread_mutex_unlock(&g_open_lock);
}

void fs_open_untrack(struct open_ref *r)
{
	pthread_mutex_lock(&g_open_lock);
	r->prev->next = r->next;
	r->next->prev = r->prev;
	pthread_mutex_unlock(&g_open_lock);
}

static void list_add(struct listing *d, const char *name, bool dir)
{
	if (d->n == d->cap) {
		d->cap = d->cap ? d->cap * 2 : 16;
		d->names = pfs_xrealloc(d->names, d->cap * sizeof *d->names);
		d->is_dir = pfs_xrealloc(d->is_dir, d->cap);
	}
	d->is_dir[d->n] = dir;
	d->names[d->n++] = pfs_xstrdup(name);
}

void fs_list_free(struct listing *d)
{
	if (d->ref.free)
		fs_open_untrack(&d->ref);
	for (size_t i = 0; i < d->n; i++)
		free(d->names[i]);
	free(d->names);
	free(d->is_dir);
	free(d);
}

uint64_t fs_list_sig(const struct listing *d)
{
	uint64_t h = PFS_FNV_INIT;

	for (size_t i = 0; i < d->n; i++) /* "/" ends a name, "d" or "f" says what */
		h = pfs_fnv1a(pfs_fnv1a(h, d->names[i]), d->is_dir[i] ? "/d" : "/f");
	return h | 1; /* never 0: a node not listed yet */
}

static void add_round(const char *round, time_t t, void *arg)
{
	(void)t;
	list_add(arg, round, true);
}

static void add_file(const char *file, void *arg)
{
	list_add(arg, file, false);
}

/* merged/<range>/: a file per merge key with an input in range, and
 * default.pgo where the cpu snapshots make one. A key with no input yet
 * has the latest round's files fetched, and waited for (unless quiet). */
static int list_range(struct loc *l, int flags, bool quiet, struct listing *d)
{
	struct pfs_service *s = l->service;
	const char **keys;
	char name[512];
	size_t n = pfs_merged_keys(s, &keys);
	off_t size;
	time_t t;
	int rc = 0;

	for (size_t i = 0; i < n && rc != -EAGAIN; i++) {
		bool has = pfs_merged_has(s, l->range, keys[i]);
		if (!has && !quiet)
			has = (rc = pfs_snap_latest_key(s, keys[i], flags)) == 0;
		if (has) {
			snprintf(name, sizeof name, "%s.pb.gz", keys[i]);
			list_add(d, name, false);
			/* stat'ed next (rsync, cp -r, ls -l): built meanwhile */
			pfs_merged_prebuild(s, l->range, keys[i]);
		}
	}
	free(keys);
	if (rc == -EAGAIN)
		return rc;
	/* listed once built: no input with start_line (or none), no file */
	rc = pfs_merged_stat(s, l->range, PFS_PGO_FILE, &size, &t, NULL, NULL);
	if (rc == 0 || rc == -EIO)
		list_add(d, PFS_PGO_FILE, false);
	return 0;
}

/* A service listed (its round is in): its merged/ files are built on
 * the workers meanwhile, so the rsync or cp -r that lists it finds them
 * ready when it reaches merged/ (it copies latest/ and <time>/ first). */
static void prebuild_merged(struct pfs_service *s)
{
	const char **keys;
	size_t n = pfs_merged_keys(s, &keys);

	for (size_t r = 0; r < fs_cfg->n_merged; r++)
		for (size_t i = 0; i < n; i++)
			pfs_merged_prebuild(s, &fs_cfg->merged[r], keys[i]);
	free(keys);
}

/* Without wait: -EAGAIN (the listing is dropped) while fetches run. */
int fs_list_dir(struct loc *l, int flags, bool quiet, struct listing *d)
{
	char name[512];
	int rc = 0;

	list_add(d, ".", true);
	list_add(d, "..", true);
	switch (l->node) {
	case N_ROOT:
		for (size_t i = 0; i < fs_cfg->n_clusters; i++)
			list_add(d, fs_cfg->clusters[i].name, true);
		break;
	case N_CLUSTER: {
		struct pfs_service **svcs;
		size_t n;
		bool failed = !quiet && pfs_source_refresh(l->cluster, l->cluster->api.discover_every);
		n = pfs_registry_services(l->cluster, &svcs);
		/* a bucket's tree (s3) that could never be listed is no empty
		 * tree: an rsync --delete of it would delete everything */
		if (failed && n == 0 && l->cluster->src->tree_listed) {
			free(svcs);
			return -EIO;
		}
		size_t cpu = 0;
		double secs = 0;
		for (size_t i = 0; i < n; i++) {
			/* Listing (or copying) a cluster snapshots all of its services
			 * at once (one round per latest_ttl), so an rsync of the
			 * mount waits for the slowest target, not for their sum. */
			if (pfs_snap_service_gone(svcs[i]))
				continue; /* discovered once, nothing left of it */
			size_t c = quiet ? 0 : pfs_snap_latest_start(svcs[i], flags);
			cpu += c;
			secs = c && svcs[i]->cpu_seconds > secs ? svcs[i]->cpu_seconds : secs;
			list_add(d, svcs[i]->name, true);
		}
		pfs_snap_say_cpu(l->cluster->name, cpu, secs);
		free(svcs);
		break;
	}
	case N_SERVICE:
		/* Listing a service takes a snapshot (one per latest_ttl) and
		 * lists its <time> directory once its fetches are done (if one
		 * succeeded), so one rsync run copies the snapshot it caused. */
		if (!quiet) {
			snprintf(name, sizeof name, "%s/%s", l->cluster->name, l->service->name);
			/* parked, it waits for the round: a failure is taken,
			 * not fetched again (retry_after 0) at every retry */
			pfs_snap_say_cpu(name, pfs_snap_latest_start(l->service, flags),
					 l->service->cpu_seconds);
		}
		list_add(d, LATEST, true);
		if (fs_cfg->n_merged)
			list_add(d, PFS_MERGED_DIR, true);
		rc = pfs_snap_list_rounds(l->service, flags, !quiet, add_round, d);
		if (!rc && !quiet)
			prebuild_merged(l->service);
		break;
	case N_LATEST:
		/* Listing latest scrapes all of it at once, so the stat calls
		 * that follow (ls -l, rsync, cp -r) find every file ready. */
		rc = pfs_snap_latest_all(l->service, flags, add_file, d);
		break;
	case N_ROUND:
		rc = pfs_snap_list_files(l->service, l->round, flags, add_file, d);
		break;
	case N_MERGED:
		for (size_t i = 0; i < fs_cfg->n_merged; i++)
			list_add(d, fs_cfg->merged[i].name, true);
		break;
	case N_RANGE:
		rc = list_range(l, flags, quiet, d);
		break;
	default:
		rc = -ENOTDIR;
	}
	return rc;
}

static double min_d(double a, double b) { return a < b ? a : b; }

/* True if each merge key of the service has an input in the range. */
static bool range_complete(struct pfs_service *s, const struct pfs_range *r)
{
	const char **keys;
	size_t n = pfs_merged_keys(s, &keys);
	bool all = true;

	for (size_t i = 0; i < n && all; i++)
		all = pfs_merged_has(s, r, keys[i]);
	free(keys);
	return all;
}

/* Whether listing l has work to start (and so must reach us), and for how
 * long that holds otherwise. */
static bool listing_due(struct loc *l, double *timeout)
{
	switch (l->node) {
	case N_CLUSTER: {
		struct pfs_cluster *c = l->cluster;
		struct pfs_service **svcs;
		bool due = false;
		if (c->src->discover) {
			pthread_mutex_lock(&c->lock);
			double left = c->discovered_at
					      ? (double)c->discovered_at + c->api.discover_every -
							(double)time(NULL) - 1
					      : 0;
			pthread_mutex_unlock(&c->lock);
			due = left <= 0;
			*timeout = min_d(*timeout, left);
		}
		size_t n = pfs_registry_services(c, &svcs);
		for (size_t i = 0; i < n && !due; i++)
			due = pfs_snap_listing_due(svcs[i], PFS_SNAP_DIR_CLUSTER, NULL, timeout) > 0;
		free(svcs);
		return due;
	}
	case N_SERVICE:
		return pfs_snap_listing_due(l->service, PFS_SNAP_DIR_SERVICE, NULL, timeout) > 0;
	case N_LATEST:
		return pfs_snap_listing_due(l->service, PFS_SNAP_DIR_LATEST, NULL, timeout) > 0;
	case N_ROUND:
		return pfs_snap_listing_due(l->service, PFS_SNAP_DIR_ROUND, l->round, timeout) > 0;
	case N_RANGE: {
		int due = pfs_snap_listing_due(l->service, PFS_SNAP_DIR_RANGE, NULL, timeout);
		if (due >= 0)
			return due;
		/* until a file's last input leaves the range (arrivals:
		 * fs_merged_changed); a file with no input yet: listing fetches it */
		*timeout = min_d(*timeout, pfs_merged_listing_valid(l->service, l->range));
		return !pfs_snap_latest_settled(l->service) && !range_complete(l->service, l->range);
	}
	default:
		return false;
	}
}

/* A directory's mtime nanoseconds (no_opendir): its listing's signature,
 * or, while a listing has work to start, a value never given before. */
int fs_listing_nsec(struct loc *l, int flags, double *timeout, long *nsec)
{
	int rc;

	if (listing_due(l, timeout)) {
		/* not 0: each path walk through a directory checks its
		 * permissions, from attributes that must be fresh */
		*timeout = l->node == N_LATEST ? 0 : DIR_TIMEOUT;
		*nsec = (long)(fs_fresh_gen() % 1000000000);
		return 0;
	}
	struct listing *d = pfs_xcalloc(1, sizeof *d);
	rc = fs_list_dir(l, flags, true, d);
	*nsec = rc ? 0 : (long)(fs_list_sig(d) % 1000000000);
	fs_list_free(d);
	return rc;
}

/* The entries of d from off on, as many as fit in size. */
void fs_reply_listing(fuse_req_t req, const struct listing *d, size_t size, off_t off)
{
	char *buf = pfs_xmalloc(size ? size : 1);
	size_t used = 0;

	for (size_t i = (size_t)off; off >= 0 && i < d->n; i++) {
		struct stat st = {.st_ino = fs_hash_str(d->names[i]) | 1,
				  .st_mode = d->is_dir[i] ? S_IFDIR : S_IFREG};
		size_t n = fuse_add_direntry(req, buf + used, size - used, d->names[i], &st,
					     (off_t)i + 1);
		if (n > size - used)
			break;
		used += n;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}
/* At teardown: handles whose release never came (unmounted by a signal). */
void fs_open_free_all(void)
{
	while (g_open.next != &g_open)
		g_open.next->free(g_open.next);
}
