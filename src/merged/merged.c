/* merged/<range>/ files: choose inputs, merge, store, remember. */
#include "merged.h"

#include "lib/cache.h"
#include "lib/log.h"
#include "lib/merge.h"
#include "lib/names.h"
#include "snap/snap.h"
#include "source/source.h"
#include "lib/work.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* One merge result: a version of a merged/ file, named by its inputs. */
struct result {
	uint64_t sig;  /* of the inputs: the version (0: none) */
	off_t size;
	time_t mtime;
	/* a merge of one snapshot keeps no file of its own (merge.h struct
	 * pfs_merge_shape): the bytes of snapshot round/file (file NULL:
	 * none), then bytes */
	char round[PFS_ROUND_NAME_MAX];
	char *file;
	uint8_t *bytes;
	size_t n_bytes;
};

static void result_free(struct result *r)
{
	free(r->file);
	free(r->bytes);
	memset(r, 0, sizeof *r);
}

struct memo {
	const struct pfs_service *svc;
	const struct pfs_range *range;
	char *key;
	uint64_t sig;  /* of the inputs of the last build */
	int rc;        /* 0 built (cur), -EIO failed, -ENOENT never built,
			* -ENODATA nothing to build from (default.pgo: no
			* input has Function.start_line) */
	time_t oldest; /* input time: the result holds until it leaves the range */
	struct result cur;
	/* the version cur replaced: a reader that opened it reads on (the
	 * kernel asks for its pages by inode, long after the open) until the
	 * build after next */
	struct result prev;
	pthread_mutex_t lock; /* held while building: builds of other files run */
	struct memo *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* the memo table */
/* memos by service: g_memos[hash of the service pointer] */
#define MEMO_BUCKETS 4096
static struct memo *g_memos[MEMO_BUCKETS];

static struct memo **bucket(const struct pfs_service *s)
{
	return &g_memos[((uintptr_t)s >> 4) % MEMO_BUCKETS];
}

const struct pfs_range *pfs_merged_range(const struct pfs_config *cfg, const char *name)
{
	for (size_t i = 0; i < cfg->n_merged; i++)
		if (strcmp(cfg->merged[i].name, name) == 0)
			return &cfg->merged[i];
	return NULL;
}

static bool is_pgo(const char *key)
{
	return strcmp(key, PFS_PGO_FILE) == 0;
}

const char *pfs_merged_input_key(const char *key)
{
	return is_pgo(key) ? pfs_profile_names[PFS_CPU] : key;
}

/* The inputs of a merged/ file: *n of them (0: none), or -EAGAIN without
 * PFS_SNAP_WAIT (pfs_snap_inputs). */
static int inputs(struct pfs_service *s, const struct pfs_range *r, const char *key, int flags,
		  struct pfs_snap_input **in, size_t *n)
{
	if (is_pgo(key) && !s->cluster->src->pgo) {
		*in = NULL; /* no line numbers: nothing go build -pgo could use */
		*n = 0;
		return 0;
	}
	return pfs_snap_inputs(s, pfs_merged_input_key(key), time(NULL) - (time_t)r->seconds, flags,
			       in, n);
}

size_t pfs_merged_keys(const struct pfs_service *s, const char ***keys)
{
	/* read once: a listing may add files meanwhile */
	size_t n = 0, nf = __atomic_load_n(&s->n_files, __ATOMIC_ACQUIRE);
	const struct pfs_file *files = __atomic_load_n(&s->files, __ATOMIC_ACQUIRE);

	*keys = pfs_xmalloc((nf ? nf : 1) * sizeof **keys);
	for (size_t i = 0; i < nf; i++) {
		bool seen = false;
		for (size_t j = 0; j < n && !seen; j++)
			seen = strcmp((*keys)[j], files[i].merge_key) == 0;
		if (!seen)
			(*keys)[n++] = files[i].merge_key;
	}
	return n;
}

bool pfs_merged_has(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	struct pfs_snap_input *in;
	size_t n;

	inputs(s, r, key, PFS_SNAP_WAIT, &in, &n);
	free(in);
	return n > 0;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
	return pfs_fnv1a(pfs_fnv1a(h, s), "/");
}

static uint64_t signature(const struct pfs_snap_input *in, size_t n)
{
	uint64_t h = PFS_FNV_INIT;

	for (size_t i = 0; i < n; i++)
		h = fnv_str(fnv_str(h, in[i].round), in[i].file);
	return h;
}

static int read_fd(int fd, uint8_t **out, size_t *len)
{
	struct stat st;
	size_t off = 0;

	if (fstat(fd, &st))
		return -1;
	*out = pfs_xmalloc((size_t)st.st_size + 1);
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, *out + off, (size_t)st.st_size - off);
		if (n <= 0) {
			free(*out);
			return -1;
		}
		off += (size_t)n;
	}
	*len = off;
	return 0;
}

