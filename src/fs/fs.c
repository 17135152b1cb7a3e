/* FUSE operations (lowlevel API). Nodes are paths; what a path names is
 * parse_path()'s business, what it holds the snapshot index's.
 *
 * No request holds a thread while a fetch runs: lookup never waits (a
 * file whose fetch is in flight gets an entry the kernel must not cache),
 * and getattr, read or readdir (open, opendir: see g_no_open) that would
 * wait are parked and answered by the retry thread when a fetch of their
 * service finishes, when they are interrupted (EINTR), or past their
 * deadline (EIO). So a slow profile
 * stalls neither its directory (the kernel serializes lookups per
 * directory: libfuse 3.14 never grants FUSE_PARALLEL_DIROPS) nor other
 * requests. */
#include "fs.h"

#include "discovery/discovery.h"

#include "lib/cache.h"
#include "lib/log.h"
#include "merged/merged.h"
#include "lib/names.h"
#include "snap/snap.h"
#include "source/source.h"
#include "status/status.h"
#include "lib/xalloc.h"

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
#define FROZEN_TIMEOUT 86400.0 /* of what never changes: directories, rounds and
				* their files (retention's removal invalidates them) */

static struct pfs_config *g_cfg;
static time_t g_mount_time;
static __thread fuse_req_t tl_req; /* the request this FUSE thread serves */
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
static bool g_no_opendir;

/* A number never given before: what makes pinned node names and due
 * directories' mtimes unique. */
static uint64_t fresh_gen(void)
{
	static uint64_t gen;

	return __atomic_add_fetch(&gen, 1, __ATOMIC_RELAXED);
}

/* ---- paths ---- */

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
	char round[PFS_ROUND_NAME_MAX]; /* N_LATEST*: the round pinned, if pinned */
	bool pinned;
	char file[256];
	int slot;     /* N_LATEST_FILE: index of the service's file */
	char key[128];/* N_RANGE_FILE: merge key */
	uint64_t version; /* N_RANGE_FILE: the merge result pinned (0: the node's) */
	fuse_ino_t ino;   /* pinned N_STATUS, N_RANGE_FILE: the node */
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
	if (rc && strcmp(file, PFS_PGO_FILE) == 0) {
		snprintf(key, keylen, "%s", PFS_PGO_FILE);
		rc = 0;
	}
	return rc;
}

/* Size, mtime, validity and version of a merged/ file (built, unless
 * peek). With no input in range yet (a fresh mount), the latest round's
 * files it merges are fetched first, and waited for as latest/ is. */
static int merged_stat(struct loc *l, int flags, bool peek, off_t *size, time_t *t,
		       double *valid, uint64_t *version)
{
	struct pfs_service *s = l->service;
	int rc;

	for (int pass = 0;; pass++) {
		rc = peek ? pfs_merged_peek(s, l->range, l->key, size, t, valid, version)
			  : pfs_merged_stat(s, l->range, l->key, size, t, valid, version);
		if (rc != -ENOENT || pass || pfs_merged_has(s, l->range, l->key))
			return rc;
		if ((rc = pfs_snap_latest_key(s, pfs_merged_input_key(l->key), flags)))
			return rc;
	}
}

static int copy_part(char *dst, size_t dstlen, const char *part)
{
	if (strlen(part) >= dstlen)
		return -ENOENT;
	memcpy(dst, part, strlen(part) + 1);
	return 0;
}

/* Cut a pin ("\1<hex>") off a path component. */
static bool pin_of(char *part, struct loc *l)
{
	char *p = strchr(part, PIN);

	if (!p)
		return false;
	*p = 0;
	l->pinned = true;
	l->version = p[1] == 'n' ? 0 : strtoull(p + 1, NULL, 16);
	return true;
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
			if (pin_of(part, l)) {
				if (strcmp(part, PFS_STATUS_FILE))
					return -ENOENT;
				l->node = N_STATUS;
				break;
			}
			if (strcmp(part, PFS_STATUS_FILE) == 0) {
				l->node = N_STATUS;
				break;
			}
			if (!(l->cluster = pfs_registry_cluster(g_cfg, part)))
				return -ENOENT;
			l->node = N_CLUSTER;
			break;
		case 2:
			if (l->node != N_CLUSTER || !(l->service = pfs_registry_service(l->cluster, part)))
				return -ENOENT;
			l->node = N_SERVICE;
			break;
		case 3:
			if (strcmp(part, LATEST) == 0) {
				l->node = N_LATEST;
			} else if (strncmp(part, LATEST_AT, strlen(LATEST_AT)) == 0) {
				if (copy_part(l->round, sizeof l->round, part + strlen(LATEST_AT)))
					return -ENOENT;
				l->node = N_LATEST;
				l->pinned = true;
			} else if (strcmp(part, PFS_MERGED_DIR) == 0)
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
				/* a listed kind's (s3) names come with its listing */
				if ((l->slot = pfs_snap_file_index(l->service, part)) < 0 &&
				    !pfs_snap_names_listed(l->service))
					return -ENOENT;
				l->node = N_LATEST_FILE;
			} else {
				l->node = N_ROUND_FILE;
			}
			break;
		case 5:
			pin_of(part, l);
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

