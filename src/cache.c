/* On-disk snapshot store, all paths relative to one directory fd. */
#include "cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TMP_DIR ".tmp"

static int g_root = -1;

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

int pfs_cache_init(const char *dir, char *err, size_t errlen)
{
	DIR *d;
	struct dirent *de;
	int tmp;

	if (mkdir_p(dir) || (g_root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		snprintf(err, errlen, "cache_dir %s: %s", dir, strerror(errno));
		return -1;
	}
	if (mkdirat(g_root, TMP_DIR, 0700) && errno != EEXIST) {
		snprintf(err, errlen, "cache_dir %s/" TMP_DIR ": %s", dir, strerror(errno));
		return -1;
	}
	/* Leftovers of writes cut short by a crash are never published. */
	tmp = openat(g_root, TMP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tmp >= 0 && (d = fdopendir(tmp))) {
		while ((de = readdir(d)))
			if (de->d_name[0] != '.')
				unlinkat(tmp, de->d_name, 0);
		closedir(d);
	}
	return 0;
}

static int mkdirs_at(const char *cluster, const char *service, const char *round, char *rel,
		     size_t rellen)
{
	snprintf(rel, rellen, "%s", cluster);
	if (mkdirat(g_root, rel, 0700) && errno != EEXIST)
		return -1;
	snprintf(rel, rellen, "%s/%s", cluster, service);
	if (mkdirat(g_root, rel, 0700) && errno != EEXIST)
		return -1;
	snprintf(rel, rellen, "%s/%s/%s", cluster, service, round);
	if (mkdirat(g_root, rel, 0700) && errno != EEXIST)
		return -1;
	return 0;
}

int pfs_cache_publish(const char *cluster, const char *service, const char *round,
		      const char *file, const uint8_t *data, size_t len, time_t mtime,
		      char *err, size_t errlen)
{
	char tmp[128], dst[1024];
	struct timespec ts[2] = {{mtime, 0}, {mtime, 0}};
	static unsigned seq;
	size_t off = 0;
	int fd;

	snprintf(tmp, sizeof tmp, TMP_DIR "/%d.%u", getpid(), __atomic_fetch_add(&seq, 1, __ATOMIC_RELAXED));
	fd = openat(g_root, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		goto fail;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			goto fail_fd;
		}
		off += (size_t)w;
	}
	if (futimens(fd, ts) || fsync(fd))
		goto fail_fd;
	close(fd);
	if (mkdirs_at(cluster, service, round, dst, sizeof dst))
		goto fail_tmp;
	snprintf(dst, sizeof dst, "%s/%s/%s/%s", cluster, service, round, file);
	if (renameat(g_root, tmp, g_root, dst))
		goto fail_tmp;
	return 0;
fail_fd:
	close(fd);
fail_tmp:
	snprintf(err, errlen, "cache write: %s", strerror(errno));
	unlinkat(g_root, tmp, 0);
	return -1;
fail:
	snprintf(err, errlen, "cache write: %s", strerror(errno));
	return -1;
}

int pfs_cache_open(const char *cluster, const char *service, const char *round, const char *file)
{
	char rel[1024];
	int fd;

	snprintf(rel, sizeof rel, "%s/%s/%s/%s", cluster, service, round, file);
	fd = openat(g_root, rel, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd < 0 ? -errno : fd;
}

int pfs_cache_stat(const char *cluster, const char *service, const char *round, const char *file,
		   off_t *size)
{
	char rel[1024];
	struct stat st;

	snprintf(rel, sizeof rel, "%s/%s/%s/%s", cluster, service, round, file);
	if (fstatat(g_root, rel, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
		return -1;
	*size = st.st_size;
	return 0;
}

/* Call fn for each subdirectory (want_dir) or regular file in rel ("" for
 * the root, where dot entries such as .tmp are skipped; deeper down they
 * are merged/ files, which callers tell by their names). */
static void each_entry(const char *rel, int want_dir,
		       void (*fn)(const char *name, const struct stat *st, void *arg), void *arg)
{
	int fd = openat(g_root, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct dirent *de;
	struct stat st;
	DIR *d;

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    (!*rel && de->d_name[0] == '.') ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW))
			continue;
		if (want_dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode))
			fn(de->d_name, &st, arg);
	}
	closedir(d);
}

struct scan {
	pfs_cache_visit visit;
	void *arg;
	const char *c, *s, *r;
	uint64_t bytes;
};

static void scan_file(const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	if (sc->visit)
		sc->visit(sc->c, sc->s, sc->r, name, st->st_size, st->st_mtime, sc->arg);
	sc->bytes += (uint64_t)st->st_size;
}

static void scan_round(const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	char rel[1024];
	(void)st;
	sc->r = name;
	snprintf(rel, sizeof rel, "%s/%s/%s", sc->c, sc->s, name);
	each_entry(rel, 0, scan_file, sc);
}

static void scan_service(const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	char rel[1024];
	(void)st;
	sc->s = name;
	snprintf(rel, sizeof rel, "%s/%s", sc->c, name);
	each_entry(rel, 1, scan_round, sc);
}

static void scan_cluster(const char *name, const struct stat *st, void *arg)
{
	struct scan *sc = arg;
	(void)st;
	sc->c = name;
	each_entry(name, 1, scan_service, sc);
}

void pfs_cache_scan(pfs_cache_visit visit, void *arg)
{
	struct scan sc = {.visit = visit, .arg = arg};
	each_entry("", 1, scan_cluster, &sc);
}

uint64_t pfs_cache_bytes(void)
{
	struct scan sc = {0};
	each_entry("", 1, scan_cluster, &sc);
	return sc.bytes;
}

static void unlink_file(const char *name, const struct stat *st, void *arg)
{
	(void)st;
	unlinkat(*(int *)arg, name, 0);
}

int pfs_cache_remove_round(const char *cluster, const char *service, const char *round)
{
	char rel[1024];
	int fd;

	snprintf(rel, sizeof rel, "%s/%s/%s", cluster, service, round);
	fd = openat(g_root, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	each_entry(rel, 0, unlink_file, &fd);
	close(fd);
	return unlinkat(g_root, rel, AT_REMOVEDIR) ? -errno : 0;
}