static void dir_name(const struct pfs_range *r, char *out, size_t outlen)
{
	snprintf(out, outlen, ".merged-%s", r->name);
}

/* The stored file of a merge: "<key>.pb.gz", and the one it replaced
 * "<key>.pb.gz.prev" (no key's file ends so). */
static void file_name(const char *key, bool prev, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s.pb.gz%s", key, prev ? ".prev" : "");
}

/* Before a build: cur becomes prev, its file renamed aside. m->lock held. */
static void retire(struct pfs_service *s, const struct pfs_range *r, const char *key,
		   struct memo *m)
{
	char dir[64], file[160], old[168];

	result_free(&m->prev);
	if (m->rc == 0)
		m->prev = m->cur;
	if (m->rc == 0 && !m->cur.bytes) { /* its file kept aside */
		dir_name(r, dir, sizeof dir);
		file_name(key, false, file, sizeof file);
		file_name(key, true, old, sizeof old);
		if (pfs_cache_rename(s->cluster->name, s->name, dir, file, old))
			m->prev.sig = 0;
	}
	memset(&m->cur, 0, sizeof m->cur); /* what it held is prev's now */
}

/* The rule of a sample type of this service's key (the kind's own, else
 * merge.h's by name). */
struct rule_arg {
	const struct pfs_service *s;
	const struct pfs_file *f;
};

static enum pfs_merge_rule kind_rule(void *arg, const char *type, const char *unit)
{
	const struct rule_arg *a = arg;

	return a->s->cluster->src->merge_rule(a->f, type, unit);
}

/* Merge and store; fills m. m->lock held. */
static void build(struct pfs_service *s, const struct pfs_range *r, const char *key,
		  const struct pfs_snap_input *in, size_t n, struct memo *m)
{
	struct pfs_merge_in *mi = pfs_xcalloc(n, sizeof *mi);
	uint8_t **bufs = pfs_xcalloc(n, sizeof *bufs), *gz = NULL;
	size_t *lens = pfs_xcalloc(n, sizeof *lens), gzlen = 0, n_in = 0, used = 0;
	size_t *src = pfs_xcalloc(n ? n : 1, sizeof *src); /* mi[j] is in[src[j]] */
	char err[512] = "", dir[64], file[160], what[512];
	bool pgo = is_pgo(key);
	struct pfs_merge_shape shape = {0};

	m->cur.mtime = 0;
	m->oldest = 0;
	for (size_t i = 0; i < n && !err[0]; i++) {
		if (in[i].base && pgo)
			continue; /* cpu: no differences */
		int fd = pfs_cache_open(s->cluster->name, s->name, in[i].round, in[i].file);
		if (fd < 0 || read_fd(fd, &bufs[n_in], &lens[n_in]))
			snprintf(err, sizeof err, "cannot read %s/%s: %s", in[i].round, in[i].file,
				 strerror(fd < 0 ? -fd : errno));
		if (fd >= 0)
			close(fd);
		/* the series: one per cache key (target, or API type) */
		size_t series = 0;
		while (series < i && strcmp(in[series].file, in[i].file))
			series++;
		mi[n_in] = (struct pfs_merge_in){bufs[n_in], lens[n_in], series, in[i].t, in[i].base,
						 in[i].file};
		src[n_in] = i;
		if (!in[i].base) {
			used++;
			if (in[i].t > m->cur.mtime)
				m->cur.mtime = in[i].t;
			if (!m->oldest || in[i].t < m->oldest)
				m->oldest = in[i].t;
		}
		n_in++;
	}
	dir_name(r, dir, sizeof dir);
	file_name(key, false, file, sizeof file);
	snprintf(what, sizeof what, "%s/%s/%s/%s/%s", s->cluster->name, s->name, PFS_MERGED_DIR,
		 r->name, pgo ? key : file);
	int mrc = -1;
	if (err[0]) {
		/* mrc -1: said below */
	} else if (pgo) {
		size_t total = used;
		mrc = pfs_pprof_pgo((const uint8_t *const *)bufs, lens, n_in, 1u << 30, &used, &gz,
				    &gzlen, err, sizeof err);
		if (mrc >= 0 && used < total)
			pfs_warn("%s: %zu of %zu cpu snapshots have no Function.start_line (go build "
				 "-pgo rejects them): left out%s", what, total - used, total,
				 used ? "" : ", so no such file");
	} else {
		struct rule_arg ra = {s, NULL};
		struct pfs_merge_rules rules = {.windows = pfs_snap_windows(s)};
		for (size_t i = 0; i < s->n_files && !ra.f; i++)
			if (strcmp(s->files[i].merge_key, key) == 0)
				ra.f = &s->files[i];
		if (s->cluster->src->merge_rule && ra.f) {
			rules.rule = kind_rule;
			rules.arg = &ra;
		}
		mrc = pfs_pprof_merge_range(mi, n_in, 1u << 30, &rules, what, &shape, &gz, &gzlen,
					    err, sizeof err);
	}
	if (mrc == 0 && (shape.follows || shape.no_samples)) {
		/* one snapshot (most merged/ files of a round or two): kept
		 * here, no file (a cold export of 1000 services made 7000 files
		 * and was 1.3x slower) */
		m->rc = 0;
		m->cur.bytes = gz;
		m->cur.n_bytes = gzlen;
		m->cur.size = (off_t)gzlen;
		if (shape.follows) {
			const struct pfs_snap_input *x = &in[src[shape.which]];
			snprintf(m->cur.round, sizeof m->cur.round, "%s", x->round);
			m->cur.file = pfs_xstrdup(x->file);
			m->cur.size += (off_t)lens[shape.which];
		}
		m->cur.sig = m->sig;
		gz = NULL;
		pfs_debug("merged 1 snapshot into %s (no file)", what);
	} else if (mrc == PFS_MERGE_NOTHING) {
		m->rc = -ENODATA;
	} else if (mrc == 0 && pfs_cache_publish(s->cluster->name, s->name, dir, file, gz, gzlen,
						 m->cur.mtime, err, sizeof err) == 0) {
		m->rc = 0;
		m->cur.size = (off_t)gzlen;
		m->cur.sig = m->sig;
		pfs_debug("merged %zu snapshots into %s", used, what);
	} else {
		m->rc = -EIO;
		pfs_err("merge %s of %zu snapshots failed: %s", what, used, err);
	}
	for (size_t i = 0; i < n_in; i++)
		free(bufs[i]);
	free(bufs);
	free(lens);
	free(src);
	free(mi);
	free(gz);
}

