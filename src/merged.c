/* merged/<range>/ files: choose inputs, merge, store, remember. */
#include "merged.h"

#include "cache.h"
#include "log.h"
#include "merge.h"
#include "names.h"
#include "snap.h"
#include "source.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct memo {
	const struct pfs_service *svc;
	const struct pfs_range *range;
	char *key;
	uint64_t sig;  /* of the inputs it was built from */
	int rc;        /* 0 built, -EIO failed */
	off_t size;
	time_t mtime;
	time_t oldest; /* input time: the result holds until it leaves the range */
	/* one input: the merge is that snapshot, served as it is */
	char single_round[PFS_ROUND_NAME_MAX];
	char *single_file; /* its cache key, when is_single */
	bool is_single;
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

static size_t inputs(struct pfs_service *s, const struct pfs_range *r, const char *key,
		     struct pfs_snap_input **in)
{
	return pfs_snap_inputs(s, key, time(NULL) - (time_t)r->seconds, in);
}

size_t pfs_merged_keys(const struct pfs_service *s, const char ***keys)
{
	size_t n = 0;

	*keys = malloc((s->n_files ? s->n_files : 1) * sizeof **keys);
	for (size_t i = 0; i < s->n_files; i++) {
		bool seen = false;
		for (size_t j = 0; j < n && !seen; j++)
			seen = strcmp((*keys)[j], s->files[i].merge_key) == 0;
		if (!seen)
			(*keys)[n++] = s->files[i].merge_key;
	}
	return n;
}

