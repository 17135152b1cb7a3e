/* FUSE operations (lowlevel API): the table the session runs, setup and
 * teardown. No request holds a thread while a fetch runs: lookup never
 * waits (a file whose fetch is in flight gets an entry the kernel must not
 * cache), and getattr, read or readdir (open, opendir: see g_no_open) that
 * would wait are parked (park.c) and answered by the retry thread when a
 * fetch of their service finishes, when they are interrupted (EINTR), or
 * past their deadline (EIO). So a slow profile stalls neither its
 * directory (the kernel serializes lookups per directory: libfuse 3.14
 * never grants FUSE_PARALLEL_DIROPS) nor other requests. */
#include "fs_i.h"

struct pfs_config *fs_cfg;
time_t fs_mount_time;
/* With the kernel's no_open, files are never opened here: the first open
 * answered ENOSYS makes every open of the connection succeed in the kernel
 * alone (and close send no release), and reads come by inode, no handle. */
static bool g_no_open;
/* Likewise directories (no_opendir): the kernel reads them by inode and
 * keeps their listings while their mtime stays the same. So a directory's
 * mtime carries its listing's signature in the nanoseconds, its attributes
 * last only as long as the listing is known to hold, and where listing it
 * has work to start (a snapshot due: latest_ttl passed, a discovery due)
 * its mtime differs at every getattr, so the next listing reaches us. */
bool fs_no_opendir;

/* A number never given before: what makes pinned node names and due
 * directories' mtimes unique. */
uint64_t fs_fresh_gen(void)
{
	static uint64_t gen;

	return __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
}

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	bool handles = getenv("PROFILEFS_OPEN_HANDLES") != NULL;
	g_no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && !handles;
	fs_no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) && !handles;
	pfs_debug("the kernel opens files %s, directories %s", g_no_open ? "alone" : "through us",
		  fs_no_opendir ? "alone" : "through us");
}

/* The generation of the .status.json node to give: the last one's if it
 * was made less than half a second ago (true), else a new one (false). */
static bool status_recent(uint64_t *gen)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t last_gen;
	static struct timespec last_at;
	struct timespec now;
	bool recent;

	clock_gettime(CLOCK_MONOTONIC, &now);
	pthread_mutex_lock(&lock);
	recent = last_gen && (double)(now.tv_sec - last_at.tv_sec) +
				     (double)(now.tv_nsec - last_at.tv_nsec) / 1e9 < 0.5;
	if (!recent) {
		last_gen = fs_fresh_gen();
		last_at = now;
	}
	*gen = last_gen;
	pthread_mutex_unlock(&lock);
	return recent;
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_what w;
	char *dir = fs_node_path(parent, &w), path[1024];
	struct fuse_entry_param e;
	struct loc l;
	int rc;

	if (!dir) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	rc = snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "", name);
	fs_req = req;
	memset(&e, 0, sizeof e);
	if (rc >= (int)sizeof path || strlen(name) > 255) {
		free(dir);
		fuse_reply_err(req, ENAMETOOLONG);
		goto out;
	}
	/* the parent as its lookup resolved it, and name resolved in it */
	rc = strchr(name, LATEST_AT[0]) ? -ENOENT /* only fs_lookup makes such names */
					 : fs_loc(dir, &w, &l);
	free(dir);
	if (rc || (rc = fs_loc_child(&l, name))) {
		fuse_reply_err(req, -rc);
		goto out;
	}
	/* merged/ files are built at getattr/open, not under the directory's lock */
	rc = fs_attr_of(&l, 0, true, &e.attr, &e.attr_timeout);
	/* names of what never goes stay; their attributes may not */
	bool stays = l.node == N_CLUSTER || l.node == N_SERVICE || l.node == N_MERGED ||
		     l.node == N_RANGE;
	e.entry_timeout = stays ? FROZEN_TIMEOUT : e.attr_timeout;
	if (rc == -EAGAIN) {
		/* in flight: an entry the kernel asks about again (getattr waits) */
		memset(&e.attr, 0, sizeof e.attr);
		e.attr_timeout = e.entry_timeout = 0;
		e.attr.st_uid = getuid();
		e.attr.st_gid = getgid();
		if (fs_is_file(l.node))
			fs_fill_file(&e.attr, 0, fs_mount_time);
		else
			fs_fill_dir(&e.attr, fs_mount_time);
		rc = 0;
	}
	if (rc) {
		fuse_reply_err(req, -rc);
		goto out;
	}
	char *doc = NULL;
	size_t doc_len = 0;
	if (l.node == N_LATEST_FILE) {
		/* the node of that round's file; the entry lasts while it is latest */
		snprintf(path, sizeof path, "/%s/%s/%s%s/%s", l.cluster->name, l.service->name,
			 LATEST_AT, l.round, l.file);
		if (e.attr_timeout > 0)
			e.attr_timeout = FROZEN_TIMEOUT;
	} else if (l.node == N_RANGE_FILE) {
		/* the node of this result; the entry lasts while it is current
		 * (a new input drops it at once: fs_merged_changed). Not built yet:
		 * a node of its own, reading the result its getattr finds. */
		size_t n = strlen(path);
		if (l.version) { /* the entry may last less: a result about to leave */
			snprintf(path + n, sizeof path - n, "%c%016llx", PIN,
				 (unsigned long long)l.version);
			e.attr_timeout = FROZEN_TIMEOUT;
		} else {
			snprintf(path + n, sizeof path - n, "%cn%llx", PIN,
				 (unsigned long long)fs_fresh_gen());
			e.attr_timeout = 0;
		}
	} else if (l.node == N_STATUS) {
		/* a document made now, its own node; the name is looked up anew
		 * at each open. Within half a second of the last one, that one:
		 * a stat and then an open (cp) read one document, one inode. */
		uint64_t gen;
		if (!status_recent(&gen))
			doc = pfs_status_json(fs_cfg, fs_mount_time, &doc_len);
		e.attr.st_size = (off_t)doc_len;
		snprintf(path, sizeof path, "/%s%c%llx", PFS_STATUS_FILE, PIN,
			 (unsigned long long)gen);
		e.attr_timeout = FROZEN_TIMEOUT;
		e.entry_timeout = 0;
	}
	fs_what_of(&l, &w);
	e.ino = fs_node_ref(path, &w);
	if (l.node == N_STATUS && !doc) {
		time_t t;
		if (fs_node_doc(e.ino, NULL, &doc_len, &t) == 0) {
			e.attr.st_size = (off_t)doc_len;
			e.attr.st_mtime = t;
		}
	}
	e.attr.st_ino = e.ino;
	if (doc)
		fs_node_set_doc(e.ino, doc, doc_len, e.attr.st_mtime);
	if (fuse_reply_entry(req, &e) == -ENOENT)
		fs_node_forget(e.ino, 1);
