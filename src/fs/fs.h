/* FUSE operations (lowlevel API): the read-only tree
 *   /<cluster>/<service>/latest/<profile>.pb.gz   scraped on access
 *   /<cluster>/<service>/<time>/<profile>.pb.gz   frozen snapshots */
#ifndef PFS_FS_H
#define PFS_FS_H

#include <fuse_lowlevel.h>

#include "registry/registry.h"

/* Before the session loop: node table, retry thread for parked requests. */
int pfs_fs_setup(struct pfs_config *cfg);
/* The session, for invalidations of what the kernel caches. */
void pfs_fs_set_session(struct fuse_session *se);
/* After it: fails what is still parked, frees the nodes. */
void pfs_fs_teardown(void);
extern const struct fuse_lowlevel_ops pfs_fs_ops;

#endif
