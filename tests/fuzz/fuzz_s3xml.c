/* libFuzzer: S3's XML answers (ListBucketResult pages, Error documents),
 * as hostile bytes from a bucket's server; and any non-200 body as the
 * error line gets it (no body at all is NULL, as curl leaves it). */
#include "lib/fetch.h"
#include "lib/s3xml.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct pfs_s3_list l;
	char err[256], text[300], line[512];
	const unsigned char *body = size ? data : NULL;

	pfs_s3_parse_list((const char *)body, size, &l, err, sizeof err);
	for (size_t i = 0; i < l.n_objects; i++)
		if (!l.objects[i].key)
			abort();
	pfs_s3_list_free(&l);
	pfs_s3_error_text(body, size, text, sizeof text);
	if (strlen(text) >= sizeof text)
		abort();
	pfs_http_error(line, sizeof line, 302, body, size);
	if (strlen(line) >= sizeof line)
		abort();
	return 0;
}