static struct memo *memo_for(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	struct memo *m;

	for (m = *bucket(s); m; m = m->next)
		if (m->svc == s && m->range == r && strcmp(m->key, key) == 0)
			return m;
	m = pfs_xcalloc(1, sizeof *m);
	m->svc = s;
	m->range = r;
	m->key = pfs_xstrdup(key);
	m->sig = 0;
	m->rc = -ENOENT;
	pthread_mutex_init(&m->lock, NULL);
	m->next = *bucket(s);
	*bucket(s) = m;
	return m;
}

/* The memo of a file, made if new (under the table's lock). */
static struct memo *memo_of(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	pthread_mutex_lock(&g_lock);
	struct memo *m = memo_for(s, r, key);
	pthread_mutex_unlock(&g_lock);
	return m;
}

/* Seconds m holds: until its oldest input leaves the range (a new input
 * invalidates it sooner: fs/ tells the kernel). Windows: not at all. */
static double valid_for(const struct pfs_service *s, const struct pfs_range *r,
			const struct memo *m)
{
	double left = (double)m->oldest + r->seconds - (double)time(NULL) - 1;

	return pfs_snap_windows(s) || m->rc || left < 0 ? 0 : left;
}

/* What stat_ex may do: only look (a lookup: no waiting, no building),
 * build from inputs that are all there already (a prebuild on a worker:
 * no waiting), or fetch what it needs, wait and build. */
enum stat_mode { PEEK, BUILD_READY, BUILD };

static int stat_ex(struct pfs_service *s, const struct pfs_range *r, const char *key,
		   enum stat_mode mode, off_t *size, time_t *mtime, double *valid, uint64_t *version)
{
	struct pfs_snap_input *in;
	size_t n;
	int rc;

	if ((rc = inputs(s, r, key, mode == BUILD ? PFS_SNAP_WAIT : 0, &in, &n)))
		return rc;
	if (n == 0) {
		free(in);
		return -ENOENT;
	}
	uint64_t sig = signature(in, n);
	struct memo *m = memo_of(s, r, key);
	if (mode == PEEK ? pthread_mutex_trylock(&m->lock) : pthread_mutex_lock(&m->lock)) {
		free(in);
		return -EAGAIN; /* being built */
	}
	rc = 0;
	if (m->sig != sig || m->rc == -ENOENT) {
		if (mode != PEEK) {
			retire(s, r, key, m);
			m->sig = sig;
			build(s, r, key, in, n, m);
		} else {
			rc = -EAGAIN;
		}
	}
	if (!rc) {
		rc = m->rc == -ENODATA ? -ENOENT : m->rc;
		*size = m->cur.size;
		*mtime = m->cur.mtime;
		if (valid)
			*valid = valid_for(s, r, m);
		if (version)
			*version = m->cur.sig;
	}
	pthread_mutex_unlock(&m->lock);
	free(in);
	return rc;
}

