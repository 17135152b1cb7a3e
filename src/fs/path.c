/* What a path names: parse_path() reads it into a struct loc. */
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

int fs_parse_path(const char *path, struct loc *l)
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
			if (!(l->cluster = pfs_registry_cluster(fs_cfg, part)))
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
				if (!(l->range = pfs_merged_range(fs_cfg, part)))
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

bool fs_is_file(enum node n)
{
	return n == N_STATUS || n == N_LATEST_FILE || n == N_ROUND_FILE || n == N_RANGE_FILE;
}