static bool is_file(enum node n)
{
	return n == N_STATUS || n == N_LATEST_FILE || n == N_ROUND_FILE || n == N_RANGE_FILE;
}

/* ---- nodes: inode number <-> path, counted by the kernel's lookups ---- */

/* A pinned .status.json's document. */
struct doc {
	size_t len;
	time_t t;
	char text[]; /* len bytes and a NUL */
};

/* One per node the kernel holds: 10000 targets make 300000 of them, so
 * what only some nodes need is shared or hung off a pointer. */
struct inode {
	fuse_ino_t ino;
	uint64_t nlookup;
	union {
		uint64_t list_sig; /* directories: of the listing last given the kernel */
		uint64_t version;  /* a merged/ file looked up unbuilt: the result it reads */
	};
	struct doc *doc;           /* a pinned .status.json */
	struct inode *next_ino, *next_path;
	struct inode *limbo_prev, *limbo_next; /* forgotten, kept a while: g_limbo */
	char path[];
};

/* Nodes the kernel forgot stay known by path for a while: the next lookup
 * of that path gets the same inode number. A path stat'ed and then opened
 * (cp, install and tar compare the two) keeps its inode even when the
 * kernel dropped the entry in between (an invalidation, memory pressure). */
#define LIMBO_MAX 4096
static struct inode g_limbo = {.limbo_prev = &g_limbo, .limbo_next = &g_limbo};
static size_t g_n_limbo;

static pthread_mutex_t g_nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct inode **g_by_ino, **g_by_path;
static size_t g_buckets, g_n_nodes;
static fuse_ino_t g_next_ino = FUSE_ROOT_ID + 1;

static uint64_t hash_str(const char *s)
{
	return pfs_fnv1a(PFS_FNV_INIT, s);
}

static void nodes_grow(void)
{
	size_t n = g_buckets ? g_buckets * 2 : 1024;
	struct inode **bi = pfs_xcalloc(n, sizeof *bi), **bp = pfs_xcalloc(n, sizeof *bp);

	for (size_t i = 0; i < g_buckets; i++)
		for (struct inode *nd = g_by_ino[i], *next; nd; nd = next) {
			next = nd->next_ino;
			nd->next_ino = bi[nd->ino % n];
			bi[nd->ino % n] = nd;
			nd->next_path = bp[hash_str(nd->path) % n];
			bp[hash_str(nd->path) % n] = nd;
		}
	free(g_by_ino);
	free(g_by_path);
	g_by_ino = bi;
	g_by_path = bp;
	g_buckets = n;
}

/* g_nodes_lock held */
static struct inode *node_by_ino(fuse_ino_t ino)
{
	for (struct inode *nd = g_buckets ? g_by_ino[ino % g_buckets] : NULL; nd; nd = nd->next_ino)
		if (nd->ino == ino)
			return nd;
	return NULL;
}

/* g_nodes_lock held: the node with this path, or NULL. */
static struct inode *node_by_path(const char *path)
{
	for (struct inode *nd = g_buckets ? g_by_path[hash_str(path) % g_buckets] : NULL; nd;
	     nd = nd->next_path)
		if (strcmp(nd->path, path) == 0)
			return nd;
	return NULL;
}

/* g_nodes_lock held: a forgotten node known again (or about to go). */
static void limbo_out(struct inode *nd)
{
	nd->limbo_prev->limbo_next = nd->limbo_next;
	nd->limbo_next->limbo_prev = nd->limbo_prev;
	nd->limbo_prev = nd->limbo_next = NULL;
	g_n_limbo--;
}

