/* libFuzzer: one source kind's decoder (KIND) on an upstream answer, then
 * the validation every fetch gets; built once per kind. */
#include "config/config.h"
#include "lib/mem.h"
#include "lib/pprof.h"
#include "source/source.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const struct pfs_source_ops *ops = pfs_source_find(KIND);
	struct pfs_file file = {.profile = PFS_CPU};
	struct pfs_job *j = calloc(1, sizeof *j);
	uint8_t *gz = NULL;
	size_t gzlen = 0;
	char err[256] = "";

	pfs_mem_init(256u << 20);
	file.type_id = strcmp(KIND, "coroot") == 0 ? "go:profile_cpu:nanoseconds"
						   : "process_cpu:cpu:nanoseconds:cpu:nanoseconds";
	j->file = &file;
	j->from = 1764700000;
	j->to = j->from + 3600;
	if (ops->decode(j, data, size, &gz, &gzlen, err, sizeof err) == 0)
		pfs_pprof_validate_gz(gz, gzlen, 64u << 20, NULL, err, sizeof err);
	free(gz);
	free(j);
	return 0;
}
