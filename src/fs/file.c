/* Open files: a snapshot's cache file, a merged/ result, a document; reads. */
#include "fs_i.h"

int fs_open_file(struct loc *l, int flags, struct fuse_file_info *fi, struct handle **out)
{
	struct handle *h;
	off_t size;
	time_t t;
	int rc = 0, fd = -1;

	if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC))
		return -EROFS;
	h = pfs_xcalloc(1, sizeof *h);
	switch (l->node) {
	case N_STATUS:
		if (l->pinned) {
			rc = fs_node_doc(l->ino, &h->doc, &h->len, &t);
			break;
		}
		h->doc = pfs_status_json(fs_cfg, fs_mount_time, &h->len);
		fi->direct_io = 1;
		break;
	case N_LATEST_FILE:
		/* nodes of latest/ files are pinned to a round (fs_lookup) */
		if (!l->pinned)
			rc = -ENOENT;
		else if (!(rc = fs_resolve_latest(l, flags)) &&
			 !(rc = pfs_snap_slot(l->service, l->round, l->slot, flags, &size, &t, &fd)))
			fi->keep_cache = 1; /* one round's: cached pages stay valid */
		break;
	case N_ROUND_FILE:
		if ((rc = pfs_snap_stat_fd(l->service, l->round, l->file, flags, &size, &t, &fd)))
			break;
		fi->keep_cache = 1; /* frozen snapshot: cached pages stay valid */
		break;
	case N_RANGE_FILE:
		if (!l->pinned)
			fi->direct_io = 1; /* rebuilt when new snapshots arrive */
		else if ((rc = fs_pinned_version(l, flags)))
			break;
		else
			fi->keep_cache = 1;
		if ((rc = pfs_merged_open(l->service, l->range, l->key, l->version, &fd, &h->tail,
					  &h->tail_len)))
			break;
		if (h->tail && fd >= 0) {
			struct stat fst;
			if (fstat(fd, &fst)) {
				rc = -errno;
				close(fd);
				fd = -1;
				free(h->tail);
				break;
			}
			h->fd_len = fst.st_size;
		}
		break;
	default:
		rc = -EISDIR;
	}
	if (!rc && !h->doc && !h->tail && fd < 0)
		rc = fd == -ENOENT ? -EIO : fd;
	if (rc) {
		free(h);
		return rc;
	}
	h->fd = fd;
	*out = h;
	return 0;
}

void fs_handle_free(struct handle *h)
{
	if (h->ref.free)
		fs_open_untrack(&h->ref);
	if (h->fd >= 0)
		close(h->fd);
	free(h->doc);
	free(h->tail);
	free(h);
}

void fs_handle_ref_free(struct open_ref *r) { fs_handle_free((struct handle *)r); }
void fs_listing_ref_free(struct open_ref *r) { fs_list_free((struct listing *)r); }

/* Read what a handle holds; the reply copies it. */
void fs_reply_read(fuse_req_t req, struct handle *h, size_t size, off_t off)
{
	if (h->doc) {
		/* from a copy: once the reply is out, the reader may close (and
		 * release free the document) while writev is still returning */
		size_t n = (size_t)off >= h->len ? 0 : h->len - (size_t)off;
		char *copy = pfs_xmalloc(n ? (n < size ? n : size) : 1);
		if (n)
			memcpy(copy, h->doc + off, n < size ? n : size);
		fuse_reply_buf(req, copy, n < size ? n : size);
		free(copy);
		return;
	}
	/* a plain pread: profiles are small, splicing them costs more */
	char *buf = pfs_xmalloc(size ? size : 1);
	ssize_t n = 0;
	/* the fd's part (all of it without a tail), then the tail's */
	size_t from_fd = !h->tail ? size : off >= h->fd_len ? 0 : (size_t)(h->fd_len - off);
	from_fd = from_fd < size ? from_fd : size;
	if (from_fd)
		do
			n = pread(h->fd, buf, from_fd, off);
		while (n < 0 && errno == EINTR);
	if (h->tail && n == (ssize_t)from_fd && from_fd < size) { /* off + n >= fd_len */
		size_t t = (size_t)(off + n - h->fd_len), m = t < h->tail_len ? h->tail_len - t : 0;
		m = m < size - (size_t)n ? m : size - (size_t)n;
		if (m)
			memcpy(buf + n, h->tail + t, m);
		n += (ssize_t)m;
	}
	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_buf(req, buf, (size_t)n);
	free(buf);
}