/* The node of path, made if new; one more lookup counted. */
static fuse_ino_t node_ref(const char *path)
{
	struct inode *nd;
	fuse_ino_t ino;

	pthread_mutex_lock(&g_nodes_lock);
	if (g_n_nodes >= g_buckets * 2)
		nodes_grow();
	if ((nd = node_by_path(path)) && nd->limbo_next) { /* forgotten: again */
		limbo_out(nd);
		if (!strchr(nd->path, PIN))
			nd->list_sig = 0; /* the kernel has no listing of it now */
	}
	if (!nd) {
		/* a merged/ node looked up unbuilt ("\1n<n>") is renamed to
		 * its result's version once built (node_version): room for it */
		const char *pin = strchr(path, PIN);
		size_t room = pin && pin[1] == 'n' ? 18 : 0;
		/* a latest/ node looked up before its round was known
		 * ("\1latest=/<file>") takes the round's name (resolve_latest) */
		if (pin && strncmp(pin, LATEST_AT "/", strlen(LATEST_AT) + 1) == 0)
			room = PFS_ROUND_NAME_MAX;
		nd = pfs_xcalloc(1, sizeof *nd + strlen(path) + 1 + room);
		nd->ino = g_next_ino++;
		memcpy(nd->path, path, strlen(path) + 1);
		nd->next_ino = g_by_ino[nd->ino % g_buckets];
		g_by_ino[nd->ino % g_buckets] = nd;
		nd->next_path = g_by_path[hash_str(path) % g_buckets];
		g_by_path[hash_str(path) % g_buckets] = nd;
		g_n_nodes++;
	}
	nd->nlookup++;
	ino = nd->ino;
	pthread_mutex_unlock(&g_nodes_lock);
	return ino;
}

/* g_nodes_lock held: out of both tables, freed. */
static void node_unlink_free(struct inode *nd)
{
	struct inode **pp;

	for (pp = &g_by_ino[nd->ino % g_buckets]; *pp != nd; pp = &(*pp)->next_ino)
		;
	*pp = nd->next_ino;
	for (pp = &g_by_path[hash_str(nd->path) % g_buckets]; *pp != nd; pp = &(*pp)->next_path)
		;
	*pp = nd->next_path;
	g_n_nodes--;
	free(nd->doc);
	free(nd);
}

static void node_forget(fuse_ino_t ino, uint64_t n)
{
	struct inode *nd;

	pthread_mutex_lock(&g_nodes_lock);
	nd = node_by_ino(ino);
	if (nd)
		nd->nlookup = n < nd->nlookup ? nd->nlookup - n : 0;
	if (nd && nd->nlookup == 0 && !nd->limbo_next) {
		nd->limbo_prev = g_limbo.limbo_prev; /* the newest last */
		nd->limbo_next = &g_limbo;
		g_limbo.limbo_prev->limbo_next = nd;
		g_limbo.limbo_prev = nd;
		if (++g_n_limbo > LIMBO_MAX) {
			struct inode *old = g_limbo.limbo_next;
			limbo_out(old);
			node_unlink_free(old);
		}
	}
	pthread_mutex_unlock(&g_nodes_lock);
}

/* The path of ino (malloc'd), or NULL. */
static char *node_path(fuse_ino_t ino)
{
	char *p = NULL;

	if (ino == FUSE_ROOT_ID)
		return pfs_xstrdup("/");
	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(ino);
	if (nd)
		p = pfs_xstrdup(nd->path);
	pthread_mutex_unlock(&g_nodes_lock);
	return p;
}

/* The document of a pinned .status.json: hand it to its node (taken over). */
static void node_set_doc(fuse_ino_t ino, char *doc, size_t len, time_t t)
{
	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(ino);
	if (nd && !nd->doc) {
		nd->doc = pfs_xmalloc(sizeof *nd->doc + len + 1);
		nd->doc->len = len;
		nd->doc->t = t;
		memcpy(nd->doc->text, doc, len);
		nd->doc->text[len] = 0;
	}
	pthread_mutex_unlock(&g_nodes_lock);
	free(doc);
}

/* Its length and time, and a copy of it if want (malloc'd); -ESTALE if gone. */
static int node_doc(fuse_ino_t ino, char **copy, size_t *len, time_t *t)
{
	int rc = -ESTALE;

	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(ino);
	if (nd && nd->doc) {
		*len = nd->doc->len;
		*t = nd->doc->t;
		if (copy) {
			*copy = pfs_xmalloc(nd->doc->len + 1);
			memcpy(*copy, nd->doc->text, nd->doc->len + 1);
		}
		rc = 0;
	}
	pthread_mutex_unlock(&g_nodes_lock);
	return rc;
}

/* g_nodes_lock held: nd takes the name a lookup would give what it reads
 * now (room made by node_ref), unless a live node has it already; one the
 * kernel forgot gives it up. */
static void node_rename(struct inode *nd, const char *name)
{
	struct inode *had = node_by_path(name), **pp;

	if (had && !had->limbo_next)
		return; /* a lookup made that node already */
	if (had) {
		limbo_out(had);
		node_unlink_free(had);
	}
	for (pp = &g_by_path[hash_str(nd->path) % g_buckets]; *pp != nd; pp = &(*pp)->next_path)
		;
	*pp = nd->next_path;
	strcpy(nd->path, name);
	nd->next_path = g_by_path[hash_str(nd->path) % g_buckets];
	g_by_path[hash_str(nd->path) % g_buckets] = nd;
}

