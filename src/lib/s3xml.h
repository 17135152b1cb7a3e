/* S3's XML answers, read by a small strict reader (no DTD, no entities
 * beyond XML's five and character references, bounded depth and text):
 * ListObjectsV2's ListBucketResult and the Error document of a failure. */
#ifndef PFS_S3XML_H
#define PFS_S3XML_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pfs_s3_object {
	char *key;
	uint64_t size;
};

struct pfs_s3_list {
	struct pfs_s3_object *objects;
	size_t n_objects;
	char **prefixes; /* CommonPrefixes */
	size_t n_prefixes;
	bool truncated;
	char *next_token; /* NextContinuationToken, when truncated */
};

/* A ListBucketResult into out (zeroed first; free with pfs_s3_list_free
 * also on error). -1 with why in err: not XML, too deep, an element
 * other than expected, an S3 Error document ("<Code>: <Message>"). */
int pfs_s3_parse_list(const char *xml, size_t len, struct pfs_s3_list *out, char *err,
		      size_t errlen);
void pfs_s3_list_free(struct pfs_s3_list *l);

/* "<Code>: <Message>" of an S3 Error document (printable ASCII only,
 * cut to fit); false if body is not one. */
bool pfs_s3_error_text(const uint8_t *body, size_t len, char *out, size_t outlen);

#endif
