/* The mount's configuration: a JSON file (jansson) read once at mount into
 * the registry's model (registry.h), every part checked, each error one
 * line naming the file and the field. */
#ifndef PFS_CONFIG_H
#define PFS_CONFIG_H

#include "registry/registry.h"

#include <stdbool.h>
#include <stddef.h>

/* Load and validate. On error returns -1 and writes one line naming the
 * file and the field into err. Warns (log) when the file holds secrets and
 * is readable by others. */
int pfs_config_load(const char *path, struct pfs_config *cfg, char *err, size_t errlen);
/* The same with mount options "key=value" setting top-level fields over
 * the file's (each must pass pfs_config_option). */
int pfs_config_load_with(const char *path, char *const *options, size_t n_options,
			 struct pfs_config *cfg, char *err, size_t errlen);
/* True if "key=value" names a field a mount option may set: cache_dir,
 * the durations, timeout, cpu_seconds, the limits (not the tree, not
 * secrets). */
bool pfs_config_option(const char *kv);
void pfs_config_free(struct pfs_config *cfg);

#endif
