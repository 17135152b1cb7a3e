/* /.status.json: per target fetch counters and errors, cache size. Not
 * listed in the root directory (so exports of the mount stay stable), but
 * readable by name. */
#ifndef PFS_STATUS_H
#define PFS_STATUS_H

#include "config.h"

#include <stddef.h>
#include <time.h>

#define PFS_STATUS_FILE ".status.json"

/* A malloc'd JSON document and its length. */
char *pfs_status_json(struct pfs_config *cfg, time_t mounted_at, size_t *len);

/* A time as the document shows it ("2026-12-02T10:00:00Z"), or null for 0. */
struct json_t;
struct json_t *pfs_status_time(time_t t);

#endif