out:
	fs_req = NULL;
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	fs_node_forget(ino, nlookup);
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		fs_node_forget(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	fs_submit(req, OP_GETATTR, ino, NULL, 0, 0);
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (g_no_open)
		fuse_reply_err(req, ENOSYS);
	else
		fs_submit(req, OP_OPEN, ino, fi, 0, 0);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	if (fi->fh)
		fs_reply_read(req, (struct handle *)(uintptr_t)fi->fh, size, off);
	else /* what it names, which may still be fetched: a task */
		fs_submit(req, OP_READ, ino, NULL, size, off);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh)
		fs_handle_free((struct handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (fs_no_opendir)
		fuse_reply_err(req, ENOSYS);
	else
		fs_submit(req, OP_OPENDIR, ino, fi, 0, 0);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	if (fi->fh)
		fs_reply_listing(req, (struct listing *)(uintptr_t)fi->fh, size, off);
	else /* what it names, which may wait for fetches: a task */
		fs_submit(req, OP_READDIR, ino, NULL, size, off);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh)
		fs_list_free((struct listing *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void fs_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	(void)ino;
	memset(&sv, 0, sizeof sv);
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY;
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops pfs_fs_ops = {
	.init = fs_init,
	.lookup = fs_lookup,
	.forget = fs_forget,
	.forget_multi = fs_forget_multi,
	.getattr = fs_getattr,
	.open = fs_open,
	.read = fs_read,
	.release = fs_release,
	.opendir = fs_opendir,
	.readdir = fs_readdir,
	.releasedir = fs_releasedir,
	.statfs = fs_statfs,
};

int pfs_fs_setup(struct pfs_config *cfg)
{
	fs_cfg = cfg;
	fs_mount_time = time(NULL);
	fs_nodes_init();
	fs_park_init();
	pfs_snap_set_hooks(fs_on_change, fs_interrupted, fs_on_removed);
	pfs_discovery_set_hook(fs_on_discovered);
	if (fs_inval_start())
		return -1;
	return fs_park_start();
}

void pfs_fs_teardown(void)
{
	fs_park_stop();
	pfs_snap_set_hooks(NULL, NULL, NULL);
	fs_inval_stop();
	fs_nodes_free();
	fs_open_free_all();
}
