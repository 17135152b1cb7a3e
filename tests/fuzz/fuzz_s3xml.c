/* libFuzzer: S3's XML answers (ListBucketResult pages, Error documents),
 * as hostile bytes from a bucket's server. */
#include "s3xml.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct pfs_s3_list l;
	char err[256], text[300];

	pfs_s3_parse_list((const char *)data, size, &l, err, sizeof err);
	for (size_t i = 0; i < l.n_objects; i++)
		if (!l.objects[i].key)
			abort();
	pfs_s3_list_free(&l);
	pfs_s3_error_text(data, size, text, sizeof text);
	if (strlen(text) >= sizeof text)
		abort();
	return 0;
}
