/* Attributes of what a path names, and how long the kernel may keep them. */
#include "fs_i.h"

void fs_fill_dir(struct stat *st, time_t mtime)
{
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	st->st_mtime = st->st_atime = mtime;
	/* the mtime moves as the listing changes (rounds land); the ctime
	 * stays: GNU tar compares a directory's ctime before and after
	 * archiving it ("file changed as we read it", exit 1) */
	st->st_ctime = fs_mount_time;
}

void fs_fill_file(struct stat *st, off_t size, time_t mtime)
{
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = size;
	st->st_blocks = (size + 511) / 512;
	st->st_mtime = st->st_ctime = st->st_atime = mtime;
}

/* Attributes of what l names, and how long the kernel may keep them.
 * Without wait: -EAGAIN while a fetch it needs is in flight (at lookup,
 * also while a merged/ file would have to be built). */
int fs_attr_of(struct loc *l, int flags, bool lookup, struct stat *st, double *timeout)
{
	char round[PFS_ROUND_NAME_MAX] = ""; /* filled unless no round is known yet */
	off_t size = 0;
	time_t t = fs_mount_time;
	int rc = 0;

	memset(st, 0, sizeof *st);
	st->st_uid = getuid();
	st->st_gid = getgid();
	*timeout = FROZEN_TIMEOUT;
	switch (l->node) {
	case N_ROOT:
	case N_CLUSTER:
	case N_SERVICE:
	case N_MERGED:
	case N_RANGE:
		/* never change, never go (services are only ever added) */
		break;
	case N_LATEST:
		if (!(t = pfs_snap_latest_time(l->service)))
			t = fs_mount_time;
		*timeout = pfs_snap_latest_valid(l->service); /* then moves on */
		break;
	case N_ROUND:
		rc = pfs_snap_round_time(l->service, l->round, flags, &t);
		/* a scrape round found has a file and no fetch in flight: its
		 * time is fixed (retention's removal invalidates it); a window
		 * once every fetch of it is done */
		if (!rc && pfs_snap_round_may_change(l->service, l->round))
			*timeout = DIR_TIMEOUT;
		break;
	case N_STATUS: {
		size_t len;
		if (l->pinned) {
			rc = fs_node_doc(l->ino, NULL, &len, &t);
		} else { /* at lookup, which makes the document and pins it */
			len = 0;
			t = time(NULL);
		}
		size = (off_t)len;
		break;
	}
	case N_LATEST_FILE:
		if (l->pinned) {
			if (!(rc = fs_resolve_latest(l, flags)))
				rc = pfs_snap_slot(l->service, l->round, l->slot, flags, &size, &t, NULL);
			break; /* its content is fixed */
		}
		/* at lookup: which round latest is (fs_lookup pins the node to it) */
		rc = pfs_snap_latest(l->service, l->file, flags, round, &size, &t);
		memcpy(l->round, round, sizeof round);
		*timeout = pfs_snap_latest_valid(l->service);
		break;
	case N_ROUND_FILE:
		rc = pfs_snap_stat(l->service, l->round, l->file, flags, &size, &t);
		/* a file that exists never changes */
		break;
	case N_RANGE_FILE:
		if (l->pinned) { /* one result's: fixed */
			if (!(rc = fs_pinned_version(l, flags)))
				rc = pfs_merged_version(l->service, l->range, l->key, l->version,
							&size, &t);
			break;
		}
		/* rebuilt as snapshots arrive: fs tells the kernel (fs_merged_changed) */
		rc = fs_merged_stat(l, flags, lookup, &size, &t, timeout, &l->version);
		break;
	}
	long nsec = 0;
	if (!rc && fs_no_opendir && !fs_is_file(l->node) && l->node != N_ROOT && l->node != N_MERGED)
		rc = fs_listing_nsec(l, flags, timeout, &nsec);
	if (rc)
		return rc;
	if (fs_is_file(l->node)) {
		fs_fill_file(st, size, t);
	} else {
		fs_fill_dir(st, t);
		st->st_mtim.tv_nsec = nsec;
	}
	return 0;
}
