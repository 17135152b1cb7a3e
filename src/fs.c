/* FUSE operations (high-level API, path based, multithreaded). */
#include "fs.h"

#include "cache.h"
#include "snap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define LATEST "latest"

static struct pfs_config *g_cfg;
static time_t g_mount_time;

void pfs_fs_setup(struct pfs_config *cfg)
{
	g_cfg = cfg;
	g_mount_time = time(NULL);
}

/* A path split into what it names. depth 0 is the root, 4 a file. */
struct loc {
	int depth;
	struct pfs_cluster *cluster;
	struct pfs_service *service;
	int latest;                    /* depth >= 3: the "latest" directory */
	char round[PFS_ROUND_NAME_MAX];/* depth >= 3 and !latest */
	char file[256];                /* depth 4 */
};

static int parse_path(const char *path, struct loc *l)
{
	char buf[1024], *save = NULL, *part;

	memset(l, 0, sizeof *l);
	if (strlen(path) >= sizeof buf)
		return -ENAMETOOLONG;
	snprintf(buf, sizeof buf, "%s", path);
	for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
		switch (++l->depth) {
		case 1:
			if (!(l->cluster = pfs_config_cluster(g_cfg, part)))
				return -ENOENT;
			break;
		case 2:
			if (!(l->service = pfs_config_service(l->cluster, part)))
				return -ENOENT;
			break;
		case 3:
			if (strcmp(part, LATEST) == 0)
				l->latest = 1;
			else if (strlen(part) < sizeof l->round)
				memcpy(l->round, part, strlen(part) + 1);
			else
				return -ENOENT;
			break;
		case 4:
			if (strlen(part) >= sizeof l->file)
				return -ENOENT;
			memcpy(l->file, part, strlen(part) + 1);
			break;
		default:
			return -ENOENT;
		}
	}
	return 0;
}

static void fill_dir(struct stat *st, time_t mtime)
{
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	st->st_mtime = st->st_ctime = st->st_atime = mtime;
}

static void fill_file(struct stat *st, off_t size, time_t mtime)
{
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = size;
	st->st_blocks = (size + 511) / 512;
	st->st_mtime = st->st_ctime = st->st_atime = mtime;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	char round[PFS_ROUND_NAME_MAX];
	struct loc l;
	off_t size;
	time_t t;
	int rc, slot;

	(void)fi;
	memset(st, 0, sizeof *st);
	st->st_uid = getuid();
	st->st_gid = getgid();
	if ((rc = parse_path(path, &l)))
		return rc;
	switch (l.depth) {
	case 0:
	case 1:
	case 2:
		fill_dir(st, g_mount_time);
		return 0;
	case 3:
		if (l.latest) {
			t = pfs_snap_latest_time(l.service);
			fill_dir(st, t ? t : g_mount_time);
			return 0;
		}
		if ((rc = pfs_snap_round_time(l.service, l.round, &t)))
			return rc;
		fill_dir(st, t);
		return 0;
	default:
		if (!l.latest) {
			if ((rc = pfs_snap_stat(l.service, l.round, l.file, &size, &t)))
				return rc;
			fill_file(st, size, t);
			return 0;
		}
		if ((slot = pfs_snap_slot_by_name(l.service, l.file)) < 0)
			return -ENOENT;
		if ((rc = pfs_snap_latest(l.service, slot, round, &size, &t)))
			return rc;
		fill_file(st, size, t);
		return 0;
	}
}

struct dir_fill {
	void *buf;
	fuse_fill_dir_t filler;
};

static void add_round(const char *round, time_t t, void *arg)
{
	struct dir_fill *d = arg;
	(void)t;
	d->filler(d->buf, round, NULL, 0, 0);
}

