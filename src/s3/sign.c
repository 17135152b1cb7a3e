/* S3 requests: names, URLs and the credentials that sign them. */
#include "s3.h"

#include "lib/confparse.h"
#include "lib/log.h"
#include "lib/xalloc.h"
#include "lib/secrets.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* s URI-encoded (every byte but A-Za-z0-9-_.~, and '/' if keep_slash). */
char *pfs_s3_encode(const char *s, bool keep_slash)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = pfs_xmalloc(strlen(s) * 3 + 1), *o = out;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}

char *pfs_s3_object_url(const struct pfs_target *t, const char *bucket, const char *key)
{
	char *enc = pfs_s3_encode(key, true), *url;

	if (asprintf(&url, "%s/%s/%s", t->url, bucket, enc) < 0)
		url = NULL;
	free(enc);
	return url;
}

bool pfs_s3_child(const char *name, const char *prefix, size_t plen, size_t *len)
{
	size_t n = strlen(name);

	if (n <= plen + 1 || strncmp(name, prefix, plen) || name[n - 1] != '/')
		return false;
	*len = n - plen - 1;
	return true;
}

const char *pfs_s3_region(json_t *obj)
{
	const char *r = json_string_value(json_object_get(obj, "region"));

	if (!r || !*r)
		r = getenv("AWS_REGION");
	if (!r || !*r)
		r = getenv("AWS_DEFAULT_REGION");
	return r && *r ? r : "us-east-1";
}

char *pfs_s3_default_url(json_t *obj)
{
	char *url;

	if (asprintf(&url, "https://s3.%s.amazonaws.com", pfs_s3_region(obj)) < 0)
		url = NULL;
	return url;
}

static bool bucket_ok(const char *b)
{
	size_t n = strlen(b);

	if (n < 3 || n > 63 || b[0] == '.' || b[0] == '-' || b[n - 1] == '.' || b[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') || (b[i] >= '0' && b[i] <= '9') || b[i] == '.' ||
		      b[i] == '-'))
			return false;
	return true;
}

static void trim(char *s)
{
	size_t n = strlen(s);

	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r' || s[n - 1] == '\n'))
		s[--n] = '\0';
}

/* The profile's keys in an AWS shared credentials file (INI). 0 if found,
 * 1 if not, -1 if it cannot be read (why in err). Warns when others can
 * read it. */
static int read_credentials(const char *path, const char *profile, char **id, char **secret,
			    char **token, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "r");
	char line[2048], want[256];
	bool in = false;
	struct stat st;

	if (!fp) {
		if (errno == ENOENT)
			return 1;
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fileno(fp), &st) == 0 && (st.st_mode & (S_IRGRP | S_IROTH)))
		pfs_warn("%s holds secrets and %s can read it: chmod 600 %s", path,
			 st.st_mode & S_IROTH ? "others" : "its group", path);
	snprintf(want, sizeof want, "[%s]", profile);
	while (fgets(line, sizeof line, fp)) {
		char *l = line, *eq, *v;
		while (*l == ' ' || *l == '\t')
			l++;
		trim(l);
		if (*l == '[') {
			in = strcmp(l, want) == 0;
			continue;
		}
		if (!in || *l == '#' || *l == ';' || !(eq = strchr(l, '=')))
			continue;
		*eq = '\0';
		trim(l);
		for (v = eq + 1; *v == ' ' || *v == '\t'; v++)
			;
		char **to = strcmp(l, "aws_access_key_id") == 0       ? id
			    : strcmp(l, "aws_secret_access_key") == 0 ? secret
			    : strcmp(l, "aws_session_token") == 0     ? token
								      : NULL;
		if (to) {
			free(*to);
			*to = pfs_xstrdup(v);
		}
	}
	explicit_bzero(line, sizeof line);
	fclose(fp);
	return *id && *secret ? 0 : 1;
}