/* g_nodes_lock held: an unbuilt merged/ node ("<file>\1n<n>") now reads
 * version v: it takes the name a lookup of that result gives
 * ("<file>\1<v>"), so a path stat'ed (which built it) and then opened
 * (looked up again) keeps its inode, as cp and install check. */
static void node_rename_built(struct inode *nd, uint64_t v)
{
	char *pin = strchr(nd->path, PIN), name[1024];

	if (!pin || pin[1] != 'n')
		return;
	snprintf(name, sizeof name, "%.*s%c%016llx", (int)(pin - nd->path), nd->path, PIN,
		 (unsigned long long)v);
	node_rename(nd, name);
}

/* A latest/ node looked up before its round was known (a listed kind's
 * first listing still running) reads the round latest is at its first
 * use: it takes that round's name, as one looked up later would have. */
static int resolve_latest(struct loc *l, int flags)
{
	char round[PFS_ROUND_NAME_MAX];
	off_t size;
	time_t t;
	int rc;

	if (l->round[0])
		return 0;
	if ((rc = pfs_snap_latest(l->service, l->file, flags, round, &size, &t)))
		return rc;
	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(l->ino);
	char *at = nd ? strstr(nd->path, LATEST_AT) : NULL;
	if (at && at[strlen(LATEST_AT)] == '/') { /* first use: the round's name */
		char name[1024];
		snprintf(name, sizeof name, "%.*s%s%s%s", (int)(at - nd->path), nd->path, LATEST_AT,
			 round, at + strlen(LATEST_AT));
		node_rename(nd, name);
		snprintf(l->round, sizeof l->round, "%s", round);
	} else if (at) { /* the round an earlier use named it by */
		at += strlen(LATEST_AT);
		snprintf(l->round, sizeof l->round, "%.*s", (int)strcspn(at, "/"), at);
	}
	pthread_mutex_unlock(&g_nodes_lock);
	if (!l->round[0])
		return -ESTALE;
	l->slot = pfs_snap_file_index(l->service, l->file);
	return 0;
}

/* The merge result a node looked up unbuilt reads: the first one offered. */
static uint64_t node_version(fuse_ino_t ino, uint64_t offer)
{
	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(ino);
	if (nd && !nd->version && offer) {
		nd->version = offer;
		node_rename_built(nd, offer);
	}
	uint64_t v = nd ? nd->version : offer;
	pthread_mutex_unlock(&g_nodes_lock);
	return v;
}

/* The result a pinned merged/ node reads, chosen (built) at its first use. */
static int pinned_version(struct loc *l, int flags)
{
	off_t size;
	time_t t;
	int rc;

	if (l->version)
		return 0;
	if ((l->version = node_version(l->ino, 0)))
		return 0;
	/* the lookup that made the node started what it merges: a failure
	 * is taken, not fetched again (one fetch per access) */
	rc = merged_stat(l, flags | PFS_SNAP_NO_RETRY, false, &size, &t, NULL, &l->version);
	if (!rc)
		l->version = node_version(l->ino, l->version);
	return rc;
}

static uint64_t g_root_sig;

/* True if a directory's listing is the one the kernel was given last
 * (it may keep its copy); remembers it. */
static bool listing_same(fuse_ino_t ino, uint64_t sig)
{
	bool same = false;

	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = ino == FUSE_ROOT_ID ? NULL : node_by_ino(ino);
	uint64_t *last = ino == FUSE_ROOT_ID ? &g_root_sig : nd ? &nd->list_sig : NULL;
	if (last) {
		same = *last == sig;
		*last = sig;
	}
	pthread_mutex_unlock(&g_nodes_lock);
	return same;
}

static void nodes_free(void)
{
	for (size_t i = 0; i < g_buckets; i++)
		for (struct inode *nd = g_by_ino[i], *next; nd; nd = next) {
			next = nd->next_ino;
			free(nd->doc);
			free(nd);
		}
	free(g_by_ino);
	free(g_by_path);
	g_by_ino = g_by_path = NULL;
	g_buckets = g_n_nodes = 0;
	g_limbo.limbo_prev = g_limbo.limbo_next = &g_limbo;
	g_n_limbo = 0;
}

/* ---- attributes ---- */

static void fill_dir(struct stat *st, time_t mtime)
{
	st->st_mode = S_IFDIR | 0555;
	st->st_nlink = 2;
	st->st_mtime = st->st_atime = mtime;
	/* the mtime moves as the listing changes (rounds land); the ctime
	 * stays: GNU tar compares a directory's ctime before and after
	 * archiving it ("file changed as we read it", exit 1) */
	st->st_ctime = g_mount_time;
}

