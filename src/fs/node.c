/* Nodes: inode number <-> path, counted by the kernel's lookups; pinned
 * names (latest/ at a round, a merged/ result, a .status.json document). */
#include "fs_i.h"

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
	struct fs_what what;       /* what it names, resolved at its lookup */
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

uint64_t fs_hash_str(const char *s)
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
			nd->next_path = bp[fs_hash_str(nd->path) % n];
			bp[fs_hash_str(nd->path) % n] = nd;
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
	for (struct inode *nd = g_buckets ? g_by_path[fs_hash_str(path) % g_buckets] : NULL; nd;
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
fuse_ino_t fs_node_ref(const char *path, const struct fs_what *w)
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
		 * ("\1latest=/<file>") takes the round's name (fs_resolve_latest) */
		if (pin && strncmp(pin, LATEST_AT "/", strlen(LATEST_AT) + 1) == 0)
			room = PFS_ROUND_NAME_MAX;
		nd = pfs_xcalloc(1, sizeof *nd + strlen(path) + 1 + room);
		nd->ino = g_next_ino++;
		memcpy(nd->path, path, strlen(path) + 1);
		nd->what = *w;
		nd->next_ino = g_by_ino[nd->ino % g_buckets];
		g_by_ino[nd->ino % g_buckets] = nd;
		nd->next_path = g_by_path[fs_hash_str(path) % g_buckets];
		g_by_path[fs_hash_str(path) % g_buckets] = nd;
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
	for (pp = &g_by_path[fs_hash_str(nd->path) % g_buckets]; *pp != nd; pp = &(*pp)->next_path)
		;
	*pp = nd->next_path;
	g_n_nodes--;
	free(nd->doc);
	free(nd);
}

void fs_node_forget(fuse_ino_t ino, uint64_t n)
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

/* The path of ino (malloc'd) and what it names (*w), or NULL if gone. */
char *fs_node_path(fuse_ino_t ino, struct fs_what *w)
{
	char *p = NULL;

	if (ino == FUSE_ROOT_ID) {
		*w = (struct fs_what){.node = N_ROOT, .slot = -1};
		return pfs_xstrdup("/");
	}
	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_ino(ino);
	if (nd) {
		p = pfs_xstrdup(nd->path);
		*w = nd->what;
	}
	pthread_mutex_unlock(&g_nodes_lock);
	return p;
}

/* The document of a pinned .status.json: hand it to its node (taken over). */
void fs_node_set_doc(fuse_ino_t ino, char *doc, size_t len, time_t t)
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
int fs_node_doc(fuse_ino_t ino, char **copy, size_t *len, time_t *t)
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
 * now (room made by fs_node_ref), unless a live node has it already; one the
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
	for (pp = &g_by_path[fs_hash_str(nd->path) % g_buckets]; *pp != nd; pp = &(*pp)->next_path)
		;
	*pp = nd->next_path;
	strcpy(nd->path, name);
	nd->next_path = g_by_path[fs_hash_str(nd->path) % g_buckets];
	g_by_path[fs_hash_str(nd->path) % g_buckets] = nd;
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
int fs_resolve_latest(struct loc *l, int flags)
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
int fs_pinned_version(struct loc *l, int flags)
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
	rc = fs_merged_stat(l, flags | PFS_SNAP_NO_RETRY, false, &size, &t, NULL, &l->version);
	if (!rc)
		l->version = node_version(l->ino, l->version);
	return rc;
}

static uint64_t g_root_sig;

/* True if a directory's listing is the one the kernel was given last
 * (it may keep its copy); remembers it. */
bool fs_listing_same(fuse_ino_t ino, uint64_t sig)
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

void fs_nodes_free(void)
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

fuse_ino_t fs_node_find(const char *path)
{
	fuse_ino_t ino = 0;

	pthread_mutex_lock(&g_nodes_lock);
	struct inode *nd = node_by_path(path);
	if (nd)
		ino = nd->ino;
	pthread_mutex_unlock(&g_nodes_lock);
	return ino;
}

void fs_nodes_init(void)
{
	pthread_mutex_lock(&g_nodes_lock);
	nodes_grow();
	pthread_mutex_unlock(&g_nodes_lock);
}
