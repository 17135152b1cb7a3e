/* FUSE operations (high-level API, path based, multithreaded). */
#include "fs.h"

#include "cache.h"
#include "merged.h"
#include "snap.h"
#include "source.h"
#include "status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
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

/* What a path names. */
enum node {
	N_ROOT,
	N_STATUS,       /* /.status.json */
	N_CLUSTER,
	N_SERVICE,
	N_LATEST,       /* <s>/latest */
	N_LATEST_FILE,
	N_ROUND,        /* <s>/<time> */
	N_ROUND_FILE,
	N_MERGED,       /* <s>/merged */
	N_RANGE,        /* <s>/merged/<range> */
	N_RANGE_FILE,
};

struct loc {
	enum node node;
	struct pfs_cluster *cluster;
	struct pfs_service *service;
	const struct pfs_range *range;
	char round[PFS_ROUND_NAME_MAX];
	char file[256];
	int slot;     /* N_LATEST_FILE: index of the service's file */
	char key[128];/* N_RANGE_FILE: merge key */
};

/* The merge key a merged/<range>/ file name stands for, if the service has it. */
static int merged_key_of(const struct pfs_service *s, const char *file, char *key, size_t keylen)
{
	const char **keys;
	size_t n = pfs_merged_keys(s, &keys), len = strlen(file);
	int rc = -ENOENT;

	for (size_t i = 0; i < n && rc; i++)
		if (len == strlen(keys[i]) + 6 && strncmp(file, keys[i], len - 6) == 0 &&
		    strcmp(file + len - 6, ".pb.gz") == 0) {
			snprintf(key, keylen, "%s", keys[i]);
			rc = 0;
		}
	free(keys);
	return rc;
}

static int copy_part(char *dst, size_t dstlen, const char *part)
{
	if (strlen(part) >= dstlen)
		return -ENOENT;
	memcpy(dst, part, strlen(part) + 1);
	return 0;
}

