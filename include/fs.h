/* FUSE operations: the read-only tree
 *   /<cluster>/<service>/latest/<profile>.pb.gz   scraped on access
 *   /<cluster>/<service>/<time>/<profile>.pb.gz   frozen snapshots */
#ifndef PFS_FS_H
#define PFS_FS_H

#include <fuse.h>

#include "config.h"

void pfs_fs_setup(struct pfs_config *cfg);
extern const struct fuse_operations pfs_fs_ops;

#endif