static int listing_nsec(struct loc *l, int flags, double *timeout, long *nsec);

static void fill_file(struct stat *st, off_t size, time_t mtime)
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
static int attr_of(struct loc *l, int flags, bool lookup, struct stat *st, double *timeout)
{
	char round[PFS_ROUND_NAME_MAX] = ""; /* filled unless no round is known yet */
	off_t size = 0;
	time_t t = g_mount_time;
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
			t = g_mount_time;
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
			rc = node_doc(l->ino, NULL, &len, &t);
		} else { /* at lookup, which makes the document and pins it */
			len = 0;
			t = time(NULL);
		}
		size = (off_t)len;
		break;
	}
	case N_LATEST_FILE:
		if (l->pinned) {
			if (!(rc = resolve_latest(l, flags)))
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
			if (!(rc = pinned_version(l, flags)))
				rc = pfs_merged_version(l->service, l->range, l->key, l->version,
							&size, &t);
			break;
		}
		/* rebuilt as snapshots arrive: fs tells the kernel (merged_changed) */
		rc = merged_stat(l, flags, lookup, &size, &t, timeout, &l->version);
		break;
	}
	long nsec = 0;
	if (!rc && g_no_opendir && !is_file(l->node) && l->node != N_ROOT && l->node != N_MERGED)
		rc = listing_nsec(l, flags, timeout, &nsec);
	if (rc)
		return rc;
	if (is_file(l->node)) {
		fill_file(st, size, t);
	} else {
		fill_dir(st, t);
		st->st_mtim.tv_nsec = nsec;
	}
	return 0;
}

/* ---- open handles: files and listings, freed at release (or at
 * teardown, for those whose release never came: unmounted by a signal) */

struct open_ref {
	struct open_ref *prev, *next;
	void (*free)(struct open_ref *r);
};

static pthread_mutex_t g_open_lock = PTHREAD_MUTEX_INITIALIZER;
static struct open_ref g_open = {&g_open, &g_open, NULL};

static void open_track(struct open_ref *r, void (*free_fn)(struct open_ref *r))
{
	r->free = free_fn;
	pthread_mutex_lock(&g_open_lock);
	r->next = g_open.next;
	r->prev = &g_open;
	g_open.next->prev = r;
	g_open.next = r;
	pthread_mutex_unlock(&g_open_lock);
}

static void open_untrack(struct open_ref *r)
{
	pthread_mutex_lock(&g_open_lock);
	r->prev->next = r->next;
	r->next->prev = r->prev;
	pthread_mutex_unlock(&g_open_lock);
}

/* ---- directory listings, made whole at opendir ---- */

struct listing {
	struct open_ref ref; /* first */
	char **names;
	unsigned char *is_dir;
	size_t n, cap;
};

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

static void list_free(struct listing *d)
{
	if (d->ref.free)
		open_untrack(&d->ref);
	for (size_t i = 0; i < d->n; i++)
		free(d->names[i]);
	free(d->names);
	free(d->is_dir);
	free(d);
}

static uint64_t list_sig(const struct listing *d)
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

	for (size_t r = 0; r < g_cfg->n_merged; r++)
		for (size_t i = 0; i < n; i++)
			pfs_merged_prebuild(s, &g_cfg->merged[r], keys[i]);
	free(keys);
}

/* Without wait: -EAGAIN (the listing is dropped) while fetches run. */
static int list_dir(struct loc *l, int flags, bool quiet, struct listing *d)
{
	char name[512];
	int rc = 0;

	list_add(d, ".", true);
	list_add(d, "..", true);
	switch (l->node) {
	case N_ROOT:
		for (size_t i = 0; i < g_cfg->n_clusters; i++)
			list_add(d, g_cfg->clusters[i].name, true);
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
		if (g_cfg->n_merged)
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
		for (size_t i = 0; i < g_cfg->n_merged; i++)
			list_add(d, g_cfg->merged[i].name, true);
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
		 * merged_changed); a file with no input yet: listing fetches it */
		*timeout = min_d(*timeout, pfs_merged_listing_valid(l->service, l->range));
		return !pfs_snap_latest_settled(l->service) && !range_complete(l->service, l->range);
	}
	default:
		return false;
	}
}

/* A directory's mtime nanoseconds (no_opendir): its listing's signature,
 * or, while a listing has work to start, a value never given before. */
static int listing_nsec(struct loc *l, int flags, double *timeout, long *nsec)
{
	int rc;

	if (listing_due(l, timeout)) {
		/* not 0: each path walk through a directory checks its
		 * permissions, from attributes that must be fresh */
		*timeout = l->node == N_LATEST ? 0 : DIR_TIMEOUT;
		*nsec = (long)(fresh_gen() % 1000000000);
		return 0;
	}
	struct listing *d = pfs_xcalloc(1, sizeof *d);
	rc = list_dir(l, flags, true, d);
	*nsec = rc ? 0 : (long)(list_sig(d) % 1000000000);
	list_free(d);
	return rc;
}