static int parse_path(const char *path, struct loc *l)
{
	char buf[1024], *save = NULL, *part;
	int depth = 0;

	memset(l, 0, sizeof *l);
	if (strlen(path) >= sizeof buf)
		return -ENAMETOOLONG;
	snprintf(buf, sizeof buf, "%s", path);
	l->node = N_ROOT;
	for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
		switch (++depth) {
		case 1:
			if (strcmp(part, PFS_STATUS_FILE) == 0) {
				l->node = N_STATUS;
				break;
			}
			if (!(l->cluster = pfs_config_cluster(g_cfg, part)))
				return -ENOENT;
			l->node = N_CLUSTER;
			break;
		case 2:
			if (l->node != N_CLUSTER || !(l->service = pfs_config_service(l->cluster, part)))
				return -ENOENT;
			l->node = N_SERVICE;
			break;
		case 3:
			if (strcmp(part, LATEST) == 0)
				l->node = N_LATEST;
			else if (strcmp(part, PFS_MERGED_DIR) == 0)
				l->node = N_MERGED;
			else if (copy_part(l->round, sizeof l->round, part) == 0)
				l->node = N_ROUND;
			else
				return -ENOENT;
			break;
		case 4:
			if (l->node == N_MERGED) {
				if (!(l->range = pfs_merged_range(g_cfg, part)))
					return -ENOENT;
				l->node = N_RANGE;
				break;
			}
			if (copy_part(l->file, sizeof l->file, part))
				return -ENOENT;
			if (l->node == N_LATEST) {
				if ((l->slot = pfs_snap_file_index(l->service, part)) < 0)
					return -ENOENT;
				l->node = N_LATEST_FILE;
			} else {
				l->node = N_ROUND_FILE;
			}
			break;
		case 5:
			if (l->node != N_RANGE ||
			    merged_key_of(l->service, part, l->key, sizeof l->key))
				return -ENOENT;
			copy_part(l->file, sizeof l->file, part);
			l->node = N_RANGE_FILE;
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
	off_t size = 0;
	time_t t = g_mount_time;
	int rc;

	(void)fi;
	memset(st, 0, sizeof *st);
	st->st_uid = getuid();
	st->st_gid = getgid();
	if ((rc = parse_path(path, &l)))
		return rc;
	switch (l.node) {
	case N_ROOT:
	case N_CLUSTER:
	case N_SERVICE:
	case N_MERGED:
	case N_RANGE:
		break;
	case N_LATEST:
		if (!(t = pfs_snap_latest_time(l.service)))
			t = g_mount_time;
		break;
	case N_ROUND:
		rc = pfs_snap_round_time(l.service, l.round, &t);
		break;
	case N_STATUS: {
		size_t len;
		free(pfs_status_json(g_cfg, g_mount_time, &len));
		size = (off_t)len;
		t = time(NULL);
		break;
	}
	case N_LATEST_FILE:
		rc = pfs_snap_latest(l.service, l.slot, round, &size, &t);
		break;
	case N_ROUND_FILE:
		rc = pfs_snap_stat(l.service, l.round, l.file, &size, &t);
		break;
	case N_RANGE_FILE:
		rc = pfs_merged_stat(l.service, l.range, l.key, &size, &t);
		break;
	}
	if (rc)
		return rc;
	if (l.node == N_STATUS || l.node == N_LATEST_FILE || l.node == N_ROUND_FILE ||
	    l.node == N_RANGE_FILE)
		fill_file(st, size, t);
	else
		fill_dir(st, t);
	return 0;
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

static void add_file(const char *file, void *arg)
{
	struct dir_fill *d = arg;
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
	filler(buf, ".", NULL, 0, 0);
	filler(buf, "..", NULL, 0, 0);
	switch (l.node) {
	case N_ROOT:
		for (size_t i = 0; i < g_cfg->n_clusters; i++)
			filler(buf, g_cfg->clusters[i].name, NULL, 0, 0);
		return 0;
	case N_CLUSTER: {
		struct pfs_service **svcs;
		size_t n;
		pfs_cluster_refresh(l.cluster, l.cluster->api.discover_every);
		n = pfs_cluster_services(l.cluster, &svcs);
		for (size_t i = 0; i < n; i++) {
			/* Listing (or copying) a cluster snapshots all of its services
			 * at once (one round per latest_ttl), so an rsync of the
			 * mount waits for the slowest target, not for their sum. */
			pfs_snap_latest_start(svcs[i]);
			filler(buf, svcs[i]->name, NULL, 0, 0);
		}
		free(svcs);
		return 0;
	}
	case N_SERVICE:
		/* Listing a service takes a snapshot (one per latest_ttl): its
		 * <time> directory is listed now and filled as fetches finish,
		 * so one rsync run copies the snapshot it caused. */
		pfs_snap_latest_start(l.service);
		filler(buf, LATEST, NULL, 0, 0);
		if (g_cfg->n_merged)
			filler(buf, PFS_MERGED_DIR, NULL, 0, 0);
		pfs_snap_list_rounds(l.service, add_round, &d);
		return 0;
	case N_LATEST:
		/* Listing latest scrapes all of it at once, so the stat calls
		 * that follow (ls -l, rsync, cp -r) find every file ready. */
		pfs_snap_latest_all(l.service, add_file, &d);
		return 0;
	case N_ROUND:
		return pfs_snap_list_files(l.service, l.round, add_file, &d);
	case N_MERGED:
		for (size_t i = 0; i < g_cfg->n_merged; i++)
			filler(buf, g_cfg->merged[i].name, NULL, 0, 0);
		return 0;
	case N_RANGE: {
		const char **keys;
		size_t n = pfs_merged_keys(l.service, &keys);
		for (size_t i = 0; i < n; i++)
			if (pfs_merged_has(l.service, l.range, keys[i])) {
				snprintf(name, sizeof name, "%s.pb.gz", keys[i]);
				filler(buf, name, NULL, 0, 0);
			}
		free(keys);
		return 0;
	}
	default:
		return -ENOTDIR;
	}
}

/* fi->fh: an open cache file, or a document made at open. */
struct handle {
	int fd;
	char *doc;
	size_t len;
};

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	char round[PFS_ROUND_NAME_MAX];
	struct handle *h;
	struct loc l;
	off_t size;
	time_t t;
	int rc, fd = -1;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return -EROFS;
	if ((rc = parse_path(path, &l)))
		return rc;
	h = calloc(1, sizeof *h);
	h->fd = -1;
	switch (l.node) {
	case N_STATUS:
		h->doc = pfs_status_json(g_cfg, g_mount_time, &h->len);
		fi->direct_io = 1;
		break;
	case N_LATEST_FILE:
		if ((rc = pfs_snap_latest(l.service, l.slot, round, &size, &t)))
			break;
		/* latest moves on to a new snapshot: no page cache across opens,
		 * reads not bounded by a size the kernel cached before. */
		fi->direct_io = 1;
		fd = pfs_cache_open(l.cluster->name, l.service->name, round, l.file);
		break;
	case N_ROUND_FILE:
		if ((rc = pfs_snap_stat(l.service, l.round, l.file, &size, &t)))
			break;
		fi->keep_cache = 1; /* frozen snapshot: cached pages stay valid */
		fd = pfs_cache_open(l.cluster->name, l.service->name, l.round, l.file);
		break;
	case N_RANGE_FILE:
		fi->direct_io = 1; /* rebuilt when new snapshots arrive */
		fd = pfs_merged_open(l.service, l.range, l.key);
		if (fd < 0)
			rc = fd;
		break;
	default:
		rc = -EISDIR;
	}
	if (!rc && !h->doc && fd < 0)
		rc = fd == -ENOENT ? -EIO : fd;
	if (rc) {
		free(h);
		return rc;
	}
	h->fd = fd;
	fi->fh = (uint64_t)(uintptr_t)h;
	return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;
	ssize_t n;

	(void)path;
	if (h->doc) {
		if ((size_t)off >= h->len)
			return 0;
		n = (ssize_t)(h->len - (size_t)off < size ? h->len - (size_t)off : size);
		memcpy(buf, h->doc + off, (size_t)n);
		return (int)n;
	}
	do
		n = pread(h->fd, buf, size, off);
	while (n < 0 && errno == EINTR);
	return n < 0 ? -errno : (int)n;
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
	struct handle *h = (struct handle *)(uintptr_t)fi->fh;

	(void)path;
	if (h->fd >= 0)
		close(h->fd);
	free(h->doc);
	free(h);
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
