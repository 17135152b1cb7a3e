/* /.status.json: per target fetch counters and errors, cache size. Not
 * listed in the root directory (so exports of the mount stay stable), but
 * readable by name. */
#ifndef PFS_STATUS_H
#define PFS_STATUS_H

#include "registry/registry.h"

#include <stddef.h>
#include <time.h>

#define PFS_STATUS_FILE ".status.json"

/* A malloc'd JSON document and its length. */
char *pfs_status_json(struct pfs_config *cfg, time_t mounted_at, size_t *len);

#endif
