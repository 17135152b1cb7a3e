/* libFuzzer: the pprof codec on upstream bytes, gzip'd or raw. */
#include "lib/mem.h"
#include "lib/pprof.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	char err[256];
	struct Perftools__Profiles__Profile *p;

	pfs_mem_init(256u << 20);
	pfs_pprof_validate_gz(data, size, 64u << 20, NULL, err, sizeof err);
	p = pfs_pprof_decode_raw(data, size, err, sizeof err);
	pfs_pprof_free(p);
	return 0;
}
