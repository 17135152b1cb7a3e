/* On-disk snapshot store. Every path below cache_dir is walked one
 * component at a time from the cache_dir fd with O_NOFOLLOW: a symlink
 * anywhere in the tree (a round, a service, .tmp) is never followed, so
 * nothing outside the cache is read, renamed into or deleted. */
#include "cache.h"

#include "log.h"
#include "xalloc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_DIR ".tmp"
#define LOCK_FILE ".lock"

static int g_root = -1, g_tmp = -1, g_lock = -1;

#define DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

static int mkdir_p(const char *path)
{
	char buf[4096];

	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0700) && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, 0700) && errno != EEXIST ? -1 : 0;
}

/* One path component as the cache names them: never "", ".", ".." or
 * anything with a '/'. */
static bool plain(const char *c)
{
	return *c && strcmp(c, ".") && strcmp(c, "..") && !strchr(c, '/');
}

/* The directory root/parts[0]/.../parts[n-1], each component opened with
 * O_NOFOLLOW (and made if create). An fd, or -errno. */
static int open_dir(const char *const *parts, size_t n, bool create)
{
	int fd = dup(g_root);

	for (size_t i = 0; i < n && fd >= 0; i++) {
		int next;
		if (!plain(parts[i])) {
			close(fd);
			return -EINVAL;
		}
		next = openat(fd, parts[i], DIR_FLAGS);
		if (next < 0 && create && (errno == ELOOP || errno == ENOTDIR)) {
			/* a link or file planted where a directory goes: drop it */
			pfs_warn("cache: %s is not a directory: replacing it", parts[i]);
			if (unlinkat(fd, parts[i], 0) == 0)
				errno = ENOENT;
		}
		if (next < 0 && errno == ENOENT && create &&
		    (mkdirat(fd, parts[i], 0700) == 0 || errno == EEXIST))
			next = openat(fd, parts[i], DIR_FLAGS);
		int e = errno;
		close(fd);
		if (next < 0)
			return e == ELOOP || e == ENOTDIR ? -ENOTDIR : -e;
		fd = next;
	}
	return fd < 0 ? -errno : fd;
}

static int round_dir(const char *cluster, const char *service, const char *round, bool create)
{
	const char *parts[] = {cluster, service, round};
	return open_dir(parts, 3, create);
}

/* Replace a non-directory (a symlink, a file) at name with an empty dir. */
static int fresh_dir(const char *dir, const char *name)
{
	struct stat st;

	if (fstatat(g_root, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode)) {
		pfs_warn("cache_dir %s/%s is not a directory (%s): replacing it", dir, name,
			 S_ISLNK(st.st_mode) ? "a symlink" : "a file");
		if (unlinkat(g_root, name, 0))
			return -1;
	}
	if (mkdirat(g_root, name, 0700) && errno != EEXIST)
		return -1;
	return openat(g_root, name, DIR_FLAGS);
}

