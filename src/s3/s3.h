/* S3 requests, shared by the s3 source kind (reading a bucket) and the
 * uploader (filling one): names, URLs, and the keys that sign requests.
 * libcurl signs (CURLOPT_AWS_SIGV4, set through pfs_target.aws_sigv4);
 * what the signature needs besides is done here: keys encoded but for
 * '/', queries sorted and fully encoded, x-amz-content-sha256 sent. */
#ifndef PFS_S3_H
#define PFS_S3_H

#include "lib/target.h"

#include <jansson.h>
#include <stdbool.h>

struct pfs_parser;

/* SHA-256 of an empty body: what GET, HEAD and list requests carry */
#define PFS_S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The config keys of a bucket and its credentials, NULL-terminated. */
#define PFS_S3_KEYS "bucket", "prefix", "region", "access_key_id", "secret_access_key", \
	"secret_access_key_env", "session_token", "session_token_env", "credentials_file", "profile"

/* s URI-encoded: every byte but A-Za-z0-9-_.~ (and '/' if keep_slash). */
char *pfs_s3_encode(const char *s, bool keep_slash);
/* <t's URL>/<bucket>/<key encoded> (malloc'd): path-style. */
char *pfs_s3_object_url(const struct pfs_target *t, const char *bucket, const char *key);
/* A CommonPrefix "<prefix><child>/" of a listing of prefix (plen bytes):
 * true, and the child's length (it starts at name + plen). */
bool pfs_s3_child(const char *name, const char *prefix, size_t plen, size_t *len);
/* "region", else AWS_REGION, else AWS_DEFAULT_REGION, else us-east-1. */
const char *pfs_s3_region(json_t *obj);
/* https://s3.<region>.amazonaws.com (malloc'd). */
char *pfs_s3_default_url(json_t *obj);

/* From obj (where: "a.b."): the bucket (checked), the prefix (default
 * def_prefix; made to end in '/'), and the credentials signing t's
 * requests: the config's, else AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
 * else the AWS shared credentials file (credentials_file, profile; a file
 * others can read is warned of). */
int pfs_s3_parse(struct pfs_parser *p, json_t *obj, const char *where, const char *def_prefix,
		 char **bucket, char **prefix, struct pfs_target *t);

#endif
