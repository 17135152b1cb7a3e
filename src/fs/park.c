/* Requests that may wait: run now, or parked and run again by the retry
 * thread when a fetch settles, when interrupted, or past their deadline. */
#include "fs_i.h"

__thread fuse_req_t fs_req; /* the request this FUSE thread serves */

/* A blocking wait (merged/, discovery) gives up when its request is
 * interrupted. */
bool fs_interrupted(void)
{
	return fs_req && fuse_req_interrupted(fs_req);
}

static pthread_mutex_t g_park_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_park_cond;
static struct task *g_parked;
static bool g_dirty, g_stop;
static pthread_t g_retry_thread;
static size_t g_n_parked;

/* Before a parked request is answered: no interrupt callback runs after
 * this returns (libfuse holds the request's lock while calling it). */
static void unpark(struct task *t)
{
	fuse_req_interrupt_func(t->req, NULL, NULL);
}

static void reply_err(struct task *t, int err)
{
	unpark(t);
	fuse_reply_err(t->req, err);
}

/* A task's work failed with rc: wait (-EAGAIN, if it may), or answer. */
static int failed(struct task *t, int rc, bool may_wait)
{
	if (rc == -EAGAIN && may_wait)
		return rc;
	reply_err(t, rc == -EAGAIN ? EIO : -rc);
	return 0;
}

/* The listing of a directory task (NULL and *rc if none). */
static struct listing *task_listing(struct task *t, struct loc *l, bool quiet, int *rc)
{
	struct listing *d = pfs_xcalloc(1, sizeof *d);

	*rc = fs_is_file(l->node) ? -ENOTDIR : fs_list_dir(l, t->flags, quiet, d);
	if (*rc) {
		fs_list_free(d);
		return NULL;
	}
	return d;
}

/* Answer t, unless it would wait (and may: returns -EAGAIN). */
static int run_task(struct task *t, bool may_wait)
{
	struct loc l;
	struct stat st;
	struct handle *h;
	struct listing *d;
	double timeout;
	int rc;

	if ((rc = fs_loc(t->path, &t->what, &l))) {
		reply_err(t, -rc);
		return 0;
	}
	l.ino = t->ino;
	switch (t->op) {
	case OP_GETATTR:
		if ((rc = fs_attr_of(&l, t->flags, false, &st, &timeout)))
			return failed(t, rc, may_wait);
		st.st_ino = t->ino;
		unpark(t);
		fuse_reply_attr(t->req, &st, timeout);
		return 0;
	case OP_OPEN:
		if ((rc = fs_open_file(&l, t->flags, &t->fi, &h)))
			return failed(t, rc, may_wait);
		t->fi.fh = (uint64_t)(uintptr_t)h;
		fs_open_track(&h->ref, fs_handle_ref_free);
		unpark(t);
		if (fuse_reply_open(t->req, &t->fi) == -ENOENT) /* the caller went away */
			fs_handle_free(h);
		return 0;
	case OP_READ:
		t->fi.flags = O_RDONLY;
		if ((rc = fs_open_file(&l, t->flags, &t->fi, &h)))
			return failed(t, rc, may_wait);
		unpark(t);
		fs_reply_read(t->req, h, t->size, t->off);
		fs_handle_free(h);
		return 0;
	case OP_READDIR:
		/* its first part may start work, the rest only read */
		if (!(d = task_listing(t, &l, t->off > 0, &rc)))
			return failed(t, rc, may_wait);
		unpark(t);
		fs_reply_listing(t->req, d, t->size, t->off);
		fs_list_free(d);
		return 0;
	case OP_OPENDIR:
		if (!(d = task_listing(t, &l, false, &rc)))
			return failed(t, rc, may_wait);
		t->fi.fh = (uint64_t)(uintptr_t)d;
		/* the kernel keeps its copy of the listing while it is the same */
		t->fi.cache_readdir = 1;
		t->fi.keep_cache = fs_listing_same(t->ino, fs_list_sig(d));
		fs_open_track(&d->ref, fs_listing_ref_free);
		unpark(t);
		if (fuse_reply_open(t->req, &t->fi) == -ENOENT)
			fs_list_free(d);
		return 0;
	}
	return 0;
}

static void on_interrupt(fuse_req_t req, void *data)
{
	struct task *t = data;

	(void)req;
	pthread_mutex_lock(&g_park_lock);
	t->interrupted = true;
	g_dirty = true;
	pthread_cond_signal(&g_park_cond);
	pthread_mutex_unlock(&g_park_lock);
}