/* The entries of d from off on, as many as fit in size. */
static void reply_listing(fuse_req_t req, const struct listing *d, size_t size, off_t off)
{
	char *buf = pfs_xmalloc(size ? size : 1);
	size_t used = 0;

	for (size_t i = (size_t)off; off >= 0 && i < d->n; i++) {
		struct stat st = {.st_ino = hash_str(d->names[i]) | 1,
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

/* ---- open files ---- */

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

static int open_file(struct loc *l, int flags, struct fuse_file_info *fi, struct handle **out)
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
			rc = node_doc(l->ino, &h->doc, &h->len, &t);
			break;
		}
		h->doc = pfs_status_json(g_cfg, g_mount_time, &h->len);
		fi->direct_io = 1;
		break;
	case N_LATEST_FILE:
		/* nodes of latest/ files are pinned to a round (fs_lookup) */
		if (!l->pinned)
			rc = -ENOENT;
		else if (!(rc = resolve_latest(l, flags)) &&
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
		else if ((rc = pinned_version(l, flags)))
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

static void handle_free(struct handle *h)
{
	if (h->ref.free)
		open_untrack(&h->ref);
	if (h->fd >= 0)
		close(h->fd);
	free(h->doc);
	free(h->tail);
	free(h);
}

static void handle_ref_free(struct open_ref *r) { handle_free((struct handle *)r); }
static void listing_ref_free(struct open_ref *r) { list_free((struct listing *)r); }

/* ---- requests that may wait: run now, or parked and run again ---- */

/* Read what a handle holds; the reply copies it. */
static void reply_read(fuse_req_t req, struct handle *h, size_t size, off_t off)
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

/* OP_READ, OP_READDIR: with no handle (no_open, no_opendir), of what the
 * node names. */
enum op { OP_GETATTR, OP_OPEN, OP_OPENDIR, OP_READ, OP_READDIR };

struct task {
	fuse_req_t req;
	enum op op;
	fuse_ino_t ino;
	char *path;
	struct fuse_file_info fi;
	size_t size; /* OP_READ */
	off_t off;
	struct timespec deadline;
	int flags;        /* 0 on the first run, PFS_SNAP_NO_RETRY once parked */
	bool interrupted; /* g_park_lock */
	struct task *next;
};

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

	*rc = is_file(l->node) ? -ENOTDIR : list_dir(l, t->flags, quiet, d);
	if (*rc) {
		list_free(d);
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

	if ((rc = parse_path(t->path, &l))) {
		reply_err(t, -rc);
		return 0;
	}
	l.ino = t->ino;
	switch (t->op) {
	case OP_GETATTR:
		if ((rc = attr_of(&l, t->flags, false, &st, &timeout)))
			return failed(t, rc, may_wait);
		st.st_ino = t->ino;
		unpark(t);
		fuse_reply_attr(t->req, &st, timeout);
		return 0;
	case OP_OPEN:
		if ((rc = open_file(&l, t->flags, &t->fi, &h)))
			return failed(t, rc, may_wait);
		t->fi.fh = (uint64_t)(uintptr_t)h;
		open_track(&h->ref, handle_ref_free);
		unpark(t);
		if (fuse_reply_open(t->req, &t->fi) == -ENOENT) /* the caller went away */
			handle_free(h);
		return 0;
	case OP_READ:
		t->fi.flags = O_RDONLY;
		if ((rc = open_file(&l, t->flags, &t->fi, &h)))
			return failed(t, rc, may_wait);
		unpark(t);
		reply_read(t->req, h, t->size, t->off);
		handle_free(h);
		return 0;
	case OP_READDIR:
		/* its first part may start work, the rest only read */
		if (!(d = task_listing(t, &l, t->off > 0, &rc)))
			return failed(t, rc, may_wait);
		unpark(t);
		reply_listing(t->req, d, t->size, t->off);
		list_free(d);
		return 0;
	case OP_OPENDIR:
		if (!(d = task_listing(t, &l, false, &rc)))
			return failed(t, rc, may_wait);
		t->fi.fh = (uint64_t)(uintptr_t)d;
		/* the kernel keeps its copy of the listing while it is the same */
		t->fi.cache_readdir = 1;
		t->fi.keep_cache = listing_same(t->ino, list_sig(d));
		open_track(&d->ref, listing_ref_free);
		unpark(t);
		if (fuse_reply_open(t->req, &t->fi) == -ENOENT)
			list_free(d);
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
static void submit(fuse_req_t req, enum op op, fuse_ino_t ino, struct fuse_file_info *fi,
		   size_t size, off_t off)
{
	struct task *t = pfs_xcalloc(1, sizeof *t);
	struct loc l;
	double wait = 15;
	int rc;

	t->req = req;
	t->op = op;
	t->ino = ino;
	t->size = size;
	t->off = off;
	if (fi)
		t->fi = *fi;
	if (!(t->path = node_path(ino))) {
		fuse_reply_err(req, ESTALE);
		task_free(t);
		return;
	}
	tl_req = req; /* a blocking wait in it (merged/) sees interrupts */
	rc = run_task(t, true);
	tl_req = NULL;
	if (rc != -EAGAIN) {
		task_free(t);
		return;
	}
	if (parse_path(t->path, &l) == 0 && l.service)
		wait = pfs_snap_max_wait(l.service);
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

/* A name the kernel must forget: a round retention removed ("/c/s" and
 * round), a merged/ file rebuilt ("/c/s/merged/<range>" and file); or,
 * without name, a directory's attributes and listing (no_opendir). */
struct inval {
	char *dir, *name;
	struct inval *next;
};
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

static fuse_ino_t node_find(const char *path)
{
	fuse_ino_t ino = 0;

	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_path(path);
	if (nd)
		ino = nd->ino;
	pthread_mutex_unlock(&g_nodes_lock);
	return ino;
}

static void queue_inval(struct inval *iv);

/* The kernel's copy of a directory's listing (no_opendir) is stale. */
static void listing_changed(const char *dir)
{
	if (g_no_opendir) {
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
static void merged_changed(struct pfs_service *s)
{
	const char **keys;
	char dir[1024], name[256];
	size_t n;

	if (!g_cfg->n_merged)
		return;
	n = pfs_merged_keys(s, &keys);
	for (size_t r = 0; r < g_cfg->n_merged; r++) {
		snprintf(dir, sizeof dir, "/%s/%s/%s/%s", s->cluster->name, s->name,
			 PFS_MERGED_DIR, g_cfg->merged[r].name);
		if (!node_find(dir))
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

static void on_removed(struct pfs_service *s, const char *round)
{
	struct inval *iv = pfs_xcalloc(1, sizeof *iv);
	size_t n = strlen(s->cluster->name) + strlen(s->name) + 3;

	iv->dir = pfs_xmalloc(n);
	snprintf(iv->dir, n, "/%s/%s", s->cluster->name, s->name);
	iv->name = pfs_xstrdup(round);
	listing_changed(iv->dir);
	queue_inval(iv);
	merged_changed(s);
}

/* No lock held: the kernel's invalidation may wait for a lookup or a
 * parked listing in that directory. */
static void run_invals(struct inval *iv)
{
	while (iv) {
		struct inval *next = iv->next;
		fuse_ino_t ino = node_find(iv->dir);
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
static void on_discovered(struct pfs_cluster *c)
{
	char dir[512];

	snprintf(dir, sizeof dir, "/%s", c->name);
	listing_changed(dir);
}

static void on_change(struct pfs_service *s)
{
	merged_changed(s);
	pthread_mutex_lock(&g_park_lock);
	g_dirty = true;
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

/* A blocking wait (merged/, discovery) gives up when its request is
 * interrupted. */
static bool interrupted(void)
{
	return tl_req && fuse_req_interrupted(tl_req);
}

/* ---- operations ---- */

static void fs_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	bool handles = getenv("PROFILEFS_OPEN_HANDLES") != NULL;
	g_no_open = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) && !handles;
	g_no_opendir = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) && !handles;
	pfs_debug("the kernel opens files %s, directories %s", g_no_open ? "alone" : "through us",
		  g_no_opendir ? "alone" : "through us");
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
		last_gen = fresh_gen();
		last_at = now;
	}
	*gen = last_gen;
	pthread_mutex_unlock(&lock);
	return recent;
}

static void fs_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	char *dir = node_path(parent), path[1024];
	struct fuse_entry_param e;
	struct loc l;
	int rc;

	if (!dir) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	rc = snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "", name);
	free(dir);
	tl_req = req;
	memset(&e, 0, sizeof e);
	if (rc >= (int)sizeof path || strlen(name) > 255) {
		fuse_reply_err(req, ENAMETOOLONG);
		goto out;
	}
	if (strchr(name, LATEST_AT[0])) { /* only fs_lookup makes such names */
		fuse_reply_err(req, ENOENT);
		goto out;
	}
	if ((rc = parse_path(path, &l))) {
		fuse_reply_err(req, -rc);
		goto out;
	}
	/* merged/ files are built at getattr/open, not under the directory's lock */
	rc = attr_of(&l, 0, true, &e.attr, &e.attr_timeout);
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
		if (is_file(l.node))
			fill_file(&e.attr, 0, g_mount_time);
		else
			fill_dir(&e.attr, g_mount_time);
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
		 * (a new input drops it at once: merged_changed). Not built yet:
		 * a node of its own, reading the result its getattr finds. */
		size_t n = strlen(path);
		if (l.version) { /* the entry may last less: a result about to leave */
			snprintf(path + n, sizeof path - n, "%c%016llx", PIN,
				 (unsigned long long)l.version);
			e.attr_timeout = FROZEN_TIMEOUT;
		} else {
			snprintf(path + n, sizeof path - n, "%cn%llx", PIN,
				 (unsigned long long)fresh_gen());
			e.attr_timeout = 0;
		}
	} else if (l.node == N_STATUS) {
		/* a document made now, its own node; the name is looked up anew
		 * at each open. Within half a second of the last one, that one:
		 * a stat and then an open (cp) read one document, one inode. */
		uint64_t gen;
		if (!status_recent(&gen))
			doc = pfs_status_json(g_cfg, g_mount_time, &doc_len);
		e.attr.st_size = (off_t)doc_len;
		snprintf(path, sizeof path, "/%s%c%llx", PFS_STATUS_FILE, PIN,
			 (unsigned long long)gen);
		e.attr_timeout = FROZEN_TIMEOUT;
		e.entry_timeout = 0;
	}
	e.ino = node_ref(path);
	if (l.node == N_STATUS && !doc) {
		time_t t;
		if (node_doc(e.ino, NULL, &doc_len, &t) == 0) {
			e.attr.st_size = (off_t)doc_len;
			e.attr.st_mtime = t;
		}
	}
	e.attr.st_ino = e.ino;
	if (doc)
		node_set_doc(e.ino, doc, doc_len, e.attr.st_mtime);
	if (fuse_reply_entry(req, &e) == -ENOENT)
		node_forget(e.ino, 1);
out:
	tl_req = NULL;
}

static void fs_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	node_forget(ino, nlookup);
	fuse_reply_none(req);
}

static void fs_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		node_forget(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void fs_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	submit(req, OP_GETATTR, ino, NULL, 0, 0);
}

static void fs_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (g_no_open)
		fuse_reply_err(req, ENOSYS);
	else
		submit(req, OP_OPEN, ino, fi, 0, 0);
}

static void fs_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	if (fi->fh)
		reply_read(req, (struct handle *)(uintptr_t)fi->fh, size, off);
	else /* what it names, which may still be fetched: a task */
		submit(req, OP_READ, ino, NULL, size, off);
}

static void fs_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh)
		handle_free((struct handle *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void fs_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (g_no_opendir)
		fuse_reply_err(req, ENOSYS);
	else
		submit(req, OP_OPENDIR, ino, fi, 0, 0);
}

static void fs_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	if (fi->fh)
		reply_listing(req, (struct listing *)(uintptr_t)fi->fh, size, off);
	else /* what it names, which may wait for fetches: a task */
		submit(req, OP_READDIR, ino, NULL, size, off);
}

static void fs_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	if (fi->fh)
		list_free((struct listing *)(uintptr_t)fi->fh);
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
	pthread_condattr_t ca;

	g_cfg = cfg;
	g_mount_time = time(NULL);
	pthread_mutex_lock(&g_nodes_lock);
	nodes_grow();
	pthread_mutex_unlock(&g_nodes_lock);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&g_park_cond, &ca);
	pfs_snap_set_hooks(on_change, interrupted, on_removed);
	pfs_discovery_set_hook(on_discovered);
	if (pthread_create(&g_inval_thread, NULL, inval_main, NULL))
		return -1;
	return pthread_create(&g_retry_thread, NULL, retry_main, NULL) ? -1 : 0;
}

void pfs_fs_teardown(void)
{
	pthread_mutex_lock(&g_park_lock);
	g_stop = true;
	pthread_cond_signal(&g_park_cond);
	pthread_mutex_unlock(&g_park_lock);
	pthread_join(g_retry_thread, NULL);
	pfs_snap_set_hooks(NULL, NULL, NULL);
	pthread_mutex_lock(&g_inval_lock);
	g_inval_stop = true;
	pthread_cond_signal(&g_inval_cond);
	pthread_mutex_unlock(&g_inval_lock);
	pthread_join(g_inval_thread, NULL);
	/* the session is gone (g_se NULL): run_invals only frees them */
	run_invals(g_invals);
	g_invals = NULL;
	nodes_free();
	while (g_open.next != &g_open)
		g_open.next->free(g_open.next);
}