bool pfs_merged_has(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	struct pfs_snap_input *in;
	size_t n = inputs(s, r, key, &in);

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
	*out = malloc((size_t)st.st_size + 1);
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

/* Merge and store; fills m. m->lock held. */
static void build(struct pfs_service *s, const struct pfs_range *r, const char *key,
		  const struct pfs_snap_input *in, size_t n, struct memo *m)
{
	uint8_t **bufs, *gz = NULL;
	size_t *lens, gzlen = 0;
	char err[512] = "", dir[64], file[160];

	m->is_single = false;
	if (n == 1) {
		m->mtime = m->oldest = in[0].t;
		m->rc = pfs_cache_stat(s->cluster->name, s->name, in[0].round, in[0].file, &m->size)
			    ? -EIO : 0;
		memcpy(m->single_round, in[0].round, sizeof m->single_round);
		free(m->single_file);
		m->single_file = strdup(in[0].file);
		m->is_single = m->rc == 0;
		if (m->rc)
			pfs_err("merge %s/%s/%s/%s/%s.pb.gz: snapshot %s/%s is gone", s->cluster->name,
				s->name, PFS_MERGED_DIR, r->name, key, in[0].round, in[0].file);
		return;
	}
	bufs = calloc(n, sizeof *bufs);
	lens = calloc(n, sizeof *lens);

	for (size_t i = 0; i < n && !err[0]; i++) {
		int fd = pfs_cache_open(s->cluster->name, s->name, in[i].round, in[i].file);
		if (fd < 0 || read_fd(fd, &bufs[i], &lens[i]))
			snprintf(err, sizeof err, "cannot read %s/%s: %s", in[i].round, in[i].file,
				 strerror(fd < 0 ? -fd : errno));
		if (fd >= 0)
			close(fd);
	}
	m->mtime = in[n - 1].t;
	m->oldest = in[0].t;
	for (size_t i = 1; i < n; i++)
		if (in[i].t < m->oldest)
			m->oldest = in[i].t;
	dir_name(r, dir, sizeof dir);
	snprintf(file, sizeof file, "%s.pb.gz", key);
	if (!err[0] && pfs_pprof_merge((const uint8_t *const *)bufs, lens, n, 1u << 30, &gz, &gzlen,
				       err, sizeof err) == 0 &&
	    pfs_cache_publish(s->cluster->name, s->name, dir, file, gz, gzlen, m->mtime, err,
			      sizeof err) == 0) {
		m->rc = 0;
		m->size = (off_t)gzlen;
		pfs_debug("merged %zu snapshots into %s/%s/%s/%s/%s", n, s->cluster->name, s->name,
			  PFS_MERGED_DIR, r->name, file);
	} else {
		m->rc = -EIO;
		pfs_err("merge %s/%s/%s/%s/%s of %zu snapshots failed: %s", s->cluster->name, s->name,
			PFS_MERGED_DIR, r->name, file, n, err);
	}
	for (size_t i = 0; i < n; i++)
		free(bufs[i]);
	free(bufs);
	free(lens);
	free(gz);
}

static struct memo *memo_for(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	struct memo *m;

	for (m = *bucket(s); m; m = m->next)
		if (m->svc == s && m->range == r && strcmp(m->key, key) == 0)
			return m;
	m = calloc(1, sizeof *m);
	m->svc = s;
	m->range = r;
	m->key = strdup(key);
	m->sig = 0;
	m->rc = -ENOENT;
	pthread_mutex_init(&m->lock, NULL);
	m->next = *bucket(s);
	*bucket(s) = m;
	return m;
}

/* Seconds m holds: until its oldest input leaves the range (a new input
 * invalidates it sooner: fs.c tells the kernel). Windows: not at all. */
static double valid_for(const struct pfs_service *s, const struct pfs_range *r,
			const struct memo *m)
{
	double left = (double)m->oldest + r->seconds - (double)time(NULL) - 1;

	return s->cluster->src->windows || m->rc || left < 0 ? 0 : left;
}

static int stat_ex(struct pfs_service *s, const struct pfs_range *r, const char *key, bool build_it,
		   off_t *size, time_t *mtime, double *valid)
{
	struct pfs_snap_input *in;
	size_t n;
	int rc;

	if (!build_it && s->cluster->src->windows)
		return -EAGAIN; /* choosing inputs fetches windows */
	if ((n = inputs(s, r, key, &in)) == 0) {
		free(in);
		return -ENOENT;
	}
	uint64_t sig = signature(in, n);
	pthread_mutex_lock(&g_lock);
	struct memo *m = memo_for(s, r, key);
	pthread_mutex_unlock(&g_lock);
	pthread_mutex_lock(&m->lock);
	rc = 0;
	if (m->sig != sig || m->rc == -ENOENT) {
		if (build_it) {
			m->sig = sig;
			build(s, r, key, in, n, m);
		} else {
			rc = -EAGAIN;
		}
	}
	if (!rc) {
		rc = m->rc;
		*size = m->size;
		*mtime = m->mtime;
		if (valid)
			*valid = valid_for(s, r, m);
	}
	pthread_mutex_unlock(&m->lock);
	free(in);
	return rc;
}

int pfs_merged_stat(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid)
{
	return stat_ex(s, r, key, true, size, mtime, valid);
}

int pfs_merged_peek(struct pfs_service *s, const struct pfs_range *r, const char *key, off_t *size,
		    time_t *mtime, double *valid)
{
	return stat_ex(s, r, key, false, size, mtime, valid);
}

int pfs_merged_open(struct pfs_service *s, const struct pfs_range *r, const char *key)
{
	char round[PFS_ROUND_NAME_MAX], dir[64], file[160], *single_file = NULL;
	off_t size;
	time_t mtime;
	int rc = pfs_merged_stat(s, r, key, &size, &mtime, NULL);

	if (rc)
		return rc;
	pthread_mutex_lock(&g_lock);
	struct memo *m = memo_for(s, r, key);
	pthread_mutex_unlock(&g_lock);
	pthread_mutex_lock(&m->lock);
	if (m->is_single) {
		memcpy(round, m->single_round, sizeof round);
		single_file = strdup(m->single_file);
	}
	pthread_mutex_unlock(&m->lock);
	if (single_file) {
		rc = pfs_cache_open(s->cluster->name, s->name, round, single_file);
		free(single_file);
		return rc;
	}
	dir_name(r, dir, sizeof dir);
	snprintf(file, sizeof file, "%s.pb.gz", key);
	/* A rebuild renames a new file into place; this fd keeps the one
	 * whose size getattr reported unless a rebuild raced in between. */
	return pfs_cache_open(s->cluster->name, s->name, dir, file);
}

void pfs_merged_free(void)
{
	pthread_mutex_lock(&g_lock);
	for (size_t i = 0; i < MEMO_BUCKETS; i++)
		while (g_memos[i]) {
			struct memo *m = g_memos[i];
			g_memos[i] = m->next;
			pthread_mutex_destroy(&m->lock);
			free(m->key);
			free(m->single_file);
			free(m);
		}
	pthread_mutex_unlock(&g_lock);
}