static void task_free(struct task *t)
{
	free(t->path);
	free(t);
}

/* Run a request that may have to wait; if it does, park it. */
void fs_submit(fuse_req_t req, enum op op, fuse_ino_t ino, struct fuse_file_info *fi,
		   size_t size, off_t off)
{
	struct task *t = pfs_xcalloc(1, sizeof *t);
	struct pfs_service *s;
	double wait = 15;
	int rc;

	t->req = req;
	t->op = op;
	t->ino = ino;
	t->size = size;
	t->off = off;
	if (fi)
		t->fi = *fi;
	if (!(t->path = fs_node_path(ino, &t->what))) {
		fuse_reply_err(req, ESTALE);
		task_free(t);
		return;
	}
	fs_req = req; /* a blocking wait in it (merged/) sees interrupts */
	rc = run_task(t, true);
	fs_req = NULL;
	if (rc != -EAGAIN) {
		task_free(t);
		return;
	}
	if ((s = fs_what_service(&t->what)))
		wait = pfs_snap_max_wait(s);
	t->flags = PFS_SNAP_NO_RETRY;
	clock_gettime(CLOCK_MONOTONIC, &t->deadline);
	t->deadline.tv_sec += (time_t)wait + 1;
	/* may call on_interrupt at once: g_park_lock not held here */
	fuse_req_interrupt_func(req, on_interrupt, t);
	pthread_mutex_lock(&g_park_lock);
	t->next = g_parked;
	g_parked = t;
	g_n_parked++;
	g_dirty = true; /* a fetch may have finished since run_task looked */
	pthread_cond_signal(&g_park_cond);
	pthread_mutex_unlock(&g_park_lock);
}

static bool past(const struct timespec *dl)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > dl->tv_sec || (now.tv_sec == dl->tv_sec && now.tv_nsec >= dl->tv_nsec);
}

static void *retry_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_park_lock);
	while (!g_stop) {
		struct timespec dl;
		clock_gettime(CLOCK_MONOTONIC, &dl);
		dl.tv_nsec += 200 * 1000000L; /* deadlines are looked at 5 times a second */
		if (dl.tv_nsec >= 1000000000L) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000L;
		}
		if (!g_dirty)
			pthread_cond_timedwait(&g_park_cond, &g_park_lock, &dl);
		g_dirty = false;
		struct task *list = g_parked, *keep = NULL;
		g_parked = NULL;
		pthread_mutex_unlock(&g_park_lock);
		while (list) {
			struct task *t = list;
			list = t->next;
			pthread_mutex_lock(&g_park_lock);
			bool intr = t->interrupted;
			pthread_mutex_unlock(&g_park_lock);
			if (intr)
				reply_err(t, EINTR);
			else if (run_task(t, !past(&t->deadline)) == -EAGAIN) {
				t->next = keep;
				keep = t;
				continue;
			}
			task_free(t);
			pthread_mutex_lock(&g_park_lock);
			g_n_parked--;
			pthread_mutex_unlock(&g_park_lock);
		}
		pthread_mutex_lock(&g_park_lock);
		while (keep) {
			struct task *t = keep;
			keep = t->next;
			t->next = g_parked;
			g_parked = t;
		}
	}
	/* unmounting: whatever still waits fails */
	while (g_parked) {
		struct task *t = g_parked;
		g_parked = t->next;
		pthread_mutex_unlock(&g_park_lock);
		reply_err(t, EIO);
		task_free(t);
		pthread_mutex_lock(&g_park_lock);
	}
	pthread_mutex_unlock(&g_park_lock);
	return NULL;
}

void fs_on_change(struct pfs_service *s)
{
	fs_merged_changed(s);
	pthread_mutex_lock(&g_park_lock);
	g_dirty = true;
	pthread_cond_signal(&g_park_cond);
	pthread_mutex_unlock(&g_park_lock);
}

void fs_park_init(void)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_park_cond, &ca);
}

int fs_park_start(void)
{
	return pthread_create(&g_retry_thread, NULL, retry_main, NULL) ? -1 : 0;
}

void fs_park_stop(void)
{
	pthread_mutex_lock(&g_park_lock);
	g_stop = true;
	pthread_cond_signal(&g_park_cond);
	pthread_mutex_unlock(&g_park_lock);
	pthread_join(g_retry_thread, NULL);
}