static void add_file(const char *file, off_t size, time_t mtime, void *arg)
{
	struct dir_fill *d = arg;
	(void)size;
	(void)mtime;
	d->filler(d->buf, file, NULL, 0, 0);
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t filler, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	struct dir_fill d = {buf, filler};
	char name[512];
	struct loc l;
	int rc;

	(void)off;
	(void)fi;
	(void)flags;
	if ((rc = parse_path(path, &l)))
		return rc;
	if (l.depth == 4)
		return -ENOTDIR;
	if (l.depth == 3 && !l.latest) {
		time_t t;
		if ((rc = pfs_snap_round_time(l.service, l.round, &t)))
			return rc;
	}
	filler(buf, ".", NULL, 0, 0);
	filler(buf, "..", NULL, 0, 0);
	switch (l.depth) {
	case 0:
		for (size_t i = 0; i < g_cfg->n_clusters; i++)
			filler(buf, g_cfg->clusters[i].name, NULL, 0, 0);
		break;
	case 1:
		for (size_t i = 0; i < l.cluster->n_services; i++)
			filler(buf, l.cluster->services[i].name, NULL, 0, 0);
		break;
	case 2:
		/* Listing a service takes a snapshot (one per latest_ttl): its
		 * <time> directory is listed now and filled as fetches finish,
		 * so one rsync run copies the snapshot it caused. */
		pfs_snap_latest_start(l.service);
		filler(buf, LATEST, NULL, 0, 0);
		pfs_snap_list_rounds(l.service, add_round, &d);
		break;
	case 3:
		if (!l.latest)
			return pfs_snap_list_files(l.service, l.round, add_file, &d);
		/* Listing latest scrapes all of it at once, so the stat calls
		 * that follow (ls -l, rsync, cp -r) find every file ready. */
		pfs_snap_latest_all(l.service);
		for (int i = 0; i < pfs_snap_slot_count(l.service); i++)
			if (pfs_snap_slot_served(l.service, i)) {
				pfs_snap_slot_name(l.service, i, name, sizeof name);
				filler(buf, name, NULL, 0, 0);
			}
		break;
	}
	return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	char round[PFS_ROUND_NAME_MAX];
	struct loc l;
	off_t size;
	time_t t;
	int rc, fd, slot;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return -EROFS;
	if ((rc = parse_path(path, &l)))
		return rc;
	if (l.depth != 4)
		return -EISDIR;
	if (l.latest) {
		if ((slot = pfs_snap_slot_by_name(l.service, l.file)) < 0)
			return -ENOENT;
		if ((rc = pfs_snap_latest(l.service, slot, round, &size, &t)))
			return rc;
		/* latest moves on to a new snapshot: no page cache across opens,
		 * reads not bounded by a size the kernel cached before. */
		fi->direct_io = 1;
	} else {
		if ((rc = pfs_snap_stat(l.service, l.round, l.file, &size, &t)))
			return rc;
		memcpy(round, l.round, sizeof round);
		fi->keep_cache = 1; /* frozen snapshot: cached pages stay valid */
	}
	fd = pfs_cache_open(l.cluster->name, l.service->name, round, l.file);
	if (fd < 0)
		return fd == -ENOENT ? -EIO : fd;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t n;

	(void)path;
	do
		n = pread((int)fi->fh, buf, size, off);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : (int)n;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh);
	return 0;
}

static int fs_statfs(const char *path, struct statvfs *sv)
{
	(void)path;
	memset(sv, 0, sizeof *sv);
	sv->f_bsize = sv->f_frsize = 4096;
	sv->f_namemax = 255;
	sv->f_flag = ST_RDONLY;
	return 0;
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->entry_timeout = 1;
	cfg->attr_timeout = 1;
	cfg->negative_timeout = 0;
	return NULL;
}

const struct fuse_operations pfs_fs_ops = {
	.init = fs_init,
	.getattr = fs_getattr,
	.readdir = fs_readdir,
	.open = fs_open,
	.read = fs_read,
	.release = fs_release,
	.statfs = fs_statfs,
};
