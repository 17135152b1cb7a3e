/* What the kernel must forget (a round retention removed, a merged/ file
 * rebuilt, a listing that changed), told on a thread of its own. */
#include "fs_i.h"

/* Invalidations run on a thread of their own: the kernel's may wait for
 * the directory's lock, which a parked listing of it holds until the
 * retry thread answers it. */
static pthread_mutex_t g_inval_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_inval_cond = PTHREAD_COND_INITIALIZER;
static struct inval *g_invals; /* g_inval_lock */
static bool g_inval_stop;
static pthread_t g_inval_thread;
static struct fuse_session *g_se;

void pfs_fs_set_session(struct fuse_session *se) { g_se = se; }

static void queue_inval(struct inval *iv);

/* The kernel's copy of a directory's listing (no_opendir) is stale. */
static void listing_changed(const char *dir)
{
	if (fs_no_opendir) {
		struct inval *iv = pfs_xcalloc(1, sizeof *iv);
		iv->dir = pfs_xstrdup(dir);
		queue_inval(iv);
	}
}

static void queue_inval(struct inval *iv)
{
	pthread_mutex_lock(&g_inval_lock);
	iv->next = g_invals;
	g_invals = iv;
	pthread_cond_signal(&g_inval_cond);
	pthread_mutex_unlock(&g_inval_lock);
}

/* The service's inputs changed: its merged/ files the kernel knows of may
 * be rebuilt. Their names go: the next lookup finds the new result, who
 * has the old one open reads it on. */
void fs_merged_changed(struct pfs_service *s)
{
	const char **keys;
	char dir[1024], name[256];
	size_t n;

	if (!fs_cfg->n_merged)
		return;
	n = pfs_merged_keys(s, &keys);
	for (size_t r = 0; r < fs_cfg->n_merged; r++) {
		snprintf(dir, sizeof dir, "/%s/%s/%s/%s", s->cluster->name, s->name,
			 PFS_MERGED_DIR, fs_cfg->merged[r].name);
		if (!fs_node_find(dir))
			continue; /* the kernel knows none of its names */
		listing_changed(dir);
		for (size_t i = 0; i <= n; i++) {
			struct inval *iv = pfs_xcalloc(1, sizeof *iv);
			snprintf(name, sizeof name, i < n ? "%s.pb.gz" : "%s",
				 i < n ? keys[i] : PFS_PGO_FILE);
			iv->dir = pfs_xstrdup(dir);
			iv->name = pfs_xstrdup(name);
			queue_inval(iv);
		}
	}
	free(keys);
}

void fs_on_removed(struct pfs_service *s, const char *round)
{
	struct inval *iv = pfs_xcalloc(1, sizeof *iv);
	size_t n = strlen(s->cluster->name) + strlen(s->name) + 3;

	iv->dir = pfs_xmalloc(n);
	snprintf(iv->dir, n, "/%s/%s", s->cluster->name, s->name);
	iv->name = pfs_xstrdup(round);
	listing_changed(iv->dir);
	queue_inval(iv);
	fs_merged_changed(s);
}

/* No lock held: the kernel's invalidation may wait for a lookup or a
 * parked listing in that directory. */
static void run_invals(struct inval *iv)
{
	while (iv) {
		struct inval *next = iv->next;
		fuse_ino_t ino = fs_node_find(iv->dir);
		if (ino && g_se && iv->name) /* else the kernel never looked it up */
			fuse_lowlevel_notify_inval_entry(g_se, ino, iv->name, strlen(iv->name));
		else if (ino && g_se)
			fuse_lowlevel_notify_inval_inode(g_se, ino, 0, 0);
		free(iv->dir);
		free(iv->name);
		free(iv);
		iv = next;
	}
}

/* Discovery added services: the cluster's listing the kernel holds is
 * stale (their names were never looked up: nothing else is cached). */
void fs_on_discovered(struct pfs_cluster *c)
{
	char dir[512];

	snprintf(dir, sizeof dir, "/%s", c->name);
	listing_changed(dir);
}

static void *inval_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_inval_lock);
	while (!g_inval_stop) {
		struct inval *iv = g_invals;
		g_invals = NULL;
		if (!iv) {
			pthread_cond_wait(&g_inval_cond, &g_inval_lock);
			continue;
		}
		pthread_mutex_unlock(&g_inval_lock);
		run_invals(iv);
		pthread_mutex_lock(&g_inval_lock);
	}
	pthread_mutex_unlock(&g_inval_lock);
	return NULL;
}

int fs_inval_start(void)
{
	return pthread_create(&g_inval_thread, NULL, inval_main, NULL) ? -1 : 0;
}

void fs_inval_stop(void)
{
	pthread_mutex_lock(&g_inval_lock);
	g_inval_stop = true;
	pthread_cond_signal(&g_inval_cond);
	pthread_mutex_unlock(&g_inval_lock);
	pthread_join(g_inval_thread, NULL);
	/* the session is gone (g_se NULL): run_invals only frees them */
	run_invals(g_invals);
	g_invals = NULL;
}