int pfs_merged_stat(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid, uint64_t *version)
{
	return stat_ex(s, r, key, BUILD, size, mtime, valid, version);
}

struct prebuild {
	struct pfs_service *s;
	const struct pfs_range *r;
	char key[224];
};

static void prebuild_run(void *arg)
{
	struct prebuild *p = arg;
	off_t size;
	time_t mtime;

	stat_ex(p->s, p->r, p->key, BUILD_READY, &size, &mtime, NULL, NULL);
	free(p);
}

void pfs_merged_prebuild(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	off_t size;
	time_t mtime;

	if (stat_ex(s, r, key, PEEK, &size, &mtime, NULL, NULL) != -EAGAIN)
		return; /* built, or nothing to build */
	struct prebuild *p = pfs_xcalloc(1, sizeof *p);
	p->s = s;
	p->r = r;
	snprintf(p->key, sizeof p->key, "%s", key);
	pfs_work_submit(prebuild_run, p);
}

int pfs_merged_peek(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid, uint64_t *version)
{
	return stat_ex(s, r, key, PEEK, size, mtime, valid, version);
}

double pfs_merged_listing_valid(struct pfs_service *s, const struct pfs_range *r)
{
	const char **keys;
	size_t n = pfs_merged_keys(s, &keys);
	double valid = 86400;
	time_t now = time(NULL);

	for (size_t k = 0; k < n; k++) {
		struct pfs_snap_input *in;
		size_t m;
		inputs(s, r, keys[k], PFS_SNAP_WAIT, &in, &m);
		time_t newest = 0;
		for (size_t i = 0; i < m; i++)
			if (in[i].t > newest)
				newest = in[i].t;
		free(in);
		if (m) {
			double left = (double)newest + r->seconds - (double)now - 1;
			valid = left < valid ? left : valid;
		}
	}
	free(keys);
	return valid > 0 ? valid : 0;
}

/* The result of that version, if it is cur or prev; m->lock held. */
static const struct result *result_of(const struct memo *m, uint64_t version, bool *prev)
{
	*prev = false;
	if (!version)
		return NULL;
	if (m->rc == 0 && m->cur.sig == version)
		return &m->cur;
	*prev = true;
	return m->prev.sig == version ? &m->prev : NULL;
}

int pfs_merged_version(struct pfs_service *s, const struct pfs_range *r, const char *key,
		       uint64_t version, off_t *size, time_t *mtime)
{
	struct memo *m = memo_of(s, r, key);
	bool prev;

	pthread_mutex_lock(&m->lock);
	const struct result *res = result_of(m, version, &prev);
	if (res) {
		*size = res->size;
		*mtime = res->mtime;
	}
	pthread_mutex_unlock(&m->lock);
	return res ? 0 : -ESTALE;
}

int pfs_merged_open(struct pfs_service *s, const struct pfs_range *r, const char *key,
		    uint64_t version, int *fd, uint8_t **tail, size_t *tail_len)
{
	char dir[64], file[168];
	off_t size;
	time_t mtime;
	bool prev;
	int rc = 0;

	*fd = -1;
	*tail = NULL;
	*tail_len = 0;
	if (!version && (rc = pfs_merged_stat(s, r, key, &size, &mtime, NULL, &version)))
		return rc;
	struct memo *m = memo_of(s, r, key);
	/* under the lock: a build renames cur aside, then places the new one */
	pthread_mutex_lock(&m->lock);
	const struct result *res = result_of(m, version, &prev);
	if (!res) {
		rc = -ESTALE;
	} else if (res->bytes) { /* a snapshot's bytes and these (a copy: prev goes) */
		if (res->file) {
			*fd = pfs_cache_open(s->cluster->name, s->name, res->round, res->file);
			rc = *fd < 0 ? *fd : 0;
		}
		if (!rc) {
			*tail = pfs_xmalloc(res->n_bytes);
			memcpy(*tail, res->bytes, res->n_bytes);
			*tail_len = res->n_bytes;
		}
	} else {
		dir_name(r, dir, sizeof dir);
		file_name(key, prev, file, sizeof file);
		*fd = pfs_cache_open(s->cluster->name, s->name, dir, file);
		rc = *fd < 0 ? *fd : 0;
	}
	pthread_mutex_unlock(&m->lock);
	return rc == -ENOENT ? -ESTALE : rc;
}

void pfs_merged_free(void)
{
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < MEMO_BUCKETS; i++)
		while (g_memos[i]) {
			struct memo *m = g_memos[i];
			g_memos[i] = m->next;
			result_free(&m->cur);
			result_free(&m->prev);
			pthread_mutex_destroy(&m->lock);
			free(m->key);
			free(m);
		}
	pthread_mutex_unlock(&g_lock);
}
