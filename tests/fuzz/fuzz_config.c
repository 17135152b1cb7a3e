/* libFuzzer: the JSON config loader. Any bytes: an error line or a config
 * that frees cleanly; never a crash, a leak or undefined behaviour. */
#include "config/config.h"
#include "lib/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	static char path[64];
	struct pfs_config cfg;
	char err[1024];
	FILE *f;

	if (!path[0]) {
		snprintf(path, sizeof path, "/tmp/pfs-fuzz-config.%d.json", (int)getpid());
		setenv("PFS_FUZZ_TOKEN", "t0k", 1);
	}
	if (!(f = fopen(path, "wb")))
		return 0;
	fwrite(data, 1, size, f);
	fclose(f);
	pfs_config_load(path, &cfg, err, sizeof err);
	pfs_config_free(&cfg); /* also what a failed load made */
	unlink(path);
	return 0;
}
