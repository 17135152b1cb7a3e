/* Source kind "pyroscope" (placeholder until implemented). */
#include "source.h"
#include <stdio.h>

static int discover(struct pfs_cluster *c, char *err, size_t errlen)
{
	(void)c;
	snprintf(err, errlen, "not implemented");
	return -1;
}

static void start(struct pfs_job *j)
{
	(void)j;
}

const struct pfs_source_ops pfs_source_pyroscope = {
	.kind = "pyroscope",
	.windows = true,
	.discover = discover,
	.start = start,
};