int pfs_s3_parse(struct pfs_parser *p, json_t *obj, const char *where, const char *def_prefix,
		 char **bucket_out, char **prefix_out, struct pfs_target *t)
{
	const char *bucket = NULL, *prefix = NULL, *id = NULL, *secret = NULL, *token = NULL;
	const char *file = NULL, *profile = NULL, *region = NULL;
	char field[512], *fid = NULL, *fsecret = NULL, *ftoken = NULL, path[1024], cerr[512];
	int rc = -1;

	if (pfs_conf_string(p, obj, "bucket", where, &bucket) ||
	    pfs_conf_string(p, obj, "prefix", where, &prefix) ||
	    pfs_conf_string(p, obj, "region", where, &region) ||
	    pfs_conf_string(p, obj, "access_key_id", where, &id) ||
	    pfs_conf_secret(p, obj, "secret_access_key", where, &secret) ||
	    pfs_conf_secret(p, obj, "session_token", where, &token) ||
	    pfs_conf_string(p, obj, "credentials_file", where, &file) ||
	    pfs_conf_string(p, obj, "profile", where, &profile))
		return -1;
	snprintf(field, sizeof field, "%sbucket", where);
	if (!bucket)
		return pfs_conf_fail(p, field, "is required");
	if (!bucket_ok(bucket))
		return pfs_conf_fail(p, field, "\"%.80s\" is not a bucket name (3-63 of a-z 0-9 . -)",
				     bucket);
	if (!prefix)
		prefix = def_prefix;
	size_t n = strlen(prefix);
	snprintf(field, sizeof field, "%sprefix", where);
	if (prefix[0] == '/' || n > 512 || strstr(prefix, "//"))
		return pfs_conf_fail(p, field, "must not start with / nor hold // (at most 512 bytes)");
	/* credentials: the config, else the environment, else the shared file */
	if (!id != !secret) {
		snprintf(field, sizeof field, "%s%s", where, id ? "secret_access_key" : "access_key_id");
		return pfs_conf_fail(p, field, "is required with %s",
				     id ? "access_key_id" : "secret_access_key");
	}
	if (!id && getenv("AWS_ACCESS_KEY_ID") && getenv("AWS_SECRET_ACCESS_KEY")) {
		id = getenv("AWS_ACCESS_KEY_ID");
		secret = getenv("AWS_SECRET_ACCESS_KEY");
		token = token ? token : getenv("AWS_SESSION_TOKEN");
	}
	if (!id) {
		if (!file)
			file = getenv("AWS_SHARED_CREDENTIALS_FILE");
		if (!file)
			snprintf(path, sizeof path, "%s/.aws/credentials",
				 getenv("HOME") ? getenv("HOME") : "/root");
		else
			snprintf(path, sizeof path, "%s", file);
		if (!profile)
			profile = getenv("AWS_PROFILE") ? getenv("AWS_PROFILE") : "default";
		int found = read_credentials(path, profile, &fid, &fsecret, &ftoken, cerr, sizeof cerr);
		snprintf(field, sizeof field, "%scredentials_file", where);
		if (found < 0) {
			pfs_conf_fail(p, field, "%s", cerr);
			goto out;
		}
		if (found > 0) {
			pfs_conf_fail(p, field, "no credentials: give access_key_id and "
				      "secret_access_key[_env], set AWS_ACCESS_KEY_ID and "
				      "AWS_SECRET_ACCESS_KEY, or profile [%s] in %s", profile, path);
			goto out;
		}
		id = fid;
		secret = fsecret;
		token = token ? token : ftoken;
	}
	*bucket_out = pfs_xstrdup(bucket);
	if (asprintf(prefix_out, "%s%s", prefix, n && prefix[n - 1] != '/' ? "/" : "") < 0)
		*prefix_out = NULL;
	free(t->username);
	free(t->password);
	t->username = pfs_xstrdup(id);
	t->password = pfs_xstrdup(secret);
	if (asprintf(&t->aws_sigv4, "aws:amz:%s:s3", pfs_s3_region(obj)) < 0)
		t->aws_sigv4 = NULL;
	pfs_target_add_header(t, "x-amz-content-sha256", PFS_S3_EMPTY_SHA256);
	if (token)
		pfs_target_add_header(t, "x-amz-security-token", token);
	rc = 0;
out:
	free(fid);
	pfs_secret_free(fsecret);
	pfs_secret_free(ftoken);
	return rc;
}