static int take_lock(const char *dir, char *err, size_t errlen)
{
	char pid[32] = "";
	ssize_t n;

	g_lock = openat(g_root, LOCK_FILE, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (g_lock < 0) {
		snprintf(err, errlen, "cache_dir %s/" LOCK_FILE ": %s", dir, strerror(errno));
		return -1;
	}
	if (flock(g_lock, LOCK_EX | LOCK_NB)) {
		n = pread(g_lock, pid, sizeof pid - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(err, errlen, "cache_dir %s is in use by another profilefs (pid %s); give each "
			 "mount its own cache_dir", dir, *pid ? pid : "unknown");
		return -1;
	}
	pfs_cache_note_pid();
	return 0;
}

void pfs_cache_note_pid(void)
{
	char pid[32];
	int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());

	if (ftruncate(g_lock, 0) || pwrite(g_lock, pid, (size_t)n, 0) != n)
		pfs_warn("cache_dir/" LOCK_FILE ": cannot write pid");
}

int pfs_cache_init(const char *dir, char *err, size_t errlen)
{
	struct stat st;
	DIR *d;
	struct dirent *de;

	if (mkdir_p(dir) || (g_root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fstat(g_root, &st)) {
		snprintf(err, errlen, "cache_dir %s: %s", dir, strerror(errno));
		return -1;
	}
	if (st.st_uid != geteuid() || (st.st_mode & 022)) {
		snprintf(err, errlen, "cache_dir %s: %s (owner uid %u, mode %04o): refusing, others "
			 "could plant files or links in it", dir,
			 st.st_uid != geteuid() ? "owned by another user" : "writable by others",
			 (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
		return -1;
	}
	if (take_lock(dir, err, errlen))
		return -1;
	if ((g_tmp = fresh_dir(dir, TMP_DIR)) < 0) {
		snprintf(err, errlen, "cache_dir %s/" TMP_DIR ": %s", dir, strerror(errno));
		return -1;
	}
	/* Leftovers of writes cut short by a crash are never published. */
	int fd = dup(g_tmp);
	if (fd >= 0 && (d = fdopendir(fd))) {
		rewinddir(d);
		while ((de = readdir(d)))
			if (plain(de->d_name))
				unlinkat(g_tmp, de->d_name, 0);
		closedir(d);
	}
	return 0;
}

/* "cache write: <why>"; out of descriptors said so, with the limit */
static void write_err(char *err, size_t errlen, int e)
{
	struct rlimit rl;

	if ((e == EMFILE || e == ENFILE) && getrlimit(RLIMIT_NOFILE, &rl) == 0)
		snprintf(err, errlen, "cache write: out of file descriptors (RLIMIT_NOFILE %ld): %s",
			 (long)rl.rlim_cur, strerror(e));
	else
		snprintf(err, errlen, "cache write: %s", strerror(e));
}

/* Write data aside in dir (cache_dir/.tmp, or the file's own directory:
 * ".stage.<pid>.<n>", a name no snapshot file has), not yet durable. */
static int stage(int dir, const uint8_t *data, size_t len, time_t mtime, char name[64],
		 char *err, size_t errlen)
{
	struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
	static unsigned seq;
	size_t off = 0;
	int fd;

	snprintf(name, 64, ".stage.%d.%u", getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		write_err(err, errlen, errno);
		return -1;
	}
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			break;
		off += (size_t)w;
	}
	if (off < len || futimens(fd, ts)) {
		write_err(err, errlen, errno);
		close(fd);
		unlinkat(dir, name, 0);
		return -1;
	}
	close(fd);
	return 0;
}

/* Rename a file staged in .tmp (or in its round's directory: in_round)
 * into place; or, with file NULL, remove it. */
static int place(const char *name, bool in_round, const char *cluster, const char *service,
		 const char *round, const char *file, char *err, size_t errlen)
{
	int dir = round_dir(cluster, service, round, true), e;
	int from = in_round ? dir : g_tmp;

	/* renameat replaces a symlink at file; it never writes through one */
	if (file && dir >= 0 && renameat(from, name, dir, file) == 0) {
		close(dir);
		return 0;
	}
	e = dir < 0 ? -dir : errno;
	if (err)
		write_err(err, errlen, e);
	if (from >= 0)
		unlinkat(from, name, 0);
	if (dir >= 0)
		close(dir);
	return -1;
}

int pfs_cache_publish(const char *cluster, const char *service, const char *round,
		      const char *file, const uint8_t *data, size_t len, time_t mtime,
		      char *err, size_t errlen)
{
	char name[64];

	if (!plain(file)) {
		snprintf(err, errlen, "cache write: bad file name");
		return -1;
	}
	/* staged in its own directory, as snapshots are (see below: one shared
	 * staging directory costs ext4 an inode search per file) */
	int dir = round_dir(cluster, service, round, true), rc;
	if (dir < 0) {
		write_err(err, errlen, -dir);
		return -1;
	}
	rc = stage(dir, data, len, mtime, name, err, errlen);
	close(dir);
	if (rc)
		return -1;
	return place(name, true, cluster, service, round, file, err, errlen);
}

/* ---- durable publishing: group commits ----
 * A file is renamed into place only once its data is on disk, so a crash
 * leaves it whole or absent. One syncfs covers every file staged before
 * it began: while it runs the next group gathers, so the cost is one sync
 * per group, not one fsync per file. Files are staged in their own round's
 * directory: one shared staging directory made ext4 search one block
 * group's inode table for every new file (a fifth of profilefs' CPU in a
 * cold 1000-target run). A crash may leave a staged file there: never
 * listed nor served, it goes with its round. */

struct commit {
	char name[64];
	char *cluster, *service, *round, *file;
	pfs_cache_done_fn done;
	void *arg;
	struct commit *next;
};

static pthread_mutex_t g_commit_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_commit_cond = PTHREAD_COND_INITIALIZER;
static struct commit *g_commits, **g_commits_tail = &g_commits;
static bool g_committer, g_commit_stop;
static pthread_t g_commit_thread;

static void commit_group(struct commit *c)
{
	char err[256] = "";

	if (syncfs(g_tmp))
		snprintf(err, sizeof err, "cache write: sync: %s", strerror(errno));
	while (c) {
		struct commit *next = c->next;
		char why[256];
		int rc = -1;
		if (err[0]) {
			snprintf(why, sizeof why, "%s", err);
			place(c->name, true, c->cluster, c->service, c->round, NULL, NULL, 0);
		} else {
			rc = place(c->name, true, c->cluster, c->service, c->round, c->file, why,
				   sizeof why);
		}
		c->done(c->arg, rc, rc ? why : NULL);
		free(c->cluster);
		free(c->service);
		free(c->round);
		free(c->file);
		free(c);
		c = next;
	}
}

static void *committer_main(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&g_commit_lock);
	for (;;) {
		while (!g_commits && !g_commit_stop)
			pthread_cond_wait(&g_commit_cond, &g_commit_lock);
		if (!g_commits)
			break;
		struct commit *group = g_commits;
		g_commits = NULL;
		g_commits_tail = &g_commits;
		pthread_mutex_unlock(&g_commit_lock);
		commit_group(group);
		pthread_mutex_lock(&g_commit_lock);
	}
	pthread_mutex_unlock(&g_commit_lock);
	return NULL;
}

int pfs_cache_committer_start(void)
{
	g_commit_stop = false;
	if (pthread_create(&g_commit_thread, NULL, committer_main, NULL))
		return -1;
	pthread_mutex_lock(&g_commit_lock);
	g_committer = true;
	pthread_mutex_unlock(&g_commit_lock);
	return 0;
}

void pfs_cache_committer_stop(void)
{
	if (!g_committer)
		return;
	pthread_mutex_lock(&g_commit_lock);
	g_commit_stop = true;
	pthread_cond_signal(&g_commit_cond);
	pthread_mutex_unlock(&g_commit_lock);
	pthread_join(g_commit_thread, NULL);
	pthread_mutex_lock(&g_commit_lock);
	g_committer = false;
	pthread_mutex_unlock(&g_commit_lock);
}

struct pfs_staged *pfs_cache_stage(const char *cluster, const char *service, const char *round,
				   const char *file, const uint8_t *data, size_t len, time_t mtime,
				   char *err, size_t errlen)
{
	struct commit *c;

	if (!plain(file)) {
		snprintf(err, errlen, "cache write: bad file name");
		return NULL;
	}
	int dir = round_dir(cluster, service, round, true);
	if (dir < 0) {
		write_err(err, errlen, -dir);
		return NULL;
	}
	c = pfs_xcalloc(1, sizeof *c);
	int rc = stage(dir, data, len, mtime, c->name, err, errlen);
	close(dir);
	if (rc) {
		free(c);
		return NULL;
	}
	c->cluster = pfs_xstrdup(cluster);
	c->service = pfs_xstrdup(service);
	c->round = pfs_xstrdup(round);
	c->file = pfs_xstrdup(file);
	return (struct pfs_staged *)c;
}

void pfs_cache_commit(struct pfs_staged *staged, pfs_cache_done_fn done, void *arg)
{
	struct commit *c = (struct commit *)staged;

	c->done = done;
	c->arg = arg;
	pthread_mutex_lock(&g_commit_lock);
	if (g_committer && !g_commit_stop) {
		*g_commits_tail = c;
		g_commits_tail = &c->next;
		pthread_cond_signal(&g_commit_cond);
		pthread_mutex_unlock(&g_commit_lock);
		return;
	}
	pthread_mutex_unlock(&g_commit_lock);
	commit_group(c); /* no thread (tools, tests, stopping): a group of one, now */
}

int pfs_cache_open(const char *cluster, const char *service, const char *round, const char *file)
{
	int dir = round_dir(cluster, service, round, false), fd;
	struct stat st;

	if (dir < 0)
		return dir == -ENOTDIR ? -ENOENT : dir;
	fd = plain(file) ? openat(dir, file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC) : -1;
	int e = plain(file) ? errno : ENOENT;
	close(dir);
	if (fd < 0)
		return e == ELOOP ? -ENOENT : -e;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

int pfs_cache_rename(const char *cluster, const char *service, const char *round, const char *from,
		     const char *to)
{
	int dir = round_dir(cluster, service, round, false), rc = -1;

	if (dir < 0)
		return -1;
	if (plain(from) && plain(to))
		rc = renameat(dir, from, dir, to);
	close(dir);
	return rc;
}

int pfs_cache_stat(const char *cluster, const char *service, const char *round, const char *file,
		   off_t *size)
{
	int dir = round_dir(cluster, service, round, false), rc = -1;
	struct stat st;

	if (dir < 0)
		return -1;
	if (plain(file) && fstatat(dir, file, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode)) {
		*size = st.st_size;
		rc = 0;
	}
	close(dir);
	return rc;
}

/* Call fn for each entry of the directory fd (taken over) that is a
 * directory (want_dir) or a regular file, never following a link; dot
 * entries are skipped where skip_dot (the root: .tmp, .lock). */
static void each_entry(int fd, bool want_dir, bool skip_dot,
		       void (*fn)(int dirfd, const char *name, const struct stat *st, void *arg),
		       void *arg)
{
	struct dirent *de;
	struct stat st;
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d); /* a dup of g_root shares its offset */
	while ((de = readdir(d))) {
		if (!plain(de->d_name) || (skip_dot && de->d_name[0] == '.') ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
			fn(dirfd(d), de->d_name, &st, arg);
	}
	closedir(d);
}

struct scan {
	pfs_cache_round_fn round_fn;
	void *arg;
	const char *c, *s;
	uint64_t bytes;
};

static void scan_file(int dir, const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	(void)dir, (void)name;
	sc->bytes += (uint64_t)st->st_size;
}

static void scan_round(int dir, const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	(void)st;
	if (sc->round_fn)
		sc->round_fn(sc->c, sc->s, name, sc->arg);
	else
		each_entry(openat(dir, name, DIR_FLAGS), false, false, scan_file, sc);
}

static void scan_service(int dir, const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	(void)st;
	sc->s = name;
	each_entry(openat(dir, name, DIR_FLAGS), true, false, scan_round, sc);
}

static void scan_cluster(int dir, const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	(void)st;
	sc->c = name;
	each_entry(openat(dir, name, DIR_FLAGS), true, false, scan_service, sc);
}

void pfs_cache_rounds(const char *cluster, const char *service, pfs_cache_round_fn fn, void *arg)
{
	struct scan sc = {.round_fn = fn, .arg = arg, .c = cluster, .s = service};
	const char *parts[] = {cluster, service};
	int fd = open_dir(parts, service ? 2 : 1, false);

	if (fd < 0)
		return;
	if (service)
		each_entry(fd, true, false, scan_round, &sc);
	else
		each_entry(fd, true, false, scan_service, &sc);
}

struct file_scan {
	pfs_cache_file_fn fn;
	void *arg;
};

static void scan_named_file(int dir, const char *name, const struct stat *st, void *arg)
{
	struct file_scan *fs = arg;
	(void)dir;
	if (st->st_size > 0) /* as pfs_cache_stat: an empty file is no snapshot */
		fs->fn(name, fs->arg);
}

void pfs_cache_files(const char *cluster, const char *service, const char *round,
		     pfs_cache_file_fn fn, void *arg)
{
	const char *parts[] = {cluster, service, round};
	struct file_scan fs = {fn, arg};
	int fd = open_dir(parts, 3, false);

	if (fd >= 0)
		each_entry(fd, false, false, scan_named_file, &fs);
}

void pfs_cache_each_round(pfs_cache_round_fn fn, void *arg)
{
	struct scan sc = {.round_fn = fn, .arg = arg};
	each_entry(dup(g_root), true, true, scan_cluster, &sc);
}

uint64_t pfs_cache_bytes(void)
{
	struct scan sc = {0};
	each_entry(dup(g_root), true, true, scan_cluster, &sc);
	return sc.bytes;
}

int pfs_cache_remove_round(const char *cluster, const char *service, const char *round)
{
	const char *parts[] = {cluster, service};
	int svc = open_dir(parts, 2, false), fd, rc = 0;
	struct dirent *de;
	DIR *d;

	if (svc < 0)
		return svc == -ENOTDIR ? -ENOENT : svc;
	fd = plain(round) ? openat(svc, round, DIR_FLAGS) : -1;
	if (fd < 0) {
		rc = -errno;
		/* a symlink or file where a round should be: remove the link itself */
		if ((errno == ENOTDIR || errno == ELOOP) && unlinkat(svc, round, 0) == 0)
			rc = 0;
		close(svc);
		return rc;
	}
	if ((d = fdopendir(fd))) {
		while ((de = readdir(d)))
			if (plain(de->d_name))
				unlinkat(dirfd(d), de->d_name, 0); /* files and links, not their targets */
		closedir(d);
	} else {
		close(fd);
	}
	if (unlinkat(svc, round, AT_REMOVEDIR))
		rc = -errno;
	close(svc);
	return rc;
}

void pfs_cache_close(void)
{
	int *fds[] = {&g_tmp, &g_root, &g_lock};

	for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}
