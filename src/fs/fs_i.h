/* The FUSE filesystem's own declarations, shared by its files (one per
 * concern, as below); nothing outside fs/ includes it. Nodes are paths;
 * what a path names is path.c's business, what it holds the snapshot
 * index's (snap.h) and merged/'s (merged.h).
 *
 * LOCKING: g_nodes_lock (node.c: the node tables and what nodes hold),
 * g_park_lock (park.c: parked requests), g_inval_lock (inval.c: queued
 * invalidations) and g_open_lock (dir.c: open handles) are leaves: none
 * is held while another lock is taken, nor across a call into snap/,
 * merged/ or the registry, which take their own. */
#ifndef PFS_FS_I_H
#define PFS_FS_I_H

#include "fs.h"

#include "discovery/discovery.h"
#include "lib/cache.h"
#include "lib/log.h"
#include "lib/names.h"
#include "lib/xalloc.h"
#include "merged/merged.h"
#include "snap/snap.h"
#include "source/source.h"
#include "status/status.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define LATEST "latest"
/* The node of latest/<file> names the round latest was when looked up:
 * "<s>/\1latest=<round>/<file>", a name no lookup can give (\1). So its
 * content never changes and the kernel may cache it like a round's. */
#define LATEST_AT "\1latest="
/* Likewise the node of merged/<range>/<file> names the merge result it was
 * looked up as ("<file>\1<version>"; "<file>\1n<n>" if it was not built
 * yet: the result its first getattr or read finds, held by the node), and
 * that of .status.json the document made at its lookup (".status.json\1<n>",
 * held by the node). What a file node reads never changes, so the kernel
 * may read it by inode without an open (no_open) and keep its pages. */
#define PIN '\1'
#define DIR_TIMEOUT PFS_SNAP_CLOCK   /* entry and attr timeout of windows still fetched */

/* What a path names; from N_SERVICE on, something in a service. */
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
	char round[PFS_ROUND_NAME_MAX]; /* N_LATEST*: the round pinned, if pinned */
	bool pinned;
	char file[256];
	int slot;     /* N_LATEST_FILE: index of the service's file */
	char key[128];/* N_RANGE_FILE: merge key */
	uint64_t version; /* N_RANGE_FILE: the merge result pinned (0: the node's) */
	fuse_ino_t ino;   /* pinned N_STATUS, N_RANGE_FILE: the node */
};

/* What a node names, resolved by name once, at its lookup (path.c): a
 * request on the node takes it from here (fs_loc) and looks nothing up
 * again. Every node has one: kept small. */
struct fs_what {
	void *owner;                   /* N_CLUSTER: the cluster; deeper: the service */
	const struct pfs_range *range; /* N_RANGE*: the range */
	int32_t slot;                  /* N_LATEST_FILE: the file's index, -1 until known */
	uint8_t node;                  /* enum node */
};

/* Open handles: files and listings, freed at release (or at teardown,
 * for those whose release never came: unmounted by a signal). */

struct open_ref {
	struct open_ref *prev, *next;
	void (*free)(struct open_ref *r);
};

/* A directory listing, made whole at opendir. */

struct listing {
	struct open_ref ref; /* first */
	char **names;
	unsigned char *is_dir;
	size_t n, cap;
};

/* fi->fh: an open cache file, or a document made at open. */
struct handle {
	struct open_ref ref; /* first */
	int fd;
	char *doc;
	size_t len;
	/* after the fd's fd_len bytes (or alone, fd -1): a merged/ file of
	 * one snapshot is that snapshot's file and these (pfs_merged_open) */
	uint8_t *tail;
	size_t tail_len;
	off_t fd_len;
};

/* OP_READ, OP_READDIR: with no handle (no_open, no_opendir), of what the
 * node names. */
enum op { OP_GETATTR, OP_OPEN, OP_OPENDIR, OP_READ, OP_READDIR };

struct task {
	fuse_req_t req;
	enum op op;
	fuse_ino_t ino;
	char *path;          /* the node's, and what it names: as at submit */
	struct fs_what what;
	struct fuse_file_info fi;
	size_t size; /* OP_READ */
	off_t off;
	struct timespec deadline;
	int flags;        /* 0 on the first run, PFS_SNAP_NO_RETRY once parked */
	bool interrupted; /* g_park_lock */
	struct task *next;
};

