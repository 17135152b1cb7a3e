/* file_sd: Prometheus target group files (JSON), read again when one
 * changes (checked every second) and every refresh_interval. Each target
 * gets __meta_filepath. A file that does not parse keeps the last good
 * set (a writer that is not atomic shows a half file now and then). */
#include "sd.h"
#include "lib/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_FILE_BYTES (64u << 20)

struct file_sd {
	char **files;
	size_t n;
	double every;
	struct stat *seen; /* what was read last: a change reads again */
};

static int parse(struct pfs_parser *p, json_t *obj, const char *where,
		 const struct pfs_settings *s, void **priv)
{
	static const char *const keys[] = {"files", "refresh_interval", NULL};
	struct file_sd *f = pfs_xcalloc(1, sizeof *f);
	json_t *files = json_object_get(obj, "files"), *e;
	char field[512];
	size_t i;

	(void)s;
	*priv = f;
	f->every = 300; /* Prometheus' default; changes are seen within a second anyway */
	if (pfs_conf_keys(p, obj, where, keys) ||
	    pfs_conf_duration(p, obj, "refresh_interval", where, 1, PFS_DAY, &f->every))
		return -1;
	snprintf(field, sizeof field, "%sfiles", where);
	if (json_is_string(files))
		files = json_pack("[O]", files);
	else if (json_is_array(files) && json_array_size(files))
		json_incref(files);
	else
		return pfs_conf_fail(p, field, "must be a path or a non-empty array of paths");
	f->files = pfs_xcalloc(json_array_size(files), sizeof *f->files);
	json_array_foreach(files, i, e) {
		if (!json_is_string(e) || json_string_value(e)[0] != '/') {
			json_decref(files);
			return pfs_conf_fail(p, field, "[%zu] must be an absolute path (a daemon's "
					     "working directory is /)", i);
		}
		f->files[f->n++] = pfs_xstrdup(json_string_value(e));
	}
	json_decref(files);
	f->seen = pfs_xcalloc(f->n, sizeof *f->seen);
	return 0;
}

static bool same_stat(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static bool changed(void *priv)
{
	struct file_sd *f = priv;
	struct stat st;

	for (size_t i = 0; i < f->n; i++) {
		memset(&st, 0, sizeof st);
		stat(f->files[i], &st);
		if (!same_stat(&st, &f->seen[i]))
			return true;
	}
	return false;
}

/* The whole file, a regular one of at most MAX_FILE_BYTES. */
static char *slurp(const char *path, struct stat *st, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	char *buf = NULL;
	size_t n = 0;

	if (fd < 0 || fstat(fd, st)) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		goto out;
	}
	if (!S_ISREG(st->st_mode) || st->st_size > (off_t)MAX_FILE_BYTES) {
		snprintf(err, errlen, "%s: %s", path, S_ISREG(st->st_mode) ? "larger than 64 MiB"
									   : "not a regular file");
		goto out;
	}
	buf = pfs_xmalloc((size_t)st->st_size + 1);
	for (ssize_t r; n < (size_t)st->st_size; n += (size_t)r)
		if ((r = read(fd, buf + n, (size_t)st->st_size - n)) <= 0)
			break;
	*len = n;
out:
	if (fd >= 0)
		close(fd);
	return buf;
}

static int refresh(struct pfs_sd *sd, void *priv, struct pfs_sd_set *out, char *err,
		   size_t errlen)
{
	struct file_sd *f = priv;
	int rc = 0;

	for (size_t i = 0; i < f->n && !rc; i++) {
		struct stat st = {0};
		size_t len = 0;
		char *text = slurp(f->files[i], &st, &len, err, errlen), why[400];
		f->seen[i] = st; /* a broken file is read again when it changes */
		if (!text) {
			rc = -1;
			break;
		}
		struct pfs_sd_set one = {0};
		rc = pfs_sd_parse_groups(text, len, "__meta_filepath", f->files[i],
					 pfs_sd_max_targets(sd) - out->n, &one, why, sizeof why);
		free(text);
		if (rc) {
			snprintf(err, errlen, "%s: %s", f->files[i], why);
			break;
		}
		for (size_t k = 0; k < one.n; k++)
			*pfs_sd_set_add(out) = one.t[k];
		free(one.t);
	}
	return rc;
}

static void run(struct pfs_sd *sd, void *priv)
{
	pfs_sd_poll(sd, priv, ((struct file_sd *)priv)->every, refresh, changed);
}

static void describe(void *priv, char *out, size_t outlen)
{
	struct file_sd *f = priv;

	snprintf(out, outlen, "%s%s", f->n ? f->files[0] : "", f->n > 1 ? " ..." : "");
}

static void free_priv(void *priv)
{
	struct file_sd *f = priv;

	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		free(f->files[i]);
	free(f->files);
	free(f->seen);
	free(f);
}

const struct pfs_sd_ops pfs_sd_file = {
	.name = "file_sd",
	.parse = parse,
	.run = run,
	.free = free_priv,
	.describe = describe,
};
