/* What a path names (struct loc): resolved by name one component at a
 * time as the kernel looks it up (fs_loc_child), and kept by its node
 * (struct fs_what), so a request on a node looks nothing up again (fs_loc). */
#include "fs_i.h"

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
int fs_merged_stat(struct loc *l, int flags, bool peek, off_t *size, time_t *t,
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

/* How deep what node names is: the depth of its last component. */
static int depth_of(enum node n)
{
	switch (n) {
	case N_ROOT:
		return 0;
	case N_STATUS:
	case N_CLUSTER:
		return 1;
	case N_SERVICE:
		return 2;
	case N_LATEST:
	case N_ROUND:
	case N_MERGED:
		return 3;
	case N_LATEST_FILE:
	case N_ROUND_FILE:
	case N_RANGE:
		return 4;
	default:
		return 5;
	}
}

/* The cluster a node's lookup resolved. */
static struct pfs_cluster *what_cluster(const struct fs_what *w)
{
	return w->node == N_CLUSTER ? w->owner : ((struct pfs_service *)w->owner)->cluster;
}

struct pfs_service *fs_what_service(const struct fs_what *w)
{
	return w->node >= N_SERVICE ? w->owner : NULL;
}

/* One more component: l, which named its parent, names part in it. With
 * w (what a node's lookup resolved) nothing is looked up by name again. */
static int step(struct loc *l, char *part, const struct fs_what *w)
{
	switch (depth_of(l->node) + 1) {
	case 1:
		if (pin_of(part, l)) {
			if (strcmp(part, PFS_STATUS_FILE))
				return -ENOENT;
			l->node = N_STATUS;
			return 0;
		}
		if (strcmp(part, PFS_STATUS_FILE) == 0) {
			l->node = N_STATUS;
			return 0;
		}
		if (!(l->cluster = w ? what_cluster(w) : pfs_registry_cluster(fs_cfg, part)))
			return -ENOENT;
		l->node = N_CLUSTER;
		return 0;
	case 2:
		if (l->node != N_CLUSTER ||
		    !(l->service = w ? fs_what_service(w) : pfs_registry_service(l->cluster, part)))
			return -ENOENT;
		l->node = N_SERVICE;
		return 0;
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
		return 0;
	case 4:
		if (l->node == N_MERGED) {
			if (!(l->range = w ? w->range : pfs_merged_range(fs_cfg, part)))
				return -ENOENT;
			l->node = N_RANGE;
			return 0;
		}
		if (copy_part(l->file, sizeof l->file, part))
			return -ENOENT;
		if (l->node != N_LATEST) {
			l->node = N_ROUND_FILE;
			return 0;
		}
		/* a listed kind's (s3) names come with its listing: the index
		 * is looked up until it is known */
		l->slot = w && w->slot >= 0 ? w->slot : pfs_snap_file_index(l->service, part);
		if (!w && l->slot < 0 && !pfs_snap_names_listed(l->service))
			return -ENOENT;
		l->node = N_LATEST_FILE;
		return 0;
	case 5:
		pin_of(part, l);
		if (l->node != N_RANGE || copy_part(l->file, sizeof l->file, part))
			return -ENOENT;
		if (!w && merged_key_of(l->service, part, l->key, sizeof l->key))
			return -ENOENT;
		if (w) /* its lookup found the key: the name less ".pb.gz" */
			snprintf(l->key, sizeof l->key, "%.*s",
				 (int)strlen(part) - (strcmp(part, PFS_PGO_FILE) ? 6 : 0), part);
		l->node = N_RANGE_FILE;
		return 0;
	default:
		return -ENOENT;
	}
}

int fs_loc(const char *path, const struct fs_what *w, struct loc *l)
{
	char buf[1024], *save = NULL, *part;
	int rc = 0;

	memset(l, 0, sizeof *l);
	if (strlen(path) >= sizeof buf)
		return -ENAMETOOLONG;
	snprintf(buf, sizeof buf, "%s", path);
	l->node = N_ROOT;
	for (part = strtok_r(buf, "/", &save); part && !rc; part = strtok_r(NULL, "/", &save))
		rc = step(l, part, w);
	return rc;
}

int fs_loc_child(struct loc *l, const char *name)
{
	char part[256];

	if (copy_part(part, sizeof part, name))
		return -ENAMETOOLONG;
	return step(l, part, NULL);
}

void fs_what_of(const struct loc *l, struct fs_what *w)
{
	w->node = (uint8_t)l->node;
	w->owner = l->service ? (void *)l->service : (void *)l->cluster;
	w->range = l->range;
	w->slot = l->node == N_LATEST_FILE ? l->slot : -1;
}

bool fs_is_file(enum node n)
{
	return n == N_STATUS || n == N_LATEST_FILE || n == N_ROUND_FILE || n == N_RANGE_FILE;
}