/* A name the kernel must forget: a round retention removed ("/c/s" and
 * round), a merged/ file rebuilt ("/c/s/merged/<range>" and file); or,
 * without name, a directory's attributes and listing (no_opendir). */
struct inval {
	char *dir, *name;
	struct inval *next;
};
#define FROZEN_TIMEOUT 86400.0 /* of what never changes: directories, rounds and
				* their files (retention's removal invalidates them) */

/* ops.c: the operations table, setup and teardown */
uint64_t fs_fresh_gen(void);
extern struct pfs_config *fs_cfg;
extern time_t fs_mount_time;
extern bool fs_no_opendir;

/* path.c: what a path names (struct loc) */
int fs_merged_stat(struct loc *l, int flags, bool peek, off_t *size, time_t *t, double *valid, uint64_t *version);
/* What path names, from what its node's lookup resolved (w) */
int fs_loc(const char *path, const struct fs_what *w, struct loc *l);
/* l, which named a directory, names its child name: resolved by name */
int fs_loc_child(struct loc *l, const char *name);
void fs_what_of(const struct loc *l, struct fs_what *w);
/* The service it names or is in (NULL: the root, .status.json, a cluster) */
struct pfs_service *fs_what_service(const struct fs_what *w);
bool fs_is_file(enum node n);

/* node.c: nodes: inode number <-> path, counted by the kernel's lookups */
uint64_t fs_hash_str(const char *s);
fuse_ino_t fs_node_ref(const char *path, const struct fs_what *w);
void fs_node_forget(fuse_ino_t ino, uint64_t n);
char *fs_node_path(fuse_ino_t ino, struct fs_what *w);
void fs_node_set_doc(fuse_ino_t ino, char *doc, size_t len, time_t t);
int fs_node_doc(fuse_ino_t ino, char **copy, size_t *len, time_t *t);
int fs_resolve_latest(struct loc *l, int flags);
int fs_pinned_version(struct loc *l, int flags);
bool fs_listing_same(fuse_ino_t ino, uint64_t sig);
void fs_nodes_free(void);
fuse_ino_t fs_node_find(const char *path);
void fs_nodes_init(void);

/* attr.c: attributes and their timeouts */
void fs_fill_dir(struct stat *st, time_t mtime);
void fs_fill_file(struct stat *st, off_t size, time_t mtime);
int fs_attr_of(struct loc *l, int flags, bool lookup, struct stat *st, double *timeout);

/* dir.c: directory listings, and open handles */
void fs_open_track(struct open_ref *r, void (*free_fn)(struct open_ref *r));
void fs_open_untrack(struct open_ref *r);
void fs_list_free(struct listing *d);
uint64_t fs_list_sig(const struct listing *d);
int fs_list_dir(struct loc *l, int flags, bool quiet, struct listing *d);
int fs_listing_nsec(struct loc *l, int flags, double *timeout, long *nsec);
void fs_reply_listing(fuse_req_t req, const struct listing *d, size_t size, off_t off);
void fs_open_free_all(void);

/* file.c: open files and reads */
int fs_open_file(struct loc *l, int flags, struct fuse_file_info *fi, struct handle **out);
void fs_handle_free(struct handle *h);
void fs_handle_ref_free(struct open_ref *r);
void fs_listing_ref_free(struct open_ref *r);
void fs_reply_read(fuse_req_t req, struct handle *h, size_t size, off_t off);

/* park.c: requests that may wait: run now, or parked and run again */
void fs_submit(fuse_req_t req, enum op op, fuse_ino_t ino, struct fuse_file_info *fi, size_t size, off_t off);
extern __thread fuse_req_t fs_req;
bool fs_interrupted(void);
void fs_on_change(struct pfs_service *s);
void fs_park_init(void);
int fs_park_start(void);
void fs_park_stop(void);

/* inval.c: what the kernel must forget, on a thread of its own */
void fs_merged_changed(struct pfs_service *s);
void fs_on_removed(struct pfs_service *s, const char *round);
void fs_on_discovered(struct pfs_cluster *c);
int fs_inval_start(void);
void fs_inval_stop(void);

#endif
